"""Heartbeats: fixed-rate periodic callbacks, an interval iterator, and a watchdog.

Fixed rate, no drift. The k-th deadline of a schedule is ``start + k * interval``, computed
from the start every time, never by adding the interval to "now" (which would carry every
run's lateness into all later ones): after 10,000 ticks the schedule is where it should be.

Missed ticks. When the loop was blocked past one or more deadlines, the policy decides what
happens (the three of tokio's ``MissedTickBehavior``):

- ``"burst"``: run every missed tick, back to back, then go on with the original schedule;
- ``"delay"``: run once now and restart the schedule from now (``start = now``);
- ``"skip"`` (default): run once now and continue at the next multiple of the interval that
  is still in the future; the skipped ticks are counted.

A periodic handle is one wheel entry that re-files itself after each run; cancelling it is
O(1). A watchdog is one wheel entry whose deadline :meth:`Watchdog.feed` pushes back, which is
the wheel's lazy re-file: O(1), no heap or bucket work.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from . import _awaiting
from ._entry import Owner, Timed

__all__ = ["Interval", "PeriodicHandle", "Watchdog"]


class Schedule:
    """The arithmetic of a fixed-rate schedule: deadline k is ``start + k * interval``."""

    __slots__ = ("interval", "k", "missed", "skipped", "start")

    def __init__(self, start: float, interval: float, missed: str) -> None:
        self.start = start
        self.interval = interval
        self.missed = missed
        self.k = 0
        self.skipped = 0

    def deadline(self) -> float:
        """The current (k-th) deadline."""
        return self.start + self.k * self.interval

    def advance(self, now: float) -> None:
        """The current deadline has been served at ``now``: move k to the next one."""
        self.k += 1
        next_deadline = self.start + self.k * self.interval
        if next_deadline > now or self.missed == "burst":
            return
        if self.missed == "delay":
            self.start = now
            self.k = 1
            return
        # skip: the first multiple strictly after now.
        behind = math.floor((now - self.start) / self.interval) + 1
        while self.start + behind * self.interval <= now:
            behind += 1  # float rounding in the division
        self.skipped += behind - self.k
        self.k = behind


class _Runner(Timed):
    """A wheel entry that runs a user callback, sync or async, when it fires."""

    __slots__ = ("_args", "_callback", "_context", "_is_async", "_owner", "_task")

    _is_async: bool
    _callback: Callable[..., Any]
    _args: tuple[object, ...]
    _context: contextvars.Context
    _task: asyncio.Task[Any] | None
    _owner: Owner

    def __init__(
        self,
        owner: Owner,
        when: float,
        callback: Callable[..., Any],
        args: tuple[object, ...],
        context: contextvars.Context,
    ) -> None:
        super().__init__()
        self._when = when
        self._owner = owner
        self._callback = callback
        self._args = args
        self._context = context
        self._task = None
        # Asked once: inspect's check costs more than the rest of a run.
        self._is_async = inspect.iscoroutinefunction(callback)

    def _active(self) -> bool:
        """Whether a queued sync run should still happen."""
        raise NotImplementedError

    def _running(self) -> bool:
        task = self._task
        return task is not None and not task.done()

    def _start_run(self, owner: Owner) -> None:
        # Each run gets its own copy of the captured context, as separate loop callbacks do.
        # A sync callback joins the timer's batch of due callbacks (one loop callback runs
        # them all); an async one starts as a task at once.
        if self._is_async:
            context = self._context.copy()
            try:
                coro = context.run(self._callback, *self._args)
            except Exception as exc:  # e.g. wrong arguments: a failed run, not a dead timer
                self._report(asyncio.get_running_loop(), exc)
                return
            task = owner._create_task(coro, context)
            task.add_done_callback(self._on_run_done)
            self._task = task
        else:
            owner._queue(self)

    def _run_due(self) -> None:
        if not self._active():
            return
        context = self._context.copy()
        try:
            result = context.run(self._callback, *self._args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(asyncio.get_running_loop(), exc)
            return
        if asyncio.iscoroutine(result):  # an async callable that is not a coroutine function
            task = asyncio.get_running_loop().create_task(result, context=context)
            task.add_done_callback(self._on_run_done)
            self._task = task

    def _on_run_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled():
            exc = task.exception()
            if exc is not None:
                self._report(task.get_loop(), exc)

    def _report(self, loop: asyncio.AbstractEventLoop, exc: BaseException) -> None:
        loop.call_exception_handler(
            {
                "message": f"Exception in {type(self).__name__} callback {self._callback!r}",
                "exception": exc,
                "handle": self,
            }
        )

    def _cancel_run(self) -> None:
        task = self._task
        if task is not None and not task.done():
            task.cancel()


class PeriodicHandle(_Runner):
    """A callback run at a fixed rate by :meth:`Timer.every`.

    The callback may be a plain function or an async one. An async run that is still going
    when the next tick comes due is left alone and that tick is skipped (counted in
    :attr:`skipped`), so runs never overlap. A callback that raises is reported to the loop's
    exception handler and the schedule goes on.
    """

    __slots__ = ("_cancelled", "_count", "_schedule")

    _schedule: Schedule
    _count: int
    _cancelled: bool

    def __init__(
        self,
        owner: Owner,
        schedule: Schedule,
        callback: Callable[..., Any],
        args: tuple[object, ...],
        context: contextvars.Context,
    ) -> None:
        super().__init__(owner, schedule.deadline(), callback, args, context)
        self._schedule = schedule
        self._count = 0
        self._cancelled = False
        owner._file(self, self._when)  # filed as it is made, at its first beat

    @property
    def count(self) -> int:
        """How many runs have been started."""
        return self._count

    @property
    def skipped(self) -> int:
        """How many ticks were not run (missed under ``"skip"``, or overlapping a run)."""
        return self._schedule.skipped

    def next_deadline(self) -> float | None:
        """The loop time of the next run, or None once cancelled."""
        return None if self._cancelled else self._when

    def cancel(self) -> bool:
        """Stop future runs (and cancel an async run in progress). True if this call did it."""
        if self._cancelled:
            return False
        self._cancelled = True
        self._owner._unfile(self)
        self._cancel_run()
        return True

    def cancelled(self) -> bool:
        """True once cancelled (or its timer closed)."""
        return self._cancelled

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else f"next={self._when!r}"
        return f"<PeriodicHandle every={self._schedule.interval!r} {state} count={self._count}>"

    def _active(self) -> bool:
        return not self._cancelled

    def _describe(self) -> tuple[str, object, object]:
        return ("heartbeat", self._callback, None)

    def _fire(self, owner: Owner) -> None:
        if self._running():
            self._schedule.skipped += 1  # the previous async run is still going
        else:
            self._count += 1
            self._start_run(owner)
        self._schedule.advance(owner._now())
        owner._file(self, self._schedule.deadline())

    def _abandon(self, exc: BaseException | None) -> None:
        self._cancelled = True
        self._cancel_run()


class Watchdog(_Runner):
    """Runs ``on_expire`` once if :meth:`feed` is not called within ``timeout`` seconds.

    The "peer is dead" half of heartbeats: feed it on every message from the peer.
    """

    __slots__ = ("_state", "_timeout")

    _timeout: float
    _state: str

    def __init__(
        self,
        owner: Owner,
        timeout: float,
        callback: Callable[..., Any],
        args: tuple[object, ...],
        context: contextvars.Context,
    ) -> None:
        super().__init__(owner, owner._loop_time() + timeout, callback, args, context)
        self._timeout = timeout
        self._state = "armed"
        owner._file(self, self._when)  # filed as it is made

    @property
    def timeout(self) -> float:
        """Seconds of silence after which it expires."""
        return self._timeout

    def when(self) -> float | None:
        """The loop time at which it expires unless fed, or None once expired or cancelled."""
        return self._when if self._state == "armed" else None

    def feed(self) -> bool:
        """Push the deadline to now + timeout. O(1): no heap or bucket work.

        Returns False (and does nothing) if the watchdog already expired or was cancelled.
        """
        if self._prev is None:
            return False
        # Only the exact deadline moves (the driver's lazy push-back): the entry keeps its
        # bucket and is re-filed from `_when` when that bucket comes due. This runs on every
        # message from the peer. (A closed timer has unlinked every entry: answered above.)
        owner = self._owner
        if not owner._push_back_by(self, self._timeout):
            owner._running_loop()  # raises for another thread (or loop)
            owner._move(self, owner._now() + self._timeout)
        return True

    def cancel(self) -> bool:
        """Disarm it: True if this call stopped ``on_expire`` from running, or cancelled an
        async ``on_expire`` still running; False if it had run (or was already cancelled)."""
        if self._state == "cancelled":
            return False
        if self._state == "expired" and not self._running():
            return False
        # "armed", "firing" (a sync on_expire queued in the timer's batch), or a running task.
        self._state = "cancelled"
        self._owner._unfile(self)
        self._cancel_run()
        return True

    def expired(self) -> bool:
        """True once it has expired (its deadline passed unfed)."""
        return self._state in ("firing", "expired")

    def __repr__(self) -> str:
        return f"<Watchdog timeout={self._timeout!r} {self._state}>"

    def _active(self) -> bool:
        return self._state == "expired"

    def _run_due(self) -> None:
        if self._state != "firing":
            return  # cancelled after it came due
        self._state = "expired"
        super()._run_due()

    def _describe(self) -> tuple[str, object, object]:
        return ("watchdog", self._callback, None)

    def _fire(self, owner: Owner) -> None:
        # A sync on_expire waits in the timer's batch ("firing": cancel() can still stop it,
        # as TimerHandle.cancel() can); an async one starts as a task at once.
        self._state = "expired" if self._is_async else "firing"
        self._start_run(owner)

    def _abandon(self, exc: BaseException | None) -> None:
        self._state = "cancelled"


class Interval(AsyncIterator[float]):
    """``async for deadline in timer.interval(period): ...``: yields each tick's scheduled time.

    Sleeping between ticks is the only time it holds a timer, so leaving the loop (``break``)
    or cancelling the consuming task leaves nothing pending.
    """

    __slots__ = ("_owner", "_schedule")

    def __init__(self, owner: Owner, schedule: Schedule) -> None:
        self._owner = owner
        self._schedule = schedule

    @property
    def skipped(self) -> int:
        """Ticks skipped under the ``"skip"`` policy."""
        return self._schedule.skipped

    def __aiter__(self) -> Interval:
        return self

    def __anext__(self) -> Coroutine[Any, Any, float]:
        schedule = self._schedule
        return _awaiting.next_tick(self._owner, schedule.deadline(), schedule.advance)
