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
through ``asyncio.new_event_loop``, without the event loop policy (see :class:`_Loops`).

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
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import warnings
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final

import pytest

from . import _validate, _view
from ._census import PendingTimer, _name, pending
from ._fuzz import DEFAULT_JITTER_TICKS, DEFAULT_STALL, Fuzz, fuzz_number
from ._lingering import LingeringTimerWarning
from ._loop import LoopFactory, config_of, loop_factory, virtual_loop_factory, watch_loops
from ._virtual import VirtualClock
from .loops import BASES, auto_base, base_class, installed
from .testing import clock_of, first_divergence

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

# pytest-asyncio's name for the parameter that gives a test its loop factory.
_PYTEST_ASYNCIO_FACTORY = "_asyncio_loop_factory"

CLOCKS: Final = ("real", "virtual")
"""The values ``--aiowheel-clock`` and the ``aiowheel_clock`` marker take."""

_MARKER: Final = "aiowheel_clock"
_FUZZ_MARKER: Final = "aiowheel_fuzz"
_TICK: Final = _validate.DEFAULT_TICK

LINGERING: Final = ("off", "warn", "error")
"""The values ``--aiowheel-lingering`` takes."""

# One factory per (base name, virtual clock settings or None, max_batch).
_factories: dict[
    tuple[str, tuple[bool, bool | float, float] | None, int | None], LoopFactory
] = {}
# The test being set up or run: anyio's runner is made without it (see _wrap_anyio).
_current: list[pytest.Item] = []
_tally: pytest.StashKey[Counter[tuple[str, str]]] = pytest.StashKey()
_restore: pytest.StashKey[Callable[[], None]] = pytest.StashKey()
_lingering: pytest.StashKey[_Lingering] = pytest.StashKey()
_fuzzing: pytest.StashKey[_Fuzzing] = pytest.StashKey()
_run: pytest.StashKey[_Run] = pytest.StashKey()
# Where the plugin put a test (_where), noted at its call; and the kinds of loop it ran that
# the plugin did not make for it: "stock", "every loop" (see _Loops).
_placed: pytest.StashKey[tuple[str, str, bool]] = pytest.StashKey()
_seen: pytest.StashKey[set[str]] = pytest.StashKey()


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's ``--aiowheel-...`` options (and the ``aiowheel_every_loop`` ini option)."""
    group = parser.getgroup("aiowheel")
    group.addoption(
        "--aiowheel-base",
        choices=(*BASES, "auto"),
        default="asyncio",
        help="with -p aiowheel.pytest: the base loop of the loop-mode loops (default: asyncio)",
    )
    group.addoption(
        "--aiowheel-strict",
        action="store_true",
        default=False,
        help="with -p aiowheel.pytest: fail every asyncio test left on its own loop "
        "(a backend's own loop_factory, the suite's own loop factories hook)",
    )
    group.addoption(
        "--aiowheel-every-loop",
        action="store_true",
        default=None,
        help="with -p aiowheel.pytest: every asyncio loop the tests make (asyncio.run, "
        "asyncio.Runner, asyncio.new_event_loop, anyio.run, blocking portals) on loop mode too "
        "(ini: aiowheel_every_loop)",
    )
    parser.addini(
        "aiowheel_every_loop",
        type="bool",
        default=False,
        help="with -p aiowheel.pytest: as --aiowheel-every-loop",
    )
    group.addoption(
        "--aiowheel-clock",
        choices=CLOCKS,
        default=None,
        help="with -p aiowheel.pytest: 'virtual' runs every asyncio test on a virtual clock "
        "(aiowheel.testing): sleeps and timeouts take no wall time (default: real)",
    )
    group.addoption(
        "--aiowheel-max-batch",
        metavar="N",
        default=None,
        help="with -p aiowheel.pytest: at most N due wheel callbacks per loop iteration on the "
        "loop-mode loops the plugin makes, virtual or real (default: no bound; ini: "
        "aiowheel_max_batch)",
    )
    parser.addini(
        "aiowheel_max_batch",
        type="string",
        default="",
        help="with -p aiowheel.pytest: as --aiowheel-max-batch",
    )
    group.addoption(
        "--aiowheel-lingering",
        choices=LINGERING,
        default="off",
        help="with -p aiowheel.pytest: 'error' fails, 'warn' warns about, each test that "
        "leaves a timer pending on its loop-mode loop (default: off)",
    )
    group.addoption(
        "--aiowheel-seed",
        metavar="N",
        default=None,
        help="with -p aiowheel.pytest: every asyncio test on a virtual clock fuzzed with seed N "
        "(timers late, never early; replays a failing seed)",
    )
    group.addoption(
        "--aiowheel-jitter",
        metavar="SECONDS",
        default=None,
        help="with a seed: how late a jump to a timer may land "
        f"(default: {DEFAULT_JITTER_TICKS} ticks, {DEFAULT_JITTER_TICKS * _TICK:g} s)",
    )
    group.addoption(
        "--aiowheel-stall-rate",
        metavar="P",
        default=None,
        help="with a seed: the chance that the loop stalls after a pass of timers (default: 0)",
    )
    group.addoption(
        "--aiowheel-stall",
        metavar="SECONDS",
        default=None,
        help=f"with a seed: a stall's longest length (default: {DEFAULT_STALL:g} s)",
    )
    group.addoption(
        "--aiowheel-fuzz",
        metavar="K",
        default=None,
        help="with -p aiowheel.pytest: run every asyncio test on a virtual clock under K seeds, "
        "stopping at the first that fails and printing it",
    )
    group.addoption(
        "--aiowheel-check-determinism",
        action="store_true",
        default=False,
        help="with -p aiowheel.pytest: run every asyncio test twice per seed on a virtual clock "
        "and fail it where the two runs' timers part",
    )


