"""The pytest plugin's loop-mode factories, and which one each test gets: its base, its clock
(real, or virtual as a marker, the ``aiowheel_clock`` fixture or an option asks), armed with the
fuzz of the test's current run; and how anyio's runner is given one.

pytest-asyncio asks :mod:`aiowheel.pytest`'s ``pytest_asyncio_loop_factories`` hook, which
answers with :func:`factory`; anyio's plugin makes its runners through
``anyio.pytest_plugin.get_runner``, which :func:`wrap_anyio` wraps for the run. Both ask
:func:`clock_for` which clock the test runs on. A room of its own: the factories are made once
per (base, clock, ``max_batch``) and kept here, so that the other rooms can tell a loop the
plugin made from a suite's own (:func:`made_here`, :func:`base_name`), and :data:`current`,
the test under way, is noted here for every room that must know whose loop starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any, TypeGuard

import pytest

from .._common import _validate
from .._loopmode._loop import LoopFactory, loop_factory, virtual_loop_factory
from .._loopmode._loops import auto_base, base_class, installed
from .._loopmode._testing import clock_of
from .._virtual._fuzz import Fuzz
from ._options import CLOCKS, FUZZ_MARKER, MARKER, TICK, max_batch, version

__all__ = [
    "EVERYWHERE",
    "RUN",
    "FuzzableFactory",
    "Run",
    "base_name",
    "clock_for",
    "current",
    "factory",
    "made_here",
    "marked_clock",
    "wrap_anyio",
]

# One factory per (base name, virtual clock settings or None, max_batch).
_factories: dict[tuple[str, tuple[bool, bool | float, float] | None, int | None], LoopFactory] = {}

current: list[pytest.Item] = []
"""The test being set up or run (the last item): anyio's runner is made without it (see
:func:`wrap_anyio`), and a loop that starts running is the test's."""

EVERYWHERE: pytest.StashKey[bool] = pytest.StashKey()
"""Whether the run fuzzes every asyncio test (``--aiowheel-seed``, ``--aiowheel-fuzz``,
``--aiowheel-check-determinism``): each then runs on a virtual clock. Set at configure."""


class Run:
    """One run of a fuzzed test: its seed's Fuzz, and the traces of the loops it made (under
    the determinism check)."""

    __slots__ = ("first", "fuzz", "traces")

    def __init__(self, fuzz: Fuzz, trace: bool, first: bool) -> None:
        self.fuzz = fuzz
        self.first = first  # the test's first run: the one the run's tally counts
        self.traces: list[list[tuple[float, str]]] | None = [] if trace else None

    def trace(self) -> list[tuple[float, str]]:
        """The events of every loop of the run, loop after loop."""
        return [event for trace in self.traces or () for event in trace]


RUN: pytest.StashKey[Run] = pytest.StashKey()
"""The run under way of a fuzzed test (on the test's stash, while it runs)."""


class FuzzableFactory(LoopFactory):
    """The plugin's virtual loop factory: each loop it makes for a fuzzed test is armed with
    that test's current seed (and traced under the determinism check) before it runs
    anything. One factory serves every seed: pytest-asyncio takes it at collection, and a
    test runs under many seeds."""

    __slots__ = ()

    def __call__(self) -> asyncio.AbstractEventLoop:
        """A new virtual loop, fuzzed if the test being set up or run is."""
        loop = super().__call__()
        run = current[-1].stash.get(RUN, None) if current else None
        if run is not None:
            clock = clock_of(loop)
            assert clock is not None
            clock.fuzz(run.fuzz)
            if run.traces is not None:
                run.traces.append(clock.trace())
        return loop


def factory(
    config: pytest.Config,
    base: str | None = None,
    clock: tuple[bool | float, float] | None = None,
) -> LoopFactory:
    """The loop-mode factory for ``base`` (default: ``--aiowheel-base``) on the real clock,
    or on a virtual one with ``clock`` = (autojump, start); ``--aiowheel-max-batch`` on both."""
    name = base or str(config.getoption("aiowheel_base"))
    batch = max_batch(config)
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
            where = f"@pytest.mark.{MARKER}"
            found = FuzzableFactory(
                virtual_loop_factory(base_loop, TICK, *clock, where, batch).config
            )
        _factories[key] = found
    return found


def made_here(found: object) -> TypeGuard[LoopFactory]:
    """Whether ``found`` is a factory :func:`factory` made."""
    return isinstance(found, LoopFactory) and found in _factories.values()


def base_name(found: LoopFactory) -> str:
    """The name of ``found``'s base, as ``--aiowheel-base`` takes it ("auto" resolved)."""
    base = found.config.base
    for name, installed_base in installed().items():
        if installed_base is base:
            return name
    return "asyncio" if base.__module__.startswith("asyncio.") else base.__qualname__


def clock_for(item: pytest.Item | None) -> tuple[bool | float, float] | None:
    """The virtual clock ``item`` runs on, as (autojump, start); None for the real clock."""
    if item is None:
        return None
    marker = item.get_closest_marker(MARKER)
    if marker is not None:
        return marked_clock(item, marker)
    asked = MARKER in getattr(item, "fixturenames", ())
    if (
        asked
        or item.config.getoption("aiowheel_clock") == "virtual"
        or item.config.stash.get(EVERYWHERE, False)
        or item.get_closest_marker(FUZZ_MARKER) is not None
    ):
        return (True, 0.0)
    return None


def marked_clock(item: pytest.Item, marker: pytest.Mark) -> tuple[bool | float, float] | None:
    """The clock an ``aiowheel_clock`` marker asks for (a usage error naming the test if the
    marker is malformed)."""
    where = f"@pytest.mark.{MARKER}"
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


def wrap_anyio(plugin: Any, config: pytest.Config) -> Callable[[], None]:
    """Wrap ``plugin.get_runner`` (anyio's pytest plugin module); returns the undo."""
    original = getattr(plugin, "get_runner", None)
    if original is None or list(inspect.signature(original).parameters)[:2] != [
        "backend_name",
        "backend_options",
    ]:
        raise pytest.UsageError(
            "aiowheel.pytest: this anyio's pytest plugin has no "
            "get_runner(backend_name, backend_options) to put loop mode under "
            f"(anyio {version('anyio')}); anyio 4.4 or newer has it"
        )

    @contextlib.contextmanager
    def get_runner(backend_name: str, backend_options: dict[str, Any]) -> Iterator[Any]:
        options = backend_options or {}
        if backend_name == "asyncio" and options.get("loop_factory") is None:
            base = "uvloop" if options.get("use_uvloop") else None
            item = current[-1] if current else None
            options = {**options, "loop_factory": factory(config, base, clock_for(item))}
        with original(backend_name, options) as runner:
            yield runner

    plugin.get_runner = get_runner

    def restore() -> None:
        plugin.get_runner = original

    return restore
