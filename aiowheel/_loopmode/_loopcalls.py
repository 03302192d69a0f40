"""LoopCalls: a loop-mode loop's ``call_at`` / ``call_later``, in front of its driver.

Loop mode (:mod:`aiowheel._loopmode._loop`) binds a loop's ``call_at`` and ``call_later`` as
*instance* attributes to the two compiled methods of this class (in the compiled build the native
core's own, which route the same way and hand this class every call they do not take). They decide
where each call goes, and nothing else: the filing itself is the driver's
(:meth:`aiowheel._time._driver.Driver.call`), the same one :meth:`aiowheel.Timer.call_at` ends in.

Where a call goes:

- a float deadline (or an int one that converts exactly) at least ``threshold`` ahead, with a
  callable, on an open driver: the wheel;
- a nearer one, known to be a number and not NaN: straight to the base loop's own heap, padded
  by ``near_pad`` where that heap would run it early by the loop's clock (its base's record,
  aiowheel._common._bases); a deadline already passed is never padded. But a near deadline still
  ahead goes to the wheel when a wheel timer may run by its tick (``Driver.due_by``: the tick is at
  or past the armed expiration): the heap runs a timer at its exact deadline, the wheel at its
  tick, so a near timer on the heap could run before a wheel timer of the same deadline or an
  earlier one (two nested ``asyncio.timeout_at`` of one deadline, the inner entered 5 ms before
  it, split 22 times in 40 on asyncio's loop; the outer then never expired). Filed on the
  wheel, the two run in one pass in (deadline, filing) order. A near timer keeps the heap's
  precision whenever the wheel has nothing due by its tick;
- anything else (NaN, None, a non-number, a non-callable, a closed driver): the slow path,
  which checks it or lets the base loop do so, with the base loop's own messages.

Threads. Like the base loop's, these methods are not thread-safe: another thread hands its
calls to the loop with ``loop.call_soon_threadsafe``. With the GIL a call for the wheel is
checked in debug mode only (the base loop's own debug checks, as its ``call_at`` makes them);
on a free-threaded build always: one from a thread that is not running the loop raises
RuntimeError before anything is filed (:meth:`aiowheel._time._threads.LoopThread.claim`; one
comparison of thread ids when it is the loop's own), where it would otherwise race the loop's
thread through the wheel. A near call goes to the base loop's heap as the base would take it.

A class apart from the driver because none of this is the driver's business (the thresholds,
the pads and the base loop's methods are loop mode's). It asks the driver through its small
API (``accepts``, ``debug``, ``now``, ``call``) and the thread through
:class:`~aiowheel._time._threads.LoopThread`: direct C calls in the compiled build.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Callable
from typing import Final

from .._time._binding import Binding
from .._time._driver import Driver
from .._time._observe import WAIT_FOR_TIMER
from .._time._threads import FOREIGN_THREAD, FREE_THREADED, get_ident
from ._baseheap import BaseHeap

__all__ = ["LoopCalls", "calls_for"]

# A C static in the compiled build: a builtin named in a function is a dict lookup per call.
_callable: Final = callable
_MethodType: Final = types.MethodType

# Int delays below this convert to float exactly; larger ones go to the loop as they are.
_EXACT_INT: Final = 1 << 53


class LoopCalls:
    """The ``call_at`` / ``call_later`` of one loop-mode loop (see the module docstring).

    The heap's ``near_call_*`` take a valid near deadline straight to the loop's heap; its
    ``slow_call_*`` take every other call the wheel does not (:mod:`aiowheel._loopmode._baseheap`).
    ``debug_checks(callback, method)`` makes the base loop's debug-mode checks.
    """

    __slots__ = (
        "_binding",
        "_debug_checks",
        "_driver",
        "_near_call_at",
        "_near_call_later",
        "_near_pad",
        "_slow_call_at",
        "_slow_call_later",
        "_threshold",
    )

    def __init__(
        self,
        driver: Driver,
        binding: Binding,
        threshold: float,
        near_pad: float,
        heap: BaseHeap,
        debug_checks: Callable[[object, str], None],
    ) -> None:
        """Route calls to ``driver`` (already driving its loop: ``Driver.drive_loop``), whose
        binding is ``binding`` (its loop's thread, whether it is closed), or to ``heap``."""
        self._driver: Final = driver
        self._binding: Final = binding
        # Deadlines nearer than this go to the loop's own heap (the config's threshold).
        self._threshold: Final = threshold
        # Added to a near deadline handed to the loop's heap, for a base loop that would run it
        # early by its own clock (uvloop: whole milliseconds, rounded to the nearest). 0.0 for
        # the loops that never do; then the deadline goes on unchanged (int or float).
        self._near_pad: Final = near_pad
        self._slow_call_at: Final = heap.slow_call_at
        self._slow_call_later: Final = heap.slow_call_later
        self._near_call_at: Final = heap.near_call_at
        self._near_call_later: Final = heap.near_call_later
        self._debug_checks: Final = debug_checks

    def call_at(
        self,
        when: object,
        callback: object,
        *args: object,
        context: contextvars.Context | None = None,
    ) -> object:
        """``loop.call_at`` of a loop-mode loop: the wheel for a float (or int) deadline at
        least ``threshold`` ahead and a callable; the slow path (the loop's own heap) otherwise."""
        if FREE_THREADED and get_ident() != self._binding.thread.ident:
            return self._from_another_thread(True, when, callback, args, context)
        if isinstance(when, float):
            deadline = when
        elif isinstance(when, int) and -_EXACT_INT < when < _EXACT_INT:
            deadline = float(when)  # aiohttp rounds its deadlines up to whole seconds: ints
        else:
            return self._slow_call_at(when, callback, *args, context=context)
        driver = self._driver
        ahead = deadline - driver._now()
        if ahead >= self._threshold:
            if _callable(callback) and not self._binding.closed:
                if driver.debug:
                    self._debug_checks(callback, "call_at")
                handle = driver.call(deadline, callback, args, context, "call_at()", False)
                if type(callback) is _MethodType and driver.guards.active:  # the index
                    driver.guards.note_call(callback, handle)
                return handle
        elif ahead == ahead:  # near, and not NaN: the loop's heap, unless the wheel's order
            if ahead > 0 and _callable(callback) and self._joins_wheel(deadline):
                self._take("call_at", callback)
                handle = driver.call(deadline, callback, args, context, "call_at()", False)
                if type(callback) is _MethodType and driver.guards.active:  # the index
                    driver.guards.note_call(callback, handle)
                return handle
            pad = self._near_pad
            if pad and ahead > 0:  # a deadline already passed cannot be run early
                # As the delay it is from now: uvloop's own call_at would turn it into one
                # through self.call_later, which would pad it a second time.
                return _hand_over(self._near_call_later, ahead + pad, callback, args, context)
            return _hand_over(self._near_call_at, when, callback, args, context)
        return self._slow_call_at(when, callback, *args, context=context)

    def call_later(
        self,
        delay: object,
        callback: object,
        *args: object,
        context: contextvars.Context | None = None,
    ) -> object:
        """``loop.call_later`` of a loop-mode loop (see :meth:`call_at`)."""
        if FREE_THREADED and get_ident() != self._binding.thread.ident:
            return self._from_another_thread(False, delay, callback, args, context)
        if isinstance(delay, float):
            seconds_ahead = delay
        elif isinstance(delay, int) and -_EXACT_INT < delay < _EXACT_INT:
            seconds_ahead = float(delay)  # asyncio.sleep(5): an int delay is common
        else:
            return self._slow_call_later(delay, callback, *args, context=context)
        if seconds_ahead >= self._threshold:
            driver = self._driver
            if _callable(callback) and not self._binding.closed:
                if driver.debug:
                    self._debug_checks(callback, "call_later")
                handle = driver.call(seconds_ahead, callback, args, context, "call_later()", True)
                if callback is WAIT_FOR_TIMER and callback is not None:  # 3.11's wait_for
                    driver.guards.note_wait_for(handle)  # (the index, if active)
                return handle
        elif seconds_ahead == seconds_ahead:  # near, and not NaN: as call_at's
            driver = self._driver
            when = driver._now() + seconds_ahead
            if seconds_ahead > 0 and _callable(callback) and self._joins_wheel(when):
                self._take("call_later", callback)
                handle = driver.call(when, callback, args, context, "call_later()", False)
                if callback is WAIT_FOR_TIMER and callback is not None:
                    driver.guards.note_wait_for(handle)
                return handle
            pad = self._near_pad
            if pad and seconds_ahead > 0:
                delay = seconds_ahead + pad
            return _hand_over(self._near_call_later, delay, callback, args, context)
        return self._slow_call_later(delay, callback, *args, context=context)

    def _joins_wheel(self, when: float) -> bool:
        """Whether a near deadline still ahead goes to the wheel (see the module docstring):
        a wheel timer may run by its tick, and the loop is open."""
        return not self._binding.closed and self._driver.due_by(when)

    def _take(self, method: str, callback: object) -> None:
        """The wheel takes a near timer of ``callback``: debug mode's checks of ``method``, as
        the base would make them."""
        if self._driver.debug:
            self._debug_checks(callback, method)

    def _from_another_thread(
        self,
        at: bool,
        time: object,
        callback: object,
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> object:
        """A call from a thread that is not the loop's, on a free-threaded build: this thread
        takes the loop over (it is not running) or refuses with RuntimeError, and the call is
        routed as the loop's own, all under the binding's take-over lock, so that the loop
        cannot start or close in another thread meanwhile. Near calls too: the base's heap is
        no more thread-safe than the wheel (uvloop's crashed, from a foreign ``call_later``)."""
        binding = self._binding
        binding.refuse_early(FOREIGN_THREAD)
        with binding.thread.lock:
            previous = binding.thread.ident
            binding.claim(FOREIGN_THREAD)
            if get_ident() != binding.thread.ident:  # closed, or not bound: the base answers
                slow = self._slow_call_at if at else self._slow_call_later
                return slow(time, callback, *args, context=context)
            route = self.call_at if at else self.call_later
            try:
                return route(time, callback, *args, context=context)
            finally:
                binding.give_back(previous)  # for this call only (Binding.give_back)


def _hand_over(
    method: Callable[..., object],
    time: object,
    callback: object,
    args: tuple[object, ...],
    context: contextvars.Context | None,
) -> object:
    """``method(time, callback, *args, context=context)``, with as few arguments as will do:
    a call without keywords, or without a tuple to unpack, is the cheaper one."""
    if context is None:
        if not args:
            return method(time, callback)
        return method(time, callback, *args)
    return method(time, callback, *args, context=context)


def calls_for(
    driver: Driver,
    binding: Binding,
    threshold: float,
    near_pad: float,
    heap: BaseHeap,
    debug_checks: Callable[[object, str], None],
) -> tuple[Callable[..., object], Callable[..., object]]:
    """The ``call_at`` / ``call_later`` loop mode sets on a loop's own class (found before the
    base's methods by every caller: :mod:`aiowheel._loopmode._loop`): in the compiled
    build the native core's (aiowheel/_time/_core.c), which routes as :class:`LoopCalls` does and
    hands it every call that is not for the wheel or the loop's heap; a LoopCalls's own
    otherwise."""
    calls = LoopCalls(driver, binding, threshold, near_pad, heap, debug_checks)
    native: tuple[Callable[..., object], Callable[..., object]] | None = driver.native_calls(
        threshold,
        near_pad,
        heap.near_call_at,
        None if heap.reenters_at else heap.near_call_later,  # asyncio's: done in the core
        calls.call_at,
        calls.call_later,
    )
    return native or (calls.call_at, calls.call_later)
