"""The per-loop default Timer and the module-level helpers that use it.

One Timer per running loop, created on first use: a timing wheel pays off when it is shared
(one reaper, one loop handle, one set of buckets for every timer of the program), so the
module-level helpers all go through :func:`get_timer`. The default timer closes itself when
its loop shuts down (``asyncio.run`` cancels its reaper at exit), without a warning.

The last (loop, timer) pair is cached so the helpers on the hot path cost one identity check,
not a weak-dictionary lookup.

Threads. One loop per thread is asyncio's model (and the one a free-threaded 3.14t scales
with): each loop has its own default Timer, kept in ``_timers`` by loop (a weak dictionary,
whose single operations are thread-safe), and the cached timer is used only after it says
that this thread runs its loop (``Timer._on_loop``), so a thread never gets another's. With
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

from ._handles import Handle
from ._loop import timer_of
from ._timeout import Timeout
from ._timer import Timer
from ._validate import Seconds

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

_timers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Timer] = weakref.WeakKeyDictionary()


class _Last:
    """The most recently used timer (a closed timer has let go of its loop)."""

    __slots__ = ("timer",)

    def __init__(self) -> None:
        self.timer: Timer | None = None


class _ThreadLast(threading.local):
    """The most recently used timer of this thread (free-threaded builds)."""

    timer: Timer | None = None


_last: Final[_Last | _ThreadLast] = (
    _ThreadLast() if sysconfig.get_config_var("Py_GIL_DISABLED") else _Last()
)


def get_timer() -> Timer:
    """The running loop's default Timer, created (and bound) on first use.

    On a loop-mode loop (:func:`aiowheel.new_event_loop`) this is the loop's own Timer, the
    wheel its ``call_at`` / ``call_later`` use. Raises RuntimeError outside a running loop.
    """
    timer = _last.timer
    if timer is not None and timer._binding.on_loop():  # this thread runs its loop, and it is open
        return timer
    loop = _get_running_loop()
    if loop is None:
        raise RuntimeError(
            "aiowheel's module-level helpers (get_timer, call_later, sleep, timeout, ...) need "
            "a running event loop in this thread; from another thread, hand the call to the "
            "loop with loop.call_soon_threadsafe(...)"
        )
    timer = _timers.get(loop)
    if timer is None:
        timer = timer_of(loop)  # a loop-mode loop's own wheel
    if timer is None or timer.closed():
        timer = Timer()
        timer._binding.check_loop()  # bind now, in this loop
        _timers[loop] = timer
    _last.timer = timer
    return timer


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
