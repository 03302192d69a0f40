"""What the driver can say about its timers when asked: what each one is, and the loop's lag.

:mod:`aiowheel._seeing._census` (``pending_timers``, ``timer_census``, ``current_deadline``...)
asks; the driver answers with these. Kept out of :mod:`aiowheel._time._driver` so that the driver
reads as the driver, and compiled with it: the census of a server with 100k timers classifies every
one of them, so :func:`classify` and :func:`origin_key` run once per pending timer, in C where the
build is compiled. Nothing here is on a path a timer takes when nobody asks, except
:meth:`LagHistogram.record`, once per wheel pass that fires timers.

asyncio's own timers are recognised by their callbacks: ``asyncio.sleep`` files
``futures._set_result_unless_cancelled(future, result)``, ``asyncio.timeout`` (and ``wait_for``
from 3.12) the context manager's bound ``_on_timeout``, 3.11's ``wait_for``
``tasks._release_waiter(waiter)``. The task behind a future is the one whose wake-up is among
the future's done callbacks (asyncio's Task registers its bound wake-up method there, in its C
and Python implementations alike).
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Callable
from typing import Final

__all__ = [
    "LAG_BUCKETS",
    "LagHistogram",
    "asyncio_timeout_task",
    "classify",
    "lag_bounds",
    "origin_key",
]


# -- loop lag ------------------------------------------------------------------------------------

# A histogram of how late wheel passes ran, in microseconds, log-linear: exact below 16 us, then
# 8 buckets per power of two (each at most 12.5% wide), up to ~2**61 us.
LAG_BUCKETS: Final = 8 * 61


def _lag_bucket(late: float) -> int:
    micros = int(late * 1e6) if late > 0.0 else 0
    if micros < 16:
        return micros
    bits = micros.bit_length()
    index = 8 * (bits - 3) + ((micros >> (bits - 4)) & 7)
    return index if index < LAG_BUCKETS else LAG_BUCKETS - 1


def lag_bounds(index: int) -> tuple[float, float]:
    """The range of lateness (seconds, low inclusive, high exclusive) of lag bucket ``index``."""
    if index < 16:
        return index / 1e6, (index + 1) / 1e6
    bits = index // 8 + 3
    top = 8 + index % 8
    return (top << (bits - 4)) / 1e6, ((top + 1) << (bits - 4)) / 1e6


class LagHistogram:
    """How late one driver's wheel passes ran, since :attr:`since` (loop time): recorded once
    per pass that fired timers, weighted by how many it fired (:func:`aiowheel.loop_lag`)."""

    __slots__ = ("count", "counts", "largest", "listener", "since")

    def __init__(self, since: float) -> None:
        self.counts: list[int] | None = None  # ~500 ints, made on the first pass that fires
        self.count = 0
        self.largest = 0.0
        self.since = since
        # Also told of each pass, if set (aiowheel.otel's histogram).
        self.listener: Callable[[float, int], None] | None = None

    def record(self, late: float, count: int) -> None:
        """A pass ran ``late`` seconds after its earliest timer could first run and fired
        ``count`` timers."""
        counts = self.counts
        if counts is None:
            counts = self.counts = [0] * LAG_BUCKETS
        counts[_lag_bucket(late)] += count
        self.count += count
        if late > self.largest:
            self.largest = late
        listener = self.listener
        if listener is not None:
            listener(late, count)

    def take(self, now: float | None) -> tuple[list[int], int, float, float]:
        """The histogram, its count, its max and when its window began; with ``now`` (loop
        time), a new window begins there."""
        counts = self.counts
        window = (list(counts) if counts is not None else [], self.count, self.largest,
                  self.since)  # fmt: skip
        if now is not None:
            self.counts = None
            self.count = 0
            self.largest = 0.0
            self.since = now
        return window


# -- what a timer is -------------------------------------------------------------------------------

# asyncio's private helpers behind its own timers (None if renamed: then seen as plain calls).
_ASYNCIO_ON_TIMEOUT: Final[object] = vars(asyncio.Timeout).get("_on_timeout")
_SET_RESULT: Final[object] = getattr(asyncio.futures, "_set_result_unless_cancelled", None)
_RELEASE_WAITER: Final[object] = getattr(asyncio.tasks, "_release_waiter", None)
_MethodType: Final = types.MethodType


def _task_awaiting(future: object) -> object:
    """The task suspended on ``future`` (its wake-up is the future's done callback), or None."""
    if isinstance(future, asyncio.Task):
        return future
    for callback, _context in getattr(future, "_callbacks", None) or ():
        task = getattr(callback, "__self__", None)
        if task is not None and hasattr(task, "get_coro"):
            return task
    return None


# 3.11's wait_for files `_release_waiter(waiter)` (3.12+'s is an asyncio.timeout; there the
# same timer is asyncio.wait's, which bounds nothing: it returns, and cancels no one).
_WAIT_FOR_TIMER: Final[object] = _RELEASE_WAITER if sys.version_info < (3, 12) else None


def asyncio_timeout_task(callback: object, args: object = ()) -> object:
    """The task an ``asyncio.timeout`` (or 3.11's ``wait_for``) guards, if ``callback`` (with
    ``args``) is its expiry (else None)."""
    if type(callback) is _MethodType and callback.__func__ is _ASYNCIO_ON_TIMEOUT:
        # asyncio.Timeout's private `_task`: the task it was entered in.
        return getattr(callback.__self__, "_task", None)
    if callback is _WAIT_FOR_TIMER and callback is not None and type(args) is tuple and args:
        return _task_awaiting(args[0])  # the task awaiting wait_for's waiter
    return None


def classify(kind: str, what: object, who: object) -> tuple[str, object, object]:
    """A timer as :func:`aiowheel.pending_timers` shows it: (kind, what names it: a callback or
    a coroutine, or None; the task it serves, or None). From an entry's ``_describe()``, or
    ("loop", callback, args) for a handle on the base heap; asyncio's own sleeps and timeouts
    are recognised by their callbacks (on the wheel their kind says so too)."""
    if kind == "call" or kind == "loop":
        if what is _SET_RESULT or what is _RELEASE_WAITER:
            first = who[0] if isinstance(who, tuple) and who else None
            if kind == "call":
                kind = "sleep" if what is _SET_RESULT else "timeout"
            return kind, None, _task_awaiting(first)
        task = asyncio_timeout_task(what)
        if task is not None:
            return ("timeout" if kind == "call" else kind), None, task
        return kind, what, None
    if who is not None and not isinstance(who, tuple):
        return kind, what, _task_awaiting(who)
    return kind, what, None


def origin_key(what: object, task: object, noted: object) -> object:
    """What names a timer's origin (one key per origin, for counting): the line that filed it
    (origin tracking's note), else the code of the coroutine it runs or serves, else its
    callback."""
    if noted is not None:
        line: object = noted[0]  # type: ignore[index]  # (line, task)
        return line
    if what is None:
        if task is None:
            return None
        what = task.get_coro()  # type: ignore[attr-defined]
    code = getattr(what, "cr_code", None)
    return what if code is None else code
