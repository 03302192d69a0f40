"""CPython's own test_asyncio timer modules pass with every loop made by loop mode.

Each module list runs twice in fresh interpreters (``cpython_conformance.py`` beside this
file): on the base loop itself, the reference, and with every new event loop made by
``aiowheel.new_event_loop(base)``. Loop mode passes when no test fails under it that passed on
the base loop (uvloop fails some of test_tasks on its own: those do not count), when the runs
ran the same tests, and when the wheels of the loops made really took timers.

A test that fails under loop mode only is run once more, alone, in both modes: these are
CPython's real-time tests on a shared 2-core machine. It counts as a failure unless it then
passes under loop mode; a retried test is printed either way, never hidden.

The harness runs are started ahead, a few at a time (``_Runs``): most of a run's time is
CPython's tests sleeping on the real clock, so two to four of them side by side take little
longer than one, and CI runs these modules on seven interpreter and build passes. A test waits
for its own runs, and a run that has finished frees its place for the next one.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
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


# How many harness runs may be under way at once (each is a fresh interpreter that mostly
# sleeps; more would turn CPython's real-time tests into a contest for the two cores).
AT_ONCE = 3

Run = tuple[str, str, tuple[str, ...]]


class _Runs:
    """The harness runs this module's selected tests will ask for, started ahead in order,
    at most :data:`AT_ONCE` at a time. Each writes to files of its own, so that one waiting to
    be read never blocks on a full pipe."""

    def __init__(self) -> None:
        self.queued: list[Run] = []
        self.started: dict[Run, tuple[subprocess.Popen[bytes], Any, Any]] = {}

    def plan(self, runs: list[Run]) -> None:
        self.queued += [run for run in runs if run not in self.queued]
        self.top_up()

    def top_up(self) -> None:
        while self.queued and len(self.started) < AT_ONCE:
            run = self.queued.pop(0)
            self.started[run] = self._start(run)

    @staticmethod
    def _start(run: Run) -> tuple[subprocess.Popen[bytes], Any, Any]:
        loop, mode, tests = run
        # Closed by _read or close(): they outlive this function.
        out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, str(HARNESS), "--loop", loop, "--mode", mode, *tests],
            stdout=out,
            stderr=err,
        )
        return proc, out, err

    def result(self, run: Run) -> dict[str, Any]:
        started = self.started.pop(run, None)
        if started is None:  # not started yet, or a retry: now
            if run in self.queued:
                self.queued.remove(run)
            started = self._start(run)
        proc, out, err = started
        try:
            proc.wait(timeout=900)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.top_up()
        stdout, stderr = (_read(f) for f in (out, err))
        lines = stdout.strip().splitlines()
        assert lines, f"the harness printed nothing (exit {proc.returncode}):\n{stderr[-4000:]}"
        result: dict[str, Any] = json.loads(lines[-1])
        result["stderr"] = stderr
        return result

    def close(self) -> None:
        for proc, out, err in self.started.values():
            proc.kill()
            proc.wait()
            out.close()
            err.close()
        self.started.clear()
        self.queued.clear()


def _read(file: Any) -> str:
    file.seek(0)
    text: str = file.read().decode(errors="replace")
    file.close()
    return text


_RUNS = _Runs()


@pytest.fixture(scope="module", autouse=True)
def _start_ahead(request: pytest.FixtureRequest) -> Any:
    """Plan the runs of every selected test of this module, and start the first ones."""
    planned: list[Run] = []
    for item in request.session.items:
        if getattr(item, "module", None) is not sys.modules[__name__]:
            continue
        loop = item.callspec.params["loop"]
        if item.originalname == "test_cpython_asyncio_tests_pass_under_loop_mode":
            planned += [(loop, "base", tuple(MODULES)), (loop, "wheel", tuple(MODULES))]
        else:
            modules = tuple(VIRTUAL_MODULES)
            planned += [(loop, "base", modules), (loop, "virtual", modules)]
    _RUNS.plan(planned)
    yield
    _RUNS.close()


def _run(loop: str, mode: str, tests: list[str]) -> dict[str, Any]:
    return _RUNS.result((loop, mode, tuple(tests)))


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
