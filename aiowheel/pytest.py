"""A pytest plugin that runs every asyncio test of a suite on loop mode, opted into per run::

    pytest -p aiowheel.pytest                          # asyncio's default loop as the base
    pytest -p aiowheel.pytest --aiowheel-base uvloop   # or rloop, zuvloop, auto
    pytest -p aiowheel.pytest --aiowheel-strict        # fail asyncio tests left off loop mode
    pytest -p aiowheel.pytest --aiowheel-clock virtual # every asyncio test on a virtual clock
    pytest -p aiowheel.pytest --aiowheel-lingering error  # fail a test that leaves a timer
    pytest -p aiowheel.pytest --aiowheel-every-loop    # the loops tests make, on loop mode too
    pytest -p aiowheel.pytest --aiowheel-max-batch 64  # at most 64 due callbacks an iteration

Nothing in the suite changes, and nothing a test sees changes but its event loop:

- **pytest-asyncio** (1.4+) tests run on loop-mode loops through its public
  ``pytest_asyncio_loop_factories`` hook (one factory, so test ids do not change).
- **anyio** tests (anyio's own pytest plugin) on the asyncio backend get a loop-mode
  ``loop_factory`` where anyio makes its test runner, whatever gives the test its backend:
  anyio's default ``anyio_backend`` fixture, a conftest fixture (parametrized or constant),
  ``parametrize("anyio_backend", ...)``, or a marker a conftest adds during collection. The
  ``anyio_backend`` and ``anyio_backend_options`` values a test or fixture reads stay exactly
  its own: ``anyio_backend == "asyncio"`` is still true. ``use_uvloop=True`` makes uvloop the
  base, as it makes uvloop the loop without the plugin.
- trio tests run unchanged.

Left on their own loops, and said so: a test whose backend names its own ``loop_factory``,
and pytest-asyncio tests whose loop factories come from the suite's own
``pytest_asyncio_loop_factories`` hook (a conftest's hook is asked first and wins). The run
ends with one line saying how many tests ran on loop mode, on which base, and how many were
left off and why; ``--aiowheel-strict`` makes each asyncio test left off fail, for suites that
want every one on the wheel.

Loops the tests make themselves (``asyncio.run`` in a plain test or a ``unittest`` case, a test
client's blocking portal) are counted: the line ends with how many tests ran on a loop the
plugin did not make, "N on their own stock loops" (tests already counted as left off are not
counted again). ``--aiowheel-every-loop`` (ini: ``aiowheel_every_loop = true``) makes those
loops loop-mode loops of the same base, on the real clock: every loop ``asyncio.run``,
``asyncio.Runner``, ``asyncio.new_event_loop``, ``anyio.run`` and anyio's blocking portals make,
through ``asyncio.new_event_loop``, without the event loop policy (see
:class:`~aiowheel._plugin_loops.Loops`).

Lingering timers. ``--aiowheel-lingering error`` (or ``warn``) fails (or warns about) each
test that leaves a timer pending on its loop-mode loop once its fixtures are torn down, naming
each timer's kind and the line that filed it (origin tracking is on for those loops); a loop
shared by several tests reports to each test only the timers it left (what a wider fixture
filed while the test was set up is the fixture's). ``asyncio.run``, a
test runner or a fixture that cancels the test's tasks takes their sleeps and timeouts with
them: what lingers is a timer nothing will cancel (a ``call_later``, a heartbeat).
``warn`` issues :class:`aiowheel.LingeringTimerWarning` (also importable from here, the same
class), and never fails a test: a suite's ``filterwarnings = error`` (or ``-W error``) does not
turn it into an error, ``-W ignore::aiowheel.LingeringTimerWarning`` silences it. Filters name
it as ``aiowheel.LingeringTimerWarning``, which imports only the package. (PYTEST_DONT_REWRITE:
pytest leaves this module's asserts as they are, so a filter naming the older
``aiowheel.pytest.LingeringTimerWarning``, which imports this module before ``-p`` loads it,
draws no ``PytestAssertRewriteWarning`` either.)

Virtual time (:mod:`aiowheel.testing`). ``--aiowheel-clock virtual`` puts every asyncio test
that the plugin switches on a virtual clock: each test's loop starts at 0 (a loop shared by
several tests keeps one clock, which never goes back), and sleeps and timeouts take no wall
time. Per test, whatever the option: ``@pytest.mark.aiowheel_clock("virtual")`` (keywords
``autojump`` and ``start``, as :func:`aiowheel.testing.virtual_loop_factory` takes them) or
``@pytest.mark.aiowheel_clock("real")``. A test that asks for the ``aiowheel_clock`` fixture
runs on a virtual clock unless marked real, and gets a :class:`Clock` (``now``,
``await advance(seconds)``) for the loop it runs on.

Fuzzing time (:mod:`aiowheel.testing`, ``seed=``). ``--aiowheel-seed N`` runs every asyncio
test the plugin switches on a virtual clock fuzzed with seed N: each jump to a timer lands up to
``--aiowheel-jitter`` seconds late (default: 3 ticks), and with ``--aiowheel-stall-rate`` above
0 the loop stalls after a pass of timers for up to ``--aiowheel-stall`` seconds.
``--aiowheel-fuzz K`` runs each such test under K seeds (N, N+1, ... from ``--aiowheel-seed``,
else from 0), stopping at the first that fails; the failure says its seed and the command that
replays it, and the run ends with one line per failing seed. ``@pytest.mark.aiowheel_fuzz(K,
jitter=..., stall_rate=..., stall=...)`` does the same for one test (under ``--aiowheel-seed``
alone: the one seed, a replay). ``--aiowheel-check-determinism`` runs each test twice per seed
and fails it where the two runs' traces (the virtual time and origin of every timer due)
part, with both runs' context. The repeated runs are whole runs of the test (setup, call,
teardown), as pytest-rerunfailures makes them; a test marked ``aiowheel_clock("real")`` is
never fuzzed.

Bounding the due batch. ``--aiowheel-max-batch N`` (ini: ``aiowheel_max_batch = N``) gives
every loop-mode loop the plugin makes, on the real clock or a virtual one (the every-loop ones
too), the ``max_batch`` of :func:`aiowheel.loop_factory`: at most N due wheel callbacks run per
loop iteration, the rest over the next ones, as a server with that setting runs them. A
virtual clock stays at their deadline while they wait. The option wins over the ini value;
``none`` is no bound (the default).

What differs on loop mode is the loop's class: ``type(loop)`` is a loop-mode subclass of the
base (``isinstance(loop, uvloop.Loop)`` holds under ``--aiowheel-base uvloop``), defined in
``aiowheel._loop``, so a check of ``type(loop).__module__`` no longer reads ``"uvloop"``. That
is deliberate: the class is not uvloop's, and a suite that tells loops apart should ask
``isinstance`` (or ``aiowheel.config_of(loop)``).

How anyio is reached: anyio's plugin makes every runner, for tests and async fixtures alike,
through ``anyio.pytest_plugin.get_runner(backend_name, backend_options)``; this plugin wraps
that function for the run (and puts it back at the end), adding the ``loop_factory`` to the
options it passes on, never to the values the test holds. (0.4 rewrote the test's own
``anyio_backend`` value instead: tests saw a changed parameter, and backends a conftest marked
late were missed.)

This module holds what pytest finds in a plugin (its hooks, the ``aiowheel_clock`` fixture)
and hands each job to a room of its own: the options and markers (``aiowheel._plugin_options``),
the loop-mode factories and which one each test gets (``aiowheel._plugin_factories``), fuzzing
time (``aiowheel._plugin_fuzz``), the lingering-timer check (``aiowheel._plugin_lingering``),
the loops the tests make themselves (``aiowheel._plugin_loops``) and the run's count
(``aiowheel._plugin_tally``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from ._lingering import LingeringTimerWarning
from ._loop import LoopFactory
from ._plugin_factories import EVERYWHERE, RUN, clock_for, current, factory, wrap_anyio
from ._plugin_fuzz import FUZZING, Fuzzing
from ._plugin_lingering import LINGERING_CHECK, Lingering
from ._plugin_loops import unwatch, watch, watching
from ._plugin_options import (
    BATCH,
    CLOCKS,
    LINGERING,
    add_options,
    declare_markers,
    version,
)
from ._plugin_tally import PLACED, TALLY, count, summary_line, where
from ._virtual import VirtualClock
from .testing import clock_of

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
