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
    tmp_path: Path, shape: Shape, *args: str
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
