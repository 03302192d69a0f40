"""Work outside the request's task stopped at its deadline: :func:`at_deadline`.

Why a room of its own. The deadline cancels the request's task, and with it everything the
task awaits: an ``async def`` endpoint's database call ends there (asyncpg, psycopg's and
SQLAlchemy's async drivers cancel the query in the server when their task is cancelled). What
runs in a worker thread does not: a plain ``def`` endpoint, ``asyncio.to_thread``, a sync
driver's query go on after the 504, holding their thread, their connection and the database
(measured against PostgreSQL 15: a sync psycopg query ran 4.5 s after its request's 504, and
the next burst of requests found the pool held by queries for clients that had gone). Go's
``context`` reaches ``database/sql`` through ``QueryContext``; here the request's context
(:data:`aiowheel._deadlines._deadline.current`, carried into the worker threads the request
starts) reaches a callback that stops the work in the thread's place: cancel the query in
the server, close a socket, set an event.

The callbacks live on the request's record (:class:`aiowheel._deadlines._deadline.Stops`):
added and withdrawn from any thread under one lock, run in the loop's thread when the
deadline fires, dropped when the request ends in time. Nothing is filed on the wheel: the
request's own deadline entry is what fires. The drivers' adapters (:mod:`aiowheel.psycopg`,
:mod:`aiowheel.sqlalchemy`) file one per statement, through :func:`stop_statement`: the
connection's cancel, sent from a canceller thread (a cancel connects to the server and waits
for it, which must not hold the loop, nor wait behind the worker threads busy with the very
queries it cancels) until the statement has ended.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType
from typing import Final, final

from ._deadline import BudgetExhausted, Callback, Request, current

__all__ = ["AtDeadline", "Statement", "at_deadline", "stop_statement"]


@final
class AtDeadline:
    """What :func:`at_deadline` returns: ``cancel()`` withdraws the callback; as a context
    manager, leaving the block withdraws it."""

    __slots__ = ("_callback", "_request")

    def __init__(self, request: Request, callback: Callback) -> None:
        self._request = request
        self._callback = callback

    def cancel(self) -> bool:
        """Withdraw the callback (from any thread); True if it had not run yet."""
        stops = self._request.stops
        return stops is not None and stops.remove(self)

    def __enter__(self) -> AtDeadline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<AtDeadline {self._callback!r}>"


_OUTSIDE: Final = (
    "no request deadline here: call it in a request served under "
    "aiowheel.asgi.DeadlineMiddleware, aiowheel.aiohttp.deadline_middleware or "
    "aiowheel.grpc.DeadlineInterceptor, or in a task or worker thread its context reached "
    "(loop.run_in_executor does not carry the context: use asyncio.to_thread, or "
    "contextvars.copy_context().run)"
)


def at_deadline(callback: Callback) -> AtDeadline:
    """Run ``callback()`` when the current request's deadline fires, in the loop's thread;
    returns a handle whose ``cancel()`` (or leaving it as a context manager) withdraws it::

        def export(request):                       # a plain def endpoint: a worker thread
            stop = threading.Event()
            with aiowheel.at_deadline(stop.set):   # set in the loop's thread at the 504
                for chunk in chunks():
                    if stop.is_set():
                        break
                    write(chunk)

    For a database, :func:`aiowheel.psycopg.stop_at_deadline` and
    :func:`aiowheel.sqlalchemy.stop_at_deadline` file each statement's cancel this way, sent
    from a thread of their own.

    Call it in the request's task or in a task or worker thread its context reached (a
    ``def`` FastAPI endpoint or dependency, ``asyncio.to_thread``, Starlette's
    ``run_in_threadpool``; ``loop.run_in_executor`` does not carry the context). Once the
    deadline has fired, ``callback`` runs at once, soon, in the loop's thread. It runs in the
    loop's thread: it must not block (hand blocking work to a thread); what it raises goes to
    the loop's exception handler, and the request still answers 504.

    TypeError if ``callback`` is not callable; RuntimeError outside a request, or once the
    request has ended in time.
    """
    if not callable(callback):
        raise TypeError(f"at_deadline(): callback must be callable, got {callback!r}")
    request = current.get()
    if request is None:
        raise RuntimeError(f"at_deadline(): {_OUTSIDE}")
    handle = AtDeadline(request, callback)
    stops = request.stops_here()
    if not stops.add(handle, callback):
        stops.run_soon(callback)  # the deadline has fired: at once
    return handle


def stop_statement(cancel: Callable[[], object], where: str) -> Statement | None:
    """What a driver's adapter wraps one statement in (``with``): the connection's ``cancel``
    sent when the current request's deadline fires, or None outside a request (the statement
    runs as it would without aiowheel). :class:`BudgetExhausted` (naming ``where``) if the
    deadline has already fired: the statement is not sent, since a cancel sent before it would
    find nothing to stop."""
    request = current.get()
    if request is None or (request.ended and not request.expired):
        return None
    if request.expired:
        raise BudgetExhausted(f"{where}: the request's deadline has passed; not sent")
    statement = Statement(request, cancel)
    try:
        filed = request.stops_here().add(statement, statement.at_deadline)
    except RuntimeError:
        return None  # ended in time meanwhile
    if not filed:
        raise BudgetExhausted(f"{where}: the request's deadline has passed; not sent")
    return statement


# The pauses between a statement's cancels, in a canceller thread, until it has ended: a cancel
# that reached the server before the statement (sent as the deadline fired, the statement a
# moment behind) finds nothing to stop, and is sent again. The statement can be far behind: a
# worker thread that had registered it and was then left waiting for a CPU on a loaded machine
# (measured: a 2-core machine running two test suites, the query reaching PostgreSQL more than
# the first 1.6 s of tries after the deadline). So the cancels go on, a quarter of a second
# apart after the first ones (a late statement runs at most that long), until the statement's
# block has left, for up to _CANCEL_FOR seconds.
_AGAIN: Final = (0.02, 0.05, 0.1, 0.2)
_THEN_EVERY: Final = 0.25
_CANCEL_FOR: Final = 60.0


@final
class Statement:
    """One statement under the request's deadline (:func:`stop_statement`): when the deadline
    fires its connection's cancel is sent from a canceller thread, again until the statement
    has ended. One lock makes the end and a cancel exclusive: once the statement's block has
    left, no cancel of it is sent, so the connection's next statement (in a pool, another
    request's) is never the one cancelled."""

    __slots__ = ("_cancel", "_done", "_lock", "_request")

    def __init__(self, request: Request, cancel: Callable[[], object]) -> None:
        self._request = request
        self._cancel = cancel
        self._done = False
        self._lock = threading.Lock()

    def __enter__(self) -> Statement:
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._done = True
        stops = self._request.stops
        if stops is not None:
            stops.remove(self)

    def at_deadline(self) -> None:
        """The deadline fired (in the loop's thread): the cancels start in a canceller."""
        _cancellers().submit(self._keep_cancelling)

    def _keep_cancelling(self) -> None:
        loop = self._request.table.loop
        pauses = itertools.chain(_AGAIN, itertools.repeat(_THEN_EVERY))
        until = time.monotonic() + _CANCEL_FOR
        reported = False
        for pause in pauses:
            if time.monotonic() > until:
                return
            with self._lock:
                if self._done:
                    return
                try:
                    self._cancel()
                except Exception as exc:
                    # Reported once; tried again on the same schedule (a cancel is a new
                    # connection to the server: one refused on a loaded server may pass next).
                    if not reported:
                        reported = True
                        with contextlib.suppress(RuntimeError):  # the loop has closed
                            loop.call_soon_threadsafe(
                                loop.call_exception_handler,
                                {
                                    "message": "aiowheel: cancelling a statement failed "
                                    "(tried again until it ends)",
                                    "exception": exc,
                                },
                            )
            time.sleep(pause)


# A cancel is a connection to the server and a wait for it: I/O, not CPU. A burst of requests
# past their deadline together (10 measured) is cancelled in parallel, not four at a time
# (64 ms for the last of 10 with four, on a loaded machine). Made only as needed.
_CANCELLER_THREADS: Final = 16
_CANCELLERS: tuple[int, ThreadPoolExecutor] | None = None  # this process's (a fork: a new one)
_MAKING: Final = threading.Lock()


def _cancellers() -> ThreadPoolExecutor:
    global _CANCELLERS
    made = _CANCELLERS
    pid = os.getpid()
    if made is None or made[0] != pid:
        with _MAKING:
            made = _CANCELLERS
            if made is None or made[0] != pid:
                pool = ThreadPoolExecutor(_CANCELLER_THREADS, thread_name_prefix="aiowheel-cancel")
                made = _CANCELLERS = (pid, pool)
    return made[1]
