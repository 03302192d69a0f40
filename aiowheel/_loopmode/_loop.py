"""Loop mode: an event loop whose own ``call_at`` / ``call_later`` file timers in a wheel.

Why. Most of a server's timers are armed by code its authors do not own: ``asyncio.sleep``,
``asyncio.timeout``, ``wait_for``, ``asyncio.wait(timeout=)``, and the ``loop.call_at`` calls
inside aiohttp, database drivers and anyio. All of them end in two loop methods, so replacing
those two puts every timer of the program on the wheel, with one line and no change to anyone's
code: ``aiowheel.run(main())`` or ``asyncio.run(main(), loop_factory=aiowheel.loop_factory())``.

Shape. :func:`new_event_loop` makes an instance of a subclass of the base loop class (asyncio's
default loop, or ``uvloop.Loop``); the rest of the loop is the base's, untouched. The subclass
is a plain Python class (mypyc cannot subclass a class chosen at run time) and carries the
loop's :class:`~aiowheel.Timer`. ``call_at`` and ``call_later`` are the compiled methods of a
:class:`~aiowheel._loopmode._loopcalls.LoopCalls` in front of the Timer's driver, bound to it and
set as attributes of the loop's *own class*: an overriding method written in Python would add a
Python frame (a large share of a timer's whole cost: docs/performance.md) to every call, while
an attribute of the loop's class that is not a descriptor is handed out as it is, to every
caller, the base loop's own code included (asyncio's ``call_later`` calls ``self.call_at``;
uvloop's ``call_at`` calls ``self.call_later``).

One class per loop. Each loop is made as the one instance of a subclass of the config's class,
of the same name (``_LoopMode.__new__``, :func:`_own_class`); the three things loop mode keeps
per loop (``_aiowheel``, ``call_at``, ``call_later``) are set on that class, none on the
instance. They were instance attributes before (2026-11-29): from 3.13 CPython keeps an instance's
attributes inline only while its class's shared keys have room, and asyncio's loop has 27 of
its own on 3.14, so a loop-mode loop kept a real dict and every ``self._...`` read of the base
loop went through it (an empty iteration 11-12% more instructions than stock asyncio's on 3.14
and 3.15; 1% now). Slots were tried and left: a class with slots over a dict-keeping base has
no inline values on 3.13, and a subclass of uvloop's ``Loop`` with slots has no ``__dict__``. A
per-loop class costs about 2.4 KB beside the loop's 95 KB, and ``type(loop)`` differs between
two loops of one config (their ``__base__`` is the config's class: ``isinstance`` holds).

Placement (Linux's split: hrtimers for precise timers, the wheel for timeouts). A float deadline
at least ``threshold`` seconds ahead (an int delay too) with a callable goes to the wheel; the
rest stays on the loop's own heap: short sleeps keep the loop's precision (the wheel adds up to
one tick of lateness), ``call_soon``-like zero delays run on the next iteration as before, and
odd arguments get exactly the base loop's results, but for two refusals it lacks (a NaN
deadline, and one that is not a number: :mod:`aiowheel._loopmode._refusals`). The loop's own heap,
and on it the wheel's one wake-up (whose callback is the reaper's pass: no task), is
:mod:`aiowheel._loopmode._baseheap`; what loop mode keeps for each loop (its Timer, driver and
binding, read there rather than through the Timer) and the clock its wheel follows,
:mod:`aiowheel._loopmode._loopstate`.

Life cycle. The Timer is bound when the loop is made, so timers may be filed before the loop
runs, across repeated ``run_until_complete`` calls and after ``stop()``. ``close()`` drops
pending timers silently, as asyncio does (their handles read as cancelled); afterwards
``call_at`` raises the base loop's "Event loop is closed". :func:`aiowheel.get_timer` on such a
loop returns its Timer: one wheel per loop, shared by the loop's timers and aiowheel's API.

Debug mode: ``call_at`` / ``call_later`` make the base loop's checks (another thread, a
coroutine function, a non-callable) with its messages, and each due callback runs as a loop
callback of its own so that slow callbacks are reported as the loop reports its own
(:mod:`aiowheel._time._debug`).

Threads. One loop per thread, N threads at once, is asyncio's model and the one a
free-threaded 3.14t scales with: each loop-mode loop has its own Timer, wheel and native core,
touched only by the thread running it (its ``run_forever`` makes that thread the wheel's, so a
loop made in one thread may run in another). Calls from other threads are refused or handed on
as the driver and :mod:`aiowheel._loopmode._loopcalls` say. The module-level state here is safe to
use from many threads at once: the class cache (``_classes``; a new config's class is made under
``_classes_lock``, so two threads asking at once get the same class) and the watchers list
(single list operations, read as a tuple).

Never early, for every timer of the loop: a wheel timer runs only once the loop's clock has
reached its exact deadline (see :mod:`aiowheel._time._driver`). A timer nearer than ``threshold``
stays on the base loop's heap only where that heap is exact (asyncio's). A heap that would run
it early by the loop's own clock would need it filed that much later
(:func:`aiowheel._common._bases.near_pad`: 1 ms on uvloop, whose heap works in whole milliseconds, 1
us on rloop and zuvloop), and a timer filed late on the heap could run an iteration after a wheel
timer of the same deadline: on such a base every deadline still ahead goes to the wheel, whatever
the threshold (:func:`_threshold`), and the pad is kept for the calls that reach the heap by other
ways. A deadline already passed is filed as given, and so is the loop's wake-up for its wheel, which
re-checks every deadline itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, fields
from typing import Any, Final, TypeVar

from .._common import _bases, _validate
from .._seeing import _census
from .._time import _dispatch, _store
from .._time._clock import STATE_ATTRIBUTE
from .._time._timer import Timer, driver_of
from .._virtual import _virtual
from .._virtual._virtual import VirtualClock, VirtualTime
from . import _scheduled
from ._baseheap import BaseHeap
from ._loopcalls import calls_for
from ._loopstate import LoopState, driven, state_of, time_replaced
from ._runner import run_refusing

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

    def __setstate__(self, state: list[Any]) -> None:
        """Unpickle a config, one an earlier release pickled included: 0.4.0's holds its first
        three fields alone (``base``, ``tick``, ``threshold``); those added since, at the end,
        take their defaults."""
        names = [field.name for field in fields(self)]
        if not isinstance(state, (list, tuple)) or not 3 <= len(state) <= len(names):
            raise TypeError(f"LoopConfig: not a pickled config's state: {state!r}")
        defaults = {field.name: field.default for field in fields(self)}
        padded = [*state, *(defaults[name] for name in names[len(state) :])]
        for name, value in zip(names, padded, strict=True):
            object.__setattr__(self, name, value)


class _LoopMode:
    """The part of every loop-mode class that is not its base loop's (see the module doc)."""

    _aiowheel_config: LoopConfig

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # Each loop is made as the one instance of a class of its own (_own_class): what loop
        # mode keeps per loop goes on that class, and the instance keeps the base loop's
        # attributes inline (the module doc). The base's __new__ takes no arguments
        # (object's refuses them once __new__ is overridden; uvloop's __cinit__ has none).
        own = _own_class(cls)
        loop = super().__new__(own)
        if own.__base__ is not cls:
            # cls is another loop's own class (type(loop)()): the new loop's is its sibling,
            # not its subclass, and Python calls __init__ only on an instance of cls.
            loop.__init__(*args, **kwargs)
        return loop

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _install(self, type(self)._aiowheel_config)
        loop: Any = self
        for watcher in tuple(_watchers):
            watcher("made", loop)

    # One clock for the loop, a fake one included. A test that replaces the loop's `time` on
    # the instance (`loop.time = fake`, `mock.patch.object(loop, "time", ...)`) makes asyncio
    # run its heap by that clock; the driver and the base heap follow it
    # (aiowheel._loopmode._loopstate), so every timer is filed and fired by it, and go back to the
    # loop's own when it is removed. Only this one attribute name costs more than a comparison (the
    # loop sets few attributes per iteration, uvloop's native code none through here).

    def __setattr__(self, name: str, value: Any) -> None:
        # The compiled build's loop classes have aiowheel._time._core.loop_setattr instead (the same
        # in C: this method was a frame on every attribute the base loop sets; _loop_class).
        super().__setattr__(name, value)
        if name == "time":
            time_replaced(self)
        elif name == "_scheduled" and type(value) is list:
            _scheduled.replaced(
                self
            )  # asyncio's rebuild of its heap (aiowheel._loopmode._scheduled)

    def __delattr__(self, name: str) -> None:
        super().__delattr__(name)
        if name == "time":
            time_replaced(self)

    def run_forever(self) -> None:
        """Run the loop (the base's ``run_forever``; ``run_until_complete`` and
        ``asyncio.Runner`` come here too). The thread that runs it becomes its wheel's thread
        first: a loop made in one thread and run in another is one thread's again at once, for
        the thread checks of debug mode and of free-threaded builds (``LoopThread.claim``
        is their slow path if it is not)."""
        loop: Any = self
        state = driven(self)
        if state is None or loop.is_running():  # running: the base refuses, below
            super().run_forever()  # type: ignore[misc]
            return
        binding = state.binding
        binding.thread.run_here(binding.closed)
        try:
            super().run_forever()  # type: ignore[misc]
        finally:
            binding.thread.run_ended()

    def close(self) -> None:
        """Close the loop; pending timers are dropped silently (their handles read cancelled).
        A running loop refuses, as asyncio's does, whatever its base does (veloxloop 0.2 closes
        one)."""
        loop: Any = self
        if loop.is_running():
            raise RuntimeError("Cannot close a running event loop")
        state = driven(self)  # None: __init__ failed
        if state is not None and not loop.is_closed():
            for watcher in tuple(_watchers):
                watcher("closing", loop)
            with state.binding.thread.lock:  # never during a take-over
                state.driver.shutdown(None, " (its event loop was closed)")
            if state.virtual is not None:
                state.virtual.close()
        super().close()  # type: ignore[misc]

    def set_debug(self, enabled: bool) -> None:
        """Set the loop's debug mode; the wheel's checks follow it at once."""
        super().set_debug(enabled)  # type: ignore[misc]
        state = driven(self)  # None: in base __init__
        if state is not None:
            state.driver.set_debug(bool(enabled))

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


