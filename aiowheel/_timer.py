"""Timer: the sans-IO wheel bound to a running asyncio loop.

The driver's job, and nothing else: turn the loop's float clock into wheel ticks and back, keep
the *delay queue*, run the one *reaper* coroutine, and dispatch due entries.

Ticks. A deadline ``when`` (loop clock, seconds) becomes tick ``ceil((when - epoch) / tick)``,
rounded **up**, so a bucket is never processed before every deadline in it can have passed.
Rounding errors of the float arithmetic cannot make a timer early either: before an entry
fires, the reaper compares its exact ``when`` with ``loop.time()`` and re-files it from that
deadline if the clock has not reached it (asyncio and uvloop may run a loop timer a little
early; that is where this guard earns its keep). The same check makes pushing a deadline
later free: ``Timeout.reschedule`` and ``Watchdog.feed`` only rewrite ``when``, and the entry
is re-filed when its old bucket comes due (the wheel's lazy re-file, one level up).

Delay queue and reaper (Kafka's DelayQueue + ExpiredOperationReaper, on the loop instead of a
thread). The wheel keeps one heap item per non-empty bucket, keyed by the bucket's expiration
tick. One reaper Task per Timer awaits a future that a single ``loop.call_at`` handle resolves
at the earliest expiration, so there is at most one loop timer handle outstanding per Timer,
whatever the number of pending timers. ``Wheel.insert`` returns a tick when a bucket was
queued; only if that tick is earlier than the armed one is the loop handle replaced (the
reaper is "woken early"). While nothing is due the reaper does not wake: no periodic ticks.

Dispatch. The due callbacks of one reaper pass run, in deadline order, in *one* loop callback
(``_run_ready``): exactly like loop callbacks (no current task, the loop's exception handler,
KeyboardInterrupt leaves the loop, the rest of the batch then runs on the next iteration) and
never inside the reaper, at the cost of one loop handle per batch instead of one per timer:
that is why a storm of due timers costs aiowheel far less than the loop's own heap. Sleepers
resolve their future; scheduled coroutines start as Tasks; timeouts cancel their task. A
periodic timer re-files itself from inside the pass; it left the count when it came due, so
``max_pending`` can never refuse it.

Compiled build. This module is compiled with mypyc where possible; its coroutines are not
(see :mod:`aiowheel._awaiting`): the reaper task is a plain-Python loop that awaits
:meth:`Timer._reaper_waiter` and calls the compiled :meth:`Timer._reap_due`, so all the
per-timer work stays in C and nothing compiled ever suspends.

Loop mode (:mod:`aiowheel._loop`). A loop's own Timer has no reaper task: its wake-up handle's
callback (:meth:`Timer._drive`) advances the wheel, re-arms and runs the due callbacks inline;
``_loop_call_at`` / ``_loop_call_later`` are the loop's ``call_at`` / ``call_later``. Any other
Timer bound to such a loop keeps its task but files its wake-up on the loop's heap too.

Failure. If the reaper task is cancelled from outside (``asyncio.run`` does this to every task
at exit) or dies of a bug, the Timer closes itself: pending sleepers and scheduled futures fail
with :class:`TimerClosedError` naming the cause, pending callbacks are marked cancelled, and any
later use raises RuntimeError. It never hangs silently.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from math import ceil, floor, inf
from typing import Any, Final, Protocol, TypeVar

from . import _awaiting, _debug
from ._build import COMPILED_MODULES, is_compiled
from ._errors import PendingLimitError, TimerClosedError
from ._handles import EMPTY_CONTEXT, Scheduled, Sleeper, TimerHandle, _Timed
from ._periodic import (
    Interval,
    PeriodicHandle,
    Watchdog,
    _Schedule,
    check_missed,
    check_period,
)
from ._timeout import Timeout
from ._types import Count, Name, Seconds, seconds
from ._wheel import NEVER, Wheel

__all__ = ["PendingLimitError", "Timer", "TimerClosedError", "TimerStats"]

_T = TypeVar("_T")

# asyncio's C accelerated lookup of the running loop (~25 ns): one identity check against it
# covers "not started", "closed", "another loop" and "another thread" on the hot path.
_get_running_loop: Final = asyncio._get_running_loop

# While the reaper is about to run or is running, inserts need not re-arm the loop handle: it
# re-reads the earliest expiration before it sleeps again. No tick is below this.
_REAPER_AWAKE: Final = -NEVER

# See the reaper: a clock reading within this fraction of a tick below a boundary counts as
# having reached it.
_TICK_EPSILON: Final = 1e-6

# Int delays below this convert to float exactly; loop mode hands larger ones to the loop.
_EXACT_INT: Final = 1 << 53

# Past this many live Timers on one loop, warn once (Netty's too-many-instances lesson).
TOO_MANY_TIMERS: Final = 64

_timers_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, int] = (
    weakref.WeakKeyDictionary()
)
_warned_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


class _WakeHandle(Protocol):
    """The loop handle of the reaper's wake-up: asyncio's, uvloop's, or any loop's."""

    def cancel(self) -> object:
        """Cancel it (asyncio's returns None, aiowheel's a bool: typed loosely on purpose)."""
        ...


#: Files the wake-up handle on the loop's own heap: ``wake_at(when, callback) -> handle``.
WakeAt = Callable[[float, Callable[[], None]], _WakeHandle]


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
    beyond it raises :class:`PendingLimitError` and changes nothing.

    Use it as ``async with Timer() as timer:`` or let it bind lazily to the running loop on
    first use; share one per loop (:func:`aiowheel.get_timer`) rather than making many.

    >>> async def main():
    ...     async with Timer() as timer:
    ...         handle = timer.call_later(0.05, print, "fired")
    ...         await timer.sleep(0.1)
    """

    __slots__ = (
        "__weakref__",
        "_armed",
        "_bound_loop",
        "_cancelled_on_close",
        "_clock",
        "_closed",
        "_closing_cause",
        "_debug",
        "_debug_checks",
        "_driven",
        "_epoch",
        "_fired",
        "_inverse_tick",
        "_limit",
        "_loop",
        "_max_lateness",
        "_near",
        "_near_call_at",
        "_near_call_later",
        "_near_pad",
        "_ready",
        "_reaper",
        "_slots",
        "_slow_call_at",
        "_slow_call_later",
        "_thread_id",
        "_tick",
        "_waiter",
        "_wake_at",
        "_wake_handle",
        "_wakeups",
        "_wheel",
    )

    def __init__(
        self, *, tick: Seconds = 0.001, slots: Count = 64, max_pending: Count | None = None
    ) -> None:
        """Create an unstarted Timer; see the class docstring for the parameters."""
        given: object = tick  # as given: the compiled build sees `tick` as a float below
        if isinstance(tick, bool) or not isinstance(tick, int | float):
            raise TypeError(f"tick must be a number of seconds, got {type(tick).__name__}")
        if not 0 < tick < inf:
            raise ValueError(f"tick must be a positive, finite number of seconds, got {given!r}")
        limit = sys.maxsize
        if max_pending is not None:
            if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
                raise ValueError(f"max_pending must be a positive int or None, got {max_pending!r}")
            limit = max_pending
        self._wheel: Final = Wheel(slots)  # validates slots
        self._tick: Final = float(tick)
        self._inverse_tick: Final = 1.0 / self._tick
        self._slots: Final = self._wheel.slots
        self._limit: Final = limit
        # `_loop` is what the hot path compares the running loop with: None until bound and
        # again once closed, so that one identity check routes every odd case to _check_loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bound_loop: asyncio.AbstractEventLoop | None = None
        # The bound loop's thread. Pushing a deadline later (Timeout.reschedule, Watchdog.feed)
        # rewrites one float that only the reaper reads, so the one thing it must check is the
        # thread; comparing thread ids is ~5x cheaper on 3.11 than asking for the running loop
        # (a getpid() system call there). No thread has id -1.
        self._thread_id = -1
        self._epoch = 0.0
        self._closed = False
        self._closing_cause: str | None = None
        self._debug = False
        self._reaper: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_handle: _WakeHandle | None = None
        self._armed = NEVER
        self._fired = 0
        self._cancelled_on_close = 0
        self._wakeups = 0
        self._max_lateness = 0.0
        self._ready: list[_Timed] = []
        self._clock: Callable[[], float] = time.monotonic
        # Loop mode (aiowheel._loop) only. `_near`: deadlines nearer than this go to the loop's
        # own heap (inf: none come here through the loop). `_wake_at` files the wake-up handle
        # on the loop's heap, and its callback is the reaper itself (no reaper task).
        # `_near_*` take a valid near deadline straight to the loop's heap; `_slow_*` take
        # every other call the wheel does not (and check it, or let the base loop do so).
        self._near = inf
        # Added to a near deadline handed to the loop's heap, for a base loop that would run it
        # early by its own clock (uvloop: whole milliseconds, rounded to the nearest). 0.0 for
        # the loops that never do; then the deadline goes on unchanged (int or float).
        self._near_pad = 0.0
        self._wake_at: WakeAt | None = None
        self._driven = False
        self._slow_call_at: Callable[..., object] = _not_in_loop_mode
        self._slow_call_later: Callable[..., object] = _not_in_loop_mode
        self._near_call_at: Callable[..., object] = _not_in_loop_mode
        self._near_call_later: Callable[..., object] = _not_in_loop_mode
        self._debug_checks: Callable[[object, str], None] = _no_debug_checks

    # -- life cycle ----------------------------------------------------------------------------

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The slow path behind the hot path's loop check: bind, or explain what is wrong."""
        running = _get_running_loop()
        if self._closed:
            raise RuntimeError(f"Timer is closed{self._closing_cause or ''}")
        if running is None:
            raise RuntimeError(
                "Timer must be used from the thread running its event loop "
                "(no event loop is running in this thread)"
            )
        if self._bound_loop is None:
            self._bind(running)
            return running
        if running is not self._bound_loop:
            raise RuntimeError(f"Timer is bound to a different event loop ({self._bound_loop!r})")
        self._thread_id = threading.get_ident()  # a loop may be run from another thread later
        return running

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._adopt(loop)
        # The reaper runs in an empty context: nothing of whoever started the timer leaks in.
        self._reaper = loop.create_task(_awaiting.reap(self), context=contextvars.Context())
        # A loop closed with timers pending must not print "Task was destroyed but it is
        # pending!" for the reaper: asyncio drops its own pending TimerHandles silently too.
        self._reaper._log_destroy_pending = False  # type: ignore[attr-defined]
        self._reaper.add_done_callback(self._on_reaper_done)
        self._loop = loop

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``loop``'s clock, debug flag and thread; count this timer against the loop."""
        self._bound_loop = loop
        self._epoch = loop.time()
        # On a loop-mode loop (aiowheel._loop) the wake-up handle goes on the loop's own heap,
        # as that loop's Timer's does: filed in the loop's wheel it would be rounded up twice.
        self._wake_at = getattr(loop, "_aiowheel_wake_at", None)
        # The loop's clock, as a direct call where the loop has not replaced asyncio's
        # (BaseEventLoop.time is a Python method around time.monotonic: ~40 ns per call saved
        # on every hot path); uvloop's and any custom loop's own method otherwise.
        if getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time:
            self._clock = time.monotonic
        else:
            self._clock = loop.time
        self._debug = loop.get_debug()
        self._thread_id = threading.get_ident()
        count = _timers_per_loop.get(loop, 0) + 1
        _timers_per_loop[loop] = count
        if count > TOO_MANY_TIMERS and loop not in _warned_loops:
            _warned_loops.add(loop)
            warnings.warn(
                f"{count} aiowheel Timers are running on one event loop; a Timer is built to "
                "be shared: use aiowheel.get_timer() (or pass one Timer around) instead",
                RuntimeWarning,
                stacklevel=5,
            )

    async def __aenter__(self) -> Timer:
        """Bind to the running loop and start the reaper."""
        if _get_running_loop() is not self._loop:
            self._check_loop()
        return self

    def __aexit__(self, *exc_info: object) -> Coroutine[Any, Any, None]:
        """Close the timer (see :meth:`aclose`)."""
        return _awaiting.exit(self)

    def close(self) -> list[TimerHandle]:
        """Stop the timer and return the callback handles that never fired (Netty's stop()).

        Pending sleepers and scheduled futures are cancelled, tasks inside this timer's
        ``timeout()`` blocks are cancelled (their deadline can no longer be enforced), and
        returned handles are marked cancelled. Later scheduling calls raise RuntimeError.
        Closing twice is a no-op that returns ``[]``.
        """
        return self._shutdown(None, None)

    def aclose(self) -> Coroutine[Any, Any, list[TimerHandle]]:
        """:meth:`close`, then wait for the reaper task to finish (a coroutine)."""
        # Every coroutine that awaits is plain Python: see aiowheel._awaiting.
        return _awaiting.aclose(self)

    def _shutdown(self, exc: BaseException | None, cause: str | None) -> list[TimerHandle]:
        if self._closed:
            return []
        self._closed = True
        self._closing_cause = cause
        self._loop = None
        self._thread_id = -1
        loop = self._bound_loop
        if loop is not None:
            count = _timers_per_loop.get(loop, 1) - 1
            if count:
                _timers_per_loop[loop] = count
            else:
                _timers_per_loop.pop(loop, None)
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None
        reaper = self._reaper
        if reaper is not None and reaper is not asyncio.current_task():
            reaper.cancel()
        # Let go of the loop: a closed timer kept in get_timer()'s weak registry must not keep
        # its loop alive (the value would pin its own weak key).
        self._reaper = None
        self._waiter = None
        self._bound_loop = None
        self._clock = time.monotonic
        unfired: list[TimerHandle] = []
        entries = self._wheel.drain()
        self._cancelled_on_close += len(entries)
        for entry in entries:
            assert isinstance(entry, _Timed)
            entry._abandon(exc)
            if isinstance(entry, TimerHandle):
                unfired.append(entry)
        return unfired

    def closed(self) -> bool:
        """True once the timer has been closed (or shut itself down)."""
        return self._closed

    # -- introspection -------------------------------------------------------------------------

    def __len__(self) -> int:
        """The exact number of pending timers."""
        return len(self._wheel)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "running" if self._loop is not None else "unbound"
        build = "compiled" if is_compiled("aiowheel", COMPILED_MODULES) else "pure-Python"
        return (
            f"<Timer {state} tick={self._tick} slots={self._slots} pending={len(self)} "
            f"build={build}>"
        )

    @property
    def tick(self) -> float:
        """The wheel's resolution, in seconds."""
        return self._tick

    def time(self) -> float:
        """The loop's clock (``loop.time()``): the clock every deadline is measured against."""
        loop = self._bound_loop
        if loop is None:
            loop = asyncio.get_running_loop()
        return loop.time()

    def stats(self) -> TimerStats:
        """Counters: pending, fired, cancelled, reaper wake-ups, max lateness seen."""
        wheel = self._wheel
        return TimerStats(
            pending=len(wheel),
            fired=self._fired,
            cancelled=wheel.removed + self._cancelled_on_close,
            wakeups=self._wakeups,
            max_lateness=self._max_lateness,
            queued_buckets=len(wheel._heap),
        )

    # -- scheduling ----------------------------------------------------------------------------

    def _tick_for(self, when: float) -> int:
        """The tick of deadline ``when``, rounded up; NEVER for +inf. ValueError for NaN."""
        try:
            return ceil((when - self._epoch) * self._inverse_tick)
        except OverflowError:
            if when > 0:
                return NEVER
            return self._wheel.elapsed  # -inf: already due
        except ValueError:
            pass
        # Raised outside the except clause, so that no internal error shows as its context
        # (in both builds: the compiled one ignores `from None`).
        raise ValueError("deadline must not be NaN")

    def call_at(
        self,
        when: Seconds,
        callback: Callable[..., object],
        *args: object,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` once ``loop.time() >= when``; like ``loop.call_at``.

        The callback runs in ``context`` or else in a copy of the current context taken now.
        ``when=inf`` never fires but is pending and cancellable; a past ``when`` fires on a
        coming loop iteration, never inside this call.
        """
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            self._check_loop()
        if not isinstance(when, float):
            when = seconds("deadline", when)
        return self._call(when, callback, args, context)

    def call_later(
        self,
        delay: Seconds,
        callback: Callable[..., object],
        *args: object,
        context: contextvars.Context | None = None,
    ) -> TimerHandle:
        """Run ``callback(*args)`` after ``delay`` seconds; like ``loop.call_later``."""
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            self._check_loop()
        if not isinstance(delay, float):
            delay = seconds("delay", delay)
        return self._call(self._clock() + delay, callback, args, context)

    def _call(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> TimerHandle:
        # The hot path of call_at and call_later, once the loop is checked: every line is
        # paid by every timer, so the tick arithmetic of _tick_for is inlined (its except
        # branches cost nothing unless taken) and the count is read without len().
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        if self._debug:
            _check_not_coroutine_function(callback)
        try:
            tick = ceil((when - self._epoch) * self._inverse_tick)
        except (OverflowError, ValueError):
            tick = self._tick_for(when)
        wheel = self._wheel
        if wheel._count >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        if context is None:
            context = contextvars.copy_context()
            if not context:
                context = EMPTY_CONTEXT
        handle = TimerHandle(when, callback, args, context, wheel)
        if wheel.insert(handle, tick) < self._armed:
            self._arm()
        return handle

    # -- loop mode (aiowheel._loop): the loop's call_at / call_later ----------------------------

    def _attach_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        near: float,
        near_pad: float,
        wake_at: WakeAt,
        slow_call_at: Callable[..., object],
        slow_call_later: Callable[..., object],
        near_call_at: Callable[..., object],
        near_call_later: Callable[..., object],
        debug_checks: Callable[[object, str], None],
    ) -> None:
        """Become ``loop``'s own wheel, before the loop runs (see aiowheel._loop)."""
        self._adopt(loop)
        self._loop = loop
        self._near = near
        self._near_pad = near_pad
        self._wake_at = wake_at
        self._driven = True
        self._slow_call_at = slow_call_at
        self._slow_call_later = slow_call_later
        self._near_call_at = near_call_at
        self._near_call_later = near_call_later
        self._debug_checks = debug_checks

    def _loop_call_at(
        self,
        when: object,
        callback: object,
        *args: object,
        context: contextvars.Context | None = None,
    ) -> object:
        """``loop.call_at`` of a loop-mode loop: the wheel for a float (or int) deadline at
        least ``near`` ahead and a callable; the slow path (the loop's own heap) otherwise."""
        if isinstance(when, float):
            deadline = when
        elif isinstance(when, int) and -_EXACT_INT < when < _EXACT_INT:
            deadline = float(when)  # aiohttp rounds its deadlines up to whole seconds: ints
        else:
            return self._slow_call_at(when, callback, *args, context=context)
        ahead = deadline - self._clock()
        if ahead >= self._near:
            if callable(callback) and not self._closed:
                if self._debug:
                    self._debug_checks(callback, "call_at")
                return self._call(deadline, callback, args, context)
        elif ahead == ahead:  # near, and not NaN: straight to the loop's heap
            pad = self._near_pad
            if pad and ahead > 0:  # a deadline already passed cannot be run early
                # As the delay it is from now: uvloop's own call_at would turn it into one
                # through self.call_later, which would pad it a second time.
                return _hand_over(self._near_call_later, ahead + pad, callback, args, context)
            return _hand_over(self._near_call_at, when, callback, args, context)
        return self._slow_call_at(when, callback, *args, context=context)

    def _loop_call_later(
        self,
        delay: object,
        callback: object,
        *args: object,
        context: contextvars.Context | None = None,
    ) -> object:
        """``loop.call_later`` of a loop-mode loop (see :meth:`_loop_call_at`)."""
        if isinstance(delay, float):
            seconds_ahead = delay
        elif isinstance(delay, int) and -_EXACT_INT < delay < _EXACT_INT:
            seconds_ahead = float(delay)  # asyncio.sleep(5): an int delay is common
        else:
            return self._slow_call_later(delay, callback, *args, context=context)
        if seconds_ahead >= self._near:
            if callable(callback) and not self._closed:
                if self._debug:
                    self._debug_checks(callback, "call_later")
                return self._call(self._clock() + seconds_ahead, callback, args, context)
        elif seconds_ahead == seconds_ahead:  # near, and not NaN: straight to the loop's heap
            pad = self._near_pad
            if pad and seconds_ahead > 0:
                delay = seconds_ahead + pad
            return _hand_over(self._near_call_later, delay, callback, args, context)
        return self._slow_call_later(delay, callback, *args, context=context)

    def sleep_until(self, deadline: Seconds, result: _T = None) -> Coroutine[Any, Any, _T]:  # type: ignore[assignment]
        """Sleep until ``loop.time() >= deadline``, then return ``result`` (a coroutine).

        Cancelling the sleeping task takes its timer out of the wheel at once.
        """
        return _awaiting.sleep(self, deadline, result, until=True)

    def sleep(self, delay: Seconds, result: _T = None) -> Coroutine[Any, Any, _T]:  # type: ignore[assignment]
        """Sleep ``delay`` seconds, then return ``result``; like ``asyncio.sleep``."""
        return _awaiting.sleep(self, delay, result, until=False)

    def _sleeper_at(self, deadline: Seconds, result: object) -> Sleeper | None:
        """The synchronous part of sleep_until (see aiowheel._awaiting)."""
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            loop = self._check_loop()
        if not isinstance(deadline, float):
            deadline = seconds("deadline", deadline)
        return self._sleeper(loop, deadline, result)

    def _sleeper_after(self, delay: Seconds, result: object) -> Sleeper | None:
        """The synchronous part of sleep (see aiowheel._awaiting)."""
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            loop = self._check_loop()
        if not isinstance(delay, float):
            delay = seconds("delay", delay)
        return self._sleeper(loop, self._clock() + delay, result)

    def _sleeper(
        self, loop: asyncio.AbstractEventLoop, deadline: float, result: object
    ) -> Sleeper | None:
        """File a sleeper for ``deadline``; None if it has passed (then just yield once)."""
        try:
            tick = ceil((deadline - self._epoch) * self._inverse_tick)
        except (OverflowError, ValueError):
            tick = self._tick_for(deadline)
        wheel = self._wheel
        if wheel._count >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        if deadline <= self._clock():
            return None
        entry = Sleeper(deadline, loop.create_future(), result)
        if wheel.insert(entry, tick) < self._armed:
            self._arm()
        return entry

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
        if _get_running_loop() is not self._loop:
            self._check_loop()
        loop = self._loop
        assert loop is not None
        if asyncio.iscoroutine(coro_or_function):
            if args:
                raise TypeError("schedule_at() takes no args with a coroutine object")
        elif not callable(coro_or_function):
            raise TypeError(
                "schedule_at() needs a coroutine or a callable, "
                f"got {type(coro_or_function).__name__}"
            )
        if not isinstance(when, float):
            when = seconds("deadline", when)
        tick = self._tick_for(when)
        wheel = self._wheel
        if wheel._count >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        future: asyncio.Future[_T] = loop.create_future()
        entry = Scheduled(when, future, coro_or_function, args, contextvars.copy_context(), wheel)
        if wheel.insert(entry, tick) < self._armed:
            self._arm()
        return future

    def schedule_later(
        self,
        delay: Seconds,
        coro_or_function: Coroutine[Any, Any, _T] | Callable[..., Any],
        *args: object,
    ) -> asyncio.Future[_T]:
        """:meth:`schedule_at` ``delay`` seconds from now."""
        try:
            when = self._deadline_after(self._running_loop(), delay)
        except BaseException:
            if asyncio.iscoroutine(coro_or_function):
                coro_or_function.close()  # refused: it will never run, so no warning either
            raise
        return self.schedule_at(when, coro_or_function, *args)

    def timeout(self, delay: Seconds | None) -> Timeout:
        """An ``asyncio.timeout(delay)`` drop-in on this timer (None: no deadline).

        >>> async with timer.timeout(2.0):
        ...     await handle_request()
        """
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            self._check_loop()
        if delay is None:
            return Timeout(None, self)
        if not isinstance(delay, float):
            delay = seconds("delay", delay)
        when = self._clock() + delay
        if when != when:
            raise ValueError("deadline must not be NaN")
        return Timeout(when, self)

    def timeout_at(self, when: Seconds | None) -> Timeout:
        """An ``asyncio.timeout_at(when)`` drop-in on this timer (None: no deadline)."""
        self._running_loop()
        if when is None:
            return Timeout(None, self)
        if not isinstance(when, float):
            when = seconds("deadline", when)
        self._tick_for(when)  # refuses NaN
        return Timeout(when, self)

    def wait_for(self, aw: Awaitable[_T], timeout: Seconds | None) -> Coroutine[Any, Any, _T]:
        """``asyncio.wait_for`` with the 3.12+ semantics on every version, on this timer.

        A coroutine runs in the caller's task (no extra task); ``timeout <= 0`` cancels at
        once and raises TimeoutError unless the awaitable is already done; None waits forever.
        """
        return _awaiting.wait_for(self, aw, timeout)

    def _wait_for_timeout(self, timeout: Seconds | None) -> float | None:
        """wait_for's ``timeout``, validated."""
        if timeout is None or isinstance(timeout, float):
            return timeout
        return seconds("timeout", timeout)

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
        from now; pass ``timer.time()`` to run at once). ``missed`` is ``"skip"``,
        ``"burst"`` or ``"delay"`` (see :mod:`aiowheel._periodic`).

        >>> beat = timer.every(1.0, send_heartbeat)
        >>> beat.cancel()
        """
        loop = self._running_loop()
        period = check_period("interval", interval)
        policy = check_missed(missed)
        if not callable(callback):
            raise TypeError(f"callback must be callable, got {type(callback).__name__}")
        first = self._first_deadline(loop, start, period)
        handle = PeriodicHandle(
            self, _Schedule(first, period, policy), callback, args, contextvars.copy_context()
        )
        self._file(handle, first)
        return handle

    def interval(
        self, period: Seconds, *, missed: Name = "skip", start: Seconds | None = None
    ) -> Interval:
        """An async iterator yielding each tick's scheduled time, at a fixed rate.

        >>> async for deadline in timer.interval(1.0):
        ...     await send_heartbeat()
        """
        loop = self._running_loop()
        every = check_period("period", period)
        policy = check_missed(missed)
        first = self._first_deadline(loop, start, every)
        return Interval(self, _Schedule(first, every, policy))

    def _first_deadline(
        self, loop: asyncio.AbstractEventLoop, start: Seconds | None, period: float
    ) -> float:
        """A schedule's first deadline: ``start``, validated, or one period from now."""
        if start is None:
            return loop.time() + period
        if not isinstance(start, float):
            start = seconds("start", start)
        self._tick_for(start)  # refuses NaN
        return start

    def watchdog(
        self, timeout: Seconds, on_expire: Callable[..., object], *args: object
    ) -> Watchdog:
        """Run ``on_expire(*args)`` (sync or async) once, if not fed within ``timeout`` s.

        >>> dog = timer.watchdog(3.0, connection.close)
        >>> dog.feed()   # on every message from the peer
        """
        self._running_loop()
        silence = check_period("timeout", timeout)
        if not callable(on_expire):
            raise TypeError(f"on_expire must be callable, got {type(on_expire).__name__}")
        dog = Watchdog(self, silence, on_expire, args, contextvars.copy_context())
        self._file(dog, dog._when)
        return dog

    # -- the delay queue and the reaper --------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The loop, after the same check every scheduling call makes."""
        loop = self._loop
        if _get_running_loop() is not loop or loop is None:
            loop = self._check_loop()
        return loop

    def _deadline_after(self, loop: asyncio.AbstractEventLoop, delay: Seconds) -> float:
        """``loop.time() + delay``, validated: TypeError for a non-number, ValueError for NaN."""
        when = loop.time() + seconds("delay", delay)
        if when != when:
            raise ValueError("deadline must not be NaN")
        return when

    def _unfile(self, entry: _Timed) -> None:
        """Take an entry out of the wheel if it is in it."""
        if entry._prev is not None:
            self._wheel.remove(entry)

    def _file(self, entry: _Timed, when: float) -> None:
        """Put an unlinked entry in the wheel for deadline ``when`` (for the other modules).

        The caller has checked the loop; raises like :meth:`call_at` on a bad ``when`` or when
        ``max_pending`` is reached, leaving the timer unchanged.
        """
        tick = self._tick_for(when)
        wheel = self._wheel
        if wheel._count >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        entry._when = when
        if wheel.insert(entry, tick) < self._armed:
            self._arm()

    def _arm(self) -> None:
        """Make the single loop handle fire at the wheel's earliest bucket expiration."""
        loop = self._loop
        assert loop is not None
        expiration = self._wheel.next_expiration()
        handle = self._wake_handle
        if handle is not None:
            handle.cancel()
            self._wake_handle = None
        if expiration is None:
            self._armed = NEVER
            return
        self._armed = expiration
        when = self._epoch + expiration * self._tick
        wake_at = self._wake_at
        if wake_at is None:
            self._wake_handle = loop.call_at(when, self._wake)
        elif self._driven:
            self._wake_handle = wake_at(when, self._drive)
        else:
            self._wake_handle = wake_at(when, self._wake)

    def _wake(self) -> None:
        self._wake_handle = None
        self._armed = _REAPER_AWAKE
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    @staticmethod
    def _run_ready(batch: list[_Timed]) -> None:
        """Run a batch of due callbacks, in deadline order, as one loop callback."""
        for index, handle in enumerate(batch):
            try:
                handle._run()
            except BaseException:
                # SystemExit or KeyboardInterrupt leaves the loop, as it would from a loop
                # callback; the rest of the batch runs on the loop's next iteration.
                rest = batch[index + 1 :]
                if rest:
                    asyncio.get_running_loop().call_soon(Timer._run_ready, rest)
                raise

    def _loop_create_task(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> asyncio.Task[Any]:
        loop = self._bound_loop
        assert loop is not None
        return loop.create_task(coro, context=context)

    def _on_reaper_done(self, reaper: asyncio.Task[None]) -> None:
        # A done callback, not an except clause in _reap: a task cancelled before its first
        # step never runs any of its code.
        if self._closed:
            return
        if reaper.cancelled():
            cause = "its reaper task was cancelled"
        else:
            exc = reaper.exception()
            cause = f"its reaper task failed: {exc!r}"
            reaper.get_loop().call_exception_handler(
                {"message": f"aiowheel Timer closed: {cause}", "exception": exc, "task": reaper}
            )
        self._shutdown(TimerClosedError(f"timer closed: {cause}"), f" ({cause})")

    def _reaper_waiter(self) -> asyncio.Future[None]:
        """The future the reaper task awaits next: resolved when the earliest bucket is due."""
        loop = self._bound_loop
        assert loop is not None
        if self._armed == _REAPER_AWAKE or self._wake_handle is None:
            self._arm()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        return waiter

    def _reap_due(self) -> None:
        """The reaper task woke: advance the wheel to now and dispatch every due entry."""
        self._advance()
        if self._ready:
            self._dispatch_ready(inline=False)

    def _drive(self) -> None:
        """Loop mode's reaper: the wake-up handle's own callback (see aiowheel._loop).

        It advances the wheel, re-arms, then runs the due callbacks right here, inside this
        loop callback: they run in the loop iteration that found them due, as the loop's own
        timer handles do, with no task and no extra loop handle in between.
        """
        self._wake_handle = None
        if self._closed:
            return
        try:
            self._advance()
        finally:
            self._arm()
        if self._ready:
            self._dispatch_ready(inline=True)

    def _dispatch_ready(self, inline: bool) -> None:
        """Hand the due callbacks collected in ``_ready`` to the loop.

        Normally as one batch (one loop callback, or run inline by loop mode's reaper). In
        debug mode each gets a loop callback of its own, so that asyncio's debug machinery
        (the slow-callback report, the current handle) sees and names each one.
        """
        batch = self._ready
        self._ready = []
        loop = self._bound_loop
        assert loop is not None
        if self._debug:
            for handle in batch:
                loop.call_soon(_debug.DueCallback(handle))
        elif inline:
            Timer._run_ready(batch)
        else:
            loop.call_soon(self._run_ready, batch)

    def _advance(self) -> None:
        """Advance the wheel to now: fire every due entry, queueing callbacks in ``_ready``."""
        loop = self._bound_loop
        assert loop is not None
        wheel = self._wheel
        self._waiter = None
        self._armed = _REAPER_AWAKE
        self._wakeups += 1
        self._debug = loop.get_debug()
        now = loop.time()
        # The epsilon absorbs float error at tick boundaries (a reading of 10.9999999 ticks
        # on a clock that says "tick 11 has begun"); without it uvloop, whose clock moves in
        # whole milliseconds, would spin for a millisecond. Entries are still checked against
        # their exact deadline below.
        now_tick = floor((now - self._epoch) * self._inverse_tick + _TICK_EPSILON)
        if now_tick < wheel.elapsed:
            return  # woken early, before the last tick we processed ended
        due = wheel.advance(now_tick)
        fired = 0
        lateness = self._max_lateness
        for entry in due:
            assert isinstance(entry, _Timed)
            when = entry._when
            if when > now:
                # Not due after all: its deadline was pushed back without touching the wheel
                # (Timeout.reschedule, Watchdog.feed: the lazy re-file), or float rounding put
                # it a hair early. File it again from the exact deadline.
                tick = self._tick_for(when)
                wheel.insert(entry, tick if tick > now_tick else now_tick + 1)
                continue
            fired += 1
            if now - when > lateness:
                lateness = now - when
            try:
                entry._fire(self)
            except Exception as exc:  # a bug must cost one timer, not the reaper
                loop.call_exception_handler(
                    {"message": f"aiowheel: error firing {entry!r}", "exception": exc}
                )
        self._fired += fired
        self._max_lateness = lateness


def _check_not_coroutine_function(callback: Callable[..., object]) -> None:
    # asyncio makes this check in debug mode only, for its cost; so do we.
    if inspect.iscoroutinefunction(callback):
        raise TypeError("coroutine functions cannot be used with call_at(); use schedule_at()")


def _hand_over(
    method: Callable[..., object],
    time: object,
    callback: object,
    args: tuple[object, ...],
    context: contextvars.Context | None,
) -> object:
    """``method(time, callback, *args, context=context)``, with as few arguments as will do:
    a call without keywords, or without a tuple to unpack, is the cheaper one (loop mode)."""
    if context is None:
        if not args:
            return method(time, callback)
        return method(time, callback, *args)
    return method(time, callback, *args, context=context)


def _not_in_loop_mode(*args: object, **kwargs: object) -> object:
    raise RuntimeError("this Timer is not an event loop's own (see aiowheel.new_event_loop)")


def _no_debug_checks(callback: object, method: str) -> None:
    pass
