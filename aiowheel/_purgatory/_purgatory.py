"""Purgatory: operations that wait on keys until a condition holds or their deadline passes.

Kafka's story. A Kafka broker answers a produce request only once enough replicas have the
data, and a fetch only once enough bytes have arrived, or when the request's timeout passes.
Each such request is a *delayed operation*, parked in the ``DelayedOperationPurgatory``: it is
watched under one or more keys (a topic partition), and filed as a timer task. An event on a
key (a replica's fetch, a new batch) re-checks the operations watched under it
(``checkAndComplete``); the first check that finds the condition true completes the operation
(``onComplete``) and cancels its timer at once. Otherwise the timer expires it
(``onExpiration``). Exactly one of the two happens. Kafka wrote its hierarchical timing wheel
for this (KAFKA-3160, "Purgatory redesign"): the ``java.util.concurrent.DelayQueue`` it used
before could not remove a completed operation's timer, so the heap filled with the timers of
requests long answered. Almost every operation completes before its deadline; the wheel's O(1)
cancel is what makes that cheap. This module is the purgatory, on aiowheel's wheel.

The shape here, and where it leaves Kafka's:

- **Watchers: a dict of operations per key, purged eagerly.** ``_watchers`` maps each key to a
  ``dict`` whose keys are the live operations watched under it (an insertion-ordered set: a
  signal checks them oldest first, as Kafka's list does, and the order does not depend on
  object addresses, so a run replays exactly). An operation that finishes, whatever the way,
  is deleted from each of its keys' dicts at once: O(its keys). Kafka instead leaves completed
  operations in the other keys' lists and purges every list once the count of such stale
  entries passes ``purgeInterval`` (1000 by default), because its lists are shared by threads
  and an eager removal would take every key's lock. With one thread per loop there is no lock
  to take, so the eager removal is cheaper than the scan it saves, and memory is exactly the
  live operations': a key whose last operation leaves is deleted, and the top-level dict is
  rebuilt when it falls below a quarter of its peak (a Python dict never shrinks on deletion).
  A key's own dict keeps the capacity of its peak until it empties.
- **One thread, no locks.** Kafka takes a per-operation lock in ``safeTryComplete`` because a
  request thread and the expiration reaper can race. Here every operation changes state in the
  loop's thread only (:meth:`Purgatory.signal` refuses another thread: hand it over with
  ``loop.call_soon_threadsafe``; the thread is the one running the loop *now*, since asyncio
  lets a loop run in one thread and later in another), so a plain state field decides the one
  outcome: the first of complete, expire, cancel or fail to run wins and the others find it
  finished. Operations are kept by identity (``id``), never by their ``__eq__`` /
  ``__hash__``: two equal dataclass operations are two operations.
- **One loop at a time, not one for life.** A purgatory made at module level (the docs' first
  example) binds to the loop that first uses it, and moves to the next loop once that one is
  closed or has no live operation, as each ``asyncio.run`` or test starts a loop of its own.
  Operations left on a closed loop end as cancelled when it moves (nothing can await them).
  A purgatory given a timer stays on the timer's loop.
  Kafka's ``tryCompleteElseWatch`` checks twice, before and after watching, to close the race
  with an event on another thread; here the check and the watching happen in one step.
- **Expiry on the loop, not a reaper thread.** Kafka expires operations on a separate executor
  so the reaper never waits on an ``onExpiration``. The timer of an operation is an ordinary
  aiowheel callback (``timer.call_at``, on the loop's own wheel in loop mode): the wheel's
  due batch runs it as one loop callback, and all it does for an awaited wait is to set a
  future's exception.
- **Awaiting is the main form.** ``await purgatory.wait(keys, check, timeout)`` returns the
  first value ``check()`` gives that is neither None nor False (so a predicate and a lookup
  both read naturally). The operation *is* the future the task awaits, and the callable the
  timer calls: per wait there is one object, its timer handle and one entry per key, no
  coroutine frame, no extra future, no closure. It is not an
  :class:`asyncio.Future` but speaks its protocol, and the coroutine protocol too, so that
  ``wait`` can be awaited, gathered and handed to ``create_task`` as the ``async def`` it
  reads as; how, and why one object, is the docstring of :mod:`aiowheel._purgatory._wait`, its room.
  An ``async def`` check is refused, not awaited: a signal runs the checks synchronously, and
  the check-then-complete step that makes every outcome exactly-once without locks would be
  torn apart by an ``await`` inside it. Cancelling the task cancels that future, which takes
  the operation out of its keys and the wheel before it returns.
- **The callback form** (:class:`DelayedOperation`, for code that does not await):
  ``try_complete`` / ``on_complete`` / ``on_expiration`` as Kafka's, plus ``on_cancel`` and a
  fourth outcome, *failed*, for a ``try_complete`` that raises (Kafka lets that exception
  escape into the thread that signalled; here it is reported to the loop's exception handler
  and the operation leaves its keys, so one broken operation cannot stop a signal from
  reaching the others). Kafka runs ``onComplete`` on expiry too (after ``forceComplete``);
  here each outcome has its own hook and exactly one of them runs.

What it costs (``python -m bench.purgatory``, on the performance page): a wait that completes
is one future, one timer filed and cancelled, and a dict insertion and deletion per key; a
signal costs one ``check()`` call per operation watched under that key and nothing for any
other key. The stock way (``asyncio.Condition`` per key and ``wait_for``) wakes every task
waiting on the key to re-check, each through the condition's lock, and keeps a heap timer per
waiter.

The rooms: this one holds the purgatory's public calls (``wait``, ``watch``, ``signal`` and
the re-check it runs, the argument checks) and :class:`PurgatoryStats`; the book they and the
operations write (the states, the watchers, the counters, the binding to a loop) is
:mod:`aiowheel._purgatory._watchers`, under :class:`Purgatory` as its base class; the awaited wait
is :mod:`aiowheel._purgatory._wait` and the callback form :mod:`aiowheel._purgatory._delayed`,
between the two.

Compiled in the compiled build (mypyc), like the wheel under it: the purgatory, the wait and
:class:`DelayedOperation` are native classes (``DelayedOperation`` allows interpreted
subclasses, which is how users write theirs). Parameters that take user input are typed
``T | Unchecked`` so that the module's own checks, not mypyc's, name a bad argument, and both
builds answer alike. The pure-Python module is the same source and behaves the same.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import threading
from collections.abc import Awaitable, Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Final, TypeVar, cast

from .._common import _validate
from .._common._validate import Seconds, Unchecked
from .._time._timer import Timer
from ._delayed import DelayedOperation, attempt
from ._signals import Signals
from ._wait import Wait
from ._watchers import (
    CHECKING,
    COMPLETED,
    EXPIRED,
    FIRST,
    NEW,
    PENDING,
    Watchers,
    awaitable_answer_error,
)

__all__ = ["DelayedOperation", "Purgatory", "PurgatoryStats"]

_T = TypeVar("_T")

_get_ident: Final = threading.get_ident
_get_running_loop: Final = asyncio._get_running_loop
_inf: Final = math.inf


@dataclass(frozen=True, slots=True)
class PurgatoryStats:
    """A snapshot of a Purgatory's counters (see :meth:`Purgatory.stats`).

    Every operation ends exactly once, in one of ``completed``, ``expired``, ``cancelled``
    or ``failed``; ``live`` are those that have not ended yet.
    """

    live: int
    """Operations watched now (awaited waits and DelayedOperations)."""
    keys: int
    """Keys with at least one live operation (no other key takes memory)."""
    completed: int
    """Operations whose condition held (or that were force-completed)."""
    expired: int
    """Operations whose deadline passed first."""
    cancelled: int
    """Operations cancelled first (a waiting task cancelled, or ``cancel()``)."""
    failed: int
    """Operations whose ``check`` / ``try_complete`` raised (the error went to the waiter, or
    to the loop's exception handler for a DelayedOperation)."""


class Purgatory(Watchers):
    """Operations that wait under keys until a condition holds or a deadline passes (Kafka's
    ``DelayedOperationPurgatory``, on aiowheel's wheel).

    A task waits with :meth:`wait`; code that changes the state a condition reads calls
    :meth:`signal` with the key it changed, which re-checks only the operations watched under
    that key. A purgatory serves one event loop at a time: the first loop it is used in, and
    the next once that one is closed or has no live operation (so one made at module level
    serves each ``asyncio.run`` and each test in turn); with ``timer`` given, the timer's
    loop only. Deadlines are filed on ``timer`` (default: the loop's default Timer,
    :func:`aiowheel.get_timer`, which on a loop-mode loop is the loop's own wheel). With
    ``signals`` (:class:`aiowheel.redis.RedisSignals`), signals reach other processes too.

    >>> purgatory = aiowheel.Purgatory()
    >>> messages: dict[str, list[str]] = {}
    >>> async def poll(topic):                    # waits up to 30 s for a message
    ...     return await purgatory.wait([topic], lambda: messages.pop(topic, None), 30)
    >>> def publish(topic, message):
    ...     messages.setdefault(topic, []).append(message)
    ...     purgatory.signal(topic)               # wakes poll(topic), and only it
    """

    __slots__ = ()  # the book's attributes are slots of aiowheel._purgatory._watchers.Watchers

    def __init__(
        self, timer: Timer | Unchecked | None = None, *, signals: Signals | Unchecked | None = None
    ) -> None:
        if timer is not None and not isinstance(timer, Timer):
            raise TypeError(
                f"Purgatory(): timer must be an aiowheel.Timer or None, got {type(timer).__name__}"
            )
        # A wrong type is refused, and signals that serve another purgatory already.
        self._signals = None if signals is None else _adopt(self, signals)
        self._timer = timer
        self._given = timer is not None
        self._loop = None
        self._tid = 0
        self._watchers = {}
        self._peak = 0
        self._live = 0
        self._completed = 0
        self._expired = 0
        self._cancelled = 0
        self._failed = 0
        self._context = contextvars.Context()  # every wait's timer's (see Watchers)

    # -- introspection -------------------------------------------------------------------------

    def __len__(self) -> int:
        """The number of live operations."""
        return self._live

    def __repr__(self) -> str:
        state = "unbound" if self._loop is None else "bound"
        return f"<Purgatory {state} live={self._live} keys={len(self._watchers)}>"

    def stats(self) -> PurgatoryStats:
        """Counters: live operations, keys watched, and how many completed, expired, were
        cancelled or failed."""
        return PurgatoryStats(
            self._live,
            len(self._watchers),
            self._completed,
            self._expired,
            self._cancelled,
            self._failed,
        )

    def watched(self, key: Hashable) -> int:
        """How many live operations are watched under ``key`` (0 for a key never watched)."""
        try:
            ops = self._watchers.get(key)
        except TypeError:
            raise TypeError(
                f"Purgatory.watched(): key must be hashable, got {type(key).__name__}"
            ) from None
        return 0 if ops is None else len(ops)

    # -- waiting -------------------------------------------------------------------------------

    def wait(
        self, keys: Iterable[Hashable], check: Callable[[], _T | None], timeout: Seconds | None
    ) -> Wait[_T]:
        """Wait until ``check()`` returns something other than None or False, and return that.

        ``check()`` is called now, then each time one of ``keys`` is :meth:`signal`\\ led,
        in the loop's thread; the first value it returns that is neither None nor False is the
        result, so a predicate (``lambda: len(acks) >= 2``) returns True and a lookup
        (``lambda: ready.get(order_id)``) returns what it found. Past ``timeout`` seconds
        (None: no deadline) the wait raises :class:`TimeoutError`, naming its keys;
        ``timeout=0`` checks once. If ``check()`` raises, the wait raises that error (a
        ``StopIteration`` as a RuntimeError from it, as a coroutine would). A check must
        answer at once: an ``async def`` check, or one returning any awaitable, is refused
        with TypeError. Cancelling the waiting task takes the operation out of its keys and
        off the wheel at once.

        Use it as the coroutine it looks like: ``await`` it, hand it to
        ``asyncio.create_task``, ``TaskGroup.create_task``, ``asyncio.run`` or anyio's
        ``start_soon(purgatory.wait, keys, check, timeout)``. Called in a running loop, the
        operation is watched at once and what is returned is the operation itself, a future
        to asyncio too (:func:`asyncio.isfuture` holds: ``gather``, ``wait_for`` and
        ``shield`` take it without a task), done already if the first check held; called
        with no loop running (``asyncio.run(purgatory.wait(...))``), it starts when first
        awaited. Like any coroutine it is refused by :func:`asyncio.wait`: pass
        ``asyncio.create_task(purgatory.wait(...))`` there.

        >>> value = await purgatory.wait(["orders"], lambda: ready.get(order_id), 5.0)
        """
        # Every argument is checked before anything changes (the loop bound, a timer filed).
        if type(keys) is not tuple or len(keys) != 1:
            keys = _keys("wait", keys)
        else:
            try:
                hash(keys[0])
            except TypeError:
                keys = _keys("wait", keys)  # raises, naming it
        if not callable(check):
            raise TypeError(f"Purgatory.wait(): check must be callable, got {type(check).__name__}")
        if timeout is None:
            delay = _inf
        elif type(timeout) is float and timeout >= 0.0:
            delay = timeout
        else:
            delay = self._delay("wait", timeout)
        loop = _get_running_loop()
        if loop is None:
            # No loop yet (asyncio.run(p.wait(...)), loop.run_until_complete(...)): the wait
            # starts when a task first steps it, in that task's loop.
            return Wait(None, self, keys, check, delay)
        if loop is not self._loop:
            loop = self._bind("wait", loop)
        op: Wait[_T] = Wait(loop, self, keys, check, delay)
        op._start()
        return op

    def watch(
        self,
        operation: DelayedOperation | Unchecked,
        keys: Iterable[Hashable],
        timeout: Seconds | None,
    ) -> bool:
        """Try to complete ``operation`` now, else watch it under ``keys`` until it completes
        or ``timeout`` seconds (None: no deadline) pass (Kafka's ``tryCompleteElseWatch``).

        True if it completed at once. Each :meth:`signal` of one of ``keys`` calls its
        :meth:`~DelayedOperation.try_complete`; past the deadline its
        :meth:`~DelayedOperation.on_expiration` runs. An operation is watched once.

        >>> purgatory.watch(DelayedProduce(acks_needed=2), ["partition-0"], 30.0)
        """
        if not isinstance(operation, DelayedOperation):
            raise TypeError(
                "Purgatory.watch(): operation must be a DelayedOperation, "
                f"got {type(operation).__name__}"
            )
        if getattr(operation, "_phase", NEW) != NEW:
            raise RuntimeError(f"Purgatory.watch(): {operation!r} was watched already")
        keys = _keys("watch", keys)
        delay = _inf if timeout is None else self._delay("watch", timeout)
        self._bind("watch", _get_running_loop())
        operation._purgatory = self
        operation._keys = keys
        operation._handle = None
        operation._phase = FIRST
        if attempt(self, operation):
            return True
        if operation._phase != FIRST:
            return False  # it failed, or was cancelled from inside try_complete
        if delay == 0.0:
            operation._phase = EXPIRED
            self._expired += 1
            self._hook(operation, operation.on_expiration)
            return False
        if delay != _inf:
            timer = self._timer
            assert timer is not None
            operation._handle = timer.call_later(delay, operation)
        self._watch(operation, keys)
        operation._phase = PENDING
        return False

    # -- signalling -----------------------------------------------------------------------------

    def signal(self, key: Hashable) -> int:
        """Re-check the operations watched under ``key``, and only those; complete the ones
        whose condition now holds. Returns how many completed (here: with ``signals``, the
        key is also sent to every other process's purgatory on the channel, which re-checks
        its own operations of ``key``; see :mod:`aiowheel.redis`).

        Call it in the loop's thread: from a callback, a task, or another thread through
        ``loop.call_soon_threadsafe(purgatory.signal, key)``. Operations watched under
        ``key`` during the signal (by a check, say) are not checked by it: they were checked
        when they were watched.

        >>> messages["news"].append("hello")
        >>> purgatory.signal("news")
        1
        """
        signals = self._signals
        if signals is None:
            return self._recheck(key)
        return signals._signal(self, key, None)

    def _recheck(self, key: Hashable) -> int:
        """The local part of :meth:`signal` (all of it without ``signals``; a message from
        another process comes here)."""
        try:
            ops = self._watchers.get(key)
        except TypeError:
            raise TypeError(
                f"Purgatory.signal(): key must be hashable, got {type(key).__name__}"
            ) from None
        if ops is None:
            return 0
        if self._tid != _get_ident():
            if not self._on_loop_thread():
                raise RuntimeError(
                    "Purgatory.signal(): called from a thread that does not run the purgatory's"
                    " loop: hand it over with loop.call_soon_threadsafe(purgatory.signal, key)"
                )
            ops = self._watchers.get(key)  # it may have let a closed loop's operations go
            if ops is None:
                return 0
        completed = 0
        # A snapshot: a check may finish other operations of this key (or watch new ones).
        for op in tuple(ops.values()):
            if op._phase != PENDING:
                continue
            if type(op) is not Wait:
                if cast(DelayedOperation, op)._try():
                    completed += 1
                continue
            # Wait._try, inline: this loop is the purgatory's hot path.
            op._phase = CHECKING
            try:
                result = op._check()
            except BaseException as exc:
                op._failed(exc)
                continue
            if op._phase != CHECKING:
                continue  # cancelled by its own check
            if result is None or result is False:
                op._phase = PENDING
                continue
            if isinstance(result, Awaitable):
                op._failed(awaitable_answer_error("wait", "check", result))
                continue
            op._phase = COMPLETED
            self._completed += 1
            self._unwatch(op)
            op._done(result)
            completed += 1
        return completed

    # -- internals -----------------------------------------------------------------------------

    @staticmethod
    def _delay(method: str, timeout: object) -> float:
        """``timeout`` as a float number of seconds (inf for none), or a clear error."""
        if isinstance(timeout, bool):
            raise TypeError(
                f"Purgatory.{method}(): timeout must be a non-negative number of seconds "
                "or None, got bool"
            )
        given = timeout
        if not isinstance(timeout, float):
            try:
                timeout = _validate.seconds(f"Purgatory.{method}(): timeout", timeout)
            except TypeError:
                raise TypeError(
                    f"Purgatory.{method}(): timeout must be a non-negative number of seconds "
                    f"or None, got {type(timeout).__name__}"
                ) from None
        if not timeout >= 0.0:  # NaN too
            raise ValueError(
                f"Purgatory.{method}(): timeout must be a non-negative number, got {given!r}"
            )
        return timeout


def _adopt(purgatory: Purgatory, signals: object) -> Signals:
    """Check ``signals`` (Purgatory's parameter), hand it ``purgatory``, and return it."""
    if not isinstance(signals, Signals):
        raise TypeError(
            "Purgatory(): signals must be an aiowheel.redis.RedisSignals or None, got "
            f"{type(signals).__name__}"
        )
    signals._adopt(purgatory)
    return signals


def _keys(method: str, keys: object) -> tuple[Hashable, ...]:
    """``keys`` as a tuple of distinct hashable keys, in order, or a clear error."""
    if isinstance(keys, str | bytes):
        raise TypeError(
            f"Purgatory.{method}(): keys must be a collection of keys, got {type(keys).__name__} "
            "(for one key, pass [key])"
        )
    if type(keys) is tuple and len(keys) == 1:
        try:
            hash(keys[0])
        except TypeError:
            pass
        else:
            return keys  # the common case, kept as given: no copy
    if not isinstance(keys, Iterable):
        raise TypeError(
            f"Purgatory.{method}(): keys must be a collection of keys, got {type(keys).__name__}"
        )
    given = tuple(keys)  # once: an iterator can be read only once
    try:
        distinct = tuple(dict.fromkeys(given))
    except TypeError:
        for key in given:
            try:
                hash(key)
            except TypeError:
                raise TypeError(
                    f"Purgatory.{method}(): keys must be hashable, got {type(key).__name__} {key!r}"
                ) from None
        raise
    if not distinct:
        raise ValueError(f"Purgatory.{method}(): keys must not be empty")
    return distinct
