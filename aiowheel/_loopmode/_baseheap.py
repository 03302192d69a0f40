"""The base loop's own timer heap, reached from loop mode without coming back into it.

A loop-mode loop (:mod:`aiowheel._loopmode._loop`) puts its ``call_at`` / ``call_later`` in front of
the base loop's; the base's own heap is still where three kinds of timer go: a near deadline (the
base's precision, not the wheel's tick), a call with an odd argument (the base's own answer,
after loop mode's refusals: :mod:`aiowheel._loopmode._refusals`), and the wheel's one wake-up. A
:class:`BaseHeap` reaches that heap through the base class's methods called as plain functions,
so none of those lands back in the wheel; on a real-time loop, until a test replaces the
loop's ``time``, it is also the clock the loop's wheel runs by (a
:class:`~aiowheel._time._clock.Clock`: read the time, file a wake-up). The wake-up on asyncio's heap
is a :class:`~aiowheel._time._wakeup.WakeUp`, a handle that tells the suites looking for lingering
timers in ``loop._scheduled`` that it is none of the program's.

The reaper. In loop mode it is not a task. The wheel's wake-up handle, on the loop's own heap
and filed through the base class (so it cannot land in its own wheel), has the reaper as its
callback (``Reaper._drive``): it advances the wheel, re-arms itself, and runs the due callbacks
inline, in the iteration that found them due, as the loop does with its own timer handles.
A task would be wrong in four ways: it is visible in ``asyncio.all_tasks()``; ``asyncio.run``
cancels it at exit *before* the program's own tasks finish their cleanup (whose timers would
then have no reaper); it needs a running loop, while ``loop.call_at`` before ``run_*`` is legal;
and a loop closed with it pending prints "Task was destroyed but it is pending!". A loop
callback has none of these, and costs one loop handle per bucket expiration, as the task did.

Why a room of its own. Which of the base's methods goes round through ``self`` (asyncio's
``call_later`` calls ``self.call_at``; uvloop's ``call_at`` calls ``self.call_later``), which
one the wake-up must take, and what asyncio's ``call_at`` does for a handle it files are facts
about the base loops, apart from the loop class, its install and its config.
"""

from __future__ import annotations

import asyncio
import heapq
import time
from collections.abc import Callable
from typing import Any, Final

from .._time._wakeup import WakeUp
from ._refusals import named, odd_number

__all__ = ["BaseHeap"]

_ASYNCIO_CALL_AT: Final = asyncio.BaseEventLoop.call_at


class BaseHeap:
    """The base loop's own timer heap, reached without coming back into loop mode.

    Chosen once, when the loop is made: the base class's ``call_at`` / ``call_later`` called
    as plain functions, not through the attributes loop mode puts in front of them.
    Where one of the base's methods calls the other through ``self`` (asyncio's
    ``call_later`` calls ``self.call_at``; uvloop's ``call_at`` calls ``self.call_later``), a
    near deadline may come back through the router once, and being near it goes straight on to
    the heap; the driver's wake-up, near or far, is handed to the one method that does not go
    round (:meth:`wake_at`), so it never lands in its own wheel.

    ``near_call_at`` and ``near_call_later`` are the base's bound methods themselves wherever
    that is right (no Python frame of ours on a near timer's path); the methods below are the
    ones that need one.
    """

    __slots__ = (
        "_base_call_at",
        "_base_call_later",
        "_clock",
        "_loop",
        "near_call_at",
        "near_call_later",
        "own_clock",
        "reenters_at",
        "time",
        "wakes_by_at",
    )

    exact: Final = False  # a real clock: wake-ups at the tick

    def __init__(self, loop: Any, base: type[asyncio.AbstractEventLoop]) -> None:
        self._loop = loop
        self._base_call_at: Callable[..., Any] = base.call_at
        self._base_call_later: Callable[..., Any] = base.call_later
        # asyncio's call_later goes through self.call_at: call_at is then the way in.
        self.reenters_at = base.call_later is asyncio.BaseEventLoop.call_later
        # The driver's wake-up goes to the one method that does not come back round. asyncio's
        # call_at calls nothing else, so every subclass of asyncio's loops, including one that
        # overrides call_later around asyncio's (which calls self.call_at: the router, and
        # from there the wheel the wake-up is for), is woken through call_at; uvloop's
        # call_later is its way in (its call_at calls self.call_later).
        self.wakes_by_at = issubclass(base, asyncio.BaseEventLoop)
        asyncio_clock = getattr(base, "time", None) is asyncio.BaseEventLoop.time
        self.own_clock: Final[Callable[[], float]] = time.monotonic if asyncio_clock else loop.time
        """The loop's own clock (a direct ``time.monotonic`` on asyncio's loops)."""
        self._clock = self.own_clock
        self.time: Final[Callable[[], float]] = self.own_clock
        """The loop's own clock, as a :class:`~aiowheel._time._clock.Clock` reads it (the base heap
        is the clock a loop-mode loop's wheel runs by, until its ``time`` is replaced)."""
        self.near_call_at: Callable[..., Any] = base.call_at.__get__(loop, type(loop))
        self.near_call_later: Callable[..., Any] = (
            self._asyncio_call_later
            if self.reenters_at
            else base.call_later.__get__(loop, type(loop))
        )

    def _asyncio_call_later(
        self, delay: float, callback: object, *args: object, context: object = None
    ) -> Any:
        # asyncio's call_later for a delay known to be a number and not NaN, minus its call
        # through self.call_at back into the router.
        handle = self._base_call_at(
            self._loop, self._clock() + delay, callback, *args, context=context
        )
        if handle._source_traceback:  # asyncio's call_later drops its own frame too
            del handle._source_traceback[-1]
        return handle

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Turn delays into deadlines by ``clock`` (the loop's ``time`` was replaced)."""
        self._clock = clock

    def wake_at(self, when: float, callback: Callable[[], None]) -> Any:
        """The driver's wake-up handle: on the heap, unpadded, whatever its distance (a
        wheel re-checks every deadline when it runs, so a little early costs a re-file)."""
        if self._base_call_at is _ASYNCIO_CALL_AT:
            # asyncio's call_at, as it is, but with a handle that is not a lingering timer to
            # suites that look for them in loop._scheduled (see WakeUp).
            loop = self._loop
            loop._check_closed()
            handle = WakeUp(when, callback, (), loop, None)
            heapq.heappush(loop._scheduled, handle)
            handle._scheduled = True  # type: ignore[attr-defined]  # as asyncio's call_at
            return handle
        if self.wakes_by_at:
            return self._base_call_at(self._loop, when, callback)
        return self._base_call_later(self._loop, when - self._clock(), callback)

    def slow_call_at(
        self, when: object, callback: object, *args: object, context: object = None
    ) -> Any:
        """call_at with an odd argument: the refusals of ours, then the base's own answer."""
        deadline = odd_number(when, named("call_at", callback))
        if deadline is not None:
            return self._loop.call_at(deadline, callback, *args, context=context)
        return self._base_call_at(self._loop, when, callback, *args, context=context)

    def slow_call_later(
        self, delay: object, callback: object, *args: object, context: object = None
    ) -> Any:
        """call_later with an odd argument: the refusals of ours (as for call_at), then the
        base's own answer."""
        seconds = odd_number(delay, named("call_later", callback))
        if seconds is not None:
            return self._loop.call_later(seconds, callback, *args, context=context)
        if self.reenters_at:  # asyncio's, without its trip through self.call_at
            assert isinstance(delay, float)  # every other number is handled above
            return self._asyncio_call_later(delay, callback, *args, context=context)
        return self._base_call_later(self._loop, delay, callback, *args, context=context)
