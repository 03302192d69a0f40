"""Does a cancel hold on every base? ``python -m bench.cancels``.

asyncio's contract: a handle cancelled before it runs never runs. bracio 0.0.1 breaks it: it
calls a cancelled handle's ``_run``, which (asyncio's ``cancel`` having cleared the callback)
reports "Exception in callback None()" to the loop's exception handler instead of running
anything. This counts those reports on every base installed here, for a churn of cancelled
near timers (``call_later(DELAY)``, each cancelled when a newer one is filed, a thousand
pending: the bench's ``near`` workload) plus one cancelled ``call_soon``, on four loops per
base: the base's own, loop mode with its default threshold (near timers stay on the base's
heap), loop mode with ``threshold=0`` (every deadline ahead on the wheel), and the loop
``aiowheel.loops`` makes for that base by name. A count above 0 is the base's bug showing
through; loop mode's own timers are checked on every base (a report there would be aiowheel's).

``--json PATH`` writes the counts (``call_soon`` -1: the base's ``call_soon`` returned no handle,
as veloxloop 0.2's does). Nothing is timed; it takes seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiowheel
import aiowheel.loops

DELAY = 0.005
PENDING = 1_000
PER_ITERATION = 100


def _noop() -> None:
    pass


async def _churn(cancels: int) -> dict[str, int]:
    """Cancel ``cancels`` near timers (and one ``call_soon``); the reports each kind drew."""
    loop = asyncio.get_running_loop()
    reports: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reports.append(context))
    ring = collections.deque(loop.call_later(DELAY, _noop) for _ in range(PENDING))
    for _ in range(max(1, cancels // PER_ITERATION)):
        for _ in range(PER_ITERATION):
            ring.append(loop.call_later(DELAY, _noop))
            ring.popleft().cancel()
        await asyncio.sleep(0)
    for handle in ring:
        handle.cancel()
    await asyncio.sleep(DELAY * 4)  # every one of them due by now
    timers = len(reports)
    handle = loop.call_soon(_noop)
    if handle is None:  # veloxloop 0.2's call_soon returns no handle: nothing to cancel
        return {"timers": timers, "call_soon": -1}
    handle.cancel()
    await asyncio.sleep(0.001)
    return {"timers": timers, "call_soon": len(reports) - timers}


def _factories(name: str) -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    base = aiowheel.loops.base_class(name)
    named = aiowheel.loops.factory(name)
    own: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop if base is None else base
    return {
        "own": own,
        "loop mode": lambda: aiowheel.new_event_loop(base),
        "loop mode, threshold=0": lambda: aiowheel.new_event_loop(base, threshold=0.0),
        f"aiowheel.loops:{named.__name__}": named,
    }


def run(cancels: int, bases: list[str] | None = None) -> dict[str, dict[str, dict[str, int]]]:
    """Reports per base and loop: ``{base: {loop: {"timers": n, "call_soon": n}}}``."""
    found: dict[str, dict[str, dict[str, int]]] = {}
    for name in bases or list(aiowheel.loops.installed()):
        found[name] = {}
        for label, factory in _factories(name).items():
            with asyncio.Runner(loop_factory=factory) as runner:
                found[name][label] = runner.run(_churn(cancels))
    return found


def main(argv: list[str]) -> int:
    """Print (and with ``--json`` write) the reports; exit 1 if a loop-mode wheel drew one."""
    parser = argparse.ArgumentParser(prog="python -m bench.cancels", description=__doc__)
    parser.add_argument("--cancels", type=int, default=50_000)
    parser.add_argument("--bases", help="comma-separated (default: every base installed)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    bases = args.bases.split(",") if args.bases else None
    found = run(args.cancels, bases)
    print(f"Python {sys.version.split()[0]}; {args.cancels:,} cancelled call_later({DELAY}) "
          f"and one cancelled call_soon per loop: reports to the exception handler")  # fmt: skip
    for name, loops in found.items():
        for label, counts in loops.items():
            soon = "no handle" if counts["call_soon"] < 0 else counts["call_soon"]
            print(f"  {name:10} {label:32} timers {counts['timers']:>7,}  call_soon {soon}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {"python": sys.version.split()[0], "cancels": args.cancels, "reports": found},
                indent=1,
            )
        )
    wheel = [name for name, loops in found.items() if loops["loop mode, threshold=0"]["timers"]]
    if wheel:
        print(f"a cancelled wheel timer drew a report on: {', '.join(wheel)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