def _factory(
    config: pytest.Config,
    base: str | None = None,
    clock: tuple[bool | float, float] | None = None,
) -> LoopFactory:
    """The loop-mode factory for ``base`` (default: ``--aiowheel-base``) on the real clock,
    or on a virtual one with ``clock`` = (autojump, start); ``--aiowheel-max-batch`` on both."""
    name = base or str(config.getoption("aiowheel_base"))
    batch = _max_batch(config)
    # The clock's kind in the key: autojump True == 1.0 and False == 0 in Python.
    key = (name, None if clock is None else (isinstance(clock[0], bool), *clock), batch)
    found = _factories.get(key)
    if found is None:
        try:
            base_loop = auto_base() if name == "auto" else base_class(name)
        except ImportError as exc:
            raise pytest.UsageError(str(exc)) from exc
        if clock is None:
            found = loop_factory(base_loop, max_batch=batch)
        else:
            where = f"@pytest.mark.{_MARKER}"
            found = _FuzzableFactory(
                virtual_loop_factory(base_loop, _TICK, *clock, where, batch).config
            )
        _factories[key] = found
    return found


_batch: pytest.StashKey[int | None] = pytest.StashKey()


def _max_batch(config: pytest.Config) -> int | None:
    """``--aiowheel-max-batch`` (else the ini option), checked as ``loop_factory`` checks its
    ``max_batch``: a usage error naming the option otherwise. Read once per run."""
    if _batch in config.stash:
        return config.stash[_batch]
    option = config.getoption("aiowheel_max_batch")
    name = "--aiowheel-max-batch" if option is not None else "aiowheel_max_batch"
    text = str(option if option is not None else config.getini("aiowheel_max_batch")).strip()
    value: object = None
    if text and text.lower() != "none":
        try:
            value = int(text)
        except ValueError:
            raise pytest.UsageError(
                f"aiowheel.pytest: {name}: max_batch must be a positive int or None, "
                f"got {text!r}"
            ) from None
    try:
        batch = _validate.max_batch(value, name)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"aiowheel.pytest: {exc}") from None
    config.stash[_batch] = batch
    return batch


def _clock_for(item: pytest.Item | None) -> tuple[bool | float, float] | None:
    """The virtual clock ``item`` runs on, as (autojump, start); None for the real clock."""
    if item is None:
        return None
    marker = item.get_closest_marker(_MARKER)
    if marker is not None:
        return _marked_clock(item, marker)
    asked = _MARKER in getattr(item, "fixturenames", ())
    fuzzing = item.config.stash.get(_fuzzing, None)
    if (
        asked
        or item.config.getoption("aiowheel_clock") == "virtual"
        or (fuzzing is not None and fuzzing.everywhere)
        or item.get_closest_marker(_FUZZ_MARKER) is not None
    ):
        return (True, 0.0)
    return None


def _marked_clock(item: pytest.Item, marker: pytest.Mark) -> tuple[bool | float, float] | None:
    """The clock an ``aiowheel_clock`` marker asks for (a usage error naming the test if the
    marker is malformed)."""
    where = f"@pytest.mark.{_MARKER}"
    try:
        if len(marker.args) > 1 or set(marker.kwargs) - {"autojump", "start"}:
            raise TypeError(
                f"{where}: takes one of 'real', 'virtual', and the keywords autojump and start"
            )
        kind = marker.args[0] if marker.args else "virtual"
        if kind not in CLOCKS:
            raise ValueError(
                f"{where}: must be one of {', '.join(map(repr, CLOCKS))}, got {kind!r}"
            )
        if kind == "real":
            if marker.kwargs:
                raise TypeError(f"{where}: 'real' takes no keywords")
            return None
        autojump = _validate.autojump(marker.kwargs.get("autojump", True), where)
        start = _validate.start(marker.kwargs.get("start", 0.0), where)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"{item.nodeid}: {exc}") from None
    return (autojump, start)


