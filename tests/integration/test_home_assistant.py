"""Home Assistant's test helpers on loop mode, with the real pytest-homeassistant-custom-component
(issue 49).

``home_assistant/`` is a custom integration in Home Assistant's style (a coordinator polling
every 30 s, a 5 s debounce, a 60 s heartbeat marked ``cancel_on_shutdown``, a ``Debouncer``)
with its tests as HA's developers write them: time moved by ``async_fire_time_changed`` and the
``freezer``, leftover timers caught by ``verify_cleanup``, ``hass.async_stop``. They run three
times, each pytest started from its command line: stock (HA's own loops), and under
``-p aiowheel.pytest`` (with ``--aiowheel-every-loop`` where HA's event loop policy makes the
loops) in the compiled and in the pure-Python build. The outcomes must be stock's: every
test passes, and the one that leaks its timers is failed by ``verify_cleanup``. (Before issue 49,
loop mode failed 9 of 10 and let the leak pass.)

Home Assistant needs Python 3.13+ and pins its own pytest and pytest-asyncio, so it lives in
venvs of its own, named by ``AIOWHEEL_HA_PYTHONS`` (``.ci/run`` builds two: Python 3.13.0, where
the newest Home Assistant is 2025.4 on pytest-asyncio 0.26, and 3.14, with the newest, 2026.10 on
pytest-asyncio 1.4: ``pip install -e . pytest-homeassistant-custom-component``). Deselected by
default (``-m home_assistant`` runs it).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

PROJECT = Path(__file__).parent / "home_assistant"

pytestmark = pytest.mark.home_assistant

EXPECTED = {
    "test_the_coordinator_polls_every_30_seconds": ["PASSED"],
    "test_a_failed_poll_makes_the_data_unavailable": ["PASSED"],
    "test_the_save_waits_five_seconds": ["PASSED"],
    "test_the_heartbeat_beats_every_minute": ["PASSED"],
    "test_the_freezer_moves_the_clock": ["PASSED"],
    "test_the_debouncer_calls_once_after_its_cooldown": ["PASSED"],
    "test_a_timer_run_early_by_the_helper_is_not_run_again": ["PASSED"],
    "test_every_timer_is_seen_where_the_helpers_look": ["PASSED"],
    "test_shutdown_cancels_the_timers_marked_for_it": ["PASSED"],
    "test_leaky": ["PASSED", "ERROR"],  # its teardown: verify_cleanup's lingering timer
}


def ha_pythons() -> list[str]:
    # absolute (the runs' working directory is the project's copy), without resolving the
    # venv's symlink to its base interpreter
    found = os.environ.get("AIOWHEEL_HA_PYTHONS", "").split(os.pathsep)
    pythons = [os.path.abspath(p) for p in found if p]
    assert pythons and all(Path(p).exists() for p in pythons), (
        "set AIOWHEEL_HA_PYTHONS to Pythons 3.13+ with Home Assistant's test plugin and "
        "aiowheel (os.pathsep between them): python3.13 -m venv .venv-ha && .venv-ha/bin/pip "
        "install -e . pytest-homeassistant-custom-component (as .ci/run does)"
    )
    return pythons


def outcomes(
    python: str, tmp_path: Path, *options: str, pure: bool = False
) -> tuple[dict[str, list[str]], str]:
    project = tmp_path / ("pure" if pure else "compiled") / "_".join(options or ("stock",))
    shutil.copytree(PROJECT, project)
    # kept under another name: this suite's own collection would load it (and a conftest below
    # the root may not set pytest_plugins)
    (project / "ha_conftest.py").rename(project / "conftest.py")
    env = dict(os.environ)
    env.pop("PYTEST_ADDOPTS", None)
    if pure:
        env["AIOWHEEL_NO_EXTENSIONS"] = "1"
        env.pop("AIOWHEEL_EXPECT_COMPILED", None)
    else:  # the compiled build, or the run fails (no silent fallback to pure Python)
        env.pop("AIOWHEEL_NO_EXTENSIONS", None)
        env["AIOWHEEL_EXPECT_COMPILED"] = "1"
    command = [python, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", *options]
    done = subprocess.run(
        [*command, "ha_tests.py"], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    found: dict[str, list[str]] = {}
    for outcome, name in re.findall(
        r"^(PASSED|FAILED|ERROR) ha_tests\.py::(\w+)", done.stdout, re.M
    ):
        found.setdefault(name, []).append(outcome)
    return found, done.stdout


@pytest.mark.parametrize("python", ha_pythons() if os.environ.get("AIOWHEEL_HA_PYTHONS") else [""])
def test_home_assistants_helpers_see_the_same_timers_on_loop_mode_as_stock(
    python: str, tmp_path: Path
) -> None:
    python = python or ha_pythons()[0]  # unset: fails, saying how to set it
    stock, out = outcomes(python, tmp_path / "stock")
    assert stock == EXPECTED, out[-3000:]
    for pure in (False, True):
        # Home Assistant's plugin on pytest-asyncio 1.x: the plugin alone puts every test on
        # loop mode. Before (2025.4 on Python 3.13.0, pytest-asyncio 0.26) its event loop
        # policy makes the loops, and --aiowheel-every-loop covers them.
        options = ["-p", "aiowheel.pytest"]
        wheel, out = outcomes(python, tmp_path / "plugin", *options, pure=pure)
        if "10 tests on loop mode" not in out:
            options.append("--aiowheel-every-loop")
            wheel, out = outcomes(python, tmp_path / "every", *options, pure=pure)
        assert "10 tests on loop mode" in out, out[-3000:]
        assert wheel == EXPECTED, out[-3000:]
        assert "Lingering timer after" in out  # verify_cleanup's words, for the leak
