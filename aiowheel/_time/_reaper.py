"""The one wake-up and the reaper it wakes (Kafka's DelayQueue + ExpiredOperationReaper, on the
loop instead of a thread).

Why a room of its own. The store keeps one heap item per non-empty bucket (the delay queue);
what sleeps on it is here: one wake-up handle, filed by the clock (:mod:`aiowheel._time._clock`) at
the earliest bucket's expiration, so there is at most one loop handle per driver whatever the number
of pending timers, and while nothing is due nothing wakes (no periodic ticks). The driver
(:mod:`aiowheel._time._driver`) files and runs; it asks this room to :meth:`Reaper.arm` when a
filing queued a bucket earlier than :attr:`Reaper.armed`, and this room calls the driver's pass back
when the wake-up fires.

What the wake-up wakes. A Timer of the user's has a reaper *task*, a plain-Python loop
(:func:`aiowheel._time._awaiting.reap`) that awaits a future the wake-up resolves and then runs the
pass; if the task is cancelled from outside (``asyncio.run`` does this at exit) or dies of a
bug, :meth:`Reaper.task_done` tells the driver to close with the cause. A loop-mode loop's own
driver has no task: the wake-up's callback is the pass itself (:meth:`Reaper._drive`), run in
the loop iteration that found the timers due, as the loop runs its own timer handles (a task
would show in ``all_tasks()``, be cancelled by ``asyncio.run`` before the program's cleanup,
and need a running loop; :mod:`aiowheel._loopmode._loop`).

While a pass is about to run or runs, :attr:`Reaper.armed` is :data:`AWAKE`: filings need not
re-arm, since the pass re-reads the earliest expiration before it sleeps again.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from math import inf
from typing import Final

from .._common._errors import TimerClosedError
from . import _awaiting
from ._clock import Clock, WakeHandle
from ._grid import Grid
from ._store import Store
from ._wheel import NEVER

__all__ = ["AWAKE", "Reaper"]

AWAKE: Final = -(1 << 62)
"""``armed`` while a pass is due or running: below every expiration (they are never below the
wheel's start, 0), and a tagged int in the compiled build."""


class Reaper:
    """The wake-up of one driver and what it wakes (see the module docstring).

    ``advance()`` and ``dispatch(inline)`` are the driver's pass, in two halves (loop mode's
    pass re-arms between them); ``closed()``
    says whether the driver is closed; ``fail(exc, cause)`` closes it when its task ends.
    """

    __slots__ = (
        "_advance",
        "_clock",
        "_closed",
        "_dispatch",
        "_driven",
        "_fail",
        "_grid",
        "_handle",
        "_store",
        "_waiter",
        "armed",
        "exact_at",
        "task",
        "wake_tick",
        "wake_time",
    )

    def __init__(
        self,
        store: Store,
        grid: Grid,
        advance: Callable[[], None],
        dispatch: Callable[[bool], None],
        closed: Callable[[], bool],
        fail: Callable[[BaseException, str], object],
    ) -> None:
        self._store: Final = store
        self._grid: Final = grid
        self._advance: Final = advance
        self._dispatch: Final = dispatch
        self._closed: Final = closed
        self._fail: Final = fail
        self.armed = NEVER
        self.wake_tick = NEVER  # the expiration the last wake-up was filed for
        self.wake_time = inf  # and the time it was filed at
        # On an exact clock, the time of the armed wake-up (a filing before it re-arms, even
        # into a bucket already queued); -inf otherwise, and while a pass is due or runs.
        self.exact_at = -inf
        self.task: asyncio.Task[None] | None = None
        self._clock: Clock | None = None
        self._handle: WakeHandle | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._driven = False

    def start_task(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        """Wake a reaper task on ``loop``, started now in an empty context (nothing of
        whoever started the timer leaks in)."""
        self._clock = clock
        task = loop.create_task(
            _awaiting.reap(self._next_waiter, self._reap), context=contextvars.Context()
        )
        # A loop closed with timers pending must not print "Task was destroyed but it is
        # pending!" for the reaper: asyncio drops its own pending TimerHandles silently too.
        task._log_destroy_pending = False  # type: ignore[attr-defined]
        task.add_done_callback(self.task_done)
        self.task = task

    def drive(self, clock: Clock) -> None:
        """Loop mode: the wake-up's callback is the pass itself (no task)."""
        self._clock = clock
        self._driven = True

    def use_clock(self, clock: Clock) -> None:
        """File wake-ups with ``clock`` from now on."""
        self._clock = clock

    @property
    def driven(self) -> bool:
        """Whether this is a loop-mode loop's own reaper (no task)."""
        return self._driven

    @property
    def running(self) -> bool:
        """Whether a pass is due or running (filings need not re-arm)."""
        return self.armed == AWAKE

    def arm(self) -> None:
        """File the one wake-up at the store's earliest bucket expiration (when that tick
        begins on the grid), or none if the store is empty. On an exact clock (the virtual
        one: its time is where its wake-ups are) at the earliest exact deadline in the
        buckets of that expiration if it is earlier: each timer then runs at its own
        deadline, not at its bucket's tick (the pass fires what is due then and files the
        rest again, one tick on, to be woken for in turn)."""
        store = self._store
        expiration = store.next_expiration()
        handle = self._handle
        if handle is not None:
            handle.cancel()
            self._handle = None
        if expiration is None:
            self._set_armed(NEVER, -inf)
            return
        clock = self._clock
        assert clock is not None
        when = self._grid.time_of(expiration)
        exact_at = -inf
        if clock.exact:
            earliest = store.earliest(expiration)
            if expiration <= store.elapsed:
                # The due bucket (deadlines filed since a pass ran the bucket before its
                # tick's time) holds deadlines no later than the tick after it, where that
                # pass filed what it left: wake for both, at the earliest of them.
                expiration += 1
                later = store.earliest(expiration)
                if later < earliest:
                    earliest = later
            if earliest < when:
                when = earliest
            exact_at = when
        self._set_armed(expiration, exact_at)
        self.wake_tick = expiration
        self.wake_time = when
        self._handle = clock.wake_at(when, self._drive if self._driven else self._wake)

    def wake_handle(self) -> WakeHandle | None:
        """The armed wake-up's handle; None when nothing is armed or a pass is due or runs."""
        return None if self.armed == AWAKE else self._handle

    def awake(self) -> None:
        """A pass begins: no re-arming until it ends."""
        self._waiter = None
        self._set_armed(AWAKE, -inf)

    def _set_armed(self, expiration: int, exact_at: float) -> None:
        # Told to the store too: a native core that queues an earlier bucket (or, on an
        # exact clock, files a deadline before exact_at) calls the driver's arm.
        self.armed = expiration
        self.exact_at = exact_at
        self._store.set_armed(expiration, exact_at)

    def _wake(self) -> None:
        """The wake-up of a reaper task: resolve what it awaits."""
        self._handle = None
        self._set_armed(AWAKE, -inf)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _next_waiter(self) -> asyncio.Future[None]:
        """The future the reaper task awaits next: resolved when the earliest bucket is due."""
        task = self.task
        assert task is not None
        if self.armed == AWAKE or self._handle is None:
            self.arm()
        waiter: asyncio.Future[None] = task.get_loop().create_future()
        self._waiter = waiter
        return waiter

    def _reap(self) -> None:
        """The reaper task woke: run the pass; its callbacks run as one loop callback."""
        self._advance()
        self._dispatch(False)

    def _drive(self) -> None:
        """Loop mode's pass: the wake-up's own callback. It advances, re-arms, then runs the
        due callbacks right here, with no task and no extra loop handle in between."""
        self._handle = None
        if self._closed():
            return
        try:
            self._advance()
        finally:
            self.arm()
        self._dispatch(True)

    def task_done(self, task: asyncio.Task[None]) -> None:
        """The reaper task ended: a done callback, not an except clause in the task (a task
        cancelled before its first step never runs any of its code)."""
        if self._closed():
            return
        if task.cancelled():
            # Most often asyncio.run() (or a test runner) ending its loop: it cancels every
            # task left, this one too. Say so, and what to do about a Timer kept past it.
            cause = (
                "its reaper task was cancelled: its event loop ended or cancelled it; a Timer "
                "serves one loop, so make one per loop (async with Timer(), or "
                "aiowheel.get_timer())"
            )
        else:
            exc = task.exception()
            cause = f"its reaper task failed: {exc!r}"
            task.get_loop().call_exception_handler(
                {"message": f"aiowheel Timer closed: {cause}", "exception": exc, "task": task}
            )
        self._fail(TimerClosedError(f"timer closed: {cause}"), f" ({cause})")

    def stop(self) -> None:
        """The driver closed: cancel the wake-up and the task (unless it is the caller), and
        let go of the loop (a closed timer kept in a weak registry must not keep it alive)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        task = self.task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.task = None
        self._waiter = None
        self._clock = None
