"""See every timer: what is pending on a loop and who filed it, loop lag, the current deadline.

A wheel that holds every timer of a program (loop mode) can answer what no event loop answers:
which code holds these timers, which test left one behind, how late the loop runs, how much
time the caller left. Everything here is read when asked and costs nothing otherwise:

- :func:`pending_timers` walks the wheels of the loop (its own in loop mode, and every
  :class:`~aiowheel.Timer` bound to it) and, on asyncio's loops, its own heap
  (``loop._scheduled``, cancelled handles and the wheels' wake-ups left out). uvloop, rloop and
  zuvloop keep their heap in native code: there only the wheel is seen, which in loop mode is
  every timer but the near ones (under the threshold, 10 ms by default).
- *Origins* name each timer by what it runs: a callback's qualified name, or for a sleep or a
  timeout the coroutine of the task it serves. With origin tracking on (debug mode, or
  :func:`track_origins`) each timer also records the line that filed it, at the cost of one
  stack walk per timer filed (measured on the performance page); off, filing pays one
  comparison.
- :func:`loop_lag` reads a histogram the driver keeps per wheel pass (not per timer), so a
  storm of due timers costs it one update.
- :func:`current_deadline` scans the pending timers for the timeouts guarding the current task:
  no bookkeeping on the paths that enter and leave timeouts (their benchmarks do not move), at
  a cost proportional to what is pending when it is asked (measured on the performance page).

Pure Python in both builds: nothing here is on a hot path. What runs once per pending timer
(classifying it, counting it for the census, checking it for the timeouts guarding a task) runs
in the driver and :mod:`aiowheel._time._observe`, compiled where they are.
"""

from __future__ import annotations

import asyncio
import functools
import math
import weakref
from asyncio import _get_running_loop
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from types import BuiltinMethodType, CodeType, MethodType
from typing import Any, Final, NamedTuple

from .._time import _store
from .._time._binding import listed_on
from .._time._observe import (
    ASYNCIO_ON_TIMEOUT,
    WAIT_FOR_TIMER,
    asyncio_timeout_task,
    classify,
    guard_when,
    lag_bounds,
    origin_key,
)
from .._time._timeout import Timeout
from .._time._view import track_loop, views_of
from .._time._wakeup import is_wake_up

_MethodType: Final = MethodType
_BuiltinMethodType: Final = BuiltinMethodType
_OWN_EXPIRY: Final[object] = vars(Timeout).get("_on_timeout")  # a function in the pure build

__all__ = [
    "KINDS",
    "LoopLag",
    "checked_loop",
    "PendingTimer",
    "current_deadline",
    "loop_lag",
    "pending_timers",
    "time_left",
    "timer_census",
    "track_origins",
]

KINDS: Final = (
    "call",
    "sleep",
    "timeout",
    "heartbeat",
    "watchdog",
    "scheduled",
    "purgatory",
    "loop",
)
"""The values of :attr:`PendingTimer.kind`."""


class PendingTimer(NamedTuple):
    """One pending timer, as :func:`pending_timers` saw it (a snapshot: it does not change)."""

    when: float
    """Its deadline, in loop time (``loop.time()``)."""
    kind: str
    """``"call"`` (``call_at`` / ``call_later``), ``"sleep"``, ``"timeout"``, ``"heartbeat"``
    (``every``), ``"watchdog"``, ``"scheduled"`` (``schedule_at`` / ``schedule_later``),
    ``"purgatory"`` (an operation of a :class:`~aiowheel.Purgatory`) or ``"loop"`` (on the
    base loop's own heap)."""
    callback: Callable[..., object] | None
    """What it calls when it fires, where it calls something of the program's (None for a
    sleep or a timeout; for a purgatory's operation, the operation: its ``keys`` say what
    it waits on)."""
    origin: str
    """The callback's or the coroutine's qualified name (whom the timer is for); with origin
    tracking on, the line that filed it (``path.py:12 in handler``)."""
    task: asyncio.Task[Any] | None
    """The task it serves or that filed it, where known."""


def loop_of(loop: object, where: str) -> asyncio.AbstractEventLoop:
    """The loop an inspection function asks about: ``loop``, or with None the running loop;
    TypeError for what is not a loop, RuntimeError with none running (both naming
    ``where``, the function called, and what to pass)."""
    if loop is None:
        running = asyncio._get_running_loop()
        if running is None:
            raise RuntimeError(
                f"{where}: no running event loop in this thread; pass the loop to inspect, "
                f"{where[:-1]}loop)"
            )
        return running
    return checked_loop(loop, where)


