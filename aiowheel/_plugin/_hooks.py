"""The pytest plugin's hooks and fixture, handed to pytest by :mod:`aiowheel.pytest` (whose
docstring is the user's guide); each hook hands its work to the rooms of this folder.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from .._common._lingering import LingeringTimerWarning
from .._loopmode._loop import LoopFactory
from .._loopmode._testing import clock_of
from .._virtual._virtual import VirtualClock
from ._factories import EVERYWHERE, RUN, clock_for, current, factory, wrap_anyio
from ._fuzz import FUZZING, Fuzzing
from ._lingering import LINGERING_CHECK, Lingering
from ._loops import unwatch, watch, watching
from ._options import BATCH, CLOCKS, LINGERING, add_options, declare_markers, version
from ._tally import PLACED, TALLY, count, summary_line, where

__all__ = [
    "CLOCKS",
    "LINGERING",
    "Clock",
    "LingeringTimerWarning",
    "aiowheel_clock",
    "pytest_addoption",
    "pytest_asyncio_loop_factories",
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_load_initial_conftests",
    "pytest_report_header",
    "pytest_runtest_call",
    "pytest_runtest_protocol",
    "pytest_runtest_setup",
    "pytest_runtest_teardown",
    "pytest_terminal_summary",
    "pytest_unconfigure",
    "summary_line",
]

# anyio's runner factory put back at unconfigure.
_restore: pytest.StashKey[Callable[[], None]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's ``--aiowheel-...`` options (and the ``aiowheel_every_loop`` ini option)."""
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Wrap ``_set_running_loop`` before the suite's conftests import uvloop or rloop (each
    keeps the function it finds as it is imported)."""
    watch()


def pytest_configure(config: pytest.Config) -> None:
    """Check the base now (a clear usage error), declare the marker, and wrap anyio's
    runner factory."""
    factory(config)
    config.stash[FUZZING] = fuzzing = Fuzzing.from_options(config)
    config.stash[EVERYWHERE] = fuzzing.everywhere
    config.pluginmanager.register(fuzzing, "aiowheel-fuzzing")
    mode = str(config.getoption("aiowheel_lingering"))
    if mode != "off":
        config.stash[LINGERING_CHECK] = Lingering(mode)
    declare_markers(config)
    if config.pluginmanager.hasplugin("asyncio") and not hasattr(
        config.hook, "pytest_asyncio_loop_factories"
    ):
        raise pytest.UsageError(
            "aiowheel.pytest needs pytest-asyncio 1.4 or newer, for its loop factories hook "
            f"(installed: {version('pytest-asyncio')}): pip install -U 'pytest-asyncio>=1.4'"
        )
    tally: Counter[tuple[str, str]] = Counter()
    config.stash[TALLY] = tally
    loops = watch()
    if config.getoption("aiowheel_every_loop") or config.getini("aiowheel_every_loop"):
        loops.make_every_loop(factory(config))
        tally["every loop", ""] += 0  # the line says "0 on their own stock loops" too
    anyio_plugin = config.pluginmanager.get_plugin("anyio")
    if anyio_plugin is not None:
        config.stash[_restore] = wrap_anyio(anyio_plugin, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put anyio's runner factory and asyncio's functions back; stop watching loops."""
    unwatch()
    restore = config.stash.get(_restore, None)
    if restore is not None:
        restore()
    lingering = config.stash.get(LINGERING_CHECK, None)
    if lingering is not None:
        lingering.unwatch()


def pytest_report_header(config: pytest.Config) -> str:
    """Say that the run is on loop mode, on which base, and on which clock."""
    base = config.getoption("aiowheel_base")
    strict = ", strict" if config.getoption("aiowheel_strict") else ""
    clock = ", virtual clock" if config.getoption("aiowheel_clock") == "virtual" else ""
    fuzzing = config.stash.get(FUZZING, None)
    if fuzzing is not None and fuzzing.everywhere:
        clock = f", virtual clock, {fuzzing.describe()}"
    loops = watching()
    every = ", every loop" if loops is not None and loops.factory is not None else ""
    batch = config.stash.get(BATCH, None)
    batch_text = "" if batch is None else f", max_batch {batch}"
    return f"aiowheel: asyncio tests on loop mode, base {base}{clock}{batch_text}{strict}{every}"


