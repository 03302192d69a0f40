"""Timer: aiowheel's public API, over the driver that drives the wheel on a loop.

This module is the facade (tokio's ``Handle``, Kafka's ``SystemTimer``): each method checks
the running loop and its arguments, with asyncio's messages, then hands a valid timer to the
driver (:mod:`aiowheel._time._driver`), which alone owns the store, the clock, the wake-up, the loop
binding, the reaper and dispatch (each a room of its own under it). The theory of operation
(ticks, the delay queue, dispatch, failure) is the driver's docstring. What is here: which
checks each call makes and in what order, so that bad input raises a clear error and changes
nothing (the checks themselves are :mod:`aiowheel._common._validate`'s), and the objects the API
returns. Nothing here touches the wheel or the wake-up: every timer is filed by a driver
method, or files itself through the driver's protected API (:class:`aiowheel._time._entry.Owner`).
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from .._common import _validate
from .._common._build import COMPILED_MODULES, is_compiled
from .._common._errors import PendingLimitError, TimerClosedError
from .._common._validate import Count, Name, Seconds, seconds
from . import _awaiting
from ._dispatch import DEFAULT_MAX_BATCH
from ._driver import NO_LIMIT, Driver
from ._handles import Handle, Scheduled
from ._periodic import Interval, PeriodicHandle, Schedule, Watchdog
from ._timeout import Timeout, timeout_after

__all__ = ["PendingLimitError", "Timer", "TimerClosedError", "TimerStats", "driver_of"]

_T = TypeVar("_T")

# C statics in the compiled build (a builtin named in a function is a dict lookup per call).
_callable: Final = callable
Context: Final = contextvars.Context


@dataclass(frozen=True, slots=True)
class TimerStats:
    """A snapshot of a Timer's counters (see :meth:`Timer.stats`)."""

    pending: int
    """Timers in the wheel now."""
    fired: int
    """Timers that came due and were dispatched."""
    cancelled: int
    """Timers taken out before they were due (including by close())."""
    wakeups: int
    """How many times the reaper woke up."""
    max_lateness: float
    """The largest (dispatch time - deadline) seen, in seconds."""
    queued_buckets: int
    """Items in the delay queue (at most one per bucket)."""


