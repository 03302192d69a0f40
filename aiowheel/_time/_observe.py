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
    "ASYNCIO_ON_TIMEOUT",
    "LAG_BUCKETS",
    "Guards",
    "LagHistogram",
    "asyncio_timeout_task",
    "classify",
    "guard_when",
    "lag_bounds",
    "origin_key",
    "WAIT_FOR_TIMER",
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
ASYNCIO_ON_TIMEOUT: Final[object] = vars(asyncio.Timeout).get("_on_timeout")
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
WAIT_FOR_TIMER: Final[object] = _RELEASE_WAITER if sys.version_info < (3, 12) else None


def asyncio_timeout_task(callback: object, args: object = ()) -> object:
    """The task an ``asyncio.timeout`` (or 3.11's ``wait_for``) guards, if ``callback`` (with
    ``args``) is its expiry (else None)."""
    if type(callback) is _MethodType and callback.__func__ is ASYNCIO_ON_TIMEOUT:
        # asyncio.Timeout's private `_task`: the task it was entered in.
        return getattr(callback.__self__, "_task", None)
    if callback is WAIT_FOR_TIMER and callback is not None and type(args) is tuple and args:
        return _task_awaiting(args[0])  # the task awaiting wait_for's waiter
    return None


# -- the timeouts guarding each task ------------------------------------------------------------

_SWEEP_MIN: Final = 256  # notes between two sweeps of a driver's guards, at the least


class Guards:
    """The timeouts guarding each task on one driver's wheel, noted as they are filed: what
    :func:`aiowheel.current_deadline` and the budget read (:meth:`deadline_for`) in the time of
    the task's own timeouts, instead of one pass over every pending timer (a client adapter
    asks on every call it sends; a server with 100k pending timers would pay 100k per call).

    Noted: asyncio's ``timeout`` (its bound ``_on_timeout``) and 3.11's ``wait_for`` (its
    ``_release_waiter``) filed on the wheel by loop mode's ``call_at`` / ``call_later``, and
    aiowheel's own timeouts when entered. Nothing is taken out when a timeout ends: a guard
    that no longer guards (cancelled, fired, exited) is dropped when its task's guards are
    read or noted, and by a sweep of the whole index every ``max(256, 2 x live)`` notes, so
    the index holds at most about twice the live guards and a finished task is let go soon.
    The loop's own heap (near deadlines, and asyncio's loops without loop mode) is not here:
    :mod:`aiowheel._seeing._census` walks the part of it before the deadline it already has.

    Kept only once asked: an index nobody reads would cost every timeout its note. It starts
    ``active`` False (nothing noted: the filing paths test one flag, the native core one
    pointer); the first read of a deadline on the driver's loop (:meth:`start`) notes every
    timeout then pending, from one pass over the wheel, and from then on each as it is filed.
    """

    __slots__ = ("_by_task", "_noted", "_sweep_at", "active")

    def __init__(self) -> None:
        """An empty index, not yet kept (see :meth:`start`)."""
        self._by_task: dict[object, list[object]] = {}
        self._noted = 0
        self._sweep_at = _SWEEP_MIN
        self.active = False

    def start(self, pending: list[object]) -> None:
        """Keep the index from now on, beginning with the guards among ``pending`` (the driver's
        pending timers: aiowheel Timeouts, and handles or wheel calls of asyncio's timeouts and
        3.11's ``wait_for``)."""
        self.active = True
        for timer in pending:
            handle = timer if isinstance(timer, _TimerHandle) else getattr(timer, "_handle", None)
            if handle is None:  # an entry of aiowheel's own: a Timeout is its own guard
                if getattr(timer, "_guarding", None) is not None:
                    self.note(getattr(timer, "_task", None), timer)
                continue
            callback = getattr(handle, "_callback", None)
            if type(callback) is _MethodType and callback.__func__ is ASYNCIO_ON_TIMEOUT:
                self.note_timeout(callback.__self__)
            elif callback is WAIT_FOR_TIMER and callback is not None:
                args = getattr(handle, "_args", ())
                waiter = args[0] if type(args) is tuple and args else None
                self.note(_task_awaiting(waiter), handle)

    def note(self, task: object, guard: object) -> None:
        """``guard`` (an asyncio or aiowheel Timeout, or 3.11's ``wait_for`` timer handle)
        guards ``task``; a guard noted last for the task already is noted once."""
        if task is None:
            return
        by_task = self._by_task
        guards = by_task.get(task)
        if guards is None:
            by_task[task] = [guard]
        else:
            last = guards[-1]
            if last is guard:
                return  # a reschedule's filing again
            if not _guarding(last):  # a task entering timeout after timeout: in its place
                guards[-1] = guard
                return
            if len(guards) >= 8:  # nested ones left behind: keep the list short
                guards[:] = [known for known in guards if _guarding(known)]
            guards.append(guard)
        self._noted += 1
        if self._noted >= self._sweep_at:
            self._sweep()

    def note_call(self, callback: object, handle: object) -> None:
        """``callback`` just filed by ``loop.call_at`` (as ``handle``): if it is an
        ``asyncio.timeout``'s expiry, its Timeout guards the task it was entered in (noted once:
        a reschedule files it again, and the Timeout itself says its deadline)."""
        if type(callback) is _MethodType and callback.__func__ is ASYNCIO_ON_TIMEOUT:
            self.note_timeout(callback.__self__)

    def note_timeout(self, timeout: object) -> None:
        """``timeout``, an ``asyncio.Timeout`` whose expiry was just filed (the native core
        calls this: it has checked the callback), guards the task it was entered in."""
        self.note(getattr(timeout, "_task", None), timeout)

    def note_wait_for(self, handle: object) -> None:
        """``handle``, 3.11's ``wait_for`` timer just filed by ``loop.call_later`` in the task
        that awaits its waiter (the current task), if the index is kept."""
        if self.active:
            self.note(asyncio.current_task(), handle)

    def deadline_for(self, tasks: tuple[object, ...]) -> float | None:
        """The earliest deadline of the timeouts guarding any of ``tasks``, or None."""
        earliest: float | None = None
        by_task = self._by_task
        for task in tasks:
            guards = by_task.get(task)
            if guards is None:
                continue
            for guard in guards:
                when = guard_when(guard)
                if when is not None and (earliest is None or when < earliest):
                    earliest = when
        return earliest

    def __len__(self) -> int:
        """The guards noted and not yet dropped (live or not)."""
        return sum(len(guards) for guards in self._by_task.values())

    def _sweep(self) -> None:
        live = 0
        by_task = self._by_task
        for task in list(by_task):
            kept = [guard for guard in by_task[task] if _guarding(guard)]
            if kept:
                by_task[task] = kept
                live += len(kept)
            else:
                del by_task[task]
        self._noted = 0
        self._sweep_at = max(_SWEEP_MIN, 2 * live)