def pytest_configure(config: pytest.Config) -> None:
    """Check the base now (a clear usage error), declare the marker, and wrap anyio's
    runner factory."""
    _factory(config)
    config.stash[_fuzzing] = fuzzing = _Fuzzing.from_options(config)
    config.pluginmanager.register(fuzzing, "aiowheel-fuzzing")
    mode = str(config.getoption("aiowheel_lingering"))
    if mode != "off":
        config.stash[_lingering] = _Lingering(mode)
    config.addinivalue_line(
        "markers",
        f"{_MARKER}(kind='virtual', *, autojump=True, start=0.0): with -p aiowheel.pytest, "
        "run this asyncio test on a virtual clock ('virtual') or on the real one ('real')",
    )
    config.addinivalue_line(
        "markers",
        f"{_FUZZ_MARKER}(k=10, *, jitter=None, stall_rate=None, stall=None): with -p "
        "aiowheel.pytest, run this asyncio test on a virtual clock under k seeds, stopping at "
        "the first that fails (the seed is printed; --aiowheel-seed replays it)",
    )
    if config.pluginmanager.hasplugin("asyncio") and not hasattr(
        config.hook, "pytest_asyncio_loop_factories"
    ):
        raise pytest.UsageError(
            "aiowheel.pytest needs pytest-asyncio 1.4 or newer, for its loop factories hook "
            f"(installed: {_version('pytest-asyncio')}): pip install -U 'pytest-asyncio>=1.4'"
        )
    tally: Counter[tuple[str, str]] = Counter()
    config.stash[_tally] = tally
    loops = _loops_watch()
    if config.getoption("aiowheel_every_loop") or config.getini("aiowheel_every_loop"):
        loops.make_every_loop(_factory(config))
        tally["every loop", ""] += 0  # the line says "0 on their own stock loops" too
    anyio_plugin = config.pluginmanager.get_plugin("anyio")
    if anyio_plugin is not None:
        config.stash[_restore] = _wrap_anyio(anyio_plugin, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Put anyio's runner factory and asyncio's functions back; stop watching loops."""
    global _loops
    if _loops is not None:
        _loops.restore()
        _loops = None
    restore = config.stash.get(_restore, None)
    if restore is not None:
        restore()
    lingering = config.stash.get(_lingering, None)
    if lingering is not None:
        lingering.unwatch()


class _Lingering:
    """The lingering-timer check: watches every loop-mode loop made during the run, notes
    what each holds when a test starts, and what the test left when its teardown is done.

    A loop closed meanwhile (the test's own) answers with what it held as it closed: all of it
    is the test's. A loop that outlives the test is shared with fixtures of a wider scope,
    which may file timers while this test is set up and keep them for the next tests (a
    module's server and its heartbeats): there what was pending once the test's fixtures
    were set up is taken as theirs, and only what the test's call and teardown left counts.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._live: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._before: dict[asyncio.AbstractEventLoop, set[int]] = {}  # as set-up began
        self._set_up: dict[asyncio.AbstractEventLoop, set[int]] = {}  # as the call began
        self._keep: list[object] = []  # the objects behind those ids, kept alive
        self._left: list[PendingTimer] = []
        self.unwatch = watch_loops(self._watch)

    def _watch(self, event: str, loop: asyncio.AbstractEventLoop) -> None:
        if event == "made":
            self._live.add(loop)
            _view.track_loop(loop, True)  # name each timer by the line that filed it
        else:
            self._live.discard(loop)
            self._left.extend(self._new(loop, self._before))

    def _new(
        self, loop: asyncio.AbstractEventLoop, *notes: dict[Any, set[int]]
    ) -> list[PendingTimer]:
        known = set().union(*(note.get(loop, set()) for note in notes))
        return [timer for obj, timer in pending(loop) if id(obj) not in known]

    def _note(self) -> dict[asyncio.AbstractEventLoop, set[int]]:
        """What every live loop holds now."""
        held = {}
        for loop in list(self._live):
            objects = [obj for obj, _ in pending(loop)]
            self._keep.extend(objects)
            held[loop] = {id(obj) for obj in objects}
        return held

    def begin(self) -> None:
        """A test is about to be set up."""
        self._left, self._keep, self._set_up = [], [], {}
        self._before = self._note()

    def set_up(self) -> None:
        """The test's fixtures are set up; its call begins."""
        self._set_up = self._note()

    def end(self) -> list[PendingTimer]:
        """The test is torn down: the timers it left."""
        left = self._left
        for loop in list(self._live):
            if not loop.is_closed():
                left.extend(self._new(loop, self._before, self._set_up))
        self._left, self._before, self._set_up, self._keep = [], {}, {}, []
        return sorted(left, key=lambda timer: timer.when)


def _lingering_message(nodeid: str, left: list[PendingTimer]) -> str:
    lines = [f"{nodeid} left {len(left)} timer{'s' if len(left) > 1 else ''} pending:"]
    for timer in left:
        what = f" {_name(timer.callback)}," if timer.callback is not None else ""
        lines.append(f"  {timer.kind}{what} {timer.origin} (due at loop time {timer.when:.3f})")
    return "\n".join(lines)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """Under ``--aiowheel-lingering``: note what the live loops hold before the test."""
    lingering = item.config.stash.get(_lingering, None)
    if lingering is not None:
        lingering.begin()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Under ``--aiowheel-lingering``: once the test's fixtures are torn down, fail (or warn
    about) the timers it left."""
    result = yield
    lingering = item.config.stash.get(_lingering, None)
    if lingering is not None:
        left = lingering.end()
        if left:
            message = _lingering_message(item.nodeid, left)
            if lingering.mode == "error":
                pytest.fail(message, pytrace=False)
            # Attributed to the test itself, not to this hook.
            path, line, _ = item.location
            _warn(LingeringTimerWarning(message), path, (line or 0) + 1)
    return result


def _warn(warning: LingeringTimerWarning, path: str, line: int) -> None:
    """Issue ``warning`` as filed at ``path:line``, as the filters say, except that no filter
    makes it an exception: ``warn`` never fails a test (``error`` is the mode that does).

    A filter whose action is ``error`` (``filterwarnings = error``, ``-W error``, one naming
    the class) would raise it in the test's teardown, and pytest would report the test as an
    error; there it is issued again under an ``always`` filter for this class alone, so pytest
    records it and lists it in the warnings summary. Every other action stands (``ignore``
    silences it, ``default`` and ``once`` dedupe it)."""
    try:
        warnings.warn_explicit(warning, LingeringTimerWarning, path, line)
    except LingeringTimerWarning:
        with warnings.catch_warnings():
            warnings.simplefilter("always", LingeringTimerWarning)
            warnings.warn_explicit(warning, LingeringTimerWarning, path, line)


def _wrap_anyio(plugin: Any, config: pytest.Config) -> Callable[[], None]:
    """Wrap ``plugin.get_runner`` (anyio's pytest plugin module); returns the undo."""
    original = getattr(plugin, "get_runner", None)
    if original is None or list(inspect.signature(original).parameters)[:2] != [
        "backend_name",
        "backend_options",
    ]:
        raise pytest.UsageError(
            "aiowheel.pytest: this anyio's pytest plugin has no "
            "get_runner(backend_name, backend_options) to put loop mode under "
            f"(anyio {_version('anyio')}); anyio 4.4 or newer has it"
        )

    @contextlib.contextmanager
    def get_runner(backend_name: str, backend_options: dict[str, Any]) -> Iterator[Any]:
        options = backend_options or {}
        if backend_name == "asyncio" and options.get("loop_factory") is None:
            base = "uvloop" if options.get("use_uvloop") else None
            item = _current[-1] if _current else None
            options = {**options, "loop_factory": _factory(config, base, _clock_for(item))}
        with original(backend_name, options) as runner:
            yield runner

    plugin.get_runner = get_runner

    def restore() -> None:
        plugin.get_runner = original

    return restore


class _Loops:
    """Every loop of the run, counted or covered.

    Counted: asyncio's ``_set_running_loop``, which every loop calls as it starts running
    (asyncio's loops through ``asyncio.events``, rloop and uvloop with the function they took
    from asyncio as they were imported: wrapped here before a suite imports them, at the
    plugin's first hook), is wrapped to note, for the test under way, each loop that starts
    running and that the plugin did not make for it: a loop that is not on loop mode is
    "stock"; one made by ``--aiowheel-every-loop``, "every loop".

    Covered, under ``--aiowheel-every-loop``: ``asyncio.new_event_loop`` (the function
    ``asyncio.run``, ``asyncio.Runner``, anyio's ``run`` and its blocking portals call when
    they are given no loop factory, looked up in ``asyncio.events`` at each call) makes a
    loop-mode loop of the plugin's base, and so does the default event loop policy's class
    (its ``_loop_factory``: a suite's own policy derived from it, such as Home Assistant's,
    makes loop-mode loops too). Nothing else changes: the event loop policy is never asked
    or set (3.14 deprecates it), and the Runner sets its loop as the current one as it
    does without the plugin. A loop a suite makes itself (its own loop factory, a loop class
    called directly) is left alone and counted as "stock".
    """

    def __init__(self) -> None:
        self.factory: LoopFactory | None = None  # --aiowheel-every-loop's factory
        self._undo: list[tuple[Any, str, Any]] = []
        self._active = True  # False once restored: a wrapper a library kept calls through

        import asyncio.events as events

        set_running_loop = events._set_running_loop

        def _set_running_loop(loop: asyncio.AbstractEventLoop | None) -> None:
            set_running_loop(loop)
            if loop is not None and _current and self._active:
                self._note(loop)

        _set_running_loop.__doc__ = set_running_loop.__doc__
        self._replace(events, "_set_running_loop", set_running_loop, _set_running_loop)

    def _replace(self, module: Any, name: str, original: Any, replacement: Any) -> None:
        """Set ``module.name`` (and ``asyncio.name``, asyncio's re-export) to ``replacement``."""
        for owner in (module, asyncio):
            if getattr(owner, name, None) is original:
                self._undo.append((owner, name, original))
                setattr(owner, name, replacement)

    def _note(self, loop: asyncio.AbstractEventLoop) -> None:
        if getattr(loop, "_aiowheel_every_loop", False):
            kind = "every loop"
        elif config_of(loop) is None:
            kind = "stock"
        else:
            return  # a loop-mode loop: the plugin's own, or one the suite made so
        item = _current[-1]
        seen = item.stash.get(_seen, None)
        if seen is None:
            seen = item.stash[_seen] = set()
        seen.add(kind)

    def make_every_loop(self, factory: LoopFactory) -> None:
        """``asyncio.new_event_loop`` makes ``factory``'s loops from now on."""
        if self.factory is not None:
            return
        self.factory = factory
        import asyncio.events as events

        new_event_loop = events.new_event_loop

        def every_loop() -> asyncio.AbstractEventLoop:
            if not self._active:
                return new_event_loop()
            loop: Any = factory()
            loop._aiowheel_every_loop = True
            return loop  # type: ignore[no-any-return]

        every_loop.__doc__ = new_event_loop.__doc__
        every_loop.__name__ = every_loop.__qualname__ = "new_event_loop"
        self._replace(events, "new_event_loop", new_event_loop, every_loop)
        # A suite that installs an event loop policy of its own (Home Assistant's test plugin
        # sets HassEventLoopPolicy, a subclass of the default one, and disables setting
        # another) gets its loops from the default policy's class attribute: that too.
        import asyncio.unix_events as unix_events

        policy = getattr(unix_events, "_UnixDefaultEventLoopPolicy", None)
        if policy is not None and "_loop_factory" in vars(policy):
            self._undo.append((policy, "_loop_factory", vars(policy)["_loop_factory"]))
            policy._loop_factory = staticmethod(every_loop)

    def restore(self) -> None:
        """Put asyncio's functions back."""
        self._active = False
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()


_loops: _Loops | None = None


def _loops_watch() -> _Loops:
    """The run's :class:`_Loops`, made (and asyncio's ``_set_running_loop`` wrapped) once."""
    global _loops
    if _loops is None:
        _loops = _Loops()
    return _loops


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Wrap ``_set_running_loop`` before the suite's conftests import uvloop or rloop (each
    keeps the function it finds as it is imported)."""
    _loops_watch()


def _version(distribution: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(distribution)
    except PackageNotFoundError:
        return "unknown"


def pytest_report_header(config: pytest.Config) -> str:
    """Say that the run is on loop mode, on which base, and on which clock."""
    base = config.getoption("aiowheel_base")
    strict = ", strict" if config.getoption("aiowheel_strict") else ""
    clock = ", virtual clock" if config.getoption("aiowheel_clock") == "virtual" else ""
    fuzzing = config.stash.get(_fuzzing, None)
    if fuzzing is not None and fuzzing.everywhere:
        clock = f", virtual clock, {fuzzing.describe()}"
    every = ", every loop" if _loops is not None and _loops.factory is not None else ""
    batch = config.stash.get(_batch, None)
    batch_text = "" if batch is None else f", max_batch {batch}"
    return f"aiowheel: asyncio tests on loop mode, base {base}{clock}{batch_text}{strict}{every}"


@pytest.hookimpl(optionalhook=True)  # pytest-asyncio may be absent: anyio suites need none
def pytest_asyncio_loop_factories(
    config: pytest.Config, item: pytest.Item
) -> Mapping[str, LoopFactory]:
    """pytest-asyncio's hook: every asyncio test on one loop-mode loop factory (on a virtual
    clock where the test asks for one)."""
    try:
        clock = _clock_for(item)
    except pytest.UsageError:
        clock = None  # a malformed marker: reported for every test alike, after collection
    return {"aiowheel": _factory(config, None, clock)}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Check every ``aiowheel_clock`` and ``aiowheel_fuzz`` marker now: a malformed one is a
    usage error naming its test, before any test runs (anyio's tests read theirs only when
    their loop is made)."""
    for item in items:
        _clock_for(item)
        fuzzing = item.config.stash.get(_fuzzing, None)
        if fuzzing is not None:
            fuzzing.plan(item)


def _where(item: pytest.Item) -> tuple[str, str, bool] | None:
    """Where ``item`` runs: ("loop mode", base name, on a virtual clock) or ("left off", why,
    False); None for a test that neither pytest-asyncio nor anyio runs."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if _PYTEST_ASYNCIO_FACTORY in params:
        factory = params[_PYTEST_ASYNCIO_FACTORY]
        if isinstance(factory, LoopFactory) and factory in _factories.values():
            return ("loop mode", _base_name(factory), factory.config.clock is not None)
        return ("left off", "own loop factories hook", False)
    backend = getattr(item, "funcargs", {}).get("anyio_backend")
    if not backend or not inspect.iscoroutinefunction(getattr(item, "obj", None)):
        return None
    name, options = (backend, {}) if isinstance(backend, str) else backend
    if name != "asyncio":
        return ("left off", name, False)  # trio: not asyncio, never an error
    if options.get("loop_factory") is not None:
        return ("left off", "own loop_factory", False)
    base = "uvloop" if options.get("use_uvloop") else None
    return ("loop mode", _base_name(_factory(item.config, base)), _clock_for(item) is not None)


def _base_name(factory: LoopFactory) -> str:
    """The name of ``factory``'s base, as ``--aiowheel-base`` takes it ("auto" resolved)."""
    base = factory.config.base
    for name, installed_base in installed().items():
        if installed_base is base:
            return name
    return "asyncio" if base.__module__.startswith("asyncio.") else base.__qualname__


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Note where each async test runs; under ``--aiowheel-strict``, fail one left off;
    under ``--aiowheel-lingering``, note what the loops hold once the test is set up."""
    lingering = item.config.stash.get(_lingering, None)
    if lingering is not None:
        lingering.set_up()
    where = _where(item)
    run = item.stash.get(_run, None)
    if where is not None and (run is None or run.first):
        item.stash[_placed] = where  # counted once the test is over (_count)
        kind, why, _ = where
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


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line: how many tests ran on loop mode, on which base; how many were left off, why;
    then one line per seed that failed a test, with the command that replays it."""
    tally: Counter[tuple[str, str]] = config.stash.get(_tally, Counter())
    terminalreporter.write_line(summary_line(tally))
    fuzzing = config.stash.get(_fuzzing, None)
    if fuzzing is not None:
        for line in fuzzing.failing:
            terminalreporter.write_line(line)


def summary_line(tally: Mapping[tuple[str, str], int]) -> str:
    """The run's line, from counts of (``"loop mode"``, base) and (``"left off"``, why):
    ``aiowheel: 225 tests on loop mode (asyncio 225); 411 left off (own loop_factory 221,
    trio 190)``; then, if any, the tests that ran loops the plugin did not make
    (``("stock", "")``): ``; 27 on their own stock loops`` (always said under
    ``--aiowheel-every-loop``, whose loops are counted by ``("every loop", "")``)."""
    on = {base: n for (kind, base), n in tally.items() if kind == "loop mode"}
    off = {why: n for (kind, why), n in tally.items() if kind == "left off"}
    line = f"aiowheel: {sum(on.values())} tests on loop mode"
    if on:
        line += " (" + ", ".join(f"{base} {n}" for base, n in sorted(on.items())) + ")"
    virtual = tally.get(("virtual clock", ""), 0)
    if virtual:
        line += f", {virtual} on a virtual clock"
    every = tally.get(("every loop", ""))
    if every:
        line += f", {every} on loops --aiowheel-every-loop made"
    line += f"; {sum(off.values())} left off"
    if off:
        line += " (" + ", ".join(f"{why} {n}" for why, n in sorted(off.items())) + ")"
    stock = tally.get(("stock", ""), 0)
    if stock or every is not None:
        line += f"; {stock} on their own stock loops"
    return line


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Remember the test under way (anyio makes its runner, the loop, without naming it, and
    a loop that starts running is the test's); once it is over, count where it ran."""
    _current.append(item)
    try:
        return (yield)
    finally:
        _current.pop()
        _count(item)


def _count(item: pytest.Item) -> None:
    """Add ``item`` to the run's tally: where the plugin put it (``_placed``), and which loops
    it ran that the plugin did not make for it (``_seen``)."""
    tally = item.config.stash.get(_tally, None)
    if tally is None:
        return
    where = item.stash.get(_placed, None)
    seen = item.stash.get(_seen, set())
    every = "every loop" in seen and "stock" not in seen
    if where is not None and where[0] == "left off" and where[1].startswith("own ") and every:
        where = None  # its own factory was asyncio.new_event_loop: --aiowheel-every-loop's
    if where is not None:
        kind, why, virtual = where
        tally[kind, why] += 1
        if virtual:
            tally["virtual clock", ""] += 1
    elif "every loop" in seen and _loops is not None and _loops.factory is not None:
        tally["loop mode", _base_name(_loops.factory)] += 1
        tally["every loop", ""] += 1
    if "stock" in seen and (where is None or where[0] != "left off"):
        tally["stock", ""] += 1


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


# -- fuzzing time ------------------------------------------------------------------------------


class _FuzzableFactory(LoopFactory):
    """The plugin's virtual loop factory: each loop it makes for a fuzzed test is armed with
    that test's current seed (and traced under the determinism check) before it runs
    anything. One factory serves every seed: pytest-asyncio takes it at collection, and a
    test runs under many seeds."""

    __slots__ = ()

    def __call__(self) -> asyncio.AbstractEventLoop:
        """A new virtual loop, fuzzed if the test being set up or run is."""
        loop = super().__call__()
        run = _current[-1].stash.get(_run, None) if _current else None
        if run is not None:
            clock = clock_of(loop)
            assert clock is not None
            clock.fuzz(run.fuzz)
            if run.traces is not None:
                run.traces.append(clock.trace())
        return loop


class _Run:
    """One run of a fuzzed test: its seed's Fuzz, and the traces of the loops it made (under
    the determinism check)."""

    __slots__ = ("first", "fuzz", "traces")

    def __init__(self, fuzz: Fuzz, trace: bool, first: bool) -> None:
        self.fuzz = fuzz
        self.first = first  # the test's first run: the one the run's tally counts
        self.traces: list[list[tuple[float, str]]] | None = [] if trace else None

    def trace(self) -> list[tuple[float, str]]:
        return [event for trace in self.traces or () for event in trace]


class _Plan:
    """How one test is fuzzed: its seeds, its settings, whether its determinism is checked."""

    __slots__ = ("check", "fuzz", "seeds")

    def __init__(self, seeds: range, fuzz: Fuzz, check: bool) -> None:
        self.seeds = seeds
        self.fuzz = fuzz
        self.check = check


class _Fuzzing:
    """The fuzzing options of a run, and the protocol that runs a fuzzed test under its seeds
    (a plugin object, registered at configure)."""

    def __init__(
        self,
        seed: int | None,
        count: int | None,
        check: bool,
        settings: dict[str, float],
    ) -> None:
        self.seed = seed
        self.count = count
        self.check = check
        self.settings = settings  # the options given: jitter, stall_rate, stall
        self.everywhere = seed is not None or count is not None or check
        self.failing: list[str] = []

    @classmethod
    def from_options(cls, config: pytest.Config) -> _Fuzzing:
        """Read and check the options (a usage error naming the bad one)."""

        def option(name: str) -> str | None:
            value = config.getoption(name.replace("-", "_"))
            return None if value is None else str(value)

        try:
            seed = _int_option("--aiowheel-seed", option("aiowheel-seed"), 0)
            count = _int_option("--aiowheel-fuzz", option("aiowheel-fuzz"), 1)
            settings = {}
            for name, key, most in (
                ("jitter", "jitter", None),
                ("stall-rate", "stall_rate", 1.0),
                ("stall", "stall", None),
            ):
                text = option(f"aiowheel-{name}")
                if text is not None:
                    settings[key] = _number_option(f"--aiowheel-{name}", text, most)
        except (TypeError, ValueError) as exc:
            raise pytest.UsageError(f"aiowheel.pytest: {exc}") from None
        check = bool(config.getoption("aiowheel_check_determinism"))
        fuzzing = cls(seed, count, check, settings)
        if fuzzing.everywhere and config.getoption("aiowheel_clock") == "real":
            given = "--aiowheel-seed" if seed is not None else "--aiowheel-fuzz"
            if seed is None and count is None:
                given = "--aiowheel-check-determinism"
            raise pytest.UsageError(
                f"aiowheel.pytest: {given} fuzzes the virtual clock, and --aiowheel-clock real "
                "asks for the real one: drop --aiowheel-clock real (the seed puts every asyncio "
                "test on a virtual clock), or mark the tests that need real time "
                "@pytest.mark.aiowheel_clock('real')"
            )
        return fuzzing

    def describe(self) -> str:
        """The run's fuzzing, for the report header."""
        first = self.seed or 0
        seeds = (
            f"seed {first}" if self.count is None else f"seeds {first}..{first + self.count - 1}"
        )
        check = ", each run twice (determinism check)" if self.check else ""
        settings = "".join(f", {k} {v:g}" for k, v in self.settings.items())
        return f"fuzzed: {seeds}{settings}{check}"

    def plan(self, item: pytest.Item) -> _Plan | None:
        """How ``item`` is fuzzed; None if it is not (a usage error for a bad marker)."""
        marker = item.get_closest_marker(_FUZZ_MARKER)
        if marker is None and not self.everywhere:
            return None
        if _clock_for(item) is None:
            if marker is not None:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.{_FUZZ_MARKER} fuzzes the virtual clock, and "
                    f"the test is marked {_MARKER}('real')"
                )
            return None
        settings = dict(self.settings)
        count = self.count
        if marker is not None:
            try:
                if len(marker.args) > 1 or set(marker.kwargs) - {
                    "k",
                    "jitter",
                    "stall_rate",
                    "stall",
                }:
                    raise TypeError("takes k and the keywords jitter, stall_rate and stall")
                k = marker.args[0] if marker.args else marker.kwargs.get("k", 10)
                if count is None and self.seed is None:
                    count = _int_option("k", k, 1)
                for key in ("jitter", "stall_rate", "stall"):
                    if marker.kwargs.get(key) is not None:
                        settings[key] = marker.kwargs[key]
                fuzz = self._fuzz(0, settings)
            except (TypeError, ValueError) as exc:
                raise pytest.UsageError(
                    f"{item.nodeid}: @pytest.mark.{_FUZZ_MARKER}: {exc}"
                ) from None
        else:
            fuzz = self._fuzz(0, settings)
        first = self.seed or 0
        return _Plan(range(first, first + (count or 1)), fuzz, self.check)

    @staticmethod
    def _fuzz(seed: int, settings: Mapping[str, object]) -> Fuzz:
        return Fuzz.checked(
            seed,
            settings.get("jitter", DEFAULT_JITTER_TICKS * _TICK),
            settings.get("stall_rate", 0.0),
            settings.get("stall", DEFAULT_STALL),
        )

    def replay(self, item: pytest.Item, fuzz: Fuzz) -> str:
        """The command line that replays ``item`` under ``fuzz``."""
        options = "".join(
            f" --aiowheel-{key.replace('_', '-')} {value:g}" for key, value in self.settings.items()
        )
        check = " --aiowheel-check-determinism" if self.check else ""
        return (
            f"pytest -p aiowheel.pytest '{item.nodeid}' --aiowheel-seed {fuzz.seed}{options}{check}"
        )

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        """Run a fuzzed test under each of its seeds (twice each under the determinism check),
        whole runs, until one fails; report that one (or the last), with its seed."""
        plan = self.plan(item)
        if plan is None:
            return None
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports: list[pytest.TestReport] = []
        try:
            for seed in plan.seeds:
                fuzz = Fuzz(seed, plan.fuzz.jitter, plan.fuzz.stall_rate, plan.fuzz.stall)
                traces = []
                for again in range(2 if plan.check else 1):
                    first = seed == plan.seeds[0] and not again
                    run = item.stash[_run] = _Run(fuzz, plan.check, first)
                    reports = runtestprotocol(item, nextitem=nextitem, log=False)
                    if any(report.failed for report in reports):
                        self._failed(item, fuzz, reports, "fails")
                        return True
                    if any(report.skipped for report in reports):
                        return True  # skipped (or xfailed): one run says it
                    traces.append(run.trace())
                if plan.check:
                    where = first_divergence(*traces)
                    if where is not None:
                        self._diverged(item, fuzz, reports, where)
                        return True
            return True
        finally:
            del item.stash[_run]
            for report in reports:
                item.ihook.pytest_runtest_logreport(report=report)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _failed(
        self, item: pytest.Item, fuzz: Fuzz, reports: list[pytest.TestReport], what: str
    ) -> None:
        replay = self.replay(item, fuzz)
        line = f"aiowheel: seed {fuzz.seed} {what} {item.nodeid}; replay: {replay}"
        self.failing.append(line)
        for report in reports:
            if report.failed:
                report.sections.append(
                    ("aiowheel fuzzing", f"seed {fuzz.seed} {what} this test; replay it with\n"
                     f"  {replay}")
                )  # fmt: skip

    def _diverged(
        self, item: pytest.Item, fuzz: Fuzz, reports: list[pytest.TestReport], where: str
    ) -> None:
        call = next((report for report in reports if report.when == "call"), reports[-1])
        call.outcome = "failed"
        call.longrepr = (
            f"aiowheel --aiowheel-check-determinism: seed {fuzz.seed} ran this test twice and "
            f"the runs' timers differ, so a seed cannot replay it: {where}\n"
            "A test runs the same under one seed only if nothing outside the loop decides what "
            "it does: look for threads (to_thread, executors) racing the loop, real I/O "
            "(sockets, files, subprocesses), random or uuid without a seed, the wall clock "
            "(time.time, datetime.now), and iteration over sets of objects (hash order)."
        )
        self._failed(item, fuzz, reports, "is not deterministic in")


def _int_option(name: str, text: object, least: int) -> int | None:
    """An int option's value (None if not given), or a ValueError naming ``name``."""
    if text is None:
        return None
    value: int | None = None
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    elif isinstance(text, str) and text.strip().lstrip("-").isdigit():
        value = int(text)
    if value is None or value < least:
        raise ValueError(f"{name} must be an int >= {least}, got {text!r}")
    return value


def _number_option(name: str, text: str, most: float | None) -> float:
    """A number option's value, or a ValueError naming ``name``."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {text!r}") from None
    return fuzz_number(name, value, at_most=most)
