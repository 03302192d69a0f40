"""The awaited form of a purgatory's operation: the object :meth:`aiowheel.Purgatory.wait`
returns, which is at once the operation, the future the waiting task awaits, the coroutine
people take ``wait`` for, and the callable its timer calls.

It is not a subclass of :class:`asyncio.Future` but speaks its protocol
(``_asyncio_future_blocking``, done callbacks, ``result`` / ``exception`` / ``cancel`` /
``get_loop``), as asyncio lets any future-like object do: tasks, ``gather``, ``wait_for`` and
``shield`` take it as a future, and :func:`asyncio.isfuture` holds. It is its own iterator,
so awaiting it allocates no ``FutureIter`` either. It also speaks the *coroutine* protocol
(``send`` / ``throw`` / ``close``, registered as a :class:`collections.abc.Coroutine`),
because people call ``wait`` as the ``async def`` it reads as:
``asyncio.create_task(purgatory.wait(...))``, ``TaskGroup.create_task``, ``asyncio.run`` and
anyio's ``start_soon`` all demand a coroutine. A task steps it as it would an ``async def``
whose body awaits the wait: the first step yields the wait itself to the task, the wake-up's
step ends with its result, and an error thrown in (the task cancelled) cancels the wait
first. The one place the two protocols collide is :func:`asyncio.wait`, which refuses every
coroutine: there, as for an ``async def``, pass a task. Made with no loop running
(``asyncio.run(purgatory.wait(...))``) a wait is not a future yet
(``_asyncio_future_blocking`` is None, so asyncio wraps it in a task) and starts at its first
step. An ``async def`` check is refused, not awaited: a signal runs the checks synchronously,
and the check-then-complete step that makes every outcome exactly-once without locks would be
torn apart by an ``await`` inside it.

Why one object (and why the purgatory's docstring, :mod:`aiowheel._purgatory._purgatory`, calls
awaiting the main form): more than half of a wait's cost is the cyclic collector's passes over the
objects each waiting task keeps alive (``python -m bench.purgatory --collector-off``); one
object fewer per wait, and native slots instead of a C future plus a Python subclass's, is
what took the bench past 5x the stock way.

A room of its own: a hand-written future is some 330 lines of protocol that have nothing to do
with keys and signals, and they read best alone. It sits above the purgatory's book
(:mod:`aiowheel._purgatory._watchers`, what it changes when it ends) and below the purgatory
(:mod:`aiowheel._purgatory._purgatory`, which makes it and, on a signal's hot path, runs its check
inline). Compiled in the compiled build (mypyc) as a final native class, so the purgatory's
calls into it are native calls.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
from collections.abc import Awaitable, Callable, Coroutine, Generator, Hashable
from typing import Any, Final, Generic, TypeVar, final

from .._time._observe import classify
from ._watchers import (
    CANCELLED,
    CHECKING,
    COMPLETED,
    EXPIRED,
    FAILED,
    FIRST,
    NEW,
    OUTCOMES,
    PENDING,
    Operation,
    Watchers,
    awaitable_answer_error,
    raised_from_check,
)

__all__: list[str] = []

_T = TypeVar("_T")

_get_running_loop: Final = asyncio._get_running_loop
_inf: Final = math.inf


@final
class Wait(Operation, Generic[_T]):
    """The operation behind :meth:`Purgatory.wait`, and the future the waiting task awaits:
    one object per wait, with asyncio's future protocol (:func:`asyncio.isfuture` holds, so
    ``await``, tasks, ``gather``, ``wait_for`` and ``shield`` take it as a future), its
    bookkeeping, and (called) the timer's expiry. Awaiting it allocates nothing more: it is
    its own iterator."""

    # On the class too, as asyncio.Future has it: asyncio.isfuture() looks for it there. None
    # on a wait made with no loop running: not a future yet, so asyncio wraps it in a task.
    _asyncio_future_blocking: bool | None = False
    _loop: asyncio.AbstractEventLoop | None
    _check: Callable[[], _T | None]
    _timeout: float
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
        purgatory: Watchers,
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
            self._phase = NEW  # started by the first task step (_begin)
        else:
            self._asyncio_future_blocking = False
            self._phase = FIRST
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
        """Its check raised ``exc`` (its phase was CHECKING), or answered with what it may
        not (``exc`` is then the TypeError saying so)."""
        if isinstance(exc, SystemExit | KeyboardInterrupt):
            if self._phase == CHECKING:
                self._phase = PENDING
            raise exc
        if self._phase == CHECKING:  # not cancelled by its own check
            self._phase = FAILED
            purgatory = self._purgatory
            purgatory._failed += 1
            purgatory._unwatch(self)
            self._fail(raised_from_check(exc))

    def __call__(self) -> None:
        """The timer's callback: the deadline passed."""
        if self._phase == PENDING:
            self._phase = EXPIRED
            self._handle = None  # it fired: nothing to cancel
            purgatory = self._purgatory
            purgatory._expired += 1
            purgatory._unwatch(self)
            self._fail(self._timed_out())

    def _timed_out(self) -> TimeoutError:
        """The error of a wait whose deadline passed, naming its keys and timeout."""
        return TimeoutError(
            f"Purgatory.wait(): no result within {self._timeout:g} s for keys {list(self._keys)!r}"
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
        is FIRST). A check that answers with an awaitable is refused: TypeError from here,
        nothing watched or counted."""
        purgatory = self._purgatory
        try:
            result = self._check()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._phase = FAILED
            purgatory._failed += 1
            self._fail(raised_from_check(exc))
            return
        if result is not None and result is not False:
            if isinstance(result, Awaitable):
                self._phase = NEW
                raise awaitable_answer_error("wait", "check", result)
            self._phase = COMPLETED
            purgatory._completed += 1
            self._done(result)
            return
        delay = self._timeout
        if delay == 0.0:
            self._phase = EXPIRED
            purgatory._expired += 1
            self._fail(self._timed_out())
            return
        if delay != _inf:
            timer = purgatory._timer
            assert timer is not None
            self._handle = timer.call_later(delay, self, context=purgatory._context)
        purgatory._watch(self, self._keys)
        self._phase = PENDING

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
        self._phase = FIRST
        self._start()

    # -- asyncio's future protocol -----------------------------------------------------------------

    def cancel(self, msg: Any | None = None) -> bool:
        """Cancel the wait (what cancelling the waiting task does): the operation leaves its
        keys and the wheel before this returns. False if it had ended already."""
        if self._phase >= COMPLETED:
            return False
        self._cancelled = True
        self._cancel_message = msg
        if self._phase == NEW:  # never started: nothing watched, nothing to wake
            self._phase = CANCELLED
            return True
        self._phase = CANCELLED
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
        return self._phase >= COMPLETED

    def result(self) -> _T:
        """The value ``check()`` returned; raises what ended the wait otherwise."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if self._phase < COMPLETED:
            raise asyncio.InvalidStateError("Result is not ready.")
        exc = self._exception
        if exc is not None:
            raise exc.with_traceback(self._traceback)  # type: ignore[arg-type]
        return self._result  # type: ignore[return-value]

    def exception(self) -> BaseException | None:
        """What ended the wait (TimeoutError, the check's error), or None if it completed."""
        if self._cancelled:
            raise self._make_cancelled_error()
        if self._phase < COMPLETED:
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
        if self._phase >= COMPLETED and self._loop is not None:
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
        if phase < COMPLETED:
            if phase == NEW:
                self._begin()
                if self._phase >= COMPLETED:
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
        if self._phase < COMPLETED:
            self.cancel()
        raise val

    def close(self) -> None:
        """The coroutine's ``close``: cancel the wait if it is still pending."""
        if self._phase < COMPLETED:
            self.cancel()

    def __repr__(self) -> str:
        return f"<Purgatory.wait keys={list(self._keys)!r} {OUTCOMES.get(self._phase, 'new')}>"

    def _waiter(self) -> object:
        """The task awaiting this wait (for pending_timers), or None."""
        return classify("purgatory", None, self)[2]

    def _census_entry(self) -> tuple[object, object, object]:
        """For the census (aiowheel._seeing._census._operation): this wait, what names its origin
        (the task awaiting it), that task."""
        return self, None, self._waiter()

    def _abandoned(self) -> None:
        """Left on a closed loop, it ended as cancelled: no callback (its loop is closed)."""
        self._cancelled = True


# A wait answers to asyncio.iscoroutine and anyio's check as the coroutine it stands for (its
# send / throw / close / __await__ would make collections.abc.Coroutine's hook say so of a
# Python class; a compiled class is registered to be sure).
Coroutine.register(Wait)
