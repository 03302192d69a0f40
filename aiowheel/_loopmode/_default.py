"""The per-loop default Timer and the module-level helpers that use it.

One Timer per running loop, created on first use: a timing wheel pays off when it is shared
(one reaper, one loop handle, one set of buckets for every timer of the program), so the
module-level helpers all go through :func:`get_timer`. The default timer closes itself when
its loop shuts down (``asyncio.run`` cancels its reaper at exit), without a warning.

The last timer used is cached, with its binding (the driver's loop check,
:mod:`aiowheel._time._binding`), so the helpers on the hot path cost one identity check, not a
weak-dictionary lookup. A loop-mode loop's own timer and binding are read from the loop's state
(:mod:`aiowheel._loopmode._loopstate`); a default Timer's binding is read once, as it is made.

Threads. One loop per thread is asyncio's model (and the one a free-threaded 3.14t scales
with): each loop has its own default Timer, kept in ``_timers`` by loop (a weak dictionary,
whose single operations are thread-safe), and the cached timer is used only after it says
that this thread runs its loop (``Binding.on_loop``), so a thread never gets another's. With
the GIL the cache is one slot for the process (threads that each run a loop take turns in it,
at the cost of a lookup each time it changes hands); on a free-threaded build it is one slot
per thread (a ``threading.local``, a lookup more per read), since there N threads each running
its own loop is the point, and one shared slot would send every call of every thread to the
slow path (and bounce the slot's cache line between cores).
"""

from __future__ import annotations

import asyncio
import contextvars
import sysconfig
import threading
import weakref
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

from .._common._validate import Seconds
from .._time._binding import Binding
from .._time._handles import Handle
from .._time._timeout import Timeout
from .._time._timer import Timer
from ._loopstate import driven

__all__ = [
    "call_at",
    "call_later",
    "get_timer",
    "sleep",
    "sleep_until",
    "timeout",
    "timeout_at",
    "wait_for",
]

_T = TypeVar("_T")

_get_running_loop: Final = asyncio._get_running_loop

# A default timer with its binding: (Timer, Binding), read and written as one object.
_Default = tuple[Timer, Binding]

_timers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Default] = (
    weakref.WeakKeyDictionary()
)


class _Last:
    """The most recently used timer and its binding (a closed timer has let go of its loop)."""

    __slots__ = ("default",)

    def __init__(self) -> None:
        self.default: _Default | None = None


class _ThreadLast(threading.local):
    """The most recently used timer and its binding, of this thread (free-threaded builds)."""

    default: _Default | None = None


_last: Final[_Last | _ThreadLast] = (
    _ThreadLast() if sysconfig.get_config_var("Py_GIL_DISABLED") else _Last()
)


def get_timer() -> Timer:
    """The running loop's default Timer, created (and bound) on first use.

    On a loop-mode loop (:func:`aiowheel.new_event_loop`) this is the loop's own Timer, the
    wheel its ``call_at`` / ``call_later`` use. Raises RuntimeError outside a running loop.
    """
    last = _last.default
    if last is not None and last[1].on_loop():  # this thread runs its loop, and it is open
        return last[0]
    loop = _get_running_loop()
    if loop is None:
        raise RuntimeError(
            "aiowheel's module-level helpers (get_timer, call_later, sleep, timeout, ...) need "
            "a running event loop in this thread; from another thread, hand the call to the "
            "loop with loop.call_soon_threadsafe(...)"
        )
    default = _timers.get(loop)
    if default is None:
        state = driven(loop)  # a loop-mode loop's own wheel
        if state is not None:
            default = (state.timer, state.binding)
    if default is None or default[1].closed:
        timer = Timer()
        binding = timer._binding  # read once: the one look inside a Timer made here
        binding.check_loop()  # bind now, in this loop
        default = _timers[loop] = (timer, binding)
    _last.default = default
    return default[0]


def timeout(delay: Seconds | None) -> Timeout:
    """``asyncio.timeout`` on the default timer: ``async with aiowheel.timeout(2): ...``"""
    return get_timer().timeout(delay)


def timeout_at(when: Seconds | None) -> Timeout:
    """``asyncio.timeout_at`` on the default timer."""
    return get_timer().timeout_at(when)


async def wait_for(aw: Awaitable[_T], timeout: Seconds | None) -> _T:  # noqa: ASYNC109
    """``asyncio.wait_for`` (3.12+ semantics) on the default timer."""
    return await get_timer().wait_for(aw, timeout)


async def sleep(delay: Seconds, result: _T = None) -> _T:  # type: ignore[assignment]
    """``asyncio.sleep`` on the default timer."""
    return await get_timer().sleep(delay, result)


async def sleep_until(deadline: Seconds, result: _T = None) -> _T:  # type: ignore[assignment]
    """Sleep until the loop's clock reaches ``deadline``, on the default timer."""
    return await get_timer().sleep_until(deadline, result)


def call_later(
    delay: Seconds,
    callback: Callable[..., object],
    *args: object,
    context: contextvars.Context | None = None,
) -> Handle:
    """``loop.call_later`` on the default timer."""
    return get_timer().call_later(delay, callback, *args, context=context)


def call_at(
    when: Seconds,
    callback: Callable[..., object],
    *args: object,
    context: contextvars.Context | None = None,
) -> Handle:
    """``loop.call_at`` on the default timer."""
    return get_timer().call_at(when, callback, *args, context=context)
