"""``pytest -p aiowheel.pytest``: an existing suite's asyncio tests, unchanged, on loop mode.

A small suite (pytest-asyncio tests, anyio tests on asyncio with and without uvloop, an async
fixture) checks from inside each test whether it runs on a loop-mode loop; it is run in a
subprocess as a user runs it, with the plugin (all pass) and without it (they fail: the
check can fail).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import ROOT

SUITE = textwrap.dedent(
    """
    import asyncio

    import pytest
    import pytest_asyncio

    from aiowheel import timer_of


    def on_wheel() -> str:
        loop = asyncio.get_running_loop()
        assert timer_of(loop) is not None, f"not loop mode: {type(loop).__name__}"
        return type(loop).__name__


    @pytest_asyncio.fixture
    async def fixture_loop() -> str:
        await asyncio.sleep(0.02)
        return on_wheel()


    @pytest.mark.asyncio
    async def test_pytest_asyncio(fixture_loop: str) -> None:
        assert on_wheel() == fixture_loop
        await asyncio.sleep(0.02)
        async with asyncio.timeout(5):
            pass


    @pytest.mark.anyio
    @pytest.mark.parametrize(
        "anyio_backend",
        ["asyncio", ("asyncio", {"use_uvloop": True})],
        ids=["asyncio", "uvloop"],
    )
    async def test_anyio(anyio_backend: object, request: pytest.FixtureRequest) -> None:
        name = on_wheel()
        if request.node.name.endswith("[uvloop]"):
            assert name == "WheelLoop"  # uvloop under the wheel
        await asyncio.sleep(0.02)


    @pytest.mark.anyio
    async def test_anyio_default_backend() -> None:  # anyio's own anyio_backend fixture
        on_wheel()
        await asyncio.sleep(0.02)
    """
)


def run_suite(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_with_the_plugin_every_asyncio_test_runs_on_loop_mode(tmp_path: Path) -> None:
    proc = run_suite(tmp_path, "-p", "aiowheel.pytest")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every test of the suite ran and passed (none skipped, none left out), however many the
    # suite holds: the collected count is the passed count.
    collected = re.search(r"collected (\d+) items", proc.stdout)
    passed = re.search(r"(\d+) passed", proc.stdout)
    assert collected and passed and collected.group(1) == passed.group(1), proc.stdout
    assert " skipped" not in proc.stdout and " failed" not in proc.stdout
    assert "aiowheel: asyncio tests on loop mode, base asyncio" in proc.stdout


def test_without_it_the_same_suite_is_not_on_loop_mode(tmp_path: Path) -> None:
    proc = run_suite(tmp_path)
    assert proc.returncode == 1
    assert "3 failed, 1 error" in proc.stdout  # the async fixture errs first, for the one
    assert "not loop mode" in proc.stdout


@pytest.mark.parametrize("base", ["uvloop", "auto"])
def test_another_base_on_the_command_line(tmp_path: Path, base: str) -> None:
    proc = run_suite(tmp_path, "-p", "aiowheel.pytest", "--aiowheel-base", base)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"base {base}" in proc.stdout


def test_an_unknown_base_is_a_usage_error(tmp_path: Path) -> None:
    proc = run_suite(tmp_path, "-p", "aiowheel.pytest", "--aiowheel-base", "trio")
    assert proc.returncode == 4
    assert "invalid choice: 'trio'" in proc.stderr
