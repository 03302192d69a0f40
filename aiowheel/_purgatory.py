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
  both read naturally). The operation *is* the future the task
  awaits, and the callable the timer calls: per wait there is one object, its timer handle and
  one entry per key, no coroutine frame, no extra future, no closure. It is not a subclass of
  :class:`asyncio.Future` but speaks its protocol (``_asyncio_future_blocking``, done
  callbacks, ``result`` / ``exception`` / ``cancel`` / ``get_loop``), as asyncio lets any
  future-like object do: tasks, ``gather``, ``wait_for`` and ``shield`` take it as a future,
  and :func:`asyncio.isfuture` holds. It is its own iterator, so awaiting it allocates no
  ``FutureIter`` either. It also speaks the *coroutine* protocol (``send`` / ``throw`` /
  ``close``, registered as a :class:`collections.abc.Coroutine`), because people call
  ``wait`` as the ``async def`` it reads as: ``asyncio.create_task(purgatory.wait(...))``,
  ``TaskGroup.create_task``, ``asyncio.run`` and anyio's ``start_soon`` all demand a
  coroutine. A task steps it as it would an ``async def`` whose body awaits the wait: the
  first step yields the wait itself to the task, the wake-up's step ends with its result,
  and an error thrown in (the task cancelled) cancels the wait first. The one place the two
  protocols collide is :func:`asyncio.wait`, which refuses every coroutine: there, as for an
  ``async def``, pass a task. Made with no loop running (``asyncio.run(purgatory.wait(...))``)
  a wait is not a future yet (``_asyncio_future_blocking`` is None, so asyncio wraps it in a
  task) and starts at its first step. An ``async def`` check is refused, not awaited: a
  signal runs the checks synchronously, and the check-then-complete step that makes every
  outcome exactly-once without locks would be torn apart by an ``await`` inside it.
  Why one object: more than half of a wait's cost is the cyclic collector's passes
  over the objects each waiting task keeps alive (``python -m bench.purgatory
  --collector-off``); one object fewer per wait, and native slots instead of a C future plus a
  Python subclass's, is what took the bench past 5x the stock way. Cancelling the task cancels
  that future, which takes the operation out of its keys and the wheel before it returns.
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

Compiled in the compiled build (mypyc), like the wheel under it: the purgatory, the wait and
:class:`DelayedOperation` are native classes (``DelayedOperation`` allows interpreted
subclasses, which is how users write theirs). Parameters that take user input are typed
``T | Unchecked`` so that the module's own checks, not mypyc's, name a bad argument, and both
builds answer alike. The pure-Python module is the same source and behaves the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Generic, TypeVar, final

from . import _validate
from ._build import mypyc_attr
from ._default import get_timer
from ._handles import Handle
from ._observe import classify
from ._signals import Signals
from ._timer import Timer
from ._validate import Seconds, Unchecked

__all__ = ["DelayedOperation", "Purgatory", "PurgatoryStats"]

_T = TypeVar("_T")

_get_ident: Final = threading.get_ident
_get_running_loop: Final = asyncio._get_running_loop
_inf: Final = math.inf

# An operation's state. Only the loop's thread writes it; the first transition out of
# _PENDING / _CHECKING to a final state wins, and every other path finds it final and does
# nothing: that is the whole exactly-once rule.
_NEW: Final = 0  # a DelayedOperation not yet watched
_FIRST: Final = 1  # its first check, in watch(), before it is watched
_PENDING: Final = 2  # watched under its keys
_CHECKING: Final = 3  # watched, and its check is running (a re-entrant signal skips it)
_COMPLETED: Final = 4  # the final states, from here on
_EXPIRED: Final = 5
_CANCELLED: Final = 6
_FAILED: Final = 7
_OUTCOMES: Final = {
    _NEW: "new",
    _FIRST: "pending",
    _PENDING: "pending",
    _CHECKING: "pending",
    _COMPLETED: "completed",
    _EXPIRED: "expired",
    _CANCELLED: "cancelled",
    _FAILED: "failed",
}

