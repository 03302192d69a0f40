"""Loop mode: an event loop whose own ``call_at`` / ``call_later`` file timers in a wheel.

Why. Most of a server's timers are armed by code its authors do not own: ``asyncio.sleep``,
``asyncio.timeout``, ``wait_for``, ``asyncio.wait(timeout=)``, and the ``loop.call_at`` calls
inside aiohttp, database drivers and anyio. All of them end in two loop methods, so replacing
those two puts every timer of the program on the wheel, with one line and no change to anyone's
code: ``aiowheel.run(main())`` or ``asyncio.run(main(), loop_factory=aiowheel.loop_factory())``.

Shape. :func:`new_event_loop` makes an instance of a subclass of the base loop class (asyncio's
default loop, or ``uvloop.Loop``); the rest of the loop is the base's, untouched. The subclass
is a plain Python class (mypyc cannot subclass a class chosen at run time) and carries the
loop's :class:`~aiowheel.Timer`. ``call_at`` and ``call_later`` are bound as *instance*
attributes to the compiled methods of a :class:`~aiowheel._loopcalls.LoopCalls` in front of
the Timer's engine: an overriding method written in Python would add a Python frame (~0.1 us,
a sixth of a timer's whole cost) to every call, while an instance attribute is found first
by every caller, the base loop's own code included (asyncio's ``call_later`` calls
``self.call_at``; uvloop's ``call_at`` calls ``self.call_later``).

Placement (Linux's split: hrtimers for precise timers, the wheel for timeouts). A float deadline
at least ``threshold`` seconds ahead (an int delay too) with a callable goes to the wheel; the
rest stays on the loop's own heap: short sleeps keep the loop's precision (the wheel adds up to
one tick of lateness), ``call_soon``-like zero delays run on the next iteration as before, and
odd arguments get exactly the base loop's results. Two refusals the base loop lacks: a NaN
deadline (asyncio files it and corrupts its heap) raises ValueError, and a deadline that is not
a number (asyncio files a str, and its loop fails later; None too) raises TypeError, each named
by what the user called: ``call_at()`` / ``call_later()``, or ``asyncio.timeout()`` /
``asyncio.sleep()`` where the callback shows that one of them filed it (:func:`_named`).

The reaper. In loop mode it is not a task. The Timer's wake-up handle, on the loop's own heap
and filed through the base class (so it cannot land in its own wheel), has the reaper as its
callback (``Driver._drive``): it advances the wheel, re-arms itself, and runs the due callbacks
inline, in the iteration that found them due, as the loop does with its own timer handles.
A task would be wrong in four ways: it is visible in ``asyncio.all_tasks()``; ``asyncio.run``
cancels it at exit *before* the program's own tasks finish their cleanup (whose timers would
then have no reaper); it needs a running loop, while ``loop.call_at`` before ``run_*`` is legal;
and a loop closed with it pending prints "Task was destroyed but it is pending!". A loop
callback has none of these, and costs one loop handle per bucket expiration, as the task did.

Life cycle. The Timer is bound when the loop is made, so timers may be filed before the loop
runs, across repeated ``run_until_complete`` calls and after ``stop()``. ``close()`` drops
pending timers silently, as asyncio does (their handles read as cancelled); afterwards
``call_at`` raises the base loop's "Event loop is closed". :func:`aiowheel.get_timer` on such a
loop returns its Timer: one wheel per loop, shared by the loop's timers and aiowheel's API.

Debug mode: ``call_at`` / ``call_later`` make the base loop's checks (another thread, a
coroutine function, a non-callable) with its messages, and each due callback runs as a loop
callback of its own so that slow callbacks are reported as the loop reports its own
(:mod:`aiowheel._debug`).

Threads. One loop per thread, N threads at once, is asyncio's model and the one a
free-threaded 3.14t scales with: each loop-mode loop has its own Timer, wheel and native core,
touched only by the thread running it (its ``run_forever`` makes that thread the wheel's, so a
loop made in one thread may run in another). Calls from other threads are refused or handed on
as the engine and :mod:`aiowheel._loopcalls` say. The module-level state here is safe to use
from many threads at once: the class cache (``_classes``; a new config's class is made under
``_classes_lock``, so two threads asking at once get the same class) and the watchers list
(single list operations, read as a tuple).

Never early, for every timer of the loop: a wheel timer runs only once the loop's clock has
reached its exact deadline (see :mod:`aiowheel._driver`). A timer nearer than ``threshold``
stays on the base loop's heap only where that heap is exact (asyncio's). A heap that would run
it early by the loop's own clock would need it filed that much later (:func:`_near_pad`: 1 ms
on uvloop, whose heap works in whole milliseconds, 1 us on rloop and zuvloop), and a timer
filed late on the heap could run an iteration after a wheel timer of the same deadline: on
such a base every deadline still ahead goes to the wheel, whatever the threshold
(:func:`_threshold`), and the pad is kept for the calls that reach the heap by other ways. A
deadline already passed is filed as given, and so is the loop's wake-up for its wheel, which
re-checks every deadline itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import numbers
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from decimal import Decimal
from math import inf, nan
from typing import Any, Final, TypeVar

from . import _bases, _census, _dispatch, _scheduled, _store, _validate, _virtual
from ._clock import STATE_ATTRIBUTE, Clock
from ._loopcalls import LoopCalls
from ._timer import Timer
from ._virtual import VirtualClock, VirtualTime

__all__ = [
    "DEFAULT_THRESHOLD",
    "LoopConfig",
    "LoopFactory",
    "config_of",
    "loop_factory",
    "new_event_loop",
    "run",
    "timer_of",
]

_T = TypeVar("_T")

DEFAULT_THRESHOLD: Final = _validate.DEFAULT_THRESHOLD
"""Deadlines at least this many seconds ahead go to the wheel (10 ticks of the default 1 ms)."""

_DEFAULT_TICK: Final = _validate.DEFAULT_TICK

# One subclass per LoopConfig: few in any program.
_classes: dict[LoopConfig, type[Any]] = {}
_classes_lock: Final = threading.Lock()


def _default_base() -> type[asyncio.AbstractEventLoop]:
    """asyncio's default loop class on this platform (``asyncio.EventLoop`` from 3.13).

    Named without the event loop policies, which 3.14 deprecates and 3.16 removes: before 3.13
    the default policy's loop class is the selector loop on Unix and the proactor on Windows.
    """
    base: type[asyncio.AbstractEventLoop] | None = getattr(asyncio, "EventLoop", None)
    if base is None:
        if sys.platform == "win32":  # pragma: no cover - CI runs on Linux
            base = asyncio.ProactorEventLoop  # type: ignore[attr-defined,unused-ignore]
        else:
            base = asyncio.SelectorEventLoop
    return base


def _check_base(base: object, where: str) -> type[asyncio.AbstractEventLoop]:
    if base is None:
        return _default_base()
    if not isinstance(base, type) or not issubclass(base, asyncio.AbstractEventLoop):
        raise TypeError(
            f"{where}: base must be an event loop class (a subclass of "
            f"asyncio.AbstractEventLoop, such as uvloop.Loop), got {base!r}"
        )
    if issubclass(base, _LoopMode):
        raise ValueError(f"{where}: base is already a loop-mode class: {base.__name__}")
    return base


@dataclass(frozen=True, slots=True)
class LoopConfig:
    """What makes a loop-mode loop: its base loop class, its wheel's tick and its threshold.

    Made (and checked) by :func:`loop_factory`; it is what a :class:`LoopFactory` pickles and
    what each loop-mode class holds (:func:`config_of` reads it back from a loop).
    """

    base: type[asyncio.AbstractEventLoop]
    """The event loop class the loop-mode loop subclasses (asyncio's default, uvloop.Loop...)."""
    tick: float = _DEFAULT_TICK
    """The resolution of the loop's wheel, in seconds (default 1 ms)."""
    threshold: float = DEFAULT_THRESHOLD
    """Deadlines at least this many seconds ahead go to the wheel; nearer ones to the base's
    own heap. Only on a base whose heap is exact (asyncio's loops): on one that would run a
    timer early (uvloop, rloop, zuvloop...), every deadline still ahead goes to the wheel."""
    clock: VirtualTime | None = None
    """A virtual clock's settings (:func:`aiowheel.testing.virtual_loop_factory`); None for
    the loop's own, real clock. A virtual loop puts every timer on the wheel, whatever the
    threshold."""
    max_batch: int | None = _dispatch.DEFAULT_MAX_BATCH
    """The most due callbacks the wheel runs per loop iteration, or None for no bound."""

    def __post_init__(self) -> None:
        # Made by hand too (it is public): the checks loop_factory makes, named LoopConfig().
        if self.base is None:  # loop_factory's default is its own: a config names its base
            raise TypeError(
                "LoopConfig(): base must be an event loop class (a subclass of "
                "asyncio.AbstractEventLoop, such as uvloop.Loop), got None"
            )
        _check_base(self.base, "LoopConfig()")
        _validate.tick(self.tick, "LoopConfig()")
        if self.clock is None:
            _validate.threshold(self.threshold, "LoopConfig()")
        elif not isinstance(self.clock, VirtualTime):
            raise TypeError(
                "LoopConfig(): clock must be an aiowheel.testing.VirtualTime or None, "
                f"got {type(self.clock).__name__}"
            )
        elif self.threshold != -_INF:
            raise ValueError(
                "LoopConfig(): threshold must be -inf on a virtual clock (every timer on the "
                f"wheel), got {self.threshold!r}"
            )


class LoopState:
    """What loop mode keeps for one loop, in the one attribute it sets on the loop instance
    (``loop._aiowheel``): its Timer, its base heap, its virtual clock if any, and the clock
    its wheel runs by now (:mod:`aiowheel._clock`; a Timer of the user's on the loop reads it
    at each use)."""

    __slots__ = ("clock", "heap", "timer", "virtual")

    def __init__(self, heap: _BaseHeap, virtual: VirtualClock | None) -> None:
        self.heap: Final = heap
        self.virtual: Final = virtual
        self.clock: Clock = heap if virtual is None else virtual
        self.timer: Timer | None = None  # set once the Timer drives the loop


def _state(loop: object) -> LoopState | None:
    """A loop-mode loop's state; None before it is set up (or if its __init__ failed)."""
    state: LoopState | None = getattr(loop, STATE_ATTRIBUTE, None)
    return state


class _LoopMode:
    """The part of every loop-mode class that is not its base loop's (see the module doc)."""

    _aiowheel_config: LoopConfig

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _install(self, type(self)._aiowheel_config)
        loop: Any = self
        for watcher in tuple(_watchers):
            watcher("made", loop)

    # One clock for the loop, a fake one included. A test that replaces the loop's `time` on
    # the instance (`loop.time = fake`, `mock.patch.object(loop, "time", ...)`) makes asyncio
    # run its heap by that clock; the engine and the base heap follow it here, so every timer
    # is filed and fired by it, and go back to the loop's own when it is removed. Only this
    # one attribute name costs more than a comparison (the loop sets few attributes per
    # iteration, uvloop's native code none through here).

    def __setattr__(self, name: str, value: Any) -> None:
        # The compiled build's loop classes have aiowheel._core.loop_setattr instead (the same
        # in C: this method was a frame on every attribute the base loop sets; _loop_class).
        super().__setattr__(name, value)
        if name == "time":
            _time_replaced(self)
        elif name == "_scheduled" and type(value) is list:
            _scheduled.replaced(self)  # asyncio's rebuild of its heap (aiowheel._scheduled)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if name == "time":
            _time_replaced(self)

    def run_forever(self) -> None:
        """Run the loop (the base's ``run_forever``; ``run_until_complete`` and
        ``asyncio.Runner`` come here too). The thread that runs it becomes its wheel's thread
        first: a loop made in one thread and run in another is one thread's again at once, for
        the thread checks of debug mode and of free-threaded builds (``LoopThread.claim``
        is their slow path if it is not)."""
        loop: Any = self
        timer = _timer_of_state(self)
        if timer is None or loop.is_running():  # running: the base refuses, below
            super().run_forever()  # type: ignore[misc]
            return
        site = timer._binding
        site.thread.run_here(site.closed)
        try:
            super().run_forever()  # type: ignore[misc]
        finally:
            site.thread.run_ended()

    def close(self) -> None:
        """Close the loop; pending timers are dropped silently (their handles read cancelled)."""
        loop: Any = self
        timer = _timer_of_state(self)  # None: __init__ failed
        if timer is not None and not loop.is_running() and not loop.is_closed():
            for watcher in tuple(_watchers):
                watcher("closing", loop)
            with timer._binding.thread.lock:  # never during a take-over
                timer._driver.shutdown(None, " (its event loop was closed)")
        super().close()  # type: ignore[misc]

    def set_debug(self, enabled: bool) -> None:
        """Set the loop's debug mode; the wheel's checks follow it at once."""
        super().set_debug(enabled)  # type: ignore[misc]
        timer = _timer_of_state(self)  # None: in base __init__
        if timer is not None:
            timer._driver.set_debug(bool(enabled))

    def __repr__(self) -> str:
        config = type(self)._aiowheel_config
        base = f"{config.base.__module__}.{config.base.__qualname__}"
        return f"<{type(self).__name__} over {base} {super().__repr__()}>"


LoopWatcher = Callable[[str, asyncio.AbstractEventLoop], None]
"""Called with ``("made", loop)`` once a loop-mode loop is set up and ``("closing", loop)``
as it closes, before its pending timers are dropped (see :func:`watch_loops`)."""

_watchers: list[LoopWatcher] = []


def watch_loops(watcher: LoopWatcher) -> Callable[[], None]:
    """Call ``watcher`` as each loop-mode loop is made and closed (the pytest plugin's
    lingering-timer check); returns the function that stops it."""
    _watchers.append(watcher)

    def unwatch() -> None:
        # One call of list.remove, not "if in: remove": two threads unwatching at once (each
        # loop's thread reading the list with tuple()) must not both pass the test.
        with contextlib.suppress(ValueError):
            _watchers.remove(watcher)

    return unwatch


def _timer_of_state(loop: object) -> Timer | None:
    state = _state(loop)
    return None if state is None else state.timer


def _install(loop: Any, config: LoopConfig) -> None:
    """Give ``loop`` its Timer and bind its call_at / call_later to the Timer's router."""
    timer = Timer(tick=config.tick, max_batch=config.max_batch)
    heap = _BaseHeap(loop, config.base)
    # Virtual time (aiowheel._virtual): the wake-up is filed on the clock, and every deadline,
    # near or past, goes to the wheel (the threshold is -inf: nothing waits on the base's real
    # heap).
    virtual = None if config.clock is None else VirtualClock(loop, config.clock)
    state = LoopState(heap, virtual)
    setattr(loop, STATE_ATTRIBUTE, state)
    if virtual is not None:
        _virtual.install(loop, virtual)
    driver = timer._driver
    driver.drive_loop(loop, state.clock)
    state.timer = timer
    pad = _near_pad(config.base)
    threshold = _threshold(config.threshold, pad)
    calls = LoopCalls(
        driver,
        driver.binding,
        threshold,
        pad,
        heap.slow_call_at,
        heap.slow_call_later,
        heap.near_call_at,
        heap.near_call_later,
        _debug_checks_for(loop, config.base),
    )
    # Instance attributes, found before the class's methods by every caller (the module doc).
    # In the compiled build they are the native core's (aiowheel/_core.c), which routes as
    # LoopCalls does and hands it every call that is not for the wheel or the loop's heap.
    front = driver.front(
        threshold,
        pad,
        heap.near_call_at,
        None if heap.reenters_at else heap.near_call_later,  # asyncio's: done in the core
        calls.call_at,
        calls.call_later,
    )
    loop.call_at, loop.call_later = front or (calls.call_at, calls.call_later)
    _scheduled.install(loop)  # loop._scheduled shows its readers the wheel's timers too


def _time_replaced(loop: Any) -> None:
    """``loop.time`` was set or deleted on the instance: follow it once the loop is set up."""
    # getattr, never loop.__dict__: asking for an instance's __dict__ makes CPython keep its
    # attributes in a real dict from then on, and the base loop's every self._... read slows
    # down (Home Assistant sets loop.time on each loop it makes; see aiowheel._scheduled).
    state = getattr(loop, STATE_ATTRIBUTE, None)
    if state is not None and state.timer is not None:
        _follow_time(loop, state)


def _replaced_time(loop: Any) -> Any:
    """The ``time`` set on the instance, or None: ``loop.time`` is the class's method bound
    to the loop (without reading the instance's ``__dict__``: see :func:`_time_replaced`)."""
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
        clock = _ReplacedTime(fake, heap)
    elif state.virtual is not None:
        clock = state.virtual
    else:
        clock = heap
    heap.use_clock(heap.own_clock if clock is heap else clock.time)
    state.clock = clock
    assert state.timer is not None
    state.timer._driver.use_clock(clock)


class _ReplacedTime:
    """A clock read from a ``loop.time`` a test replaced on the instance, its wake-ups on the
    base heap (as asyncio runs its heap by such a fake)."""

    __slots__ = ("time", "wake_at")

    exact: Final = False  # a real clock's heap: wake-ups at the tick

    def __init__(self, fake: Callable[[], float], heap: _BaseHeap) -> None:
        self.time: Final = fake
        self.wake_at: Final = heap.wake_at


_ASYNCIO_CALL_AT: Final = asyncio.BaseEventLoop.call_at

# The native core (compiled build), for the loop classes' __setattr__; None in the pure build.
_native: Any = _store.native
if _native is not None:
    _native.watch_time(_time_replaced)


class _WakeUp(asyncio.TimerHandle):
    """The wheel's wake-up on asyncio's heap: one handle for every timer on the wheel.

    Test suites check for lingering timers by reading ``loop._scheduled`` and skipping what
    ``handle.cancelled()`` says is cancelled (Home Assistant's ``verify_cleanup``, and the
    plugins that copy it). The wake-up is not a timer anyone set: it answers True there, so it
    is never reported in place of the user's timers, nor after the last of them is cancelled
    (it stays on the heap until its time, as a cancelled handle would). asyncio itself reads
    ``_cancelled``, which is the truth. The wheel's timers are seen with
    :func:`aiowheel.pending_timers` and ``pytest -p aiowheel.pytest --aiowheel-lingering``.
    """

    __slots__ = ()

    def cancelled(self) -> bool:
        """True: not a timer of the program's (see the class docstring)."""
        return True

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else f"when={self.when()}"
        return f"<aiowheel wheel wake-up {state} (aiowheel.pending_timers() lists its timers)>"


class _BaseHeap:
    """The base loop's own timer heap, reached without coming back into loop mode.

    Chosen once, when the loop is made: the base class's ``call_at`` / ``call_later`` called
    as plain functions, not through the instance attributes loop mode puts in front of them.
    Where one of the base's methods calls the other through ``self`` (asyncio's
    ``call_later`` calls ``self.call_at``; uvloop's ``call_at`` calls ``self.call_later``), a
    near deadline may come back through the router once, and being near it goes straight on to
    the heap; the engine's wake-up, near or far, is handed to the one method that does not go
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
        # The engine's wake-up goes to the one method that does not come back round. asyncio's
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
        """The loop's own clock, as a :class:`~aiowheel._clock.Clock` reads it (the base heap
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
        """The engine's wake-up handle: on the heap, unpadded, whatever its distance (a
        wheel re-checks every deadline when it runs, so a little early costs a re-file)."""
        if self._base_call_at is _ASYNCIO_CALL_AT:
            # asyncio's call_at, as it is, but with a handle that is not a lingering timer to
            # suites that look for them in loop._scheduled (see _WakeUp).
            loop = self._loop
            loop._check_closed()
            handle = _WakeUp(when, callback, (), loop, None)
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
        deadline = _odd_number(when, _named("call_at", callback))
        if deadline is not None:
            return self._loop.call_at(deadline, callback, *args, context=context)
        return self._base_call_at(self._loop, when, callback, *args, context=context)

    def slow_call_later(
        self, delay: object, callback: object, *args: object, context: object = None
    ) -> Any:
        """call_later with an odd argument: the refusals of ours (as for call_at), then the
        base's own answer."""
        seconds = _odd_number(delay, _named("call_later", callback))
        if seconds is not None:
            return self._loop.call_later(seconds, callback, *args, context=context)
        if self.reenters_at:  # asyncio's, without its trip through self.call_at
            assert isinstance(delay, float)  # every other number is handled above
            return self._asyncio_call_later(delay, callback, *args, context=context)
        return self._base_call_later(self._loop, delay, callback, *args, context=context)


# The callbacks by which a loop's call_at / call_later can tell what the user called: an
# asyncio.Timeout's (asyncio.timeout(), timeout_at(), wait_for() on 3.12+, reschedule()),
# asyncio.sleep's and asyncio.wait's. Read on the slow path only, to name a refused deadline.
_ASYNCIO_TIMEOUT: Final[type | None] = getattr(asyncio, "Timeout", None)
_ASYNCIO_SLEEP_CALLBACK: Final = getattr(asyncio.futures, "_set_result_unless_cancelled", None)
# asyncio.wait(timeout=) files loop.call_later(timeout, _release_waiter, waiter); so does
# asyncio.wait_for on 3.11 (3.12's goes through asyncio.timeout).
_ASYNCIO_WAIT_CALLBACK: Final = getattr(asyncio.tasks, "_release_waiter", None)
_TIMEOUT_NAMES: Final = (
    "asyncio.timeout() / timeout_at() / Timeout.reschedule(): deadline"
    if sys.version_info < (3, 12)
    else "asyncio.timeout() / timeout_at() / wait_for() / Timeout.reschedule(): deadline"
)
_WAIT_NAMES: Final = (
    "asyncio.wait_for() / asyncio.wait(): timeout"
    if sys.version_info < (3, 12)
    else "asyncio.wait(): timeout"
)


def _named(method: str, callback: object) -> str:
    """What a refused deadline or delay of ``loop.<method>`` is called in its message: by the
    asyncio function that filed it where the callback says so, else the method's argument.

    asyncio's timeouts file their deadline with ``loop.call_at(when, self._on_timeout)``
    (``Timeout.reschedule``): a NaN given to ``asyncio.timeout()`` reaches the loop as a NaN
    deadline, so the message names the timeout, not ``call_at()``, which the user never called.
    """
    owner = getattr(callback, "__self__", None)
    if _ASYNCIO_TIMEOUT is not None and isinstance(owner, _ASYNCIO_TIMEOUT):
        return _TIMEOUT_NAMES
    if method == "call_later" and callback is not None:
        if callback is _ASYNCIO_SLEEP_CALLBACK:
            return "asyncio.sleep(): delay"
        if callback is _ASYNCIO_WAIT_CALLBACK:
            return _WAIT_NAMES
    return "call_at(): deadline" if method == "call_at" else "call_later(): delay"


def _odd_number(value: object, what: str) -> float | None:
    """The slow path's reading of a deadline or delay the router did not take (``what`` names
    it: ``"call_at(): deadline"``): ValueError for NaN; TypeError for what is not a real
    number, None included (the base would file such a deadline and fail later, or fail on its
    own arithmetic: "unsupported operand type(s) for +: 'float' and 'str'", or say so without
    naming the function: asyncio's "when cannot be None"); for a real number that is not a
    float (numpy scalars, Fraction, Decimal, huge ints), the float the wheel files (on the
    base's real-time heap a virtual clock would never reach it); None for a float, which goes
    to the base as it is (the router found its callback or engine odd: the base answers, as
    it would without loop mode)."""
    if isinstance(value, float):
        if value != value:
            raise ValueError(f"{what} must not be NaN")
        return None
    if not isinstance(value, numbers.Real | Decimal):
        raise TypeError(f"{what} must be a real number of seconds, got {type(value).__name__}")
    return _no_earlier_float(value, what)


def _no_earlier_float(value: Any, what: str) -> float:
    """``value`` (a real number that is not a float) as the float loop mode files: the nearest
    one not below it, so that rounding never makes a timer early; ValueError for NaN, and the
    infinity of its sign past the float range."""
    try:
        result = float(value)
    except OverflowError:  # an int beyond 1e308
        result = inf if value > 0 else -inf
    except ValueError:  # Decimal('sNaN')
        result = nan
    if result != result:
        raise ValueError(f"{what} must not be NaN")
    if result < value:  # exact comparisons: Fraction, Decimal and int against a float
        result = math.nextafter(result, inf)
    return result


def _near_pad(base: type[asyncio.AbstractEventLoop]) -> float:
    """How much later than asked a near timer goes on ``base``'s heap: its record's ``pad``
    (:attr:`aiowheel._bases.Base.pad`, measured there); none on asyncio's heap (a subclass of
    ``asyncio.BaseEventLoop``: exact), a millisecond on a base with no record
    (:data:`aiowheel._bases.UNMEASURED_PAD`). Read once per loop, when it is made."""
    if issubclass(base, asyncio.BaseEventLoop):
        return 0.0
    record = _bases.of_class(base)  # a subclass of uvloop.Loop keeps uvloop's heap
    return _bases.UNMEASURED_PAD if record is None else record.pad


def _threshold(threshold: float, pad: float) -> float:
    """The threshold loop mode routes by: ``threshold`` on a base whose heap is exact (no
    pad); on one that needs a pad, at most the least positive float: every deadline still
    ahead goes to the wheel (a threshold of 0 puts a deadline of now there too, as asked).

    A near timer on such a heap, filed ``pad`` late, could run an iteration after a wheel
    timer of the same deadline, or of a later one (CPython's ``test_nested_timeouts``: two
    ``asyncio.timeout_at`` of one deadline, entered a millisecond of uvloop's clock apart,
    were split across the boundary, and the inner one never expired); and the wheel, which
    checks each deadline before it runs the timer, is no less precise than a padded heap. A
    deadline already passed still goes to the heap (``call_later(0)`` runs on the next
    iteration, as before)."""
    return threshold if pad == 0.0 else min(threshold, _LEAST_AHEAD)


_LEAST_AHEAD: Final = math.ulp(0.0)


def _debug_checks_for(loop: Any, base: type[Any]) -> Callable[[object, str], None]:
    """The checks the base loop's call_at makes in debug mode, with its messages."""
    if hasattr(base, "_check_thread") and hasattr(base, "_check_callback"):  # asyncio's

        def asyncio_checks(callback: object, method: str) -> None:
            loop._check_thread()
            loop._check_callback(callback, method)

        return asyncio_checks

    def thread_check(callback: object, method: str) -> None:  # uvloop checks the thread only
        if loop.is_running() and asyncio._get_running_loop() is not loop:
            raise RuntimeError(
                "Non-thread-safe operation invoked on an event loop other than the current one"
            )

    return thread_check


class _VirtualMode:
    """The part of a loop-mode class on a virtual clock that is not loop mode's: its time."""

    def time(self) -> float:
        """The loop's virtual time (:attr:`aiowheel.testing.VirtualClock.now`)."""
        state = _state(self)
        clock = None if state is None else state.virtual
        if clock is None:  # the base loop's __init__ asking, before the clock is installed
            settings = type(self)._aiowheel_config.clock  # type: ignore[attr-defined]
            return float(settings.start)
        return clock._now


def _loop_class(config: LoopConfig) -> type[asyncio.AbstractEventLoop]:
    """The loop-mode class of ``config``: one per config (few in any program)."""
    cls = _classes.get(config)
    if cls is None:
        with _classes_lock:
            cls = _classes.get(config)
            if cls is None:
                base = config.base
                virtual = config.clock is not None
                namespace: dict[str, Any] = {
                    "__module__": __name__,
                    "__doc__": f"{base.__name__} with its timers on an aiowheel wheel"
                    + (", on a virtual clock." if virtual else "."),
                    "_aiowheel_config": config,
                }
                if _native is not None and base.__setattr__ is object.__setattr__:
                    namespace["__setattr__"] = _native.loop_setattr  # _LoopMode's, in C
                cls = type(
                    f"{'Virtual' if virtual else ''}Wheel{base.__name__.lstrip('_')}",
                    (_VirtualMode, _LoopMode, base) if virtual else (_LoopMode, base),
                    namespace,
                )
                _classes[config] = cls
    return cls


def new_event_loop(
    base: type[asyncio.AbstractEventLoop] | None = None,
    *,
    tick: float = _DEFAULT_TICK,
    threshold: float = DEFAULT_THRESHOLD,
    max_batch: int | None = _dispatch.DEFAULT_MAX_BATCH,
) -> asyncio.AbstractEventLoop:
    """A new event loop of class ``base`` whose ``call_at`` / ``call_later`` use a wheel.

    ``base`` defaults to asyncio's default loop class; pass ``uvloop.Loop`` for uvloop.
    Deadlines at least ``threshold`` seconds ahead go to the loop's wheel (resolution
    ``tick``); nearer ones stay on the loop's own heap (on asyncio's loops: on a base whose
    heap would run a timer early, such as uvloop's, every deadline ahead goes to the wheel).
    :func:`aiowheel.get_timer` on the loop returns its wheel's Timer. At most ``max_batch``
    due wheel callbacks run per loop iteration (None: no bound); more due at once run over
    the next iterations, in deadline order, the loop polling its I/O between chunks.

    >>> loop = aiowheel.new_event_loop()
    >>> loop.run_until_complete(main())   # every timer of main() on the wheel
    """
    return _loop_factory("new_event_loop()", base, tick, threshold, max_batch)()


def loop_factory(
    base: type[asyncio.AbstractEventLoop] | None = None,
    *,
    tick: float = _DEFAULT_TICK,
    threshold: float = DEFAULT_THRESHOLD,
    max_batch: int | None = _dispatch.DEFAULT_MAX_BATCH,
) -> LoopFactory:
    """A zero-argument factory of loop-mode loops (see :func:`new_event_loop`); it pickles.

    For ``asyncio.run(main(), loop_factory=...)`` (3.12+), ``asyncio.Runner(loop_factory=...)``,
    anyio's ``loop_factory`` backend option and pytest-asyncio's loop factories.

    >>> asyncio.run(main(), loop_factory=aiowheel.loop_factory())
    """
    return _loop_factory("loop_factory()", base, tick, threshold, max_batch)


def _loop_factory(
    where: str, base: object, tick: object, threshold: object, max_batch: object
) -> LoopFactory:
    """:func:`loop_factory`, its errors naming ``where`` (the function the user called)."""
    checked_base = _check_base(base, where)
    checked_tick = _validate.tick(tick, where)
    checked_threshold = _validate.threshold(threshold, where)
    batch = _validate.max_batch(max_batch, where)
    return LoopFactory(LoopConfig(checked_base, checked_tick, checked_threshold, None, batch))


def virtual_loop_factory(
    base: object,
    tick: object,
    autojump: object,
    start: object,
    where: str,
    max_batch: object = _dispatch.DEFAULT_MAX_BATCH,
) -> LoopFactory:
    """The checked factory behind :func:`aiowheel.testing.virtual_loop_factory` (errors
    naming ``where``)."""
    checked_base = _check_base(base, where)
    checked_tick = _validate.tick(tick, where)
    settings = VirtualTime(_validate.autojump(autojump, where), _validate.start(start, where))
    batch = _validate.max_batch(max_batch, where)
    return LoopFactory(LoopConfig(checked_base, checked_tick, -_INF, settings, batch))


_INF: Final = float("inf")


class LoopFactory:
    """A zero-argument callable that makes loop-mode loops (what :func:`loop_factory` returns).

    It pickles (its :class:`LoopConfig`, the base class by its import path), so it can cross
    into worker processes: uvicorn's ``--workers`` and ``--reload`` pickle their
    configuration, loop factory included.
    """

    __slots__ = ("_cls", "config")

    def __init__(self, config: LoopConfig) -> None:
        if not isinstance(config, LoopConfig):
            raise TypeError(
                f"{type(self).__name__}(): config must be a LoopConfig, got {type(config).__name__}"
            )
        self.config: Final = config
        """What the loops it makes are (base, tick and threshold)."""
        self._cls: Final = _loop_class(config)

    @property
    def base(self) -> type[asyncio.AbstractEventLoop]:
        """The base loop class (``config.base``)."""
        return self.config.base

    @property
    def tick(self) -> float:
        """The wheel's tick (``config.tick``)."""
        return self.config.tick

    @property
    def threshold(self) -> float:
        """The threshold (``config.threshold``)."""
        return self.config.threshold

    @property
    def max_batch(self) -> int | None:
        """The most due callbacks run per loop iteration (``config.max_batch``)."""
        return self.config.max_batch

    def __call__(self) -> asyncio.AbstractEventLoop:
        """A new loop-mode event loop."""
        loop: asyncio.AbstractEventLoop = self._cls()
        return loop

    def __reduce__(self) -> tuple[Any, ...]:
        return (LoopFactory, (self.config,))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, LoopFactory):
            return NotImplemented
        return self.config == other.config

    def __hash__(self) -> int:
        return hash(self.config)

    def __repr__(self) -> str:
        base = self.config.base
        virtual = self.config.clock
        batch = self.config.max_batch
        batch_text = "" if batch == _dispatch.DEFAULT_MAX_BATCH else f", max_batch={batch!r}"
        if virtual is not None:
            return (
                f"aiowheel.testing.virtual_loop_factory({base.__module__}.{base.__qualname__}, "
                f"autojump={virtual.autojump!r}, start={virtual.start!r}, "
                f"tick={self.config.tick!r}{batch_text})"
            )
        return (
            f"aiowheel.loop_factory({base.__module__}.{base.__qualname__}, "
            f"tick={self.config.tick!r}, threshold={self.config.threshold!r}{batch_text})"
        )


