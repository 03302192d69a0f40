"""Setup: a driver's state, and how it is set up when it binds to a loop and when its loop
changes what it runs by (the clock, debug mode, origin tracking).

Why a room of its own. :class:`aiowheel._time._driver.Driver` does the wheel's work: it files, moves
and unfiles timers, runs the pass and closes. Before any of that, and whenever the loop changes
under it, something must take the loop (the binding), start the tick grid on the loop's clock,
attach the store's native core, follow debug mode, and tell the core's fast lane what it may
do. That set-up is a job of its own, written once here; the driver subclasses :class:`Setup`
(mypyc: a native base class, so the driver's hot paths read the same attributes at the same
offsets, and nothing here runs per timer). ``Setup.__init__`` makes the whole state, the
reaper last, since it is handed the driver's own pass.

What decides the fast lane (:meth:`Setup._sync`): loop mode's calls go straight to the native
core unless the driver is closed, in debug mode, noting origins, or counting against
``max_pending``, and only the loop's thread may cancel there. Every change of one of those
calls ``_sync``.
"""

from __future__ import annotations

import asyncio
import sys
import time
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
from ._handles import Handle
from ._observe import Guards, LagHistogram
from ._reaper import Reaper
from ._store import store_for

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
        "guards",
        "lag",
    )

    def __init__(self, tick: float, slots: int, limit: int, max_batch: int) -> None:
        """An unbound driver's state; arguments checked by :class:`aiowheel.Timer`. Every
        attribute is made here, in the class that declares it (mypyc then reads each without
        a check that it is set), the reaper last: it is handed the driver's pass."""
        self._store: Final = store_for(slots)
        self._tick: Final = tick
        self._grid: Final = Grid(tick)
        self._limit: Final = limit
        self._due: Final = Dispatch(max_batch, self._store.run)
        # The loop check, the binding and the thread (aiowheel._time._binding): asked directly.
        self.binding: Final = Binding(self, self._bind, self._sync)
        self._loop_thread: Final = self.binding.thread
        self._debug = False
        self._read: Callable[[], float] = time.monotonic
        self._fired = 0
        self._cancelled_on_close = 0
        self._wakeups = 0
        self._max_lateness = 0.0
        self.lag: Final = LagHistogram(0.0)
        self.guards: Final = Guards()  # the timeouts guarding each task (current_deadline)
        # Where each pending timer was filed from, while origin tracking is on; else None.
        self._origins: Origins | None = None
        # The one wake-up and what it wakes (aiowheel._time._reaper): filings read its `armed`.
        self._reaper: Final = Reaper(
            self._store,
            self._grid,
            self._advance,
            self._dispatch_ready,
            self._is_closed,
            self.shutdown,
        )

    # -- what the driver does, handed to the reaper and the core (aiowheel._time._driver)
    # --------------

    def _advance(self) -> None:
        """The pass: fire what is due (the driver's)."""
        raise NotImplementedError

    def _dispatch_ready(self, inline: bool) -> None:
        """Hand the pass's due callbacks to the loop (the driver's)."""
        raise NotImplementedError

    def shutdown(self, exc: BaseException | None, cause: str | None) -> list[Handle]:
        """Close (the driver's)."""
        raise NotImplementedError

    def _claim_for_cancel(self) -> None:
        """The native core's thread check of a cancel() from another thread (the driver's)."""
        raise NotImplementedError

    def _is_closed(self) -> bool:
        return self.binding.closed

    # -- binding and what the driver runs by ----------------------------------------------------

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bound lazily, at first use, to the running ``loop``, with a reaper task."""
        clock = clock_for(loop)
        self._start(loop, clock)
        self._reaper.start_task(loop, clock)
        self.binding.open(loop)

    def drive_loop(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Become ``loop``'s own driver, before the loop runs (aiowheel._loopmode._loop): no reaper
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
        :meth:`aiowheel._time._store.Store.native_calls`)."""
        routed = self._store.native_calls(threshold, near_pad, *calls)
        self._sync()
        return routed

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
# aiowheel._time._view, here because a driver bound later reads it).
tracked_loops: Final[weakref.WeakSet[asyncio.AbstractEventLoop]] = weakref.WeakSet()
