"""The pytest plugin's count of the run: where each test ran (on loop mode, on which base and
clock; left off, and why; on loops the plugin did not make), and the line that ends the run.

:mod:`aiowheel.pytest` notes where a test is put as its call begins (:func:`where`, kept under
:data:`PLACED`) and counts it once it is over (:func:`count`); ``pytest_terminal_summary``
prints :func:`summary_line`. A room of its own: the count reads what the other rooms decided
(the factories, the loops noted) and decides nothing itself, and its line is the plugin's one
public promise about what a run says.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Mapping

import pytest

from ._factories import base_name, clock_for, factory, made_here
from ._loops import SEEN, watching

__all__ = ["PLACED", "TALLY", "count", "summary_line", "where"]

# pytest-asyncio's name for the parameter that gives a test its loop factory.
_PYTEST_ASYNCIO_FACTORY = "_asyncio_loop_factory"

TALLY: pytest.StashKey[Counter[tuple[str, str]]] = pytest.StashKey()
"""The run's counts: (kind, base or why) -> tests (see :func:`summary_line`)."""

PLACED: pytest.StashKey[tuple[str, str, bool]] = pytest.StashKey()
"""Where the plugin put a test (:func:`where`), noted at its call."""


def where(item: pytest.Item) -> tuple[str, str, bool] | None:
    """Where ``item`` runs: ("loop mode", base name, on a virtual clock) or ("left off", why,
    False); None for a test that neither pytest-asyncio nor anyio runs."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    if _PYTEST_ASYNCIO_FACTORY in params:
        found = params[_PYTEST_ASYNCIO_FACTORY]
        if made_here(found):
            return ("loop mode", base_name(found), found.config.clock is not None)
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
    return ("loop mode", base_name(factory(item.config, base)), clock_for(item) is not None)


def count(item: pytest.Item) -> None:
    """Add ``item`` to the run's tally: where the plugin put it (:data:`PLACED`), and which
    loops it ran that the plugin did not make for it (:data:`aiowheel._plugin._loops.SEEN`)."""
    tally = item.config.stash.get(TALLY, None)
    if tally is None:
        return
    placed = item.stash.get(PLACED, None)
    seen = item.stash.get(SEEN, set())
    every = "every loop" in seen and "stock" not in seen
    if placed is not None and placed[0] == "left off" and placed[1].startswith("own ") and every:
        placed = None  # its own factory was asyncio.new_event_loop: --aiowheel-every-loop's
    loops = watching()
    if placed is not None:
        kind, why, virtual = placed
        tally[kind, why] += 1
        if virtual:
            tally["virtual clock", ""] += 1
    elif "every loop" in seen and loops is not None and loops.factory is not None:
        tally["loop mode", base_name(loops.factory)] += 1
        tally["every loop", ""] += 1
    if "stock" in seen and (placed is None or placed[0] != "left off"):
        tally["stock", ""] += 1


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