def run(
    main: Coroutine[Any, Any, _T],
    *,
    base: type[asyncio.AbstractEventLoop] | None = None,
    debug: bool | None = None,
    tick: float = _DEFAULT_TICK,
    threshold: float = DEFAULT_THRESHOLD,
    max_batch: int | None = _dispatch.DEFAULT_MAX_BATCH,
) -> _T:
    """Run ``main`` like ``asyncio.run`` (or ``uvloop.run``), on a loop-mode loop.

    >>> aiowheel.run(main())                    # asyncio's default loop, timers on a wheel
    >>> aiowheel.run(main(), base=uvloop.Loop)  # the same on uvloop
    """
    try:
        if asyncio._get_running_loop() is not None:
            raise RuntimeError("aiowheel.run() cannot be called from a running event loop")
        _validate.coroutine(main, "run()")
        _validate.debug(debug, "run()")
        factory = _loop_factory("run()", base, tick, threshold, max_batch)
    except BaseException:
        if asyncio.iscoroutine(main):
            main.close()  # refused: it will never run, so no "never awaited" warning either
        raise
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)


def timer_of(loop: asyncio.AbstractEventLoop | None = None) -> Timer | None:
    """The Timer of a loop-mode ``loop`` (default: the running loop), the wheel its
    ``call_at`` / ``call_later`` use; None for any other loop.

    >>> aiowheel.timer_of()   # None unless the running loop is in loop mode
    """
    if not isinstance(loop, _LoopMode):
        loop = _census.loop_of(loop, "timer_of()")
    return _timer_of_state(loop) if isinstance(loop, _LoopMode) else None


def config_of(loop: asyncio.AbstractEventLoop | None = None) -> LoopConfig | None:
    """The :class:`LoopConfig` (base, tick, threshold) of a loop-mode ``loop`` (default: the
    running loop); None for any other loop."""
    if isinstance(loop, _LoopMode):
        return type(loop)._aiowheel_config
    found = _census.loop_of(loop, "config_of()")
    return type(found)._aiowheel_config if isinstance(found, _LoopMode) else None