# asyncio.timeouts' private state an entered Timeout is in while it guards its task (asyncio
# 3.11 to 3.15 name it so; a rename reads every asyncio Timeout as not guarding, which the
# differential tests of tests/seeing/test_deadline_index.py would show at once).
_AsyncioTimeout: Final = asyncio.Timeout
_TimerHandle: Final = asyncio.TimerHandle
_ASYNCIO_STATE: Final[object] = getattr(asyncio.timeouts, "_State", None)
_ASYNCIO_ENTERED: Final[object] = getattr(_ASYNCIO_STATE, "ENTERED", None)


def guard_when(guard: object) -> float | None:
    """A guard's deadline while it guards its task, else None: an asyncio Timeout entered and
    not yet fired or left (its ``_when``, private: the deadline ``when()`` returns), an
    aiowheel Timeout the same, 3.11's ``wait_for`` timer while its waiter waits. (Also what
    the census reads of a passed timeout's expiry waiting among the ready callbacks.)"""
    if isinstance(guard, _AsyncioTimeout):  # a subclass too: its _on_timeout is asyncio's
        if guard._state is not _ASYNCIO_ENTERED:  # type: ignore[attr-defined]
            return None
        return guard.when()
    if isinstance(guard, _TimerHandle):
        if guard.cancelled():
            return None
        args = guard._args
        waiter = args[0] if type(args) is tuple and args else None
        if waiter is None or waiter.done():
            return None
        return guard.when()
    found: float | None = guard._guard_when()  # type: ignore[attr-defined]
    return found


def _guarding(guard: object) -> bool:
    """Whether a guard may still guard its task: a Timeout (asyncio's or aiowheel's) entered and
    not fired or left (a reschedule may give it a deadline again), 3.11's ``wait_for`` timer
    while :func:`guard_when` finds it waiting."""
    if isinstance(guard, _AsyncioTimeout):
        return guard._state is _ASYNCIO_ENTERED  # type: ignore[attr-defined]
    if isinstance(guard, _TimerHandle):
        return guard_when(guard) is not None
    alive: bool = guard._guarding()  # type: ignore[attr-defined]
    return alive


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
