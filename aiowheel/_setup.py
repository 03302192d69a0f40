"""Setup: a driver's state, and how it is set up when it binds to a loop and when its loop
changes what it runs by (the clock, debug mode, origin tracking).

Why a room of its own. :class:`aiowheel._driver.Driver` does the wheel's work: it files, moves
and unfiles timers, runs the pass and closes. Before any of that, and whenever the loop changes
under it, something must take the loop (the binding), start the tick grid on the loop's clock,
attach the store's native core, follow debug mode, and tell the core's fast lane what it may
do. That set-up is a job of its own, written once here; the driver subclasses :class:`Setup`
(mypyc: a native base class, so the driver's hot paths read the same attributes at the same
offsets, and nothing here runs per timer). The driver's ``__init__`` makes the state, the
reaper last, since it is handed the driver's own pass.

What decides the fast lane (:meth:`Setup._sync`): loop mode's calls go straight to the native
core unless the driver is closed, in debug mode, noting origins, or counting against
``max_pending``, and only the loop's thread may cancel there. Every change of one of those
calls ``_sync``.
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Callable
from typing import Any, Final

from . import _dispatch
from ._binding import Binding
from ._clock import Clock, clock_for
from ._debug import Origins
from ._dispatch import Dispatch
from ._entry import Owner, Timed
from ._grid import Grid
from ._observe import LagHistogram
from ._reaper import Reaper
from ._store import Store
from ._threads import LoopThread

__all__ = ["NO_LIMIT", "Setup", "tracked_loops"]

NO_LIMIT: Final = sys.maxsize
"""max_pending / max_batch None: no limit (a C static in the compiled build)."""


class Setup(Owner):
    """A driver's state and its set-up: binding, the clock, debug mode, origin tracking."""

    __slots__ = (
        "_cancelled_on_close",
        "_debug",
        "_due",
        "_fired",
        "_grid",
        "_limit",
        "_loop_thread",
        "_max_lateness",
        "_origins",
        "_read",
        "_reaper",
        "_store",
        "_tick",
        "_wakeups",
        "binding",
        "lag",
    )

    # Made by Driver.__init__; the reaper last (it is handed the driver's pass).
    _store: Store
    _tick: float
    _grid: Grid
    _limit: int
    _due: Dispatch
    binding: Binding
    _loop_thread: LoopThread
    _debug: bool
    _reaper: Reaper
    _read: Callable[[], float]
    _fired: int
    _cancelled_on_close: int
    _wakeups: int
    _max_lateness: float
    lag: LagHistogram
    _origins: Origins | None  # where each pending timer was filed from, while noted

    def _claim_for_cancel(self) -> None:
        """The native core's thread check of a cancel() from another thread (the driver's)."""
        raise NotImplementedError

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bound lazily, at first use, to the running ``loop``, with a reaper task."""
        clock = clock_for(loop)
        self._start(loop, clock)
        self._reaper.start_task(loop, clock)
        self.binding.open(loop)

    def drive_loop(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Become ``loop``'s own driver, before the loop runs (aiowheel._loop): no reaper
        task; the wake-up is filed by ``clock`` and its callback is the pass."""
        self._reaper.drive(clock)
        self._start(loop, clock)
        self.binding.open(loop)

    def _start(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Take ``loop`` (the binding), its clock and its debug flag; make the store's core."""
        self.binding.adopt(loop)
        self._read = read = clock.time
        grid = self._grid
        grid.start(read())
        self.lag.since = grid.epoch
        self._debug = loop.get_debug()
        if self._debug or _view_tracks(loop):
            self.track_origins(True)
        self._store.attach(self._reaper.arm, self._tick, grid.epoch, read, self._claim_for_cancel)
        self._sync()

    def use_clock(self, clock: Clock) -> None:
        """Run by ``clock`` from now on (loop mode: a loop whose ``time`` was replaced, or a
        virtual clock). As on asyncio's heap, where a replaced ``loop.time`` decides what is
        due: the wheel keeps the tick it has reached, now on the new clock (the epoch moves),
        and every pending timer is filed again by its deadline on that clock."""
        self._reaper.use_clock(clock)
        self._read = read = clock.time
        if self.binding.bound is None or self.binding.closed:
            return
        store = self._store
        self._grid.rebase(read(), store.elapsed)
        entries = store.drain()
        entries.sort(key=_dispatch.deadline_of)  # by deadline, then filing stamp
        for entry in entries:
            assert isinstance(entry, Timed)
            store.insert(entry, self._grid.tick_for(entry._when, store.elapsed))
        store.set_clock(read, self._grid.epoch)
        if not self._reaper.running:  # else the pass under way re-arms when it ends
            self._reaper.arm()

    def native_calls(self, threshold: float, near_pad: float, *calls: Any) -> Any:
        """Loop mode's ``call_at`` / ``call_later`` in native code, or None (see
        :meth:`aiowheel._store.Store.native_calls`)."""
        native = self._store.native_calls(threshold, near_pad, *calls)
        self._sync()
        return native

    def _sync(self) -> None:
        """Tell the store what decides the core's fast lane (loop mode's calls file there
        directly unless closed, in debug mode, noting origins, or counting against
        max_pending) and whose thread may cancel."""
        self._store.sync(
            not self.binding.closed
            and not self._debug
            and self._origins is None
            and self._limit == NO_LIMIT,
            self._debug,
            self._loop_thread.ident,
        )

    def set_debug(self, enabled: bool) -> None:
        """Follow the loop's debug mode (debug mode tracks where timers are filed from)."""
        self._debug = enabled
        loop = self.binding.bound
        self.track_origins(enabled or (loop is not None and _view_tracks(loop)))

    def track_origins(self, enabled: bool) -> None:
        """Start (keeping what is noted) or stop noting where each timer is filed from."""
        if not enabled:
            self._origins = None
        elif self._origins is None:
            self._origins = Origins()
        self._sync()


def _view_tracks(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether origin tracking is on for ``loop`` (aiowheel.track_origins)."""
    return loop in tracked_loops


# Loops whose drivers note where each timer is filed from (aiowheel.track_origins; kept by
# aiowheel._view, here because a driver bound later reads it).
tracked_loops: Final[weakref.WeakSet[asyncio.AbstractEventLoop]] = weakref.WeakSet()
