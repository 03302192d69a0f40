"""The loop matrix every test room shares (built in :mod:`tests.support`).

- ``anyio_backend``: every ``@pytest.mark.anyio`` test runs on asyncio's default loop and on
  uvloop (anyio's pytest plugin), and on the loop-mode twin of each
  (``aiowheel.loop_factory``), where every loop timer is on a wheel.
- ``base``: a test that takes a ``base`` argument runs once per installed base loop class
  (``aiowheel.loops.installed()``); ``@pytest.mark.bases("asyncio", "uvloop")`` narrows it.
- On a free-threaded interpreter, the test after which the GIL is on fails: an extension
  imported without declaring itself free-threading safe turns it on for the whole process,
  and every test after it would run with the GIL, testing nothing free-threaded.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import aiowheel._deadlines._inbound
import aiowheel.loops
from tests import support


@pytest.fixture(params=support.anyio_backends())
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Run each ``@pytest.mark.anyio`` test once per event loop implementation."""
    return request.param  # type: ignore[no-any-return]


def pytest_configure(config: pytest.Config) -> None:
    """Declare the suite's own markers."""
    config.addinivalue_line(
        "markers",
        "bases(*names): run a test taking `base` on these installed bases only "
        "(default: every base aiowheel.loops.installed() finds)",
    )
    config.addinivalue_line(
        "markers",
        "once: a test whose outcome does not depend on the interpreter or the build (servers "
        "in subprocesses, examples, docs pages, benches): CI runs it in its first pass only "
        f"and sets {ONCE_DONE}=1 for the others, which then deselect it",
    )
    config.addinivalue_line(
        "markers",
        "programs: a whole program in subprocesses (tests/integration, the plugin's pytester "
        f"runs; set by location): deselected where {PROGRAMS_DONE}=1 (CI's passes between "
        "the interpreter range's ends, and 3.14t)",
    )


# CI (.ci/run) sets this for every pass after its first: tests marked `once` are deselected
# there (reported as deselected, not skipped: they ran, in the first pass).
ONCE_DONE = "AIOWHEEL_ONCE_DONE"

# CI sets this for the interpreters between the ends of the range it tests (3.12, 3.13, 3.15)
# and for free-threaded 3.14t: the whole programs (servers, examples and pytest itself run in
# subprocesses, from their own command lines) are deselected there. They run on 3.11 (both
# builds) and on 3.14, the oldest and the newest released interpreter; what an interpreter
# changes under them (asyncio's loop, tasks, timeouts) every pass tests in process, and
# CPython's own conformance modules on each. A fifth of a pass, on four of the seven.
PROGRAMS_DONE = "AIOWHEEL_PROGRAMS_DONE"
_HERE = Path(__file__).parent
PROGRAMS = (_HERE / "integration", _HERE / "plugin" / "test_pytest_plugin.py")


def _is_program(item: pytest.Item) -> bool:
    return any(item.path == place or place in item.path.parents for place in PROGRAMS)


def _set(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the whole programs (``programs``); deselect the ``once`` tests in CI's later passes
    (see ``ONCE_DONE``) and the programs where ``PROGRAMS_DONE`` is set."""
    for item in items:
        if _is_program(item):
            item.add_marker("programs")
    left = [
        item
        for item in items
        if not (_set(ONCE_DONE) and item.get_closest_marker("once") is not None)
        and not (_set(PROGRAMS_DONE) and item.get_closest_marker("programs") is not None)
    ]
    if len(left) < len(items):
        kept = set(map(id, left))
        config.hook.pytest_deselected(items=[item for item in items if id(item) not in kept])
        items[:] = left


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test taking ``base`` on every installed base, or on those its marker names."""
    if "base" not in metafunc.fixturenames or _parametrizes_base(metafunc):
        return
    marker = metafunc.definition.get_closest_marker("bases")
    names = None if marker is None else tuple(marker.args)
    if names is not None:
        unknown = set(names) - set(aiowheel.loops.BASES)
        if unknown:
            raise pytest.UsageError(f"bases marker: unknown base names {sorted(unknown)}")
    metafunc.parametrize("base", support.base_params(names))


def _parametrizes_base(metafunc: pytest.Metafunc) -> bool:
    """Whether the test gives ``base`` values of its own (``parametrize("base", [...])``)."""
    for marker in metafunc.definition.iter_markers("parametrize"):
        names = marker.args[0]
        if isinstance(names, str):
            names = [name.strip() for name in names.split(",")]
        if "base" in names:
            return True
    return False


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what importing and collecting made (~80k objects: aiohttp, FastAPI, hypothesis)
    out of the collector's reach. Full collections of the suite's process took up to 0.18 s,
    a stall that timing tests met at random (8 over 0.1 s in one run on 3.11; 1 with this).
    Objects the tests make are collected as before."""
    gc.collect()
    gc.freeze()


_GIL_WAS_OFF = support.FREE_THREADED and not sys._is_gil_enabled()


@pytest.fixture(autouse=True)
def _the_gil_stays_off() -> Iterator[None]:
    """Fail the test that turned the GIL on (free-threaded interpreters; once: it stays on)."""
    yield
    global _GIL_WAS_OFF
    if _GIL_WAS_OFF and sys._is_gil_enabled():
        _GIL_WAS_OFF = False
        pytest.fail(
            "the GIL is on after this test: something it imported has not declared itself "
            "free-threading safe (Py_mod_gil), and every later test runs with the GIL"
        )


@pytest.fixture(autouse=True)
def _bad_header_warnings_start_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test logs its own bad inbound deadline headers: the rate limit's memory (one
    warning per client per minute) is the test's, not left over from an earlier one."""
    monkeypatch.setattr(
        aiowheel._deadlines._inbound, "_bad_headers", aiowheel._deadlines._inbound._Warnings()
    )
