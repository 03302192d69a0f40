"""Run CPython's own test_asyncio modules with every new event loop made by loop mode.

    python tests/conformance/cpython_conformance.py --loop asyncio --mode wheel test_tasks
    python tests/conformance/cpython_conformance.py --loop uvloop --mode base test_locks

``--mode wheel`` makes every new event loop a loop-mode loop, ``aiowheel.new_event_loop(base)``
(``base``: asyncio's default loop, uvloop's, rloop's or zuvloop's); ``--mode base`` the base
loop itself, the reference to compare with.

Loops are injected without replacing event loop policies (3.14 deprecates them, 3.16 removes
them, and on 3.14 replacing ``asyncio.DefaultEventLoopPolicy`` no longer changes which loop is
made): the harness rebinds the names loops are made from, before the test modules are imported:

- the default policy class's ``_loop_factory``: what ``asyncio.new_event_loop()`` makes, and
  ``asyncio.Runner`` without a ``loop_factory`` (``asyncio.run``, ``IsolatedAsyncioTestCase``),
  on 3.11 through 3.15. A test that installs its own policy (test_runners does, with mock loops)
  still gets its own loops;
- ``asyncio.EventLoop`` (3.13+: the tests pass it as ``loop_factory``).

Each of them makes an instance of one class, a subclass of the loop-mode class (or of the base
class) that counts its instances. Prints one JSON object: the tests run, the ids of those that
failed or errored, the loops made and, in wheel mode, how many timers those loops' wheels took,
so that a run in which the injection or the wheel was never used cannot pass for conformance.

The tests are the interpreter's own, under ``Lib/test/test_asyncio``; a module the
interpreter does not ship is reported in ``missing``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import signal
import sys
import unittest
from typing import Any


def _counting_class(loop: str, mode: str, made: list[Any]) -> type[Any]:
    """The class every injected name makes: the loop-mode class of ``loop``, or the base."""
    import aiowheel
    import aiowheel.loops

    # asyncio's default loop class, or the class the library's own factory makes.
    base = aiowheel.loops.base_class(loop)
    factory = aiowheel.loop_factory(base)
    if mode == "virtual":
        import aiowheel.testing

        factory = aiowheel.testing.virtual_loop_factory(base)
    made_from: type[Any] = factory.config.base
    if mode in ("wheel", "virtual"):
        probe = factory()
        probe.close()
        made_from = type(probe)

    class Counted(made_from):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    Counted.__name__ = Counted.__qualname__ = made_from.__name__
    return Counted


def _inject(cls: type[Any]) -> None:
    # The default policy's class by the one private name it has on 3.11 through 3.15 (its
    # public alias is deprecated from 3.14).
    if sys.platform == "win32":
        policy = sys.modules["asyncio.windows_events"].DefaultEventLoopPolicy
    else:
        policy = sys.modules["asyncio.unix_events"]._UnixDefaultEventLoopPolicy
    policy._loop_factory = cls
    if hasattr(asyncio, "EventLoop"):
        asyncio.EventLoop = cls  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    import aiowheel.loops  # the bases it knows (aiowheel.loops.BASES)

    parser.add_argument("--loop", choices=list(aiowheel.loops.BASES), required=True)
    parser.add_argument("--mode", choices=["base", "wheel", "virtual"], required=True)
    parser.add_argument("tests", nargs="+", help="test_tasks, or test_tasks.Class.test_name")
    args = parser.parse_args()

    # CPython's tests assume Python's own SIGINT handler: test_runners interrupts itself with
    # _thread.interrupt_main(), which does nothing where SIGINT is ignored, and the test then
    # spins for ever on a mock selector, its memory growing. A shell without job control
    # starts its background jobs with SIGINT ignored, and that is inherited (a CI run started
    # with `&` reached 12 GB and the OOM killer).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    made: list[Any] = []
    _inject(_counting_class(args.loop, args.mode, made))

    suite = unittest.TestSuite()
    missing = []
    for name in args.tests:
        module_name = name.split(".")[0]
        try:
            importlib.import_module(f"test.test_asyncio.{module_name}")
        except ModuleNotFoundError:
            missing.append(name)
            continue
        suite.addTests(unittest.defaultTestLoader.loadTestsFromName(f"test.test_asyncio.{name}"))
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=1).run(suite)
    failed = sorted(test.id() for test, _ in result.failures + result.errors)
    failed += sorted(test.id() for test in result.unexpectedSuccesses)
    from aiowheel import timer_of

    timers = [timer for timer in map(timer_of, made) if timer is not None]
    wheel_timers = sum(t.stats().fired + t.stats().cancelled for t in timers)
    print(
        json.dumps(
            {
                "python": sys.version.split()[0],
                "loop": args.loop,
                "mode": args.mode,
                "run": result.testsRun,
                "skipped": len(result.skipped),
                "failed": failed,
                "missing": missing,
                "loops_made": len(made),
                "wheel_loops": len(timers),
                "wheel_timers": wheel_timers,
            }
        )
    )


if __name__ == "__main__":
    main()
    # The results are out. A test that failed on its own loop can leave a thread running that
    # loop, which would hold the interpreter at exit for ever (uvloop on 3.14's
    # test_free_threading does, in both modes): exit without waiting for such threads.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
