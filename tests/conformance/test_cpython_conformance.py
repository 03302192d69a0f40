"""CPython's own test_asyncio timer modules pass with every loop made by loop mode.

Each module list runs twice in fresh interpreters (``cpython_conformance.py`` beside this
file): on the base loop itself, the reference, and with every new event loop made by
``aiowheel.new_event_loop(base)``. Loop mode passes when no test fails under it that passed on
the base loop (uvloop fails some of test_tasks on its own: those do not count), when the runs
ran the same tests, and when the wheels of the loops made really took timers.

A test that fails under loop mode only is run once more, alone, in both modes: these are
CPython's real-time tests on a shared 2-core machine. It counts as a failure unless it then
passes under loop mode; a retried test is printed either way, never hidden.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import BASES

HARNESS = Path(__file__).with_name("cpython_conformance.py")

# The modules that exercise timers (test_waitfor is 3.12+ in the issue; older interpreters that
# ship it run it too).
MODULES = [
    "test_tasks",
    "test_timeouts",
    "test_waitfor",
    "test_locks",
    "test_queues",
    "test_taskgroups",
    "test_runners",
]
if sys.version_info >= (3, 14):
    # New in 3.14, and arming timers: the call-graph introspection (a task awaiting a sleep
    # must show the same on loop mode) and asyncio's thread-safety tests.
    MODULES += ["test_graph", "test_free_threading"]


def _run(loop: str, mode: str, tests: list[str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, str(HARNESS), "--loop", loop, "--mode", mode, *tests],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the harness printed nothing (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["stderr"] = proc.stderr
    return result


def _loops() -> list[str]:
    """asyncio and uvloop everywhere; rloop and zuvloop where installed, on 3.14 only: the
    interpreter the peer benchmarks are measured on (each base costs CI about 2.5 minutes)."""
    loops = ["asyncio", "uvloop"]
    if sys.version_info[:2] == (3, 14):
        loops += [name for name in ("rloop", "zuvloop") if importlib.util.find_spec(name)]
    return loops


@pytest.mark.parametrize("loop", _loops())
def test_cpython_asyncio_tests_pass_under_loop_mode(loop: str) -> None:
    base = _run(loop, "base", MODULES)
    wheel = _run(loop, "wheel", MODULES)

    assert wheel["missing"] == base["missing"]
    assert sys.version_info < (3, 12) or not wheel["missing"]
    assert wheel["run"] == base["run"] > 500
    # Every loop the tests made through the policy was a loop-mode loop, and their wheels took
    # timers: the run exercised loop mode, not the base loop.
    assert wheel["loops_made"] == wheel["wheel_loops"] > 100
    assert wheel["wheel_timers"] > 1000

    new_failures = sorted(set(wheel["failed"]) - set(base["failed"]))
    if new_failures:
        names = [test.removeprefix("test.test_asyncio.") for test in new_failures]
        retried_base = _run(loop, "base", names)
        retried = _run(loop, "wheel", names)
        print(f"retried alone ({loop}): {names}")
        print(f"  base loop failed: {retried_base['failed']}")
        print(f"  loop mode failed: {retried['failed']}")
        still = sorted(set(retried["failed"]) - set(retried_base["failed"]))
        assert not still, (
            f"fail under loop mode ({loop}) only, also when run again alone: {still}\n"
            + wheel["stderr"][-8000:]
        )


VIRTUAL_MODULES = ["test_timeouts", "test_waitfor"]


@pytest.mark.parametrize("loop", list(BASES))
def test_cpython_timeout_tests_pass_on_a_virtual_clock(loop: str) -> None:
    """asyncio's own timeout and wait_for tests, every loop they make on a virtual clock
    (aiowheel.testing.virtual_loop_factory): no failure the base loop lacks, and the wheels
    took their timers."""
    base = _run(loop, "base", VIRTUAL_MODULES)
    virtual = _run(loop, "virtual", VIRTUAL_MODULES)
    assert virtual["missing"] == base["missing"]
    assert virtual["run"] == base["run"] > 20
    assert virtual["loops_made"] == virtual["wheel_loops"] > 20
    assert virtual["wheel_timers"] > 100
    assert not sorted(set(virtual["failed"]) - set(base["failed"])), virtual["stderr"][-8000:]