# The top-level watcher dict is rebuilt when it falls below a quarter of its peak, once the
# peak is above this (a smaller table is not worth the copy).
_SHRINK_FLOOR: Final = 64


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


class Purgatory:
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

    __slots__ = (
        "_cancelled",
        "_completed",
        "_context",
        "_expired",
        "_failed",
        "_given",
        "_live",
        "_loop",
        "_peak",
        "_signals",
        "_tid",
        "_timer",
        "_watchers",
    )

    def __init__(
        self, timer: Timer | Unchecked | None = None, *, signals: Signals | Unchecked | None = None
    ) -> None:
        if timer is not None and not isinstance(timer, Timer):
            raise TypeError(
                f"Purgatory(): timer must be an aiowheel.Timer or None, got {type(timer).__name__}"
            )
        # A wrong type is refused, and signals that serve another purgatory already.
        self._signals: Signals | None = None if signals is None else _adopt(self, signals)
        self._timer: Timer | None = timer
        self._given = timer is not None  # its timer (and so its loop) was given: it never moves
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tid = 0
        # key -> {id(operation): operation}: operations are themselves, whatever __eq__ and
        # __hash__ a DelayedOperation subclass defines (a dataclass's, say).
        self._watchers: dict[Hashable, dict[int, _Operation]] = {}
        self._peak = 0
        self._live = 0
        self._completed = 0
        self._expired = 0
        self._cancelled = 0
        self._failed = 0
        # The context a wait's timer runs in: all it does is fail a future, which reads no
        # context variable, so one empty context serves every wait (no copy per operation).
        self._context = contextvars.Context()

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
    ) -> _Wait[_T]:
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
            return _Wait(None, self, keys, check, delay)
        if loop is not self._loop:
            loop = self._bind("wait", loop)
        op: _Wait[_T] = _Wait(loop, self, keys, check, delay)
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
        if getattr(operation, "_phase", _NEW) != _NEW:
            raise RuntimeError(f"Purgatory.watch(): {operation!r} was watched already")
        keys = _keys("watch", keys)
        delay = _inf if timeout is None else self._delay("watch", timeout)
        self._bind("watch", _get_running_loop())
        operation._purgatory = self
        operation._keys = keys
        operation._handle = None
        operation._phase = _FIRST
        if self._attempt(operation):
            return True
        if operation._phase != _FIRST:
            return False  # it failed, or was cancelled from inside try_complete
        if delay == 0.0:
            operation._phase = _EXPIRED
            self._expired += 1
            self._hook(operation, operation.on_expiration)
            return False
        if delay != _inf:
            timer = self._timer
            assert timer is not None
            operation._handle = timer.call_later(delay, operation)
        self._watch(operation, keys)
        operation._phase = _PENDING
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
            if op._phase != _PENDING:
                continue
            if type(op) is not _Wait:
                if op._try():
                    completed += 1
                continue
            # _Wait._try, inline: this loop is the purgatory's hot path.
            op._phase = _CHECKING
            try:
                result = op._check()
            except BaseException as exc:
                op._failed(exc)
                continue
            if op._phase != _CHECKING:
                continue  # cancelled by its own check
            if result is None or result is False:
                op._phase = _PENDING
                continue
            if isinstance(result, Awaitable):
                op._failed(_awaited("wait", "check", result))
                continue
            op._phase = _COMPLETED
            self._completed += 1
            self._unwatch(op)
            op._done(result)
            completed += 1
        return completed

    # -- internals -----------------------------------------------------------------------------

    def _bind(
        self, method: str, running: asyncio.AbstractEventLoop | None
    ) -> asyncio.AbstractEventLoop:
        """The running loop ``running``, which becomes this purgatory's: bound on first use, and
        again once its earlier loop is closed or it has no live operation there (a module-level
        purgatory serves each ``asyncio.run`` in turn). Refused while operations live on an
        open loop, and for a purgatory given a timer (the timer's loop is its loop)."""
        loop = self._loop
        if running is None:
            raise RuntimeError(f"Purgatory.{method}(): needs a running event loop")
        if running is loop:
            self._tid = _get_ident()  # the loop may run in another thread than it did
            return running
        if loop is not None:
            if self._given:
                raise RuntimeError(
                    f"Purgatory.{method}(): this purgatory belongs to another event loop (the "
                    "loop of the timer it was given)"
                )
            if self._live and not loop.is_closed():
                raise RuntimeError(
                    f"Purgatory.{method}(): this purgatory belongs to another event loop, where "
                    f"{self._live} operation(s) still wait (it moves to a new loop once that "
                    "loop is closed or has none left)"
                )
            _abandon(self)
            self._timer = None
        timer = self._timer if self._timer is not None else get_timer()
        self._timer = timer
        self._loop = running
        self._tid = _get_ident()
        if self._signals is not None:
            self._signals._attach(self, running)  # listen for other processes' signals here
        return running

    def _on_loop_thread(self) -> bool:
        """The slow path of the thread check (this thread did not use the purgatory last):
        True if this thread runs the purgatory's loop now (a loop may run in another thread
        than before), or a new loop the purgatory may move to (then it has moved)."""
        running = _get_running_loop()
        if running is None:
            return False
        if running is not self._loop:
            loop = self._loop
            if self._given or (loop is not None and self._live and not loop.is_closed()):
                return False
        self._bind("signal", running)
        return True

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

    def _watch(self, op: _Operation, keys: tuple[Hashable, ...]) -> None:
        """Watch ``op`` under ``keys`` (its timer is filed: that is what can refuse)."""
        watchers = self._watchers
        ident = id(op)
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = {ident: op}
                if len(watchers) > self._peak:
                    self._peak = len(watchers)
            else:
                ops[ident] = op
        self._live += 1

    def _unwatch(self, op: _Operation) -> None:
        """Take a finished ``op`` out of its keys and off the wheel: O(its keys)."""
        handle = op._handle
        if handle is not None:
            op._handle = None
            handle.cancel()
        watchers = self._watchers
        ident = id(op)
        for key in op._keys:
            ops = watchers[key]
            if len(ops) == 1:
                del watchers[key]
                peak = self._peak
                if peak > _SHRINK_FLOOR and len(watchers) < peak >> 2:
                    # Dicts keep their peak's table: copy to a right-sized one.
                    self._watchers = watchers = dict(watchers)
                    self._peak = len(watchers)
            else:
                del ops[ident]
        self._live -= 1

    def _attempt(self, op: DelayedOperation) -> bool:
        """Run ``op.try_complete()`` (its state is _FIRST or _CHECKING, as it is being
        watched or watched); complete it if it says so. True if it completed now. An exception
        fails it."""
        trying = op._phase
        # Through an object-typed callable: a subclass's try_complete may answer with any
        # value (None for "not yet", a count...), read by its truth in both builds (a call
        # typed bool would make the compiled build refuse all but bool).
        try_complete: Callable[[], object] = op.try_complete
        try:
            holds = try_complete()
        except (SystemExit, KeyboardInterrupt):
            if op._phase == trying:
                op._phase = _NEW if trying == _FIRST else _PENDING
            raise
        except BaseException as exc:
            if op._phase != trying:
                return False  # it ended inside try_complete (cancelled, say)
            op._phase = _FAILED
            self._failed += 1
            if trying == _CHECKING:
                self._unwatch(op)
            self._report(op, "try_complete", exc)
            return False
        if op._phase == _COMPLETED:
            return True  # try_complete called force_complete itself
        if op._phase != trying:
            return False
        if isinstance(holds, Awaitable):
            refused = _awaited("watch", "operation.try_complete", holds)
            if trying == _FIRST:
                op._phase = _NEW  # refused by watch(): nothing watched, nothing counted
                raise refused
            op._phase = _FAILED
            self._failed += 1
            self._unwatch(op)
            self._report(op, "try_complete", refused)
            return False
        if not holds:
            return False
        op._phase = _COMPLETED
        if trying == _CHECKING:
            self._unwatch(op)
        self._completed += 1
        self._hook(op, op.on_complete)
        return True

    def _hook(self, op: DelayedOperation, hook: Callable[[], object]) -> None:
        """Run one of ``op``'s outcome hooks; an exception goes to the loop's handler."""
        try:
            hook()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(op, hook.__name__, exc)

    def _report(self, op: DelayedOperation, where: str, exc: BaseException) -> None:
        loop = self._loop
        assert loop is not None
        loop.call_exception_handler(
            {
                "message": f"Exception in {type(op).__qualname__}.{where}()",
                "exception": exc,
                "operation": op,
            }
        )


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
                    f"Purgatory.{method}(): keys must be hashable, got {type(key).__name__} "
                    f"{key!r}"
                ) from None
        raise
    if not distinct:
        raise ValueError(f"Purgatory.{method}(): keys must not be empty")
    return distinct


