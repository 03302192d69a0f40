"""Driver: the one owner of a wheel on a loop. It files, moves and unfiles timers, and runs
what is due.

Why a class of its own. tokio's time driver keeps three things apart: the ``Handle`` users
hold, the ``Driver`` that owns the wheel and parks until the next expiration, and the ``entry``
with one timer's state; Kafka's ``SystemTimer`` *has* its ``TimingWheel`` and its reaper. Here
the entries are :mod:`aiowheel._time._handles`, :mod:`aiowheel._time._timeout` and
:mod:`aiowheel._time._periodic` (sans-IO wheel: :mod:`aiowheel._time._wheel`), the facade users hold
is :class:`aiowheel.Timer`, which *has* a driver, and this is the driver. Its one job is the wheel:
it alone inserts, moves and removes entries (through one :class:`~aiowheel._time._store.Store`, over
one wheel or two), arms the one wake-up, and dispatches what came due. What it asks of others,
each a room with a small API: the loop check and binding (:mod:`aiowheel._time._binding`), the
thread checks (:mod:`aiowheel._time._threads`), the clock (:mod:`aiowheel._time._clock`), the batch
and backlog (:mod:`aiowheel._time._dispatch`); introspection reads it through
:mod:`aiowheel._time._view`. Entries reach it only through :class:`aiowheel._time._entry.Owner`, the
protected API it implements.

One choke point. Every timer enters the store in :meth:`Driver._insert` (Kafka's
``addTimerTaskEntry``, tokio's ``reregister``): "insert, then wake earlier if that bucket is now
the first" is written there once; a callback handle the native core holds enters in
:meth:`Store.file_call`, whose "earlier bucket" comes back as a call of :meth:`_arm`.

Ticks. A deadline ``when`` (loop clock, seconds) becomes tick ``ceil((when - epoch) / tick)``,
rounded **up** (less the float slack of :mod:`aiowheel._time._grid`), so a bucket is never processed
before every deadline in it can have passed. On an exact clock (the virtual one) the wake-up is
at the earliest exact deadline of the bucket, before the tick's time: the pass takes the bucket,
fires what is due and files the rest one tick on, to be woken for at its own deadline in turn
(:meth:`aiowheel._time._reaper.Reaper.arm`). Rounding errors cannot make a timer early either:
before an entry fires, the driver compares its exact ``when`` with the clock and re-files it from
that deadline if the clock has not reached it (asyncio and uvloop may run a loop timer a little
early; this guard is where that ends). The same check makes pushing a deadline later free
(:meth:`_push_back`): only ``when`` is rewritten, and the entry is re-filed when its old bucket
comes due.

The wake-up. The store keeps one heap item per non-empty bucket (the delay queue); the one
wake-up filed at the earliest of them, and the reaper it wakes (a task, or for a loop-mode
loop's own driver the wake-up's callback itself) are :mod:`aiowheel._time._reaper`'s. A filing that
queues a bucket earlier than the armed one re-arms (:meth:`_arm`); the reaper runs the pass,
:meth:`_advance` then :meth:`_dispatch_ready`. If the reaper task dies or is cancelled from
outside, the driver closes (:meth:`shutdown`): pending sleepers and scheduled futures fail with
:class:`TimerClosedError` naming the cause, pending callbacks are marked cancelled, and any
later use raises RuntimeError. It never hangs silently.

Compiled build. Compiled with mypyc; its coroutines are not (:mod:`aiowheel._time._awaiting`): the
reaper task is a plain-Python loop that calls the compiled pass, so the per-timer work stays in
C and nothing compiled suspends.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable, Coroutine
from math import ceil
from typing import Any, Final

from .._common._errors import PendingLimitError
from . import _debug, _dispatch
from ._entry import Timed
from ._grid import SHRINK
from ._handles import EMPTY_CONTEXT, Call, Handle, TimerHandle, driven_by_hand
from ._setup import NO_LIMIT, Setup
from ._threads import FOREIGN_CANCEL, FREE_THREADED, get_ident, running_loop

__all__ = ["NO_LIMIT", "Driver"]

# Module constants, so that the compiled build reads them from a C static: a builtin or module
# attribute named in a function is looked up in a dict on every call.
_copy_context: Final = contextvars.copy_context


class Driver(Setup):
    """The wheel on one event loop: filing, the wake-up, the reaper and dispatch (its state
    and its set-up on binding: :class:`aiowheel._time._setup.Setup`)."""

    __slots__ = ()

    # -- the read side (aiowheel._time._view reads these; nothing else)
    # ---------------------------------

    def pending(self) -> int:
        """The exact number of pending timers."""
        return len(self._store)

    def counters(self) -> tuple[int, int, int, int, float, int]:
        """pending, fired, cancelled, wake-ups, max lateness, queued buckets."""
        store = self._store
        cancelled = store.removed + self._cancelled_on_close
        queued = store.queued
        return (len(store), self._fired, cancelled, self._wakeups, self._max_lateness, queued)

    def pending_timers(self) -> list[Any]:
        """Every pending timer: the wheel's entries, the core's handles, then those due and
        waiting in the backlog (``max_batch``) to run."""
        return self._store.entries() + self._store.handles() + self._due.waiting()

    def origin_of(self, timer: object) -> tuple[str, object] | None:
        """Where ``timer`` was filed from, if origin tracking noted it."""
        origins = self._origins
        return None if origins is None else origins.get(timer)

    def now(self) -> float:
        """The clock, as the driver reads it (0.0 before binding)."""
        return self._read() if self.binding.bound is not None else 0.0

    @property
    def debug(self) -> bool:
        """Whether the driver runs in its loop's debug mode."""
        return self._debug

    def listen(self, listener: Callable[[float, int], None] | None) -> None:
        """Call ``listener(late, count)`` for each pass that fires timers (None: stop)."""
        self.lag.listener = listener

    # -- the loop check and the clock (Owner) ----------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        return self.binding.running_loop()

    def _loop_here(self) -> asyncio.AbstractEventLoop | None:
        return self.binding.loop_here()

    def _now(self) -> float:
        return self._read()

    def due_by(self, when: float) -> bool:
        """Whether a wheel timer may run by ``when``'s tick (a near timer then joins them)."""
        return self._tick_for(when) >= self._reaper.armed

    def _loop_time(self) -> float:
        return self.binding.loop_time()

    # -- filing: every timer enters the store through _insert ------------------------------------

    def _tick_for(self, when: float) -> int:
        """The tick of deadline ``when`` (aiowheel._time._grid); ValueError for NaN."""
        return self._grid.tick_for(when, self._store.elapsed)

    def _admit(self, when: float) -> int:
        """The tick of ``when``, if the store may take one more timer: ValueError for NaN,
        PendingLimitError at ``max_pending``; raised before anything changes. Paid by every
        timer, so the grid's rounding up is inlined (its except branches cost nothing unless
        taken)."""
        grid = self._grid
        try:
            tick = ceil((when - grid.epoch) * grid.inverse * SHRINK - grid.slack)
        except (OverflowError, ValueError):
            tick = self._tick_for(when)
        if self._limit != NO_LIMIT and len(self._store) >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        return tick

    def _insert(self, entry: Timed, tick: int) -> None:
        """The one place a timer enters the store: stamp it (the tie order), insert it, and if
        its bucket is now the earliest, move the wake-up earlier. With origin tracking on, note
        where it came from."""
        store = self._store
        origins = self._origins
        if origins is not None:
            origins.note(entry, store.count, self.binding.bound)
        reaper = self._reaper
        entry._seq = store.stamp()
        if store.insert(entry, tick) < reaper.armed or entry._when < reaper.exact_at:
            self._arm()

    def _file(self, entry: Timed, when: float) -> None:
        tick = self._admit(when)
        entry._when = when
        self._insert(entry, tick)

    def _move(self, entry: Timed, when: float) -> None:
        if entry._prev is None:
            self._file(entry, when)
        elif when >= entry._when:
            entry._when = when  # lazy: re-filed from `_when` when its bucket comes due
        else:
            tick = self._tick_for(when)
            entry._when = when
            reaper = self._reaper
            if self._store.move(entry, tick) < reaper.armed or when < reaper.exact_at:
                self._arm()

    def _push_back(self, entry: Timed, when: float) -> bool:
        # A thread check, a clock read, two comparisons, one store (closed: always False).
        if (
            entry._prev is not None
            and when >= entry._when
            and get_ident() == self._loop_thread.ident
            and when > self._read()
        ):
            entry._when = when
            return True
        return False

    def _push_back_by(self, entry: Timed, delay: float) -> bool:
        # A positive delay from now is always ahead of the clock: the clock is read once.
        if entry._prev is not None and get_ident() == self._loop_thread.ident:
            when = self._read() + delay
            if when >= entry._when:
                entry._when = when
                return True
        return False

    def _arm_at(self, entry: Timed, when: float, loop: asyncio.AbstractEventLoop) -> bool:
        if loop is not self.binding.loop:
            self.binding.check_loop()  # binds, or raises (another loop, closed)
        if when <= self._read():
            return True
        self._file(entry, when)
        return False

    def _set_deadline(self, entry: Timed, when: float | None) -> asyncio.AbstractEventLoop | None:
        loop = self.binding.running_loop()
        if when is None:
            self._unfile(entry)
            return None
        if when <= self._read():
            self._unfile(entry)
            return loop
        self._move(entry, when)  # NaN is refused here, before anything changes
        return None

    def _guard(self, task: object, timeout: object) -> None:
        guards = self.guards
        if guards.active:
            guards.note(task, timeout)

    def start_guards(self) -> None:
        """Keep :attr:`guards` from now on (the first read of a task's deadline on this
        driver's loop): the timeouts pending now, then each as it is filed (the native core
        told to note asyncio's)."""
        guards = self.guards
        if not guards.active:
            guards.start(self.pending_timers())
            self._store.note_guards(guards.note_timeout)

    def _unfile(self, entry: Timed) -> bool:
        """Take ``entry`` out of the store if it is in it; True if it was. Like asyncio's, a
        ``cancel()`` is not thread-safe: checked in debug mode, and always on a free-threaded
        build, where another thread's raises before anything changes. Checked before the entry
        is looked at: one the loop's pass is taking out at this moment must not read as
        already out to another thread, whose cancel would then race the run."""
        if (self._debug or FREE_THREADED) and get_ident() != self._loop_thread.ident:
            # The take-over and the removal, as one (Binding.foreign_call).
            return self.binding.foreign_call(
                FOREIGN_CANCEL, lambda: entry._prev is not None and self._store.remove(entry)
            )
        return entry._prev is not None and self._store.remove(entry)

    def _claim_for_cancel(self) -> None:
        """The native core's thread check of a cancel() from another thread."""
        self.binding.foreign_call(FOREIGN_CANCEL, _allowed)

    def _check_cancel_of_due(self) -> None:
        if FREE_THREADED and get_ident() != self._loop_thread.ident:
            self.binding.foreign_call(FOREIGN_CANCEL, _allowed)

    def call(
        self,
        time: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
        where: str,
        later: bool,
    ) -> Handle:
        """File ``callback(*args)`` at ``time``, or ``time`` seconds from now (``later``);
        checked by the caller but for debug mode's check (named by ``where``)."""
        when = self._read() + time if later else time
        if self._debug:
            _debug.check_not_coroutine_function(callback, where)
        if self._limit != NO_LIMIT:
            self._admit(when)  # NaN, then the limit, against every pending timer
        filed: Any = self._store.file_call(when, callback, args, context)
        if filed is NotImplemented:  # no core, or beyond its grid: the wheel holds it
            return self._call_in_wheel(when, callback, args, context)
        handle: Handle = filed
        origins = self._origins
        if origins is not None:
            origins.note(handle, self._store.count, self.binding.bound)
        return handle

    def _call_in_wheel(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> Handle:
        tick = self._admit(when)
        if context is None:
            context = _copy_context()
            if not context:
                context = EMPTY_CONTEXT
        handle = TimerHandle(when, callback, args, context, self)
        call = handle._call  # the wheel's entry (aiowheel._time._handles: the handle is asyncio's)
        assert call is not None
        self._insert(call, tick)
        return handle

    # -- the wake-up (aiowheel._time._reaper) and the pass it runs
    # ---------------------------------------

    def wake_up(self) -> object | None:
        """The armed wake-up's handle (where the clock filed it: loop mode's base heap, the
        virtual clock...); None when nothing is armed or a pass is due or runs."""
        return self._reaper.wake_handle()

    def rearm(self) -> None:
        """File the wake-up again: loop mode's ``loop._scheduled`` found it taken off the
        base loop's heap, or cancelled, by code that was not the wheel's
        (aiowheel._loopmode._scheduled)."""
        self._reaper.arm()

    def _arm(self) -> None:
        """File the one wake-up at the store's earliest bucket expiration (also the native
        core's call when it queues a bucket earlier than the armed wake-up)."""
        self._reaper.arm()

    # -- dispatch ---------------------------------------------------------------------------------

    def _queue(self, entry: Timed) -> None:
        self._due.queue(entry)

    def _create_task(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> asyncio.Task[Any]:
        loop = self.binding.bound
        assert loop is not None
        return loop.create_task(coro, context=context)

    def _dispatch_ready(self, inline: bool) -> None:
        """Hand this pass's due callbacks to the loop (aiowheel._time._dispatch)."""
        loop = self.binding.bound
        if loop is None:  # closed during the pass: what came due still runs
            loop = asyncio.get_running_loop()
        elif running_loop() is None:
            # Driven by hand (a test helper's or a drain loop's _run_once, with no loop
            # running): where the batch's errors and rests go (aiowheel._time._handles).
            driven_by_hand(loop)
        self._due.dispatch(loop, inline, self._debug, self._read)

    def _advance(self) -> None:
        """Advance to now: fire every due entry (callbacks queue in the dispatch), take the
        core's due handles, and record the lateness and the loop's lag."""
        loop = self.binding.bound
        assert loop is not None
        store = self._store
        self._reaper.awake()
        self._wakeups += 1
        debug = loop.get_debug()
        if debug != self._debug:
            self._debug = debug
            self._sync()
        now = self._read()
        grid = self._grid
        reaper = self._reaper
        now_tick = grid.reached(now, reaper.wake_tick, reaper.wake_time)
        if now_tick < store.elapsed:
            return  # woken early, before the last tick processed ended
        due = store.advance(now_tick)
        if len(due) > 1:
            _dispatch.in_deadline_order(due)
        fired = 0
        first_tick = 0
        lateness = self._max_lateness
        for entry in due:
            assert isinstance(entry, Timed)
            when = entry._when
            if when > now:  # not due: pushed back lazily (_push_back), or rounded a hair early
                tick = self._tick_for(when)
                store.insert(entry, tick if tick > now_tick else now_tick + 1)
                continue
            if not fired:
                first_tick = entry._tick
            fired += 1
            if now - when > lateness:
                lateness = grid.late(now, when, lateness)
            try:
                entry._fire(self)
            except Exception as exc:  # a bug must cost one timer, not the reaper
                loop.call_exception_handler(
                    {"message": f"aiowheel: error firing {entry!r}", "exception": exc}
                )
        native_batch, native_fired, native_first, lateness = store.take_handles(
            now_tick, now, grid.pass_floor, lateness
        )
        if native_fired:
            if not fired or native_first < first_tick:
                first_tick = native_first
            fired += native_fired
            self._due.take_handles(native_batch)
        self._fired += fired
        self._max_lateness = lateness
        if fired:  # the loop's lag, once per pass, weighted by what fired
            self.lag.record(grid.lag(now, first_tick), fired)
        grid.passed(now_tick)

    # -- closing ----------------------------------------------------------------------------------

    def shutdown(self, exc: BaseException | None, cause: str | None) -> list[Handle]:
        """Close: cancel the wake-up and the reaper, let go of the loop, and abandon every
        pending entry (failing it with ``exc``, or cancelling it); the unfired handles."""
        binding = self.binding
        if binding.closed:
            return []
        binding.close(cause)
        self._origins = None
        self._reaper.stop()
        self._read = time.monotonic
        unfired: list[Handle] = []
        for handle in self._store.close():  # out of the fast lane, drained
            handle._abandon(exc)
            unfired.append(handle)
        entries = self._store.drain()
        self._cancelled_on_close += len(unfired) + len(entries)
        for entry in entries:
            assert isinstance(entry, Timed)
            entry._abandon(exc)
            if isinstance(entry, Call):
                unfired.append(entry._handle)
        return unfired

    def refuse_closing_a_loops_own(self) -> None:
        """RuntimeError if this is a loop-mode loop's own driver and its loop is open: it holds
        the loop's own timers (``asyncio.sleep``'s among them), which closing would lose."""
        if self._reaper.driven and not self.binding.closed:
            raise RuntimeError(
                "this Timer is its event loop's own (loop mode: every call_at / call_later of "
                "the loop, asyncio.sleep's too, is on it): it closes with the loop "
                "(loop.close()); close a Timer of your own instead"
            )

    def close_for_waiting(self) -> tuple[list[Handle], asyncio.Task[None] | None]:
        """Close (as ``Timer.close``) and return the unfired handles with the reaper task
        that ``aclose`` then waits for (None: no task, or it is the caller)."""
        self.refuse_closing_a_loops_own()
        reaper = self._reaper.task
        unfired = self.shutdown(None, None)
        if reaper is asyncio.current_task():
            reaper = None
        return unfired, reaper


def _allowed() -> bool:
    """A foreign call with nothing to do under the take-over lock but be allowed."""
    return True
