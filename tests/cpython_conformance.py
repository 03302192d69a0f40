"""Run CPython's own test_asyncio modules with every new event loop made by loop mode.

    python tests/cpython_conformance.py --loop asyncio --mode wheel test_tasks test_locks
    python tests/cpython_conformance.py --loop uvloop --mode base test_tasks.SleepTests

``--mode wheel`` installs an event loop policy whose ``new_event_loop()`` returns
``aiowheel.new_event_loop(base)`` (``base``: asyncio's default loop or ``uvloop.Loop``);
``--mode base`` the same policy returning the base loop itself, the reference to compare with.
The policy replaces ``asyncio.DefaultEventLoopPolicy``, so it survives the test modules'
``asyncio.set_event_loop_policy(None)`` (asyncio re-creates the policy from that name).

Prints one JSON object: the tests run, the ids of those that failed or errored, the loops the
policy made and, in wheel mode, how many timers those loops' wheels took (so a run in which
the wheel was never used cannot pass for conformance).

The tests are the interpreter's own, under ``Lib/test/test_asyncio``; a module the
interpreter does not ship is reported in ``missing``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import unittest
from typing import Any


def _policy(loop: str, mode: str, made: list[Any]) -> type[asyncio.AbstractEventLoopPolicy]:
    import aiowheel
    from aiowheel._loop import timer_of

    if loop == "uvloop":
        import uvloop

        base_policy: type[Any] = uvloop.EventLoopPolicy
        base: type[asyncio.AbstractEventLoop] | None = uvloop.Loop
    else:
        base_policy = asyncio.DefaultEventLoopPolicy
        base = None

    class Policy(base_policy):  # type: ignore[misc, valid-type]
        def new_event_loop(self) -> asyncio.AbstractEventLoop:
            if mode == "wheel":
                new = aiowheel.new_event_loop(base)
                made.append(timer_of(new))
            else:
                new = super().new_event_loop()
                made.append(None)
            return new

    return Policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], required=True)
    parser.add_argument("--mode", choices=["base", "wheel"], required=True)
    parser.add_argument("tests", nargs="+", help="test_tasks, or test_tasks.Class.test_name")
    args = parser.parse_args()

    made: list[Any] = []
    asyncio.DefaultEventLoopPolicy = _policy(args.loop, args.mode, made)  # type: ignore[misc]
    asyncio.set_event_loop_policy(None)

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
    timers = [timer for timer in made if timer is not None]
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
