"""``pytest -p aiowheel.pytest``: every asyncio test a suite has goes to loop mode, nothing else
a test sees changes, and the run says what it did.

Each *shape* of suite seen in the wild (anyio's default fixture, a parametrized or a constant
conftest fixture, markers added late by a conftest, ``use_uvloop``, a backend's own
``loop_factory``, pytest-asyncio in strict and in auto mode, a suite's own loop factories hook,
trio beside asyncio) is written to a temporary directory and run twice in a subprocess, as a
user runs it: with the plugin and without it (the negative control). Every test of the suites
records, from inside, its event loop and what it sees (``anyio_backend``,
``anyio_backend_options``, ``isinstance(loop, uvloop.Loop)``). The two runs must record the
same tests seeing the same values; only the loop differs, and only for the tests the plugin
claims.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from aiowheel.pytest import summary_line
from tests.support import ROOT

# Imported by every suite: one JSON line per test, of where it runs and what it sees.
RECORD = textwrap.dedent(
    """
    import asyncio, json, os, re

    import aiowheel
    import uvloop


    def record(**seen):
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio
            loop = None
        config = aiowheel.config_of(loop) if loop is not None else None
        entry = {
            "test": os.environ["PYTEST_CURRENT_TEST"].rpartition(" ")[0],
            "wheel": None if config is None else config.base.__name__,
            "seen": {
                "uvloop": isinstance(loop, uvloop.Loop),
                # Reprs without addresses: each run is its own process.
                **{name: re.sub(r" at 0x\\w+", "", repr(v)) for name, v in seen.items()},
            },
        }
        with open(os.environ["AIOWHEEL_RECORD"], "a") as out:
            out.write(json.dumps(entry) + "\\n")
    """
)

ANYIO_TESTS = textwrap.dedent(
    """
    import pytest

    from record import record


    @pytest.fixture
    async def fixture_seen(anyio_backend):
        record(where="fixture", anyio_backend=anyio_backend)
        return anyio_backend


    @pytest.mark.anyio
    async def test_reads_its_backend(anyio_backend, anyio_backend_name, anyio_backend_options):
        record(
            anyio_backend=anyio_backend,
            name=anyio_backend_name,
            options=anyio_backend_options,
            equals_asyncio=anyio_backend == "asyncio",
        )


    @pytest.mark.anyio
    async def test_with_an_async_fixture(fixture_seen):
        record(fixture=fixture_seen)
    """
)

# The same tests, with no marker: a conftest adds it during collection (late markers).
UNMARKED_ANYIO_TESTS = ANYIO_TESTS.replace("@pytest.mark.anyio\n", "")

LATE_MARKERS = textwrap.dedent(
    """
    import inspect

    import pytest


    def pytest_collection_modifyitems(items):
        for item in items:
            if inspect.iscoroutinefunction(getattr(item, "obj", None)):
                item.add_marker(pytest.mark.anyio)
    """
)

PYTEST_ASYNCIO_TESTS = textwrap.dedent(
    """
    import asyncio

    import pytest
    import pytest_asyncio

    from record import record


    @pytest_asyncio.fixture
    async def fixture_seen():
        record(where="fixture")
        return 1


    @pytest.mark.asyncio
    async def test_marked(fixture_seen):
        record(fixture=fixture_seen)
        async with asyncio.timeout(5):
            await asyncio.sleep(0.01)


    @pytest.mark.asyncio
    async def test_marked_alone():
        record()
    """
)


@dataclass
class Shape:
    """A suite: its files, its ini lines, and where its tests should run under the plugin."""

    files: dict[str, str]
    ini: str = "asyncio_default_fixture_loop_scope = function"
    # (kind, base or why) -> count, as the plugin's summary line counts them.
    tally: dict[tuple[str, str], int] = field(default_factory=dict)


PARAMETRIZED_FIXTURE = textwrap.dedent(
    """
    import pytest


    @pytest.fixture(
        params=["asyncio", ("asyncio", {"use_uvloop": True}), "trio"],
        ids=["asyncio", "uvloop", "trio"],
    )
    def anyio_backend(request):
        return request.param
    """
)

CONSTANT_FIXTURE = (
    'import pytest\n\n\n@pytest.fixture\ndef anyio_backend():\n    return "asyncio"\n'
)

SHAPES: dict[str, Shape] = {
    # anyio's own anyio_backend fixture: asyncio and trio (installed).
    "anyio-default": Shape(
        {"test_a.py": ANYIO_TESTS},
        tally={("loop mode", "asyncio"): 2, ("left off", "trio"): 2},
    ),
    "anyio-parametrized-fixture": Shape(
        {"conftest.py": PARAMETRIZED_FIXTURE, "test_a.py": ANYIO_TESTS},
        tally={
            ("loop mode", "asyncio"): 2,
            ("loop mode", "uvloop"): 2,
            ("left off", "trio"): 2,
        },
    ),
    "anyio-constant-fixture": Shape(
        {"conftest.py": CONSTANT_FIXTURE, "test_a.py": ANYIO_TESTS},
        tally={("loop mode", "asyncio"): 2},
    ),
    "anyio-late-markers": Shape(
        {"conftest.py": LATE_MARKERS, "test_a.py": UNMARKED_ANYIO_TESTS},
        tally={("loop mode", "asyncio"): 2, ("left off", "trio"): 2},
    ),
    "anyio-late-markers-and-fixture": Shape(
        {
            "conftest.py": LATE_MARKERS + "\n\n" + CONSTANT_FIXTURE.replace("import pytest\n", ""),
            "test_a.py": UNMARKED_ANYIO_TESTS,
        },
        tally={("loop mode", "asyncio"): 2},
    ),
    "anyio-use-uvloop": Shape(
        {
            "test_a.py": ANYIO_TESTS.replace(
                "@pytest.mark.anyio\n",
                '@pytest.mark.anyio\n@pytest.mark.parametrize("anyio_backend", '
                '[("asyncio", {"use_uvloop": True})])\n',
            )
        },
        tally={("loop mode", "uvloop"): 2},
    ),
    "anyio-own-loop-factory": Shape(
        {
            "test_a.py": "import asyncio\n"
            + ANYIO_TESTS.replace(
                "@pytest.mark.anyio\n",
                '@pytest.mark.anyio\n@pytest.mark.parametrize("anyio_backend", '
                '[("asyncio", {"loop_factory": asyncio.new_event_loop})])\n',
            )
        },
        tally={("left off", "own loop_factory"): 2},
    ),
    "pytest-asyncio-strict": Shape(
        {"test_a.py": PYTEST_ASYNCIO_TESTS},
        tally={("loop mode", "asyncio"): 2},
    ),
    "pytest-asyncio-auto": Shape(
        {"test_a.py": PYTEST_ASYNCIO_TESTS.replace("@pytest.mark.asyncio\n", "")},
        ini="asyncio_mode = auto\nasyncio_default_fixture_loop_scope = function",
        tally={("loop mode", "asyncio"): 2},
    ),
    "pytest-asyncio-own-factories": Shape(
        {
            "conftest.py": "import asyncio\n\n\ndef pytest_asyncio_loop_factories(config, item):"
            "\n    return {'plain': asyncio.new_event_loop}\n",
            "test_a.py": PYTEST_ASYNCIO_TESTS,
        },
        tally={("left off", "own loop factories hook"): 2},
    ),
}


def run_shape(
    tmp_path: Path, shape: Shape, *args: str, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run ``shape`` as a user would, in a fresh directory; its output and its records."""
    suite = tmp_path / ("with" if "aiowheel.pytest" in args else "without")
    suite.mkdir(parents=True)
    (suite / "record.py").write_text(RECORD)
    for name, text in shape.files.items():
        (suite / name).write_text(text)
    (suite / "pytest.ini").write_text(f"[pytest]\n{shape.ini}\n")
    records = suite / "records.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", *args, str(suite)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=suite,
        env={
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{suite}",
            "AIOWHEEL_RECORD": str(records),
            **(env or {}),
        },
    )
    lines = records.read_text().splitlines() if records.exists() else []
    return proc, sorted((json.loads(line) for line in lines), key=json.dumps)


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_shape_runs_on_loop_mode_exactly_as_documented(tmp_path: Path, name: str) -> None:
    shape = SHAPES[name]
    plain, plain_records = run_shape(tmp_path, shape)
    wheel, wheel_records = run_shape(tmp_path, shape, "-p", "aiowheel.pytest")
    for proc in (plain, wheel):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert " failed" not in proc.stdout and " skipped" not in proc.stdout
    tests = sum(shape.tally.values())
    assert f"{tests} passed" in plain.stdout and f"{tests} passed" in wheel.stdout, wheel.stdout
    # The negative control: without the plugin no test runs on a wheel.
    assert plain_records and all(entry["wheel"] is None for entry in plain_records)
    # Nothing a test sees changes: the same tests, the same backend values, the same uvloop-ness.
    assert [(e["test"], e["seen"]) for e in wheel_records] == [
        (e["test"], e["seen"]) for e in plain_records
    ]
    # The tests the plugin claims run on a wheel over the base it says; the others do not.
    claimed = {base for kind, base in shape.tally if kind == "loop mode"}
    wheels = {e["wheel"] for e in wheel_records}
    expected = {{"asyncio": "_UnixSelectorEventLoop", "uvloop": "Loop"}[b] for b in claimed}
    if any(kind == "left off" for kind, _ in shape.tally):
        expected.add(None)
    assert wheels == expected
    # And the run says what it did, in one line.
    assert summary_line(shape.tally) in wheel.stdout, wheel.stdout
    assert "aiowheel:" not in plain.stdout


