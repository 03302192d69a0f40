"""What loop mode keeps for one loop, and the clock that loop's wheel runs by.

A loop-mode loop (:mod:`aiowheel._loopmode._loop`) carries one attribute of aiowheel's,
``loop._aiowheel`` (set on the loop's own class, not the instance): a :class:`LoopState`,
made with the loop. It holds what the rest of loop
mode reads, each set once: the loop's Timer, the driver under it and the driver's binding
(the loop, open or closed, and its thread), the base loop's heap
(:mod:`aiowheel._loopmode._baseheap`) and the virtual clock if the loop has one; and, the one thing
that changes, the clock the wheel runs by now. Loop mode's other rooms (the loop class,
``loop._scheduled``, the default timer, the testing helpers) ask it rather than the inside of the
Timer, which loop mode reads once, as the loop is made (its driver).

The clock. A test that replaces the loop's ``time`` on the instance (``loop.time = fake``,
``mock.patch.object(loop, "time", ...)``) makes asyncio run its heap by that clock; the driver
and the base heap follow it here (:func:`time_replaced`, called by the loop class's
``__setattr__`` / ``__delattr__``), so every timer is filed and fired by it, and go back to the
loop's own clock when it is removed.

Why a room of its own. The state is read by most of loop mode and made in one place (the
loop's set-up in :mod:`aiowheel._loopmode._loop`); what it holds, when it is ready, and how the
clock it names changes are one concern, apart from the loop class and its config.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from .._time._clock import STATE_ATTRIBUTE, Clock
from .._time._driver import Driver
from .._time._timer import Timer
from .._virtual._virtual import VirtualClock
from ._baseheap import BaseHeap

__all__ = ["LoopState", "ReplacedTime", "driven", "state_of", "time_replaced"]


class LoopState:
    """What loop mode keeps for one loop, in the one attribute it sets for the loop
    (``loop._aiowheel``, on the loop's own class), each set once as the loop is made: its
    Timer, the Timer's driver, the driver's binding, its base heap and its virtual clock if
    any; and the clock its wheel runs by now (:mod:`aiowheel._time._clock`; a Timer of the
    user's on the loop reads it at each use)."""

    __slots__ = ("binding", "clock", "driver", "driving", "heap", "timer", "virtual")

    def __init__(
        self, timer: Timer, driver: Driver, heap: BaseHeap, virtual: VirtualClock | None
    ) -> None:
        self.timer: Final = timer
        self.driver: Final = driver
        # The driver's loop check (aiowheel._time._binding): the loop, open or closed, its thread.
        self.binding: Final = driver.binding
        self.heap: Final = heap
        self.virtual: Final = virtual
        self.clock: Clock = heap if virtual is None else virtual
        # True once the driver drives the loop: loop mode's set-up is done.
        self.driving = False


def state_of(loop: object) -> LoopState | None:
    """A loop-mode loop's state; None for any other loop, and in the base loop's __init__."""
    state: LoopState | None = getattr(loop, STATE_ATTRIBUTE, None)
    return state


def driven(loop: object) -> LoopState | None:
    """A loop-mode loop's state once its driver drives it; None before (in the base loop's
    __init__, or if the loop's __init__ failed), and for any other loop."""
    # getattr, never loop.__dict__: asking for an instance's __dict__ makes CPython keep its
    # attributes in a real dict from then on, and the base loop's every self._... read slows
    # down (Home Assistant sets loop.time on each loop it makes; see aiowheel._loopmode._scheduled).
    state: LoopState | None = getattr(loop, STATE_ATTRIBUTE, None)
    return state if state is not None and state.driving else None


def time_replaced(loop: Any) -> None:
    """``loop.time`` was set or deleted on the instance: follow it once the loop is set up."""
    state = driven(loop)
    if state is not None:
        _follow_time(loop, state)


def _replaced_time(loop: Any) -> Any:
    """The ``time`` set on the instance, or None: ``loop.time`` is the class's method bound
    to the loop (without reading the instance's ``__dict__``: see :func:`driven`)."""
    time_ = loop.time
    own: Any = getattr(type(loop), "time", None)
    bound = own.__get__(loop, type(loop)) if hasattr(own, "__get__") else own
    return None if time_ == bound else time_


def _follow_time(loop: Any, state: LoopState) -> None:
    """``loop.time`` was replaced on the instance or the replacement removed: the driver and
    the base heap read the clock ``loop.time`` now is, and the wake-up goes where that clock
    is kept (a fake clock: the base heap, as on asyncio; the virtual one: the clock)."""
    heap = state.heap
    fake = _replaced_time(loop)
    clock: Clock
    if fake is not None:
        clock = ReplacedTime(fake, heap)
    elif state.virtual is not None:
        clock = state.virtual
    else:
        clock = heap
    heap.use_clock(heap.own_clock if clock is heap else clock.time)
    state.clock = clock
    state.driver.use_clock(clock)


class ReplacedTime:
    """A clock read from a ``loop.time`` a test replaced on the instance, its wake-ups on the
    base heap (as asyncio runs its heap by such a fake)."""

    __slots__ = ("time", "wake_at")

    exact: Final = False  # a real clock's heap: wake-ups at the tick

    def __init__(self, fake: Callable[[], float], heap: BaseHeap) -> None:
        self.time: Final = fake
        self.wake_at: Final = heap.wake_at