def checked_loop(loop: object, where: str) -> asyncio.AbstractEventLoop:
    """``loop`` if it is an event loop; else TypeError naming ``where``."""
    if not isinstance(loop, asyncio.AbstractEventLoop):
        raise TypeError(
            f"{where}: loop must be an asyncio event loop or None, got {type(loop).__name__}"
        )
    return loop


def callback_name(target: object) -> str:
    """A callback's or coroutine's qualified name, as asyncio would name it; an object whose
    class has a ``_census_name`` method names itself (a request deadline's wheel entry, in
    :mod:`aiowheel.asgi`, names its requests' routes)."""
    while isinstance(target, functools.partial):
        target = target.func
    own = getattr(type(target), "_census_name", None)
    if own is not None:
        named = own(target)
        if isinstance(named, str):
            return named
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    if isinstance(name, str):
        return name
    return type(target).__qualname__


class _Namer:
    """Names for one call: one per origin (:func:`origin_key`), made once."""

    def __init__(self) -> None:
        self._names: dict[object, str] = {}

    def name(self, key: object) -> str:
        if isinstance(key, str):
            return key  # a line noted by origin tracking
        try:
            return self._names[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable callback
            return self._make(key)
        name = self._names[key] = self._make(key)
        return name

    @staticmethod
    def _make(key: object) -> str:
        if key is None:
            return "<unknown>"
        if isinstance(key, CodeType):
            return key.co_qualname
        return callback_name(key)

    def origin(self, what: object, task: object, noted: object) -> str:
        return self.name(origin_key(what, task, noted))


def _heap_deadline_for(
    loop: asyncio.AbstractEventLoop, tasks: tuple[object, ...], before: float = math.inf
) -> float | None:
    """The earliest deadline before ``before`` of the timeouts (``asyncio.timeout``, 3.11's
    ``wait_for``) guarding any of ``tasks`` on the base loop's own heap (asyncio's loops: its
    private ``loop._scheduled``), or None.

    asyncio's loop keeps no index of its timers by task (loop mode's wheels do:
    :class:`aiowheel._time._observe.Guards`), so this is one pass over its heap, at one
    comparison for each handle due no earlier than the best deadline yet (at first ``before``:
    the request's deadline, which a client adapter already has) and a few checks for the
    others. On loop mode the heap holds only the near timers and the wheels' wake-ups."""
    scheduled = getattr(loop, "_scheduled", None)
    if not isinstance(scheduled, list):
        return None
    # The heap itself (loop mode's _scheduled shows its readers the wheels' timers too). Read
    # in place: nothing here runs a callback, so nothing changes it during the walk.
    if _heap_guard is not None and type(before) is float and type(tasks) is tuple:
        found = _heap_guard(scheduled, tasks, before)  # the native core's walk, where it can
        if found is not NotImplemented:
            return found  # type: ignore[no-any-return]
    try:
        return _walk(scheduled, tasks, before)
    except AttributeError:  # not asyncio's TimerHandles: each read the slow way
        return _walk_any(scheduled, tasks, before)


_heap_guard: Any = None if _store.native is None else _store.native.heap_guard
"""The native core's :func:`_walk` (``heap_guard`` in ``aiowheel/_time/_native/module.c``), or
None in the pure build: the same pass in C, NotImplemented where it needs the Python one."""


def _walk(scheduled: list[Any], tasks: tuple[object, ...], before: float) -> float | None:
    """:func:`_heap_deadline_for`'s pass over asyncio's TimerHandles: a handle due no earlier
    than the best deadline yet is passed over on one comparison; the others' checks inline.
    (A walk down the heap's branches, pruned at that deadline, read fewer handles but paid
    more per handle than it saved where most timers fall before the request's deadline, as a
    server's keep-alives do: measured, the flat pass is the cheaper.)"""
    bound = before
    found = False
    for handle in list.__iter__(scheduled):
        when = handle._when
        if when >= bound:
            continue
        callback = handle._callback
        if type(callback) is _MethodType:
            if (
                callback.__func__ is ASYNCIO_ON_TIMEOUT
                and getattr(callback.__self__, "_task", None) in tasks
                and not handle._cancelled
            ):
                bound = when
                found = True
        elif (
            callback is WAIT_FOR_TIMER
            and callback is not None
            and asyncio_timeout_task(callback, handle._args) in tasks
            and not handle._cancelled
        ):
            bound = when
            found = True
    return bound if found else None


def _walk_any(scheduled: list[Any], tasks: tuple[object, ...], before: float) -> float | None:
    """:func:`_walk` for a heap of other handles (public methods, attributes read if there)."""
    bound = before
    found = False
    for handle in list.__iter__(scheduled):
        when = handle.when()
        if not when < bound:
            continue
        callback = getattr(handle, "_callback", None)  # None: cancelled
        guarded = asyncio_timeout_task(callback, getattr(handle, "_args", ()))
        if guarded is not None and guarded in tasks and not handle.cancelled():
            bound = when
            found = True
    return bound if found else None


def _passed_for(loop: asyncio.AbstractEventLoop, tasks: tuple[object, ...]) -> float | None:
    """The deadline of a timeout guarding one of ``tasks`` that had passed when it was entered (or
    rescheduled): asyncio's ``timeout`` and aiowheel's hand it to ``loop.call_soon``, so it
    waits among the ready callbacks, on no heap and no wheel, until the task is cancelled.
    Read from asyncio's private ``loop._ready`` (asyncio's loops, loop mode's over them).

    In the loop's own thread, from the loop's :class:`_ReadyIndex`: only the callbacks queued
    since the last read are looked at, so a read costs nothing per callback waiting (a busy
    server's ready queue holds thousands; one pass over them per read made every budget read
    O(ready), 1 ms at 10,000). From another thread, one pass over the queue."""
    ready = getattr(loop, "_ready", None)
    if not isinstance(ready, deque) or not (ready or _NOTING):
        return None  # nothing queued, and no index holds notes to drop
    if _get_running_loop() is loop:  # even with nothing queued: its notes are then dropped
        index = _READY_INDEXES.get(id(ready))
        if index is None or index.queue() is not ready:
            index = _READY_INDEXES[id(ready)] = _ReadyIndex(ready)
        return index.passed_for(ready, tasks)
    return _passed_among(ready, tasks) if ready else None


def _expiry_of(handle: Any) -> Any:
    """The timeout whose expiry ``handle`` (a ready callback) is, or None: asyncio's bound
    ``_on_timeout`` (a Python method) or aiowheel's (compiled: a builtin method)."""
    try:
        callback = handle._callback
    except AttributeError:  # not asyncio's Handle: read the slow way
        callback = getattr(handle, "_callback", None)
        if getattr(callback, "__name__", None) != "_on_timeout":
            return None
        timeout = getattr(callback, "__self__", None)
        return timeout if isinstance(timeout, asyncio.Timeout | Timeout) else None
    kind = type(callback)
    if kind is _MethodType:
        if callback.__func__ is not ASYNCIO_ON_TIMEOUT and callback.__func__ is not _OWN_EXPIRY:
            return None
    elif kind is not _BuiltinMethodType or type(callback.__self__) is not Timeout:
        return None
    return callback.__self__


def _passed_deadline(handle: Any, timeout: Any) -> float | None:
    """``timeout``'s deadline if its expiry ``handle``, queued in the ready callbacks, is still
    to run for it (not cancelled, the timeout still entered: the guards' own rule,
    :func:`aiowheel._time._observe.guard_when`), else None."""
    cancelled = getattr(handle, "cancelled", None)
    if cancelled is None or cancelled():
        return None
    return guard_when(timeout)


class _ReadyIndex:
    """The passed timeouts waiting among one loop's ready callbacks, by the task each guards:
    what :func:`_passed_for` reads in the loop's thread.

    Kept as it is read, never as callbacks are queued (``call_soon`` stays the base loop's):
    a read looks at the callbacks queued since the last one. The loop queues at the right and
    runs from the left, so every callback left of the rightmost one seen last time was seen;
    the new ones are those right of it, found walking from the right end until it. If it is
    gone, the loop has run everything seen, and what was noted has run or was cancelled: all
    is new, and the notes are dropped. Each read also drops the notes whose timeout no longer
    waits (:func:`_passed_deadline`: run, cancelled, left), so they hold only the few passed
    timeouts still queued. Callbacks put elsewhere than the right end (``appendleft``, which
    asyncio never does) are not seen."""

    __slots__ = ("looked", "noted", "queue", "tail")

    def __init__(self, ready: deque[Any]) -> None:
        self.queue = weakref.ref(ready, functools.partial(_forget, id(ready)))
        self.tail: object = None  # the rightmost callback seen by the last read
        self.noted: dict[object, list[tuple[object, object]]] = {}  # task: (handle, timeout)s
        self.looked = 0  # callbacks looked at, all reads together (for the tests)

    def passed_for(self, ready: deque[Any], tasks: tuple[object, ...]) -> float | None:
        """:func:`_passed_for` of ``tasks`` on ``ready``, the index's queue (see the class)."""
        noted = self.noted
        last = len(ready) - 1
        if last < 0:  # the loop ran everything: what was noted has run
            self.tail = None
            if noted:
                noted.clear()
                _NOTING.discard(self)
            return None
        tail = self.tail
        if ready[last] is not tail:  # queued since the last read: look at those
            # By position from the right end as it is now: another thread's
            # call_soon_threadsafe may append meanwhile (seen by the next read), and only this
            # thread takes from the left, so the positions stay put where an iterator would
            # fail on the change.
            new: list[object] = []
            for at in range(last, -1, -1):
                handle = ready[at]
                if handle is tail:
                    break
                new.append(handle)
            else:
                noted.clear()  # the loop ran past everything seen: all it noted has run
            self.tail = ready[last]
            self.looked += len(new)
            for handle in new:
                timeout = _expiry_of(handle)
                if timeout is not None:
                    noted.setdefault(getattr(timeout, "_task", None), []).append((handle, timeout))
        if not noted:
            _NOTING.discard(self)
            return None
        _NOTING.add(self)
        earliest: float | None = None
        for task, entries in list(noted.items()):
            kept = []
            for handle, timeout in entries:
                when = _passed_deadline(handle, timeout)
                if when is None:
                    continue
                kept.append((handle, timeout))
                if task in tasks and (earliest is None or when < earliest):
                    earliest = when
            if kept:
                noted[task] = kept
            else:
                del noted[task]
        if not noted:
            _NOTING.discard(self)
        return earliest


_READY_INDEXES: Final[dict[int, _ReadyIndex]] = {}
"""Each loop's :class:`_ReadyIndex`, by its ready queue's id (the queue weakly held: its index
goes with it)."""


_NOTING: Final[set[_ReadyIndex]] = set()
"""The indexes holding notes: while none does, a read with nothing queued looks no further."""


def _forget(key: int, _: object) -> None:
    """A ready queue is gone: so is its index."""
    index = _READY_INDEXES.pop(key, None)
    if index is not None:
        _NOTING.discard(index)


def _passed_among(ready: deque[Any], tasks: tuple[object, ...]) -> float | None:
    """:func:`_passed_for` by one pass over the ready queue (another thread's read, and the
    reference the index is tested against)."""
    earliest: float | None = None
    for handle in list(ready):  # a copy, taken at once: the loop's thread may change it
        timeout = _expiry_of(handle)
        if timeout is None or getattr(timeout, "_task", None) not in tasks:
            continue
        when = _passed_deadline(handle, timeout)
        if when is not None and (earliest is None or when < earliest):
            earliest = when
    return earliest


def _base_heap(loop: asyncio.AbstractEventLoop) -> list[tuple[object, float, Any, Any, Any]]:
    """The live handles on the base loop's own heap (asyncio's loops only), the wheels'
    wake-ups left out: (handle, when, callback, args, source traceback) each, from asyncio's
    private ``loop._scheduled`` and handle attributes (uvloop, rloop and zuvloop expose none)."""
    scheduled = getattr(loop, "_scheduled", None)
    if not isinstance(scheduled, list):
        return []
    found: list[tuple[object, float, Any, Any, Any]] = []
    # The heap itself: on loop mode _scheduled shows its readers the wheel's timers too
    # (aiowheel._loopmode._scheduled), which the views walk.
    for handle in list.__iter__(scheduled):
        if not isinstance(handle, asyncio.TimerHandle) or handle.cancelled():
            continue
        if is_wake_up(handle):
            continue
        callback = getattr(handle, "_callback", None)
        traceback = getattr(handle, "_source_traceback", None)
        args = getattr(handle, "_args", None)
        found.append((handle, handle.when(), callback, args, traceback))
    return found


def _source_of(traceback: Any) -> tuple[str, object] | None:
    """Where asyncio's debug mode says a base handle was made (its source traceback)."""
    if not traceback:
        return None
    frame = traceback[-1]
    return (f"{frame.filename}:{frame.lineno} in {frame.name}", None)


def pending_timers(loop: asyncio.AbstractEventLoop | None = None) -> list[PendingTimer]:
    """Every pending timer of ``loop`` (default: the running loop), in deadline order.

    Those on its wheels (the loop's own in loop mode, and every :class:`aiowheel.Timer` bound
    to it) and, on asyncio's loops, those on its own heap (cancelled ones left out); never a
    wheel's own wake-up. A closed loop has none.

    >>> for timer in aiowheel.pending_timers():
    ...     print(f"{timer.when:.3f} {timer.kind:9} {timer.origin}")
    """
    return [timer for _, timer in pending(loop_of(loop, "pending_timers()"))]


def pending(loop: asyncio.AbstractEventLoop) -> list[tuple[object, PendingTimer]]:
    """:func:`pending_timers` of ``loop``, each with the object behind it (a wheel entry, or a
    handle on the base heap): what the pytest plugin compares before and after a test."""
    if loop.is_closed():
        return []
    namer = _Namer()
    found: list[tuple[object, PendingTimer]] = []
    for view in views_of(loop):
        for entry, when, kind, what, task, noted in view.timers():
            found.append((entry, _snapshot(namer, when, kind, what, task, noted)))
    for handle, when, callback, args, traceback in _base_heap(loop):
        kind, what, task = classify("loop", callback, args)
        found.append((handle, _snapshot(namer, when, kind, what, task, _source_of(traceback))))
    found.sort(key=_when)
    return found


def _snapshot(
    namer: _Namer, when: float, kind: str, what: object, task: object, noted: object
) -> PendingTimer:
    if task is None and noted is not None:
        task = noted[1]  # type: ignore[index]  # origin tracking saw who filed it
    callback: object = what if callable(what) else None  # a coroutine object is not callable
    if kind == "call" and (operation := _operation(what)) is not None:
        kind = "purgatory"  # a kind of its own, named by its waiting task or its class
        callback, what, task = operation
    return PendingTimer(when, kind, callback, namer.origin(what, task, noted), task)  # type: ignore[arg-type]


def _operation(what: object) -> tuple[object, object, object] | None:
    """A purgatory's operation (aiowheel._purgatory._purgatory) as the census names it: (the
    operation, what names its origin, the task waiting on it); None for any other callback. Asked of
    the object's class, so that this room needs no import of that one (which sits above it)."""
    entry = getattr(type(what), "_census_entry", None)
    return None if entry is None else entry(what)


def _when(item: tuple[object, PendingTimer]) -> float:
    return item[1].when


def timer_census(
    loop: asyncio.AbstractEventLoop | None = None, *, top: int | None = 10
) -> list[tuple[str, int]]:
    """How many timers are pending on ``loop`` by kind and origin, most first: the ``top``
    (None: all) pairs of ``("kind origin", count)``, for a server's stats endpoint.

    >>> aiowheel.timer_census(top=3)
    [('timeout handle_request', 81234), ('sleep Peer.heartbeat', 1000), ('call _on_idle', 12)]
    """
    if top is not None:
        # A bad type is a TypeError, a bad value a ValueError, named by the function (#37).
        if isinstance(top, bool) or not isinstance(top, int):
            raise TypeError(
                f"timer_census(): top must be a positive int or None, got {type(top).__name__}"
            )
        if top < 1:
            raise ValueError(f"timer_census(): top must be a positive int or None, got {top!r}")
    loop = loop_of(loop, "timer_census()")
    if loop.is_closed():
        return []
    # Counted by origin in the drivers, without a snapshot of each timer; named once each.
    keys: dict[tuple[str, object], int] = {}
    for view in views_of(loop):
        view.tally(keys)
    for _handle, _when, callback, args, traceback in _base_heap(loop):
        kind, what, task = classify("loop", callback, args)
        key = (kind, origin_key(what, task, _source_of(traceback)))
        keys[key] = keys.get(key, 0) + 1
    namer = _Namer()
    counts: Counter[tuple[str, str]] = Counter()
    for (kind, origin), count in keys.items():
        if kind == "call" and (operation := _operation(origin)) is not None:
            _, what, task = operation  # a purgatory's operation: its origin is its callback
            kind, origin = "purgatory", origin_key(what, task, None)
        counts[kind, namer.name(origin)] += count
    return [(f"{kind} {origin}", n) for (kind, origin), n in counts.most_common(top)]


def track_origins(enabled: bool = True, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Record the line that files each timer of ``loop`` (default: the running loop) from now
    on, for :func:`pending_timers` and :func:`timer_census` (asyncio's debug mode records it
    too); ``enabled=False`` stops it. Costs a stack walk per timer filed while on."""
    if not isinstance(enabled, bool):
        raise TypeError(f"track_origins(): enabled must be a bool, got {type(enabled).__name__}")
    track_loop(loop_of(loop, "track_origins()"), enabled)


@dataclass(frozen=True, slots=True)
class LoopLag:
    """How late the loop ran its wheel timers since :attr:`since` (:func:`loop_lag`).

    Each timer that fired counts once, with the lateness of the wheel pass that ran it: how
    long after the start of its tick (when the wheel could first run it) the pass ran. That is
    the loop's own delay, the wheel's rounding up to the tick left out. Percentiles are read
    off a histogram whose buckets are at most 12.5% wide (exact below 16 us): each is the upper
    edge of its bucket, never above :attr:`max`.
    """

    count: int
    """Timers fired in the window."""
    p50: float
    """Median lag, seconds (0.0 when nothing fired)."""
    p90: float
    """90th percentile, seconds."""
    p99: float
    """99th percentile, seconds."""
    max: float
    """The largest lag, exact, seconds."""
    since: float
    """Loop time the window began (the loop's first timer, or the last reset)."""


def _percentile(histogram: list[int], count: int, fraction: float, largest: float) -> float:
    if not count:
        return 0.0
    rank = max(1, math.ceil(fraction * count))
    seen = 0
    for index, in_bucket in enumerate(histogram):
        seen += in_bucket
        if seen >= rank:
            return min(lag_bounds(index)[1], largest)
    return largest


def loop_lag(loop: asyncio.AbstractEventLoop | None = None, *, reset: bool = False) -> LoopLag:
    """The loop's lag, as its wheel timers saw it: p50, p90, p99 and max of how late each ran
    (see :class:`LoopLag`), since the window began; ``reset=True`` begins a new window.

    >>> lag = aiowheel.loop_lag(reset=True)      # e.g. every 10 s, to a dashboard
    >>> lag.p99, lag.max
    """
    if not isinstance(reset, bool):
        raise TypeError(f"loop_lag(): reset must be a bool, got {type(reset).__name__}")
    loop = loop_of(loop, "loop_lag()")
    histogram: list[int] = []
    count = 0
    largest = 0.0
    since = math.inf
    for view in views_of(loop):
        counts, driver_count, driver_max, driver_since = view.take_lag(reset)
        if len(counts) > len(histogram):
            histogram.extend([0] * (len(counts) - len(histogram)))
        for index, in_bucket in enumerate(counts):
            histogram[index] += in_bucket
        count += driver_count
        largest = max(largest, driver_max)
        since = min(since, driver_since)
    if since == math.inf:
        since = loop.time()
    return LoopLag(
        count,
        _percentile(histogram, count, 0.50, largest),
        _percentile(histogram, count, 0.90, largest),
        _percentile(histogram, count, 0.99, largest),
        largest,
        since,
    )


deadline_sources: Final[list[Callable[[object], float | None]]] = []
"""Deadlines kept off the wheel's entries, each source giving the one guarding a task (or None):
:mod:`aiowheel.asgi`'s requests share one wheel entry per tick, and keep their own."""


def _current_task(
    loop: object, where: str
) -> tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None:
    """``loop`` (checked, naming ``where``; None: the running loop) and its current task, or
    None if there is no loop running or no task."""
    if loop is None:
        loop = asyncio._get_running_loop()
        if loop is None:
            return None
    else:
        loop = checked_loop(loop, where)
    task = asyncio.current_task(loop)
    return None if task is None else (loop, task)


def current_deadline(loop: asyncio.AbstractEventLoop | None = None) -> float | None:
    """The earliest deadline (loop time) of the timeouts guarding the current task of ``loop``
    (default: the running loop), or None (no timeout, no loop running, or not in a task):
    aiowheel's ``timeout`` / ``timeout_at`` / ``wait_for``,
    and asyncio's ``timeout`` / ``timeout_at`` / ``wait_for`` on loop mode and on asyncio's
    own loops. A timeout that has expired is no longer pending: inside its block
    (a ``finally``), this names the timeouts still pending, and :func:`time_left` is 0.0.

    >>> async with asyncio.timeout(5):
    ...     aiowheel.current_deadline() - loop.time()    # about 5
    """
    found = _current_task(loop, "current_deadline()")
    if found is None:
        return None
    return task_deadline(*found)


def task_deadline(loop: asyncio.AbstractEventLoop, *tasks: asyncio.Task[Any]) -> float | None:
    """:func:`current_deadline` of ``tasks`` (the earliest of any of them), tasks of ``loop``,
    running or not."""
    return deadline_before(loop, tasks, math.inf)


def deadline_before(
    loop: asyncio.AbstractEventLoop, tasks: tuple[object, ...], before: float
) -> float | None:
    """:func:`task_deadline` of ``tasks`` if it is before ``before``, else None: what a caller
    that already knows one deadline (the request's) asks, paying nothing for the timers due
    after it. The wheels' timeouts come from their drivers' indexes (in the time of these
    tasks' own timeouts); the base heap's from a walk of the part due before the deadline
    found (:func:`_heap_deadline_for`); a timeout already passed from the ready queue."""
    earliest = before
    for driver in listed_on(loop):
        guards = driver.guards
        if not guards.active:  # the first deadline asked of this loop: kept from now on
            driver.start_guards()
        when = guards.deadline_for(tasks)
        if when is not None and when < earliest:
            earliest = when
    when = _passed_for(loop, tasks)
    if when is not None and when < earliest:
        earliest = when
    for source in deadline_sources:
        for task in tasks:
            when = source(task)
            if when is not None and when < earliest:
                earliest = when
    when = _heap_deadline_for(loop, tasks, earliest)
    if when is not None:
        earliest = when
    return None if earliest == before else earliest


def scanned_deadline(loop: asyncio.AbstractEventLoop, *tasks: asyncio.Task[Any]) -> float | None:
    """:func:`task_deadline` by one pass over every pending timer, wheels and heap: the
    reference the indexes and the pruned walk are tested against."""
    deadlines = [view.deadline_scanned(tasks) for view in views_of(loop)]
    ready = getattr(loop, "_ready", None)  # the ready queue read whole, not through its index
    deadlines.append(_passed_among(ready, tasks) if isinstance(ready, deque) else None)
    deadlines.extend(source(task) for source in deadline_sources for task in tasks)
    scheduled = getattr(loop, "_scheduled", None)
    for handle in list.__iter__(scheduled) if isinstance(scheduled, list) else ():
        callback = getattr(handle, "_callback", None)
        guarded = asyncio_timeout_task(callback, getattr(handle, "_args", ()))
        if guarded is not None and guarded in tasks and not handle.cancelled():
            deadlines.append(handle.when())
    known = [deadline for deadline in deadlines if deadline is not None]
    return min(known) if known else None


def time_left(loop: asyncio.AbstractEventLoop | None = None) -> float | None:
    """Seconds until :func:`current_deadline` of ``loop`` (default: the running loop; 0.0 once
    it has passed), or None: the budget to hand a database or an HTTP call.

    0.0 also while the current task is being cancelled (``task.cancelling()``): once a timeout
    guarding it has expired, its deadline has left the wheel, but until its block exits the
    task has no time left to hand on, whatever other timeout is still pending (an outer
    ``timeout(1)`` expired inside an inner ``timeout(5)`` leaves 0.0, not 4.0), and a cleanup
    that asks must not start a call it cannot finish.

    >>> await conn.execute(query, timeout=aiowheel.time_left())
    """
    found = _current_task(loop, "time_left()")
    if found is None:
        return None
    return tasks_left(*found)


def tasks_left(
    loop: asyncio.AbstractEventLoop, *tasks: asyncio.Task[Any], before: float = math.inf
) -> float | None:
    """:func:`time_left` of ``tasks`` together (tasks of ``loop``): 0.0 while any of them is
    being cancelled, else the seconds until the earliest :func:`task_deadline` of them; None
    if there is none before loop time ``before`` (:func:`deadline_before`)."""
    for task in tasks:
        if task.cancelling():
            return 0.0
    deadline = deadline_before(loop, tasks, before)
    if deadline is None:
        return None
    return max(0.0, deadline - loop.time())
