"""How each kind of loop tells its virtual clock it is idle: the idle detectors.

The clock (:mod:`aiowheel._virtual._virtual`) jumps only when its loop is idle, and "idle" is a fact
read off the loop, not a count of quiet cycles (looptime's "42 no-op cycles"):

- **asyncio's selector loops** ask their selector to wait only when nothing is ready and no
  timer of their own is due; a wrapper around ``selector.select`` polls with a zero timeout
  first, and an empty answer is idleness (:class:`SelectorIdle`);
- **libuv loops and others** (uvloop, rloop, zuvloop) are closed to Python, so a probe callback
  re-queues itself with the loop's ``call_soon`` while a jump is wanted (:class:`ProbeIdle`).
  These loops poll their I/O between two batches of ready callbacks, so a probe that finds
  nothing queued behind it twice in a row, with no callback scheduled through the loop in
  between, has seen a whole poll find nothing. On uvloop "nothing queued" is read from its
  ready queue itself; on rloop and zuvloop, whose queues live in native code, from every
  ``call_soon`` / ``call_soon_threadsafe`` made through the loop (a task's step or a future's
  callback included): a callback a native transport queues without the loop's ``call_soon``
  is seen only when it schedules one.

Either way, an idle loop is not yet a jump: threads may hold the clock
(:mod:`aiowheel._virtual._jobs`), and then the detector looks again ``PARK_POLL`` seconds of real
time later.

Why a room of its own. Each detector is bound to how one kind of loop runs (a selector to wrap,
a ready queue to read, a probe to re-queue), not to what the clock does when it jumps. They
ask the clock through :class:`IdleClock` (where it would jump, jump, its jobs) and import
nothing of :mod:`aiowheel._virtual._virtual`, which makes them.
"""

from __future__ import annotations

import collections
import selectors
from collections.abc import Callable
from typing import Any, Final, Protocol

from .._time._clock import STATE_ATTRIBUTE
from ._jobs import PARK_POLL, Jobs

__all__ = ["IdleClock"]


class IdleClock(Protocol):
    """What an idle detector asks of the clock
    (:class:`aiowheel._virtual._virtual.VirtualClock`)."""

    _real_wait: float  # the real idle time a jump waits for (autojump as a number), or 0.0
    _jobs: Jobs  # the work its loop handed to threads

    def _goal(self, threads: bool = True) -> float | None:
        """Where the clock would jump if the loop were idle now; None: it would not."""

    def _jump(self) -> bool:
        """The loop is idle: jump; False if there is nothing to jump to."""


class Idle:
    """How one kind of loop tells the clock it is idle."""

    def want(self) -> None:
        """The clock has a reason to jump: make sure idleness will be noticed."""


class SelectorIdle(Idle):
    """asyncio's selector loops: the selector is asked to wait only when the loop is idle."""

    def __init__(self, clock: IdleClock, selector: selectors.BaseSelector) -> None:
        self._clock = clock
        self._select: Final = selector.select
        selector.select = self.select  # type: ignore[method-assign]

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """The selector's select: a zero-timeout poll first; if it finds nothing (idle), jump
        instead of waiting, unless nothing is worth a jump (then wait as asked)."""
        if timeout is not None and timeout <= 0:
            return self._select(timeout)
        events = self._select(0)
        if events:
            return events
        clock = self._clock
        if clock._goal(False) is None:
            return self._select(timeout)
        if clock._real_wait:
            events = self._select(clock._real_wait)
            if events:
                return events
        if not clock._jump():
            if clock._jobs.recheck:  # threads hold the clock: look again soon (one may park)
                timeout = PARK_POLL if timeout is None else min(timeout, PARK_POLL)
            return self._select(timeout)
        return events


class ProbeIdle(Idle):
    """Loops closed to Python (uvloop, rloop, zuvloop): a probe callback re-queued with the
    base loop's ``call_soon`` while a jump is wanted (see the module docstring)."""

    def __init__(
        self,
        clock: IdleClock,
        loop: Any,
        ready: collections.deque[Any] | None,
        requeue: Callable[[Callable[[], None]], object],
    ) -> None:
        self._clock = clock
        self._loop = loop
        self._ready_queue = ready
        self._call_soon: Final = requeue
        self._probe_queued = False
        self._quiet = False
        self._activity = 0  # callbacks scheduled through the loop (the wrappers below)
        self._seen = -1
        self._waiting = False
        self._rechecking = False  # a look again is filed (threads held the clock)

    def counted(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` (the loop's call_soon or call_soon_threadsafe) counting each call."""

        def call(callback: Any, *args: Any, context: Any = None) -> Any:
            self._activity += 1
            return method(callback, *args, context=context)

        call.__doc__ = method.__doc__
        return call

    def want(self) -> None:
        """Queue the probe unless it is queued (or a real-time wait is under way)."""
        if not self._probe_queued and not self._waiting:
            self._probe_queued = True
            self._quiet = False
            self._call_soon(self._probe)

    def _probe(self) -> None:
        self._probe_queued = False
        clock = self._clock
        if clock._goal(False) is None:
            self._quiet = False
            return  # nothing to jump to: the next timer, advance or finished job re-queues it
        ready = self._ready_queue
        busy = (ready is not None and len(ready) > 0) or self._activity != self._seen
        self._seen = self._activity
        if busy or not self._quiet:
            # Something ran or is queued: let it run, and a poll happen, before looking again.
            # A quiet round starts with the threads idle: a poll must follow the moment they
            # were seen so (a libuv worker's result waits in the loop's I/O until one does).
            if not busy and clock._jobs.hold():
                self._hold()
                return
            self._quiet = not busy
            self._probe_queued = True
            self._call_soon(self._probe)
            return
        self._quiet = False
        if clock._real_wait:
            self._waiting = True
            # On the base's own heap, in real time (the loop's call_later is the wheel's).
            loop_state(self._loop).heap.near_call_later(
                clock._real_wait, self._after_wait, self._activity
            )
            return
        if self._jump():
            self.want()

    def _jump(self) -> bool:
        """Jump if no thread holds the clock; else :meth:`_hold` and say False."""
        if self._clock._jump():
            return True
        self._hold()
        return False

    def _hold(self) -> None:
        """Threads hold the clock: look again in ``PARK_POLL`` seconds of real time (a
        thread may park, or a worker finish, meanwhile)."""
        self._quiet = False
        if self._clock._jobs.recheck and not self._rechecking:
            self._rechecking = True
            loop_state(self._loop).heap.near_call_later(PARK_POLL, self._look_again)

    def _look_again(self) -> None:
        self._rechecking = False
        self.want()

    def _after_wait(self, activity: int) -> None:
        self._waiting = False
        if activity == self._activity and not self._jump():  # nothing scheduled meanwhile
            return
        self.want()


def loop_state(loop: Any) -> Any:
    """A loop-mode loop's state (aiowheel._loopmode._loopstate.LoopState, which sits above this
    room)."""
    return getattr(loop, STATE_ATTRIBUTE)
