"""``python -m aiowheel``: asyncio's own REPL (``python -m asyncio``) on a loop-mode loop::

    $ python -m aiowheel                 # top-level await; every timer on the loop's wheel
    >>> await asyncio.sleep(1)
    >>> aiowheel.get_timer().stats().fired
    1

The REPL is asyncio's, unchanged, so it behaves as ``python -m asyncio`` does on each
interpreter (3.13's and 3.14's ``ps``/``pstree`` sub-commands included). It makes its loop with
``asyncio.new_event_loop()``, and the only other hook is the event loop policy, which 3.14
deprecates: this command rebinds ``asyncio.new_event_loop`` to a loop-mode factory in its own
process, which is the REPL's and nothing else's, then runs asyncio's ``__main__``.
``--base uvloop`` (or ``rloop``, ``zuvloop``, or ``auto``: the fastest installed) puts the
wheel on that loop instead of asyncio's default loop.
"""

from __future__ import annotations

import argparse
import asyncio
import runpy
import sys

from aiowheel.loops import BASES, auto_base, base_class, factory


def main(argv: list[str] | None = None) -> None:
    """Start asyncio's REPL on a loop-mode loop (``argv``: the command's arguments)."""
    parser = argparse.ArgumentParser(
        prog="python -m aiowheel",
        description="asyncio's REPL (python -m asyncio) on a loop-mode event loop",
    )
    parser.add_argument(
        "--base",
        choices=(*BASES, "auto"),
        default="asyncio",
        help="the event loop under the wheel (default: asyncio's default loop; auto: the "
        "fastest installed, as aiowheel.loops:auto)",
    )
    args, rest = parser.parse_known_args(argv)
    try:  # a base that is not installed is named here, before the REPL starts
        auto_base() if args.base == "auto" else base_class(args.base)
    except ImportError as exc:
        parser.error(str(exc))
    # The base's own factory (aiowheel.loops): its record's rules hold (bracio: all on the wheel).
    setattr(asyncio, "new_event_loop", factory(args.base))  # noqa: B010
    sys.argv = ["python -m asyncio", *rest]
    runpy.run_module("asyncio", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
