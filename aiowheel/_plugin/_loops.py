"""The pytest plugin's reach into the loops the tests make themselves (``asyncio.run`` in a plain
test, a ``unittest`` case, a test client's blocking portal): each noted for the test under way,
and under ``--aiowheel-every-loop`` made on loop mode.

:class:`Loops` replaces a few of asyncio's functions for the run and puts them back at its end;
:mod:`aiowheel.pytest` makes it at its first hook (:func:`watch`, before a suite's conftests
import uvloop or rloop) and ends it at unconfigure (:func:`unwatch`). A room of its own: it is
the only part of the plugin that changes anything outside pytest's own hooks in asyncio, and
what it notes (:data:`SEEN`) is read only by the run's count (:mod:`aiowheel._plugin._tally`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from .._loopmode._loop import LoopFactory, config_of
from ._factories import current

__all__ = ["SEEN", "Loops", "unwatch", "watch", "watching"]

SEEN: pytest.StashKey[set[str]] = pytest.StashKey()
"""The kinds of loop a test ran that the plugin did not make for it: "stock", "every loop"."""


class Loops:
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
            if loop is not None and current and self._active:
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
        item = current[-1]
        seen = item.stash.get(SEEN, None)
        if seen is None:
            seen = item.stash[SEEN] = set()
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


_loops: Loops | None = None


def watch() -> Loops:
    """The run's :class:`Loops`, made (and asyncio's ``_set_running_loop`` wrapped) once."""
    global _loops
    if _loops is None:
        _loops = Loops()
    return _loops


def watching() -> Loops | None:
    """The run's :class:`Loops`, if :func:`watch` made it (and :func:`unwatch` did not end it)."""
    return _loops


def unwatch() -> None:
    """Put asyncio's functions back; stop watching loops."""
    global _loops
    if _loops is not None:
        _loops.restore()
        _loops = None
