"""The clock a wheel runs by: what reads the time, and what arms a wake-up at a time.

Why an interface of its own. Three kinds of time drive a wheel, and the driver
(:mod:`aiowheel._time._driver`) must not care which: the base loop's own (its clock, and a wake-up
on its timer heap), a ``loop.time`` a test replaced on a loop-mode loop (read from the fake, the
wake-up on the base heap, as asyncio runs its heap by that fake), and the virtual clock of
:mod:`aiowheel.testing` (read from it, the wake-up filed on it). trio names the same seam
``trio.abc.Clock`` (``current_time``, ``deadline_to_sleep_time``) and its ``MockClock`` is one
implementation; tokio's time driver takes its ``Clock`` and its ``Park`` the same way.

A :class:`Clock` has three members. ``time`` reads the clock: the driver takes it once, as a
callable, and calls it on every filing, so an implementation may make it an attribute holding a
builtin (``time.monotonic`` on asyncio's loops, where a Python method around it would add a
frame to every timer) rather than a method. ``wake_at(when, callback)`` files the driver's one
wake-up and returns something with ``cancel()``. ``exact`` says whether the clock's time is
made by its wake-ups (the virtual clock: it jumps to where they are filed): the driver then
files the wake-up at the earliest exact deadline of the bucket due, not at the bucket's tick,
so that every timer runs with the clock at its own deadline (the reaper's ``Reaper.arm``).
A real clock is not exact: its wake-up is at the tick, and a timer runs when its tick comes.

The implementations: :class:`LoopClock` here (any event loop: a Timer's clock on a loop that
is not in loop mode), :class:`aiowheel._loopmode._baseheap.BaseHeap`, the replaced-``time`` adapter
of :mod:`aiowheel._loopmode._loopstate`, and :class:`aiowheel._virtual._virtual.VirtualClock`. A
Timer of the user's on a loop-mode loop reads the loop's clock through :func:`clock_for`, which asks
the loop-mode loop what its clock is at each reading (see :class:`FollowedClock`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final, Protocol

__all__ = ["Clock", "FollowedClock", "LoopClock", "WakeAt", "WakeHandle", "clock_for"]


class WakeHandle(Protocol):
    """The wake-up a clock filed: asyncio's handle, uvloop's, a virtual clock's, any loop's."""

    def cancel(self) -> object:
        """Cancel it (asyncio's returns None, aiowheel's a bool: typed loosely on purpose)."""
        ...


#: Files a wake-up: ``wake_at(when, callback) -> handle``.
WakeAt = Callable[[float, Callable[[], None]], WakeHandle]


class Clock(Protocol):
    """What a wheel runs by (see the module docstring)."""

    def time(self) -> float:
        """The clock now, in seconds (the loop's ``time()`` scale)."""
        ...

    def wake_at(self, when: float, callback: Callable[[], None]) -> WakeHandle:
        """Call ``callback`` once the clock has reached ``when``; cancellable."""
        ...

    @property
    def exact(self) -> bool:
        """Whether wake-ups are filed at exact deadlines (see the module docstring)."""
        ...


class LoopClock:
    """An event loop's own clock and timer heap (a Timer on a loop not in loop mode).

    ``time`` is ``time.monotonic`` itself where the loop has asyncio's ``time`` (which is a
    Python method around it), and the loop's own ``time`` otherwise (uvloop, any other base).
    """

    __slots__ = ("_loop", "time")

    exact: Final = False

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop: Final = loop
        asyncio_time = getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time
        self.time: Final[Callable[[], float]] = time.monotonic if asyncio_time else loop.time

    def wake_at(self, when: float, callback: Callable[[], None]) -> WakeHandle:
        """``loop.call_at(when, callback)``."""
        return self._loop.call_at(when, callback)


class LoopModeClocks(Protocol):
    """What a loop-mode loop tells the Timers bound to it about its clock (its state object,
    :class:`aiowheel._loopmode._loopstate.LoopState`): the clock its own wheel runs by now."""

    @property
    def clock(self) -> Clock:
        """The loop's clock now (its heap's, a replaced ``loop.time``, or a virtual one)."""
        ...


class FollowedClock:
    """The clock of a loop-mode loop, as it is at each call, for a Timer that is not the loop's
    own: the loop's ``time`` may be replaced or made virtual after the Timer bound, and its
    wake-ups must then be filed by the clock the loop runs by (filed in the loop's wheel they
    would be rounded up twice)."""

    __slots__ = ("_state",)

    def __init__(self, state: LoopModeClocks) -> None:
        self._state: Final = state

    def time(self) -> float:
        """The loop's clock now."""
        return self._state.clock.time()

    def wake_at(self, when: float, callback: Callable[[], None]) -> WakeHandle:
        """File the wake-up where the loop's clock files its own."""
        return self._state.clock.wake_at(when, callback)

    @property
    def exact(self) -> bool:
        """Whether the loop's clock is exact now (a virtual one)."""
        return self._state.clock.exact


# The attribute a loop-mode loop keeps its state in (aiowheel._loopmode._loopstate.LoopState): the
# one name aiowheel sets on a loop instance.
STATE_ATTRIBUTE: Final = "_aiowheel"


def clock_for(loop: asyncio.AbstractEventLoop) -> Clock:
    """The clock a Timer bound to ``loop`` runs by: the loop-mode loop's own as it is at each
    reading (:class:`FollowedClock`), or the loop's clock and heap (:class:`LoopClock`)."""
    state: Any = getattr(loop, STATE_ATTRIBUTE, None)
    if state is not None:
        return FollowedClock(state)
    return LoopClock(loop)