class Timer:
    """A hierarchical timing wheel bound to one running event loop.

    ``tick`` is the wheel's resolution in seconds: a timer fires at most about one tick plus
    loop latency after its deadline, and never before it. ``slots`` (a power of two) is the
    number of buckets per level. ``max_pending`` bounds the pending timers; a scheduling call
    beyond it raises :class:`PendingLimitError` and changes nothing. ``max_batch`` bounds the
    due callbacks run per loop iteration (None: no bound): when more come due at once (a mass
    expiry), the rest run on the following iterations, in deadline order, with the loop
    polling its I/O between chunks (and one more chunk an iteration for every quarter of a
    second the backlog has fallen behind, so they never starve: :mod:`aiowheel._time._dispatch`).

    Use it as ``async with Timer() as timer:`` or let it bind lazily to the running loop on
    first use; share one per loop (:func:`aiowheel.get_timer`) rather than making many.

    >>> async def main():
    ...     async with Timer() as timer:
    ...         handle = timer.call_later(0.05, print, "fired")
    ...         await timer.sleep(0.1)
    """

    __slots__ = (
        "_binding",
        "_driver",
        "_max_batch",
        "_sleep_after",
        "_sleep_until",
        "_slots",
        "_tick",
        "_unfile",
    )

    def __init__(
        self,
        *,
        tick: Seconds = _validate.DEFAULT_TICK,
        slots: Count = 64,
        max_pending: Count | None = None,
        max_batch: Count | None = DEFAULT_MAX_BATCH,
    ) -> None:
        """Create an unbound timer (see the class docstring for the parameters)."""
        resolution = _validate.tick(tick, "Timer()")
        buckets = _validate.slots(slots, "Timer()")
        limit = _validate.max_pending(max_pending, "Timer()")
        batch = _validate.max_batch(max_batch, "Timer()")
        self._tick: Final = resolution
        self._slots: Final = buckets
        self._max_batch: Final = batch
        self._driver: Final = Driver(
            resolution,
            buckets,
            NO_LIMIT if limit is None else limit,
            NO_LIMIT if batch is None else batch,
        )
        # The driver's loop check (aiowheel._time._binding), asked first by every call.
        self._binding: Final = self._driver.binding
        # What the sleeping coroutines are handed (aiowheel._time._awaiting): bound once, here.
        self._sleep_after: Final = self._driver._sleeper_after
        self._sleep_until: Final = self._driver._sleeper_at
        self._unfile: Final = self._driver._unfile

    # -- life cycle ----------------------------------------------------------------------------

    # A Timer binds lazily, on first use, to the loop running then (the driver's loop check
    # and its slow path, aiowheel._time._binding); its reaper is a task the driver owns (a
    # loop-mode loop's own driver has none: aiowheel._loopmode._loop).

    async def __aenter__(self) -> Timer:
        """Bind to the running loop and start the reaper."""
        self._binding.running_loop()
        return self

    def __aexit__(self, *exc_info: object) -> Coroutine[Any, Any, None]:
        """Close the timer (see :meth:`aclose`)."""
        return _awaiting.exit(self._driver.close_for_waiting)

    def close(self) -> list[Handle]:
        """Stop the timer and return the callback handles that never fired (Netty's stop()).

        Pending sleepers and scheduled futures are cancelled, tasks inside this timer's
        ``timeout()`` blocks are cancelled (their deadline can no longer be enforced), and
        returned handles are marked cancelled. Later scheduling calls raise RuntimeError.
        Closing twice is a no-op that returns ``[]``.

        A loop-mode loop's own Timer (:func:`aiowheel.timer_of`, and :func:`aiowheel.get_timer`
        on such a loop) holds every ``call_at`` / ``call_later`` of its loop, ``asyncio.sleep``
        included: it closes with its loop (``loop.close()``) and refuses to close before,
        with RuntimeError and nothing changed, where closing it would lose the loop's timers.
        """
        self._driver.refuse_closing_a_loops_own()
        return self._driver.shutdown(None, None)

    def aclose(self) -> Coroutine[Any, Any, list[Handle]]:
        """:meth:`close`, then wait for the reaper task to finish (a coroutine)."""
        # Every coroutine that awaits is plain Python: see aiowheel._time._awaiting.
        return _awaiting.aclose(self._driver.close_for_waiting)

    def closed(self) -> bool:
        """True once the timer has been closed (or shut itself down)."""
        return self._binding.closed

    # -- introspection -------------------------------------------------------------------------

    def __len__(self) -> int:
        """The exact number of pending timers."""
        return self._driver.pending()

    def __repr__(self) -> str:
        binding = self._binding
        state = "closed" if binding.closed else "running" if binding.loop is not None else "unbound"
        build = "compiled" if is_compiled("aiowheel", COMPILED_MODULES) else "pure-Python"
        return (
            f"<Timer {state} tick={self._tick} slots={self._slots} pending={len(self)} "
            f"build={build}>"
        )

    @property
    def tick(self) -> float:
        """The wheel's resolution, in seconds."""
        return self._tick

    @property
    def max_batch(self) -> int | None:
        """The most due callbacks run per loop iteration; None for no bound."""
        return self._max_batch

    def time(self) -> float:
        """The loop's clock (``loop.time()``): the clock every deadline is measured against."""
        return self._binding.loop_time()

    def stats(self) -> TimerStats:
        """Counters: pending, fired, cancelled, reaper wake-ups, max lateness seen."""
        return TimerStats(*self._driver.counters())

    # -- scheduling ----------------------------------------------------------------------------

    def call_at(
        self,
        when: Seconds,
        callback: Callable[..., object],
        *args: object,
        context: contextvars.Context | None = None,
    ) -> Handle:
        """Run ``callback(*args)`` once ``loop.time() >= when``; like ``loop.call_at``.

        The callback runs in ``context`` or else in a copy of the current context taken now.
        ``when=inf`` never fires but is pending and cancellable; a past ``when`` fires on a
        coming loop iteration, never inside this call.
        """
        binding = self._binding
        if not binding.on_loop():  # the loop check, inline: paid by every timer
            binding.check_loop()
        driver = self._driver
        if not isinstance(when, float):
            when = seconds("call_at(): deadline", when)
        if when != when:
            raise ValueError("call_at(): deadline must not be NaN")
        if not _callable(callback) or (context is not None and type(context) is not Context):
            _validate.call(callback, context, "call_at()")  # raises, naming the argument
        return driver.call(when, callback, args, context, "call_at()", False)

    def call_later(
        self,
        delay: Seconds,
        callback: Callable[..., object],
        *args: object,
        context: contextvars.Context | None = None,
    ) -> Handle:
        """Run ``callback(*args)`` after ``delay`` seconds; like ``loop.call_later``."""
        binding = self._binding
        if not binding.on_loop():  # the loop check, inline: paid by every timer
            binding.check_loop()
        driver = self._driver
        if not isinstance(delay, float):
            delay = seconds("call_later(): delay", delay)
        if delay != delay:  # a NaN of another type (Decimal, NumPy) too, now a float
            raise ValueError("call_later(): delay must not be NaN")
        if not _callable(callback) or (context is not None and type(context) is not Context):
            _validate.call(callback, context, "call_later()")  # raises, naming the argument
        return driver.call(delay, callback, args, context, "call_later()", True)

    def sleep_until(self, deadline: Seconds, result: _T = None) -> Coroutine[Any, Any, _T]:  # type: ignore[assignment]
        """Sleep until ``loop.time() >= deadline``, then return ``result`` (a coroutine).

        Cancelling the sleeping task takes its timer out of the wheel at once.
        """
        return _awaiting.sleep(self._sleep_until, self._unfile, deadline, result)

    def sleep(self, delay: Seconds, result: _T = None) -> Coroutine[Any, Any, _T]:  # type: ignore[assignment]
        """Sleep ``delay`` seconds, then return ``result``; like ``asyncio.sleep``."""
        return _awaiting.sleep(self._sleep_after, self._unfile, delay, result)

    def schedule_at(
        self,
        when: Seconds,
        coro_or_function: Coroutine[Any, Any, _T] | Callable[..., Any],
        *args: object,
    ) -> asyncio.Future[_T]:
        """Start a coroutine as a Task once ``loop.time() >= when``.

        Takes a coroutine object, or a function (sync or async) to call with ``args``. Returns
        a Future for the task's result. Cancelling the future before the deadline takes the
        timer out of the wheel (a coroutine object is closed, never started); after, it
        cancels the task.
        """
        return self._schedule_checked("schedule_at()", when, coro_or_function, args)

    def _schedule_checked(
        self,
        where: str,
        when: object,
        coro_or_function: Coroutine[Any, Any, _T] | Callable[..., Any],
        args: tuple[object, ...],
    ) -> asyncio.Future[_T]:
        """:meth:`schedule_at`'s checks, named by the function called (``where``), then the
        filing; a refused coroutine object is closed (it will never run, so no "never
        awaited" warning either)."""
        driver = self._driver
        try:
            loop = self._binding.running_loop()
            if asyncio.iscoroutine(coro_or_function):
                if args:
                    raise TypeError(f"{where}: takes no args with a coroutine object")
            elif not callable(coro_or_function):
                raise TypeError(
                    f"{where}: coro_or_function must be a coroutine or a callable, "
                    f"got {type(coro_or_function).__name__}"
                )
            if where == "schedule_at()":
                deadline = seconds("schedule_at(): deadline", when)
                _validate.not_nan(deadline, "schedule_at(): deadline")
            else:
                delay = seconds("schedule_later(): delay", when)
                deadline = _validate.not_nan(
                    self._binding.loop_time() + delay, "schedule_later(): delay"
                )
        except BaseException:
            if asyncio.iscoroutine(coro_or_function):
                coro_or_function.close()
            raise
        # A Scheduled start files itself like any entry (refused at max_pending).
        future: asyncio.Future[_T] = loop.create_future()
        Scheduled(deadline, future, coro_or_function, args, contextvars.copy_context(), driver)
        return future

    def schedule_later(
        self,
        delay: Seconds,
        coro_or_function: Coroutine[Any, Any, _T] | Callable[..., Any],
        *args: object,
    ) -> asyncio.Future[_T]:
        """:meth:`schedule_at` ``delay`` seconds from now."""
        return self._schedule_checked("schedule_later()", delay, coro_or_function, args)

    def timeout(self, delay: Seconds | None) -> Timeout:
        """An ``asyncio.timeout(delay)`` drop-in on this timer (None: no deadline).

        >>> async with timer.timeout(2.0):
        ...     await handle_request()
        """
        driver = self._driver
        self._binding.running_loop()
        if delay is None:
            return Timeout(None, driver)
        if not isinstance(delay, float):
            delay = seconds("timeout(): delay", delay)
        return timeout_after(delay, driver)

    def timeout_at(self, when: Seconds | None) -> Timeout:
        """An ``asyncio.timeout_at(when)`` drop-in on this timer (None: no deadline)."""
        driver = self._driver
        self._binding.running_loop()
        if when is None:
            return Timeout(None, driver)
        if not isinstance(when, float):
            when = seconds("timeout_at(): deadline", when)
        return Timeout(_validate.not_nan(when, "timeout_at(): deadline"), driver)

    def wait_for(self, aw: Awaitable[_T], timeout: Seconds | None) -> Coroutine[Any, Any, _T]:
        """``asyncio.wait_for`` with the 3.12+ semantics on every version, on this timer.

        A coroutine runs in the caller's task (no extra task); ``timeout <= 0`` cancels at
        once and raises TimeoutError unless the awaitable is already done; None waits forever.
        """
        return _awaiting.wait_for(aw, timeout, self.timeout)

    # -- heartbeats ---------------------------------------------------------------------------

    def every(
        self,
        interval: Seconds,
        callback: Callable[..., object],
        *args: object,
        missed: Name = "skip",
        start: Seconds | None = None,
    ) -> PeriodicHandle:
        """Run ``callback(*args)`` (sync or async) at a fixed rate, without drift.

        The k-th run is due at ``start + k * interval`` (``start`` defaults to one interval
        from now; pass ``timer.time()`` to run at once). ``missed`` says what to do when the
        loop comes back after missing ticks: ``"skip"`` (default) runs once now and goes on at
        the next tick still ahead, counting the skipped ones; ``"burst"`` runs every missed
        tick back to back; ``"delay"`` runs once now and restarts the schedule from now.

        >>> beat = timer.every(1.0, send_heartbeat)
        >>> beat.cancel()
        """
        driver = self._driver
        self._binding.running_loop()
        period = _validate.period("every(): interval", interval)
        policy = _validate.missed(missed, "every()")
        if not callable(callback):
            raise TypeError(f"every(): callback must be callable, got {type(callback).__name__}")
        first = self._first_deadline(start, period, "every()", "interval")
        return PeriodicHandle(
            driver, Schedule(first, period, policy), callback, args, contextvars.copy_context()
        )

    def interval(
        self, period: Seconds, *, missed: Name = "skip", start: Seconds | None = None
    ) -> Interval:
        """An async iterator yielding each tick's scheduled time, at a fixed rate.

        >>> async for deadline in timer.interval(1.0):
        ...     await send_heartbeat()
        """
        self._binding.running_loop()
        every = _validate.period("interval(): period", period)
        policy = _validate.missed(missed, "interval()")
        first = self._first_deadline(start, every, "interval()", "period")
        return Interval(self._driver, Schedule(first, every, policy))

    def _first_deadline(self, start: Seconds | None, period: float, where: str, name: str) -> float:
        """A schedule's first deadline: ``start``, validated, or one period from now.
        ValueError if the period is below the float spacing there: each beat's deadline would
        be the last one's (the schedule could not advance)."""
        if start is None:
            now = self._binding.loop_time()
            first = now + period
            at = now
        else:
            if not isinstance(start, float):
                start = seconds(f"{where}: start", start)
            first = at = _validate.not_nan(start, f"{where}: start")
        if at + period == at and abs(at) < math.inf:
            raise ValueError(
                f"{where}: {name} {period!r} is below the float spacing of the clock's time "
                f"{at!r} ({math.ulp(at)!r} s): the beats could not advance"
            )
        return first

    def watchdog(
        self, timeout: Seconds, on_expire: Callable[..., object], *args: object
    ) -> Watchdog:
        """Run ``on_expire(*args)`` (sync or async) once, if not fed within ``timeout`` s.

        >>> dog = timer.watchdog(3.0, connection.close)
        >>> dog.feed()   # on every message from the peer
        """
        driver = self._driver
        self._binding.running_loop()
        silence = _validate.period("watchdog(): timeout", timeout)
        if not callable(on_expire):
            raise TypeError(
                f"watchdog(): on_expire must be callable, got {type(on_expire).__name__}"
            )
        return Watchdog(driver, silence, on_expire, args, contextvars.copy_context())


def driver_of(timer: Timer) -> Driver:
    """The driver ``timer`` is made with: what loop mode drives (:mod:`aiowheel._loopmode._loop`
    makes each loop's Timer, then files, binds and runs through this driver). Asked here, of the
    room that holds it, rather than read off the Timer."""
    return timer._driver