@pytest.hookimpl(optionalhook=True)  # pytest-asyncio may be absent: anyio suites need none
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: every asyncio test on one loop-mode loop factory (on a virtual
    clock where the test asks for one)."""
    try:
        clock = clock_for(item)
    except pytest.UsageError:
        clock = None  # a malformed marker: reported for every test alike, after collection
    return {"aiowheel": factory(config, None, clock)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Check every ``aiowheel_clock`` and ``aiowheel_fuzz`` marker now: a malformed one is a
    usage error naming its test, before any test runs (anyio's tests read theirs only when
    their loop is made)."""
    for item in items:
        clock_for(item)
        fuzzing = item.config.stash.get(FUZZING, None)
        if fuzzing is not None:
            fuzzing.plan(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Remember the test under way (anyio makes its runner, the loop, without naming it, and
    a loop that starts running is the test's); once it is over, count where it ran."""
    current.append(item)
    try:
        return (yield)
    finally:
        current.pop()
        count(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Under ``--aiowheel-lingering``: note what the live loops hold before the test."""
    lingering = item.config.stash.get(LINGERING_CHECK, None)
    if lingering is not None:
        lingering.begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Note where each async test runs; under ``--aiowheel-strict``, fail one left off;
    under ``--aiowheel-lingering``, note what the loops hold once the test is set up."""
    lingering = item.config.stash.get(LINGERING_CHECK, None)
    if lingering is not None:
        lingering.set_up()
    placed = where(item)
    run = item.stash.get(RUN, None)
    if placed is not None and (run is None or run.first):
        item.stash[PLACED] = placed  # counted once the test is over (count)
        kind, why, _ = placed
        if (
            kind == "left off"
            and why.startswith("own ")
            and item.config.getoption("aiowheel_strict")
        ):
            raise pytest.fail.Exception(
                f"aiowheel --aiowheel-strict: this asyncio test is left on its own loop ({why})",
                pytrace=False,
            )
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under ``--aiowheel-lingering``: once the test's fixtures are torn down, fail (or warn
    about) the timers it left."""
    result = yield
    lingering = item.config.stash.get(LINGERING_CHECK, None)
    if lingering is not None:
        lingering.check(item)
    return result


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line: how many tests ran on loop mode, on which base; how many were left off, why;
    then one line per seed that failed a test, with the command that replays it."""
    tally: Counter[tuple[str, str]] = config.stash.get(TALLY, Counter())
    terminalreporter.write_line(summary_line(tally))
    fuzzing = config.stash.get(FUZZING, None)
    if fuzzing is not None:
        for line in fuzzing.failing:
            terminalreporter.write_line(line)


class Clock:
    """What the ``aiowheel_clock`` fixture hands a test: the virtual clock of the loop the test
    runs on (read when used, so one fixture serves sync and async tests alike)."""

    __slots__ = ()

    @staticmethod
    def _clock() -> VirtualClock:
        import asyncio

        clock = clock_of(asyncio.get_running_loop())
        if clock is None:
            raise RuntimeError(
                "the aiowheel_clock fixture needs this test on a virtual clock: the test is "
                "marked aiowheel_clock('real'), or pytest-asyncio or anyio does not run it"
            )
        return clock

    @property
    def now(self) -> float:
        """The virtual time: the running loop's ``loop.time()``."""
        return self._clock().now

    async def advance(self, seconds: float) -> None:
        """:func:`aiowheel.testing.advance`: move the clock ``seconds`` forward."""
        await self._clock().advance(seconds)


@pytest.fixture
def aiowheel_clock() -> Clock:
    """The test's virtual clock (``now``, ``await advance(seconds)``); asking for it puts the
    test on a virtual clock unless it is marked ``aiowheel_clock("real")``."""
    return Clock()