def _install(loop: Any, config: LoopConfig) -> None:
    """Give ``loop`` its Timer and state, and bind its call_at / call_later to its router."""
    timer = Timer(tick=config.tick, max_batch=config.max_batch)
    heap = BaseHeap(loop, config.base)
    # Virtual time (aiowheel._virtual._virtual): the wake-up is filed on the clock, and every
    # deadline, near or past, goes to the wheel (the threshold is -inf: nothing waits on the base's
    # real heap).
    virtual = None if config.clock is None else VirtualClock(loop, config.clock)
    # The driver the Timer is made with, which loop mode drives, asked of the Timer's room; from
    # here on loop mode reads the driver and its binding from the loop's state.
    state = LoopState(timer, driver_of(timer), heap, virtual)
    _per_loop(loop, STATE_ATTRIBUTE, state)
    if virtual is not None:
        _virtual.install(loop, virtual)
    driver = state.driver
    driver.drive_loop(loop, state.clock)
    state.driving = True
    pad = _bases.near_pad(config.base)
    threshold = _threshold(config.threshold, pad)
    checks = _debug_checks_for(loop, config.base)
    # On the loop's own class, found before the base's methods by every caller (the module doc).
    call_at, call_later = calls_for(driver, state.binding, threshold, pad, heap, checks)
    _per_loop(loop, "call_at", call_at)
    _per_loop(loop, "call_later", call_later)
    _scheduled.install(loop)  # loop._scheduled shows its readers the wheel's timers too