@final
class _Wait(Generic[_T]):
    """The operation behind :meth:`Purgatory.wait`, and the future the waiting task awaits:
    one object per wait, with asyncio's future protocol (:func:`asyncio.isfuture` holds, so
    ``await``, tasks, ``gather``, ``wait_for`` and ``shield`` take it as a future), its
    bookkeeping, and (called) the timer's expiry. Awaiting it allocates nothing more: it is
    its own iterator."""

    # On the class too, as asyncio.Future has it: asyncio.isfuture() looks for it there. None
    # on a wait made with no loop running: not a future yet, so asyncio wraps it in a task.
    _asyncio_future_blocking: bool | None = False
    _loop: asyncio.AbstractEventLoop | None
    _purgatory: Purgatory
    _keys: tuple[Hashable, ...]
    _check: Callable[[], _T | None]
    _timeout: float
    _handle: Handle | None
    _phase: int
    _result: object
    _exception: BaseException | None
    _traceback: object
    _cancelled: bool
    _cancel_message: object
    _callback: Callable[..., object] | None  # the first done callback (a task's wake-up)
    _context: contextvars.Context | None
    _more: list[tuple[Callable[..., object], contextvars.Context]] | None

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop | None,
        purgatory: Purgatory,
        keys: tuple[Hashable, ...],
        check: Callable[[], _T | None],
        timeout: float,
    ) -> None:
        self._loop = loop
        self._purgatory = purgatory
        self._keys = keys
        self._check = check
        self._timeout = timeout
        self._handle = None
        if loop is None:
            self._asyncio_future_blocking = None
            self._phase = _NEW  # started by the first task step (_begin)
        else:
            self._asyncio_future_blocking = False
            self._phase = _FIRST
        self._result = None
        self._exception = None
        self._traceback = None
        self._cancelled = False
        self._cancel_message = None
        self._callback = None
        self._context = None
        self._more = None

    # -- the operation ---------------------------------------------------------------------------

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The keys it is watched under."""
        return self._keys

    @property
    def __name__(self) -> str:
        """Its name as a coroutine (a task's repr shows ``coro=<Purgatory.wait()>``)."""
        return "Purgatory.wait"

    def _done(self, result: object) -> None:
        """It completed with ``result`` (its phase is final already): wake its waiters."""
        self._result = result
        self._schedule()

    def _fail(self, exc: BaseException) -> None:
        """It ended with ``exc`` (its phase is final already): a CancelledError cancels it."""
        if isinstance(exc, asyncio.CancelledError):
            self._cancelled = True
            self._cancel_message = exc.args[0] if exc.args else None
        else:
            self._exception = exc
            self._traceback = exc.__traceback__
        self._schedule()

    def _failed(self, exc: BaseException) -> None:
        """Its check raised ``exc`` (its phase was _CHECKING), or answered with what it may
        not (``exc`` is then the TypeError saying so)."""
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            if self._phase == _CHECKING:
                self._phase = _PENDING
            raise exc
        if self._phase == _CHECKING:  # not cancelled by its own check
            self._phase = _FAILED
            purgatory = self._purgatory
            purgatory._failed += 1
            purgatory._unwatch(self)
            self._fail(_checked(exc))

    def __call__(self) -> None:
        """The timer's callback: the deadline passed."""
        if self._phase == _PENDING:
            self._phase = _EXPIRED
            self._handle = None  # it fired: nothing to cancel
            purgatory = self._purgatory
            purgatory._expired += 1
            purgatory._unwatch(self)
            self._fail(self._timed_out())

    def _timed_out(self) -> TimeoutError:
        """The error of a wait whose deadline passed, naming its keys and timeout."""
        return TimeoutError(
            f"Purgatory.wait(): no result within {self._timeout:g} s for keys "
            f"{list(self._keys)!r}"
        )

    def _schedule(self) -> None:
        """Schedule the done callbacks (as a future does: each a loop callback)."""
        callback = self._callback
        loop = self._loop
        assert loop is not None  # a wait that ends has started
        try:
            if callback is not None:
                self._callback = None
                loop.call_soon(callback, self, context=self._context)
                self._context = None
            more = self._more
            if more is not None:
                self._more = None
                for callback, context in more:
                    loop.call_soon(callback, self, context=context)
        except RuntimeError:
            if not loop.is_closed():
                raise
            # A wait left on a closed loop, ended from the next one: nothing can await it.

    def _start(self) -> None:
        """Its first check, and its watching if that did not end it (it is bound: its phase
        is _FIRST). A check that answers with an awaitable is refused: TypeError from here,
        nothing watched or counted."""
        purgatory = self._purgatory
        try:
            result = self._check()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._phase = _FAILED
            purgatory._failed += 1
            self._fail(_checked(exc))
            return
        if result is not None and result is not False:
            if isinstance(result, Awaitable):
                self._phase = _NEW
                raise _awaited("wait", "check", result)
            self._phase = _COMPLETED
            purgatory._completed += 1
            self._done(result)
            return
        delay = self._timeout
        if delay == 0.0:
            self._phase = _EXPIRED
            purgatory._expired += 1
            self._fail(self._timed_out())
            return
        if delay != _inf:
            timer = purgatory._timer
            assert timer is not None
            self._handle = timer.call_later(delay, self, context=purgatory._context)
        purgatory._watch(self, self._keys)
        self._phase = _PENDING

    def _begin(self) -> None:
        """Start a wait made with no loop running, in the loop of the task stepping it."""
        running = _get_running_loop()
        if running is None:
            raise RuntimeError("Purgatory.wait(): awaited with no running event loop")
        purgatory = self._purgatory
        if running is not purgatory._loop:
            running = purgatory._bind("wait", running)
        self._loop = running
        self._asyncio_future_blocking = False
        self._phase = _FIRST
        self._start()

    # -- asyncio's future protocol -----------------------------------------------------------------

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel the wait (what cancelling the waiting task does): the operation leaves its
        keys and the wheel before this returns. False if it had ended already."""
        if self._phase >= _COMPLETED:
            return False
        self._cancelled = True
        self._cancel_message = msg
        if self._phase == _NEW:  # never started: nothing watched, nothing to wake
            self._phase = _CANCELLED
            return True
        self._phase = _CANCELLED
        purgatory = self._purgatory
        purgatory._cancelled += 1
        purgatory._unwatch(self)
        self._schedule()
        return True

    def cancelled(self) -> bool:
        """True if the wait was cancelled."""
        return self._cancelled

    def done(self) -> bool:
        """True once the wait has its outcome."""
        return self._phase >= _COMPLETED

    def result(self) -> _T:
        """The value ``check()`` returned; raises what ended the wait otherwise."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if self._phase < _COMPLETED:
            raise asyncio.InvalidStateError("Result is not ready.")
        exc = self._exception
        if exc is not None:
            raise exc.with_traceback(self._traceback)  # type: ignore[arg-type]
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        """What ended the wait (TimeoutError, the check's error), or None if it completed."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if self._phase < _COMPLETED:
            raise asyncio.InvalidStateError("Exception is not set.")
        return self._exception

    def get_loop(self) -> asyncio.AbstractEventLoop:
        """The loop the wait belongs to (RuntimeError before a wait made with no loop running
        has started)."""
        loop = self._loop
        if loop is None:
            raise RuntimeError("Purgatory.wait(): not started yet (made with no loop running)")
        return loop

    def add_done_callback(
        self, fn: Callable[..., object], *, context: contextvars.Context | None = None
    ) -> None:
        """Call ``fn(wait)`` (as a loop callback) once the wait has its outcome."""
        if context is None:
            context = contextvars.copy_context()
        if self._phase >= _COMPLETED and self._loop is not None:
            self._loop.call_soon(fn, self, context=context)
        elif self._callback is None and self._more is None:
            self._callback = fn
            self._context = context
        else:
            if self._more is None:
                self._more = []
            self._more.append((fn, context))

    def remove_done_callback(self, fn: Callable[..., object]) -> int:
        """Remove every registration of ``fn``; how many there were."""
        removed = 0
        if self._callback is not None and self._callback == fn:
            self._callback = None
            self._context = None
            removed += 1
        more = self._more
        if more is not None:
            kept = [(callback, context) for callback, context in more if callback != fn]
            removed += len(more) - len(kept)
            self._more = kept or None
        return removed

    def _make_cancelled_error(self) -> asyncio.CancelledError:
        msg = self._cancel_message
        return asyncio.CancelledError() if msg is None else asyncio.CancelledError(msg)

    @property
    def _callbacks(self) -> list[tuple[Callable[..., object], contextvars.Context | None]]:
        """The done callbacks and their contexts (as a future's ``_callbacks``)."""
        found: list[tuple[Callable[..., object], contextvars.Context | None]] = []
        if self._callback is not None:
            found.append((self._callback, self._context))
        if self._more is not None:
            found.extend(self._more)
        return found

    def __await__(self) -> Generator[Any, None, _T]:
        return self  # its own iterator: no object per await

    def __iter__(self) -> Generator[Any, None, _T]:
        return self  # as __await__ (``yield from``)

    def __next__(self) -> object:
        phase = self._phase
        if phase < _COMPLETED:
            if phase == _NEW:
                self._begin()
                if self._phase >= _COMPLETED:
                    raise StopIteration(self.result())
            self._asyncio_future_blocking = True
            return self  # to the task, which adds its wake-up as a done callback
        raise StopIteration(self.result())

    # The rest of the coroutine protocol: a wait is accepted wherever a coroutine is
    # (asyncio.create_task, TaskGroup.create_task, asyncio.run, anyio's start_soon).

    def send(self, value: object) -> object:
        """The coroutine's ``send`` (a task sends None): step the wait."""
        return self.__next__()

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> object:
        """The coroutine's ``throw``: the error goes to the awaiting code, and a wait still
        pending is cancelled first (it leaves its keys and the wheel), as an ``async def``
        wait would be by the error arriving at its ``await``."""
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        if tb is not None:
            val = val.with_traceback(tb)
        if self._phase < _COMPLETED:
            self.cancel()
        raise val

    def close(self) -> None:
        """The coroutine's ``close``: cancel the wait if it is still pending."""
        if self._phase < _COMPLETED:
            self.cancel()

    def __repr__(self) -> str:
        return f"<Purgatory.wait keys={list(self._keys)!r} {_OUTCOMES.get(self._phase, 'new')}>"

    def _waiter(self) -> object:
        """The task awaiting this wait (for pending_timers), or None."""
        return classify("purgatory", None, self)[2]

    def _census_entry(self) -> tuple[object, object, object]:
        """For the census (aiowheel._census._operation): this wait, what names its origin
        (the task awaiting it), that task."""
        return self, None, self._waiter()


@mypyc_attr(allow_interpreted_subclasses=True)
class DelayedOperation:
    """An operation for :meth:`Purgatory.watch`, for code that does not await: subclass it
    and override :meth:`try_complete` and the outcome hooks (Kafka's ``DelayedOperation``).

    Exactly one outcome hook runs, once: :meth:`on_complete` (the condition held, or
    :meth:`force_complete`), :meth:`on_expiration` (the deadline passed first) or
    :meth:`on_cancel` (:meth:`cancel` first). If :meth:`try_complete` raises, the operation
    *fails*: it leaves its keys and the wheel, no hook runs, and the error goes to the loop's
    exception handler. So does an error from a hook. Hooks run in the loop's thread: a
    completion inside the :meth:`Purgatory.signal` call that caused it, an expiry in a loop
    callback.

    >>> class AcksOperation(aiowheel.DelayedOperation):
    ...     def __init__(self, acks, needed):
    ...         super().__init__()
    ...         self.acks, self.needed = acks, needed
    ...     def try_complete(self):
    ...         return len(self.acks) >= self.needed
    ...     def on_complete(self):
    ...         print("committed")
    ...     def on_expiration(self):
    ...         print("timed out")
    """

    _purgatory: Purgatory
    _keys: tuple[Hashable, ...]
    _handle: Handle | None
    _phase: int

    def __init__(self) -> None:
        self._phase = _NEW

    # -- to override -----------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Check the condition: a true value if it holds (the operation then completes, and
        :meth:`on_complete` runs); None, False or any false value if not yet. Called when
        watched and on each signal of its keys, and must answer at once: an ``async def``
        try_complete is refused (TypeError from :meth:`Purgatory.watch`). It may also call
        :meth:`force_complete` itself (Kafka's style) and return True."""
        return False

    def on_complete(self) -> None:
        """The operation completed (its condition held, or :meth:`force_complete`)."""

    def on_expiration(self) -> None:
        """The deadline passed before the operation completed."""

    def on_cancel(self) -> None:
        """:meth:`cancel` ended the operation first."""

    # -- to call ---------------------------------------------------------------------------------

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The keys it is watched under (empty before it is watched)."""
        return getattr(self, "_keys", ())

    @property
    def outcome(self) -> str:
        """``"new"`` (not watched yet), ``"pending"``, ``"completed"``, ``"expired"``,
        ``"cancelled"`` or ``"failed"``."""
        return _OUTCOMES[getattr(self, "_phase", _NEW)]

    def done(self) -> bool:
        """True once the operation has its outcome."""
        return getattr(self, "_phase", _NEW) >= _COMPLETED

    def force_complete(self) -> bool:
        """Complete the operation now, whatever its condition: it leaves its keys and the
        wheel and :meth:`on_complete` runs. True if this call completed it; False if it had
        an outcome already (Kafka's ``forceComplete``)."""
        return self._end(_COMPLETED, "force_complete")

    def cancel(self) -> bool:
        """Cancel the operation: it leaves its keys and the wheel and :meth:`on_cancel`
        runs. True if this call cancelled it; False if it had an outcome already."""
        return self._end(_CANCELLED, "cancel")

    def __call__(self) -> None:
        """The timer's callback (Kafka's ``TimerTask.run``): expire the operation if it is
        still pending. The purgatory calls it at the deadline."""
        if getattr(self, "_phase", _NEW) == _PENDING:
            self._handle = None  # it fired: nothing to cancel
            self._end(_EXPIRED, "expire")

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} keys={list(self.keys)!r} {self.outcome}>"

    # -- internals -------------------------------------------------------------------------------

    def _end(self, outcome: int, method: str) -> bool:
        state = getattr(self, "_phase", _NEW)
        if state == _NEW:
            raise RuntimeError(f"{type(self).__qualname__}.{method}(): not watched yet")
        if state >= _COMPLETED:
            return False
        purgatory = self._purgatory
        if purgatory._tid != _get_ident() and not purgatory._on_loop_thread():
            raise RuntimeError(
                f"{type(self).__qualname__}.{method}(): called from a thread that does not run "
                "the purgatory's loop: hand it over with loop.call_soon_threadsafe"
            )
        if self._phase >= _COMPLETED:
            return False  # it was left on a closed loop, and ended when the purgatory moved
        self._phase = outcome
        if state != _FIRST:  # watched under its keys
            purgatory._unwatch(self)
        if outcome == _COMPLETED:
            purgatory._completed += 1
            purgatory._hook(self, self.on_complete)
        elif outcome == _EXPIRED:
            purgatory._expired += 1
            purgatory._hook(self, self.on_expiration)
        else:
            purgatory._cancelled += 1
            purgatory._hook(self, self.on_cancel)
        return True

    def _try(self) -> bool:
        """A signal's re-check (the state is _PENDING): True if it completed now."""
        self._phase = _CHECKING
        completed = self._purgatory._attempt(self)
        if self._phase == _CHECKING:
            self._phase = _PENDING
        return completed

    def _waiter(self) -> object:
        """What pending_timers names it by: its class (no task waits on it)."""
        return None

    def _census_entry(self) -> tuple[object, object, object]:
        """For the census (aiowheel._census._operation): this operation, its class (what names
        it: no task waits on it), no task."""
        return self, type(self), None


_Operation = _Wait[Any] | DelayedOperation

# A wait answers to asyncio.iscoroutine and anyio's check as the coroutine it stands for (its
# send / throw / close / __await__ would make collections.abc.Coroutine's hook say so of a
# Python class; a compiled class is registered to be sure).
Coroutine.register(_Wait)


def _abandon(purgatory: Purgatory) -> None:
    """End the operations ``purgatory`` left on a closed loop (nothing can await them any
    more) as cancelled, each once: a DelayedOperation's on_cancel runs."""
    left: dict[int, _Operation] = {}
    for ops in purgatory._watchers.values():
        left.update(ops)
    purgatory._watchers = {}
    purgatory._peak = 0
    purgatory._live = 0
    for op in left.values():
        if op._phase >= _COMPLETED:
            continue
        op._phase = _CANCELLED
        purgatory._cancelled += 1
        handle = op._handle
        op._handle = None
        if handle is not None:
            with contextlib.suppress(Exception):  # a closed loop's timer: it never runs
                handle.cancel()
        if type(op) is _Wait:
            op._cancelled = True  # no callback: its loop is closed
        elif isinstance(op, DelayedOperation):
            purgatory._hook(op, op.on_cancel)


def _checked(exc: BaseException) -> BaseException:
    """What a wait raises for an error from its check: the error itself, but a StopIteration
    as a RuntimeError from it (raised into a task's coroutine, it would end the coroutine as
    if it returned; asyncio.Future refuses it for that reason)."""
    if isinstance(exc, StopIteration | StopAsyncIteration):
        error = RuntimeError(f"Purgatory.wait(): check raised {type(exc).__name__}")
        error.__cause__ = exc
        return error
    return exc


def _awaited(method: str, name: str, value: object) -> TypeError:
    """The error for a check that answered with an awaitable (an ``async def`` check): a
    check must answer at once, inside the signal that runs it. A coroutine is closed, so
    that it does not warn it was never awaited."""
    if isinstance(value, Coroutine):
        value.close()
    return TypeError(
        f"Purgatory.{method}(): {name} must answer at once, got an awaitable "
        f"({type(value).__name__}): use a plain function (a signal runs it synchronously)"
    )
