"""The read side of the wheels: what introspection sees, and nothing it may change.

Why a room of its own. :func:`aiowheel.pending_timers`, :func:`aiowheel.timer_census`,
:func:`aiowheel.loop_lag`, :func:`aiowheel.current_deadline` (:mod:`aiowheel._seeing._census`) and
the OpenTelemetry gauges (:mod:`aiowheel.otel`) read every wheel on a loop. They read through a
:class:`View` of each driver, never the driver itself: the driver's read API is small (its
pending timers, where one was filed from, its counters, its lag histogram) and this room turns
it into what those functions want (classified timers, tallies by origin, the deadline guarding
a task). Read only when someone asks: nothing here is on a hot path.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from ._binding import listed_on
from ._driver import Driver
from ._entry import Timed
from ._handles import Call
from ._observe import asyncio_timeout_task, classify, origin_key
from ._setup import tracked_loops
from ._timeout import Timeout

__all__ = ["View", "track_loop", "views_of"]

#: A pending timer as introspection sees it: (what the user holds: an entry, or a callback
#: entry's handle; its deadline; kind; what names it; the task it serves; where it was filed
#: from, or None).
Seen = tuple[object, float, str, object, object, object]


class View:
    """One driver, read (see the module docstring)."""

    __slots__ = ("_driver",)

    def __init__(self, driver: Driver) -> None:
        self._driver = driver

    def timers(self) -> list[Seen]:
        """Every pending timer, classified."""
        driver = self._driver
        out: list[Seen] = []
        for pending in driver.pending_timers():
            kind, what, who = pending._describe()
            kind, what, task = classify(kind, what, who)
            shown: object = pending._handle if isinstance(pending, Call) else pending
            out.append((shown, pending._when, kind, what, task, driver.origin_of(pending)))
        return out

    def handles(self) -> list[asyncio.TimerHandle]:
        """The pending timers that are ``asyncio.TimerHandle``s (``loop.call_at`` /
        ``call_later`` in loop mode, and a Timer's): what ``loop._scheduled`` shows readers
        (aiowheel._loopmode._scheduled)."""
        out: list[asyncio.TimerHandle] = []
        for pending in self._driver.pending_timers():
            shown: object = pending._handle if isinstance(pending, Call) else pending
            if isinstance(shown, asyncio.TimerHandle):
                out.append(shown)
        return out

    def tally(self, counts: dict[tuple[str, object], int]) -> None:
        """Count the pending timers into ``counts`` by (kind, :func:`origin_key`), without a
        snapshot of each (aiowheel.timer_census)."""
        driver = self._driver
        for pending in driver.pending_timers():
            kind, what, who = pending._describe()
            kind, what, task = classify(kind, what, who)
            key = (kind, origin_key(what, task, driver.origin_of(pending)))
            counts[key] = counts.get(key, 0) + 1

    def deadline_for(self, tasks: tuple[object, ...]) -> float | None:
        """The earliest deadline of the timeouts on this wheel that guard any of ``tasks``:
        aiowheel's own, and asyncio's (``asyncio.timeout``, ``wait_for``) filed here by loop
        mode. Read from the driver's index of them (:class:`aiowheel._time._observe.Guards`),
        in the time of these tasks' own timeouts."""
        return self._driver.guards.deadline_for(tasks)

    def deadline_scanned(self, tasks: tuple[object, ...]) -> float | None:
        """:meth:`deadline_for` by one pass over every pending timer: the reference the
        index is tested against."""
        earliest: float | None = None
        guarded: object
        for entry in self._driver.pending_timers():
            if isinstance(entry, Timeout):
                guarded = entry._task
            elif isinstance(entry, Call):
                handle = entry._handle
                guarded = asyncio_timeout_task(handle._callback, handle._args)
            elif isinstance(entry, Timed):
                continue
            else:  # a handle of the native core
                guarded = asyncio_timeout_task(entry._callback, entry._args)
            if guarded in tasks:
                when: float = entry._when
                if earliest is None or when < earliest:
                    earliest = when
        return earliest

    def take_lag(self, reset: bool) -> tuple[list[int], int, float, float]:
        """The lag histogram, its count, its max and the loop time its window began; a new
        window begins now if ``reset``."""
        driver = self._driver
        return driver.lag.take(driver.now() if reset else None)

    def counters(self) -> tuple[int, int, int, int, float, int]:
        """pending, fired, cancelled, wake-ups, max lateness, queued buckets."""
        return self._driver.counters()

    def listened(self) -> bool:
        """Whether a lag listener is set."""
        return self._driver.lag.listener is not None

    def listen(self, listener: Callable[[float, int], None] | None) -> None:
        """Call ``listener(late, count)`` for each pass that fires timers (None: stop)."""
        self._driver.listen(listener)

    def listener(self) -> Callable[[float, int], None] | None:
        """The lag listener set, or None."""
        return self._driver.lag.listener


def views_of(loop: asyncio.AbstractEventLoop) -> list[View]:
    """A view of each open driver bound to ``loop``."""
    drivers: list[Any] = listed_on(loop)
    return [View(driver) for driver in drivers]


def track_loop(loop: asyncio.AbstractEventLoop, enabled: bool) -> None:
    """Note (or stop noting) where every timer of ``loop``'s drivers is filed from, for the
    drivers bound now and later (debug mode notes it too)."""
    if enabled:
        tracked_loops.add(loop)
    else:
        tracked_loops.discard(loop)
    drivers: list[Any] = listed_on(loop)
    for driver in drivers:
        driver.track_origins(enabled or driver.debug)