_OWN: Final = "_aiowheel_own_class"


def _own_class(cls: type[Any]) -> type[Any]:
    """A new class of one loop: a subclass of ``cls`` (a loop-mode class, or a user's subclass
    of one), or of what ``cls`` is the own class of (``type(loop)()`` makes a second loop of
    the same kind), named as it is; marked so that :func:`_per_loop` knows it."""
    kind: type[Any] = cls.__mro__[1] if cls.__dict__.get(_OWN, False) else cls
    namespace = {
        "__module__": kind.__module__,
        "__qualname__": kind.__qualname__,
        "__doc__": kind.__doc__,
        _OWN: True,
    }
    own: type[Any] = type(kind.__name__, (kind,), namespace)
    return own


def _per_loop(loop: Any, name: str, value: object) -> None:
    """Give ``loop`` the attribute ``name``: on its own class (:func:`_own_class`), where its
    instance gains no attribute; on the instance if the loop was made without one (its
    class's ``__new__`` bypassed). ``value`` is handed out as it is: loop mode's are never
    descriptors (bound methods, the native core's calls, a LoopState), and one that were would
    be wrapped in a ``staticmethod``."""
    own = type(loop)
    if own.__dict__.get(_OWN, False):
        kept: Any = value
        setattr(own, name, staticmethod(kept) if hasattr(type(kept), "__get__") else kept)
    else:
        object.__setattr__(loop, name, value)


# The native core (compiled build), for the loop classes' __setattr__; None in the pure build.
_native: Any = _store.native
if _native is not None:
    _native.watch_time(time_replaced)


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
        state = state_of(self)
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


# A pickled factory names the path users import it from, which no move of the rooms changes:
# pickle finds a class by its __module__ (tests/test_faces.py reads every pickle's names).
LoopConfig.__module__ = LoopFactory.__module__ = "aiowheel"
# 0.4.0's pickles name this module by its place then, aiowheel._loop (tests/test_faces.py loads
# one): the name stays an alias of this room, so that they load (the top level holds no file).
sys.modules.setdefault("aiowheel._loop", sys.modules[__name__])


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
    return run_refusing(
        "run()", main, debug, lambda: _loop_factory("run()", base, tick, threshold, max_batch)
    )


def timer_of(loop: asyncio.AbstractEventLoop | None = None) -> Timer | None:
    """The Timer of a loop-mode ``loop`` (default: the running loop), the wheel its
    ``call_at`` / ``call_later`` use; None for any other loop.

    >>> aiowheel.timer_of()   # None unless the running loop is in loop mode
    """
    if not isinstance(loop, _LoopMode):
        loop = _census.loop_of(loop, "timer_of()")
    state = driven(loop) if isinstance(loop, _LoopMode) else None
    return None if state is None else state.timer


def config_of(loop: asyncio.AbstractEventLoop | None = None) -> LoopConfig | None:
    """The :class:`LoopConfig` (base, tick, threshold) of a loop-mode ``loop`` (default: the
    running loop); None for any other loop."""
    if isinstance(loop, _LoopMode):
        return type(loop)._aiowheel_config
    found = _census.loop_of(loop, "config_of()")
    return type(found)._aiowheel_config if isinstance(found, _LoopMode) else None