def test_strict_fails_every_asyncio_test_left_off_and_only_those(tmp_path: Path) -> None:
    shape = SHAPES["anyio-own-loop-factory"]
    proc, _ = run_shape(tmp_path, shape, "-p", "aiowheel.pytest", "--aiowheel-strict")
    assert proc.returncode == 1
    assert "2 failed" in proc.stdout
    assert "left on its own loop (own loop_factory)" in proc.stdout
    trio = SHAPES["anyio-default"]  # trio is not asyncio: never an error
    proc, _ = run_shape(tmp_path / "trio", trio, "-p", "aiowheel.pytest", "--aiowheel-strict")
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("base", ["uvloop", "auto"])
def test_another_base_on_the_command_line(tmp_path: Path, base: str) -> None:
    shape = SHAPES["anyio-parametrized-fixture"]
    proc, records = run_shape(tmp_path, shape, "-p", "aiowheel.pytest", "--aiowheel-base", base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"base {base}" in proc.stdout
    # Every asyncio test is on a wheel; use_uvloop's over uvloop whatever the base.
    asyncio_records = [e for e in records if "trio" not in e["test"]]
    assert asyncio_records and all(e["wheel"] is not None for e in asyncio_records)


def test_an_unknown_base_is_a_usage_error(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, SHAPES["anyio-default"], "-p", "aiowheel.pytest",
                        "--aiowheel-base", "trio")  # fmt: skip
    assert proc.returncode == 4
    assert "invalid choice: 'trio'" in proc.stderr


def test_anyio_is_given_back_its_runner_factory() -> None:
    # In this very process (the plugin is not loaded here): the wrap is undone at the end.
    import anyio.pytest_plugin

    assert anyio.pytest_plugin.get_runner.__module__ == "anyio.pytest_plugin"


# -- --aiowheel-clock virtual, the aiowheel_clock marker and fixture --------------------------

# Each test sleeps SUITE_SLEEP seconds (an hour unless the environment says otherwise) and
# records the loop time it started at, how much loop time passed, whether that took less than
# half of it in wall time, and whether its loop is on a virtual clock.
SLEEPERS = textwrap.dedent(
    """
    import asyncio, os, time

    import pytest

    import aiowheel.testing
    from record import record

    SLEEP = float(os.environ.get("SUITE_SLEEP", "3600"))


    async def sleep_and_record():
        loop = asyncio.get_running_loop()
        start, wall = loop.time(), time.perf_counter()
        await asyncio.sleep(SLEEP)
        record(
            start=round(start, 6) if aiowheel.testing.clock_of(loop) else "real",
            slept=round(loop.time() - start, 3) >= SLEEP,
            fast=time.perf_counter() - wall < SLEEP / 2,
            virtual=aiowheel.testing.clock_of(loop) is not None,
        )


    @pytest.mark.asyncio
    async def test_pytest_asyncio():
        await sleep_and_record()


    @pytest.mark.asyncio
    async def test_pytest_asyncio_timeout():
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(SLEEP / 2):
                await asyncio.sleep(SLEEP)
        await sleep_and_record()


    @pytest.mark.anyio
    async def test_anyio():
        await sleep_and_record()


    # Two tests on one module-scoped loop: one clock, which goes on from where the first left it.
    @pytest.mark.asyncio(loop_scope="module")
    async def test_shared_loop_first():
        await sleep_and_record()


    @pytest.mark.asyncio(loop_scope="module")
    async def test_shared_loop_second():
        await sleep_and_record()
    """
)

MARKED = textwrap.dedent(
    """
    import asyncio

    import pytest

    import aiowheel.testing
    from record import record


    @pytest.mark.aiowheel_clock("real")
    @pytest.mark.asyncio
    async def test_marked_real():
        loop = asyncio.get_running_loop()
        record(virtual=aiowheel.testing.clock_of(loop) is not None)


    @pytest.mark.aiowheel_clock(autojump=False, start=100.0)
    @pytest.mark.asyncio
    async def test_manual_clock(aiowheel_clock):
        sleeper = asyncio.ensure_future(asyncio.sleep(10))
        await aiowheel_clock.advance(9.5)
        early = sleeper.done()
        await aiowheel_clock.advance(0.5)
        await asyncio.sleep(0)
        record(now=aiowheel_clock.now, early=early, woke=sleeper.done())


    @pytest.mark.anyio
    async def test_anyio_fixture_alone(aiowheel_clock):
        await asyncio.sleep(60)
        record(now=aiowheel_clock.now)
    """
)

ASYNCIO_ANYIO = CONSTANT_FIXTURE  # anyio on asyncio only: a trio test would sleep for real


def clock_shape(tests: str) -> Shape:
    return Shape({"conftest.py": ASYNCIO_ANYIO, "test_a.py": tests})


def seen(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each test's record, by the test's name."""
    return {e["test"].rpartition("::")[2]: e["seen"] for e in records}


def test_the_virtual_clock_option_runs_hour_long_sleeps_in_seconds(tmp_path: Path) -> None:
    shape = clock_shape(SLEEPERS)
    proc, records = run_shape(tmp_path, shape, "-p", "aiowheel.pytest", "--aiowheel-clock",
                              "virtual")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout
    assert "base asyncio, virtual clock" in proc.stdout
    assert "aiowheel: 5 tests on loop mode (asyncio 5), 5 on a virtual clock; 0 left off" in (
        proc.stdout
    )
    tests = seen(records)
    assert sorted(tests) == sorted(
        ["test_pytest_asyncio", "test_pytest_asyncio_timeout", "test_anyio",
         "test_shared_loop_first", "test_shared_loop_second"]
    )  # fmt: skip
    for name, values in tests.items():
        assert values["virtual"] == "True" and values["slept"] == "True", name
        assert values["fast"] == "True", name  # an hour of virtual time in seconds of wall time
    # Each test its own clock from 0; the module's shared loop one clock that goes on.
    assert tests["test_pytest_asyncio"]["start"] == "0.0"
    assert tests["test_anyio"]["start"] == "0.0"
    assert tests["test_pytest_asyncio_timeout"]["start"] == "1800.0"  # after its own timeout
    assert tests["test_shared_loop_first"]["start"] == "0.0"
    assert tests["test_shared_loop_second"]["start"] == "3600.0"


def test_without_the_option_the_same_suite_runs_on_real_time(tmp_path: Path) -> None:
    shape = clock_shape(SLEEPERS)
    proc, records = run_shape(tmp_path, shape, "-p", "aiowheel.pytest",
                              env={"SUITE_SLEEP": "0.2"})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "virtual" not in proc.stdout
    tests = seen(records)
    assert len(tests) == 5
    for name, values in tests.items():
        # Real time: the loop time passed took as long in wall time.
        assert values == {"start": "'real'", "slept": "True", "fast": "False",
                          "virtual": "False", "uvloop": False}, name  # fmt: skip


def test_the_marker_and_the_fixture_choose_the_clock_per_test(tmp_path: Path) -> None:
    shape = clock_shape(MARKED)
    for args in ([], ["--aiowheel-clock", "virtual"]):
        proc, records = run_shape(tmp_path / str(len(args)), shape, "-p", "aiowheel.pytest",
                                  *args)  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "3 passed" in proc.stdout
        assert "aiowheel: 3 tests on loop mode (asyncio 3), 2 on a virtual clock" in proc.stdout
        tests = seen(records)
        assert tests["test_marked_real"]["virtual"] == "False"
        # Manual mode: not woken short of its deadline, woken by the rest; started at 100.
        assert tests["test_manual_clock"]["now"] == "110.0"
        assert tests["test_manual_clock"]["early"] == "False"
        assert tests["test_manual_clock"]["woke"] == "True"
        # Asking for the fixture is enough to be on a virtual clock (autojump).
        assert tests["test_anyio_fixture_alone"]["now"] == "60.0"


def test_the_fixture_on_a_real_clock_says_why(tmp_path: Path) -> None:
    text = MARKED.replace(
        "async def test_marked_real():",
        "async def test_marked_real(aiowheel_clock):\n    aiowheel_clock.now",
    )
    proc, _ = run_shape(tmp_path, clock_shape(text), "-p", "aiowheel.pytest")
    assert proc.returncode == 1
    assert "1 failed, 2 passed" in proc.stdout
    assert "the aiowheel_clock fixture needs this test on a virtual clock" in proc.stdout


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("'fake'", "must be one of 'real', 'virtual', got 'fake'"),
        ("'real', autojump=False", "'real' takes no keywords"),
        ("'virtual', 'real'", "takes one of 'real', 'virtual'"),
        ("tick=1", "takes one of 'real', 'virtual'"),
        ("autojump=-1", "autojump must be True, False or a non-negative, finite number"),
        ("start=float('nan')", "start must be a non-negative, finite number of seconds, got nan"),
    ],
)
def test_a_malformed_marker_is_a_usage_error_naming_the_test(
    tmp_path: Path, marker: str, message: str
) -> None:
    text = (
        "import pytest\n\n\n"
        f"@pytest.mark.aiowheel_clock({marker})\n@pytest.mark.asyncio\n"
        "async def test_it():\n    pass\n"
    )
    proc, _ = run_shape(tmp_path, clock_shape(text), "-p", "aiowheel.pytest")
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "test_a.py::test_it: @pytest.mark.aiowheel_clock: " + message in proc.stderr


def test_an_unknown_clock_is_a_usage_error_listing_the_choices(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, SHAPES["anyio-default"], "-p", "aiowheel.pytest",
                        "--aiowheel-clock", "fake")  # fmt: skip
    assert proc.returncode == 4
    line = next(line for line in proc.stderr.splitlines() if "--aiowheel-clock" in line)
    # argparse quotes the choices on newer interpreters: "(choose from 'real', 'virtual')".
    assert "invalid choice: 'fake' (choose from " in line
    assert line.replace("'", "").endswith("(choose from real, virtual)"), line


# -- --aiowheel-lingering ----------------------------------------------------------------------

LINGERING = textwrap.dedent(
    """
    import asyncio

    import pytest

    import aiowheel


    def on_idle():
        pass


    @pytest.mark.asyncio
    async def test_leaves_a_call():
        asyncio.get_running_loop().call_later(100, on_idle)


    @pytest.mark.asyncio
    async def test_cancels_its_call():
        asyncio.get_running_loop().call_later(100, on_idle).cancel()


    @pytest.mark.asyncio
    async def test_a_sleeping_task_is_cancelled_by_the_runner():
        asyncio.ensure_future(asyncio.sleep(100))
        await asyncio.sleep(0)


    @pytest.mark.anyio
    async def test_anyio_leaves_a_heartbeat():
        aiowheel.get_timer().every(30, on_idle)


    @pytest.mark.anyio
    async def test_anyio_clean():
        beat = aiowheel.get_timer().every(30, on_idle)
        beat.cancel()


    # A module-scoped loop: each test answers only for what it left.
    @pytest.mark.asyncio(loop_scope="module")
    async def test_shared_loop_leaves_one():
        asyncio.get_running_loop().call_later(200, on_idle)


    @pytest.mark.asyncio(loop_scope="module")
    async def test_shared_loop_then_clean():
        await asyncio.sleep(0)
    """
)


@pytest.mark.parametrize("clock", ["real", "virtual"])
@pytest.mark.parametrize("base", ["asyncio", "uvloop"])
def test_lingering_error_fails_each_test_that_leaves_a_timer(
    tmp_path: Path, clock: str, base: str
) -> None:
    args = ("-p", "aiowheel.pytest", "--aiowheel-lingering", "error", "--aiowheel-clock", clock,
            "--aiowheel-base", base)  # fmt: skip
    proc, _ = run_shape(tmp_path, clock_shape(LINGERING), *args)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "7 passed, 3 errors" in proc.stdout, proc.stdout
    failed = sorted(
        line.split("::")[1].split(" ")[0]
        for line in proc.stdout.splitlines()
        if line.startswith("ERROR test_a.py::")
    )
    assert failed == ["test_anyio_leaves_a_heartbeat", "test_leaves_a_call",
                      "test_shared_loop_leaves_one"]  # fmt: skip
    # Each names the timer's kind, callback and the line that filed it.
    assert "test_a.py::test_leaves_a_call left 1 timer pending:" in proc.stdout
    assert "  call on_idle, " in proc.stdout and "test_a.py:15 in test_leaves_a_call" in proc.stdout
    assert "  heartbeat on_idle, " in proc.stdout
    assert "test_a.py:31 in test_anyio_leaves_a_heartbeat" in proc.stdout


def test_lingering_warn_warns_and_passes(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, clock_shape(LINGERING), "-p", "aiowheel.pytest",
                        "--aiowheel-lingering", "warn")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 passed, 3 warnings" in proc.stdout
    assert proc.stdout.count("LingeringTimerWarning: test_a.py::") == 3


# Ways a suite makes warnings errors: its ini file (async-lru's, aiocache's), -W, a filter naming
# the class. None may fail a test under warn: the three tests still pass, each with its warning.
@pytest.mark.parametrize(
    ("ini", "args"),
    [
        ("filterwarnings = error", ()),
        ("", ("-W", "error")),
        ("", ("-W", "error::aiowheel.LingeringTimerWarning")),
    ],
    ids=["ini-error", "W-error", "W-error-naming-it"],
)
def test_lingering_warn_never_fails_a_test_where_warnings_are_errors(
    tmp_path: Path, ini: str, args: tuple[str, ...]
) -> None:
    shape = clock_shape(LINGERING)
    shape.ini += f"\n{ini}"
    proc, _ = run_shape(tmp_path, shape, *args, "-p", "aiowheel.pytest",
                        "--aiowheel-lingering", "warn")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 passed, 3 warnings" in proc.stdout, proc.stdout
    assert proc.stdout.count("LingeringTimerWarning: test_a.py::") == 3


# How docs/testing.md keeps warn a warning under filterwarnings = error, in the ini file or on
# the command line: the filter imports aiowheel, not the plugin (which pytest could then not
# rewrite, a PytestAssertRewriteWarning, fatal there); the older spelling through the plugin
# module too. An ignore filter is obeyed.
@pytest.mark.parametrize(
    ("ini", "args", "shown"),
    [
        ("filterwarnings =\n    error\n    default::aiowheel.LingeringTimerWarning", (), 3),
        ("filterwarnings = error", ("-W", "default::aiowheel.LingeringTimerWarning"), 3),
        ("filterwarnings = error", ("-W", "default::aiowheel.pytest.LingeringTimerWarning"), 3),
        ("filterwarnings = error", ("-W", "ignore::aiowheel.LingeringTimerWarning"), 0),
    ],
    ids=["ini", "W", "W-plugin-module", "W-ignore"],
)
def test_a_filter_names_the_lingering_warning_without_harm(
    tmp_path: Path, ini: str, args: tuple[str, ...], shown: int
) -> None:
    shape = clock_shape(LINGERING)
    shape.ini += f"\n{ini}"
    proc, _ = run_shape(tmp_path, shape, *args, "-p", "aiowheel.pytest",
                        "--aiowheel-lingering", "warn")  # fmt: skip
    assert "PytestAssertRewriteWarning" not in proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("LingeringTimerWarning: test_a.py::") == shown
    assert ("7 passed, 3 warnings" if shown else "7 passed in") in proc.stdout, proc.stdout


def test_the_lingering_warning_is_one_class_importable_without_pytest() -> None:
    import aiowheel
    import aiowheel.pytest

    assert aiowheel.pytest.LingeringTimerWarning is aiowheel.LingeringTimerWarning
    assert issubclass(aiowheel.LingeringTimerWarning, UserWarning)
    # Naming it imports neither pytest nor the plugin.
    code = (
        "import sys, aiowheel; aiowheel.LingeringTimerWarning; print(sorted(m for m in "
        "sys.modules if m == 'pytest' or m.startswith(('_pytest', 'aiowheel.pytest'))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr


def test_without_lingering_nothing_is_checked(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, clock_shape(LINGERING), "-p", "aiowheel.pytest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "7 passed" in proc.stdout and "Lingering" not in proc.stdout


def test_an_unknown_lingering_mode_is_a_usage_error(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, SHAPES["anyio-default"], "-p", "aiowheel.pytest",
                        "--aiowheel-lingering", "fail")  # fmt: skip
    assert proc.returncode == 4
    line = next(line for line in proc.stderr.splitlines() if "--aiowheel-lingering" in line)
    assert line.replace("'", "").endswith("invalid choice: fail (choose from off, warn, error)")


MODULE_FIXTURE = textwrap.dedent(
    """
    import asyncio

    import pytest
    import pytest_asyncio

    import aiowheel


    def on_idle():
        pass


    # A module's server, say: its heartbeat is filed while the first test is set up and kept
    # for every test of the module, on the module's loop.
    @pytest_asyncio.fixture(scope="module", loop_scope="module")
    async def server():
        beat = aiowheel.get_timer().every(30, on_idle)
        yield beat
        beat.cancel()


    @pytest.mark.asyncio(loop_scope="module")
    async def test_first(server):
        pass


    @pytest.mark.asyncio(loop_scope="module")
    async def test_leaves_a_call(server):
        asyncio.get_running_loop().call_later(100, on_idle)


    @pytest.mark.asyncio(loop_scope="module")
    async def test_last(server):
        pass
    """
)


def test_lingering_leaves_a_wider_fixtures_timers_to_it(tmp_path: Path) -> None:
    proc, _ = run_shape(tmp_path, clock_shape(MODULE_FIXTURE), "-p", "aiowheel.pytest",
                        "--aiowheel-lingering", "error")  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 passed, 1 error" in proc.stdout, proc.stdout
    assert "ERROR test_a.py::test_leaves_a_call" in proc.stdout
    assert "heartbeat" not in proc.stdout  # the module fixture's, kept for its tests


# -- every loop of the run: counted, or covered under --aiowheel-every-loop -----------------

# Tests that make their own loops, as suites do: none is a pytest-asyncio or anyio test, so
# without the option the plugin does not make their loops. DeprecationWarning is an error:
# the option must not touch the event loop policy (3.14 deprecates it).
OWN_LOOPS = textwrap.dedent(
    """
    import asyncio
    import unittest

    import anyio
    import anyio.from_thread

    from record import record


    async def main():
        record()


    def test_asyncio_run():
        asyncio.run(main())


    def test_runner():
        with asyncio.Runner() as runner:
            runner.run(main())


    def test_new_event_loop():
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()


    def test_anyio_run():
        anyio.run(main)


    def test_blocking_portal():  # a test client's shape: the app in a portal's own loop
        with anyio.from_thread.start_blocking_portal() as portal:
            portal.call(main)


    class TestUnittest(unittest.IsolatedAsyncioTestCase):
        async def test_isolated(self):
            record()


    def test_a_loop_class_of_its_own():  # never switched: counted as a stock loop
        loop = asyncio.SelectorEventLoop()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()


    def test_no_loop():
        pass
    """
)
SWITCHABLE = ["test_asyncio_run", "test_runner", "test_new_event_loop", "test_anyio_run",
              "test_blocking_portal", "test_isolated"]  # fmt: skip
STRICT_WARNINGS = "asyncio_default_fixture_loop_scope = function\nfilterwarnings =\n    error"


def wheels(records: list[dict[str, Any]]) -> dict[str, str | None]:
    """Each test's loop: the base of its wheel, or None (a stock loop)."""
    return {e["test"].rpartition("::")[2]: e["wheel"] for e in records}


def test_tests_on_loops_the_plugin_did_not_make_are_counted(tmp_path: Path) -> None:
    # Before, the line read "0 tests on loop mode; 0 left off" for such a suite.
    proc, records = run_shape(
        tmp_path, Shape({"test_a.py": OWN_LOOPS}, ini=STRICT_WARNINGS), "-p", "aiowheel.pytest"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 passed" in proc.stdout
    assert wheels(records) == dict.fromkeys([*SWITCHABLE, "test_a_loop_class_of_its_own"])
    assert "aiowheel: 0 tests on loop mode; 0 left off; 7 on their own stock loops" in proc.stdout


@pytest.mark.parametrize(
    ("how", "base", "wheel"),
    [("option", "asyncio", "_UnixSelectorEventLoop"), ("ini", "uvloop", "Loop")],
)
def test_every_loop_puts_every_loop_the_tests_make_on_loop_mode(
    tmp_path: Path, how: str, base: str, wheel: str
) -> None:
    ini = STRICT_WARNINGS + ("\naiowheel_every_loop = true" if how == "ini" else "")
    args = ["-p", "aiowheel.pytest", "--aiowheel-base", base]
    if how == "option":
        args.append("--aiowheel-every-loop")
    proc, records = run_shape(tmp_path, Shape({"test_a.py": OWN_LOOPS}, ini=ini), *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 passed" in proc.stdout and f"base {base}, every loop" in proc.stdout
    assert wheels(records) == {**dict.fromkeys(SWITCHABLE, wheel),
                               "test_a_loop_class_of_its_own": None}  # fmt: skip
    assert (
        f"aiowheel: 6 tests on loop mode ({base} 6), 6 on loops --aiowheel-every-loop made; "
        "0 left off; 1 on their own stock loops"
    ) in proc.stdout


def test_the_summary_line_counts_stock_loops() -> None:
    tally = {("loop mode", "asyncio"): 3, ("left off", "trio"): 2}
    assert summary_line(tally) == "aiowheel: 3 tests on loop mode (asyncio 3); 2 left off (trio 2)"
    tally[("stock", "")] = 570
    assert summary_line(tally).endswith("; 2 left off (trio 2); 570 on their own stock loops")
    every = {("loop mode", "asyncio"): 4, ("every loop", ""): 1}
    assert summary_line(every) == (
        "aiowheel: 4 tests on loop mode (asyncio 4), 1 on loops --aiowheel-every-loop made; "
        "0 left off; 0 on their own stock loops"
    )


def test_every_loop_changes_asyncio_only_until_restored() -> None:
    """In this process, without the plugin: asyncio's functions replaced, then given back."""
    import asyncio.events

    import aiowheel
    from aiowheel._plugin._loops import Loops

    originals = (asyncio.new_event_loop, asyncio.events._set_running_loop)
    loops = Loops()
    try:
        loops.make_every_loop(aiowheel.loop_factory())
        assert asyncio.new_event_loop is asyncio.events.new_event_loop
        assert asyncio.new_event_loop is not originals[0]
        loop = asyncio.new_event_loop()
        try:
            assert aiowheel.config_of(loop) is not None
            assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
        finally:
            loop.close()
    finally:
        loops.restore()
    assert (asyncio.new_event_loop, asyncio.events._set_running_loop) == originals
    assert asyncio._set_running_loop is originals[1]
    loop = asyncio.new_event_loop()
    loop.close()
    assert aiowheel.config_of(loop) is None
