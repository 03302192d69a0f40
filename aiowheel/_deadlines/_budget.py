"""The budget: the time left of a request's deadline and of the timeouts guarding a task, read
and moved from inside the request, and passed on to the next hop.

Why a room of its own. The requests' table (:mod:`aiowheel._deadlines._deadline`) keeps deadlines;
this room is what code under them asks: how long is left (:func:`budget`, :func:`budget_header`,
the tighter of the request's deadline and every timeout guarding the task), a route's own
deadline (:func:`set_deadline`, :func:`deadline`), and what a client adapter
(:mod:`aiowheel.grpc`, :mod:`aiowheel._deadlines._propagate` for httpx and aiohttp) gives the next
hop (:func:`outgoing`, :func:`caller_left`: also bounded by the tasks awaiting this one, less a
margin for the network, rounded down by :func:`header_value`). It reads the table, and never
files anything on the wheel itself: a moved deadline is the table's move.
"""

from __future__ import annotations

import asyncio
import functools
import math
from _thread import get_ident as _get_ident
from asyncio import _get_running_loop
from collections.abc import Awaitable, Callable
from typing import Any, Final

from .._seeing._census import tasks_left
from .._time._tasks import current_task
from ._deadline import BudgetExhausted, Deadlines, current
from ._settings import nonnegative, positive

__all__ = [
    "DEFAULT_MARGIN",
    "budget",
    "budget_header",
    "caller_left",
    "deadline",
    "header_value",
    "outgoing",
    "set_deadline",
]


def set_deadline(seconds: float) -> float:
    """Move the current request's deadline to ``seconds`` after the request arrived (later
    or sooner than the middleware's), within the inbound header's cap; returns the new
    deadline in loop time. Call it anywhere in the request's task (or a task it started)::

        async def export(request):
            aiowheel.asgi.set_deadline(120)   # this route may take two minutes
            ...

    From a worker thread the request's context reached (a plain ``def`` FastAPI endpoint or
    dependency, Starlette's ``run_in_threadpool``) the deadline is moved as well: the change
    is filed on the loop's thread, and :func:`budget` in the worker reads the new deadline at
    once. (A 504 does not stop the thread: see the docs, request deadlines.)

    RuntimeError outside a request under :class:`DeadlineMiddleware` or
    :func:`aiowheel.aiohttp.deadline_middleware`, once the deadline has expired, or once
    the request has ended (its response complete). ``seconds`` above 10**9 (about 31 years)
    is 10**9.
    """
    value = positive("set_deadline", "seconds", seconds)
    request = current.get()
    if request is None:
        raise RuntimeError(
            "set_deadline(): no request deadline here (call it in a request served under "
            "aiowheel.asgi.DeadlineMiddleware or aiowheel.aiohttp.deadline_middleware)"
        )
    if request.expired:
        raise RuntimeError("set_deadline(): the request's deadline has already expired")
    if request.ended:
        raise RuntimeError("set_deadline(): the request has ended")
    if request.cap is not None and request.cap < value:
        value = request.cap
    when = request.started + value
    table = request.table
    if table.thread == _get_ident():
        Deadlines.move(request, when)
    else:  # a worker thread: the wheel is the loop's, so the move is filed there
        table.loop.call_soon_threadsafe(Deadlines.move_if_live, request, when)
        request.deadline = when  # what budget() reads here, until the loop moves it
    return when


def deadline(seconds: float) -> Callable[[], Awaitable[None]]:
    """A FastAPI dependency giving a route its own deadline (:func:`set_deadline`)::

        @app.get("/report", dependencies=[Depends(deadline(60))])

    Async, so FastAPI runs it in the request's task (a plain ``def`` dependency would run in
    a worker thread). ``seconds`` is checked here, when the route is declared."""
    value = positive("deadline", "seconds", seconds)

    async def request_deadline() -> None:
        set_deadline(value)

    request_deadline.__qualname__ = f"deadline({value!r})"
    return request_deadline


def budget(minimum: float = 0.0) -> float | None:
    """Seconds left before the current deadline, to hand to the next call; None if nothing
    bounds the task. The deadline is the tighter of the request's (from the middleware, seen
    also in tasks the request started) and every timeout guarding this task
    (:func:`aiowheel.time_left`)::

        await client.get(url, timeout=budget(0.05))                       # httpx
        await session.get(url, timeout=aiohttp.ClientTimeout(total=budget()))
        await conn.fetch(query, timeout=budget())                         # asyncpg

    Raises :class:`BudgetExhausted` when none is left or less than ``minimum`` seconds:
    fail fast instead of starting a call that cannot finish in time. Costs the task's own
    timeouts, not the loop's pending timers: the request's deadline is read first, the
    wheels' timeouts from an index by task, and only the part of the loop's heap due before
    the request's deadline is walked (see :func:`aiowheel.current_deadline`).
    """
    return _budget(minimum, "budget()")


def _minimum(minimum: object, where: str) -> float:
    """A budget's ``minimum``: a number of seconds, >= 0 and finite (errors naming ``where``)."""
    return nonnegative(where, "minimum", minimum)


def _budget(minimum: float, where: str) -> float | None:
    """:func:`budget`, its errors naming ``where`` (the function called)."""
    if minimum != 0.0:
        minimum = _minimum(minimum, where)
    request = current.get()
    own = None if request is None else request.left()
    loop = _get_running_loop()
    task = None if loop is None else current_task(loop)
    left = None
    if loop is not None and task is not None:  # only timeouts before the request's count
        before = math.inf if own is None or request is None else request.deadline
        left = tasks_left(loop, *_awaited_by(task), before=before)
    if own is not None and (left is None or own < left):
        left = own
    if left is not None and (left <= 0.0 or left < minimum):
        raise BudgetExhausted(
            f"{left:.3f} s left of the deadline, under the {minimum:.3f} s this call needs"
        )
    return left


def budget_header(minimum: float = 0.0, *, grpc: bool = False) -> str | None:
    """The :func:`budget` as an outgoing deadline header's value, rounded down (a callee is
    never told it has more time than is left): seconds (``"1.234"``), or with ``grpc=True``
    gRPC's ``grpc-timeout`` form (``"1234m"``). None if nothing bounds the task::

        headers = {"x-request-timeout": budget_header(0.05)}   # drop it if None

    Raises :class:`BudgetExhausted` as :func:`budget` does (also when under 1 ms is left,
    which neither form can say)."""
    if not isinstance(grpc, bool):
        raise TypeError(f"budget_header(): grpc must be a bool, got {type(grpc).__name__}")
    left = _budget(minimum, "budget_header()")
    return None if left is None else header_value(left, grpc=grpc)


def header_value(seconds: float, grpc: bool = False) -> str:
    """``seconds`` as a deadline header's value, rounded down to the millisecond: seconds
    (``"1.234"``), or gRPC's form (``"1234m"``, at most 8 digits: ``"100000S"`` beyond).
    :class:`BudgetExhausted` under 1 ms, which neither form can say."""
    millis = math.floor(seconds * 1000)
    if millis < 1:
        raise BudgetExhausted(f"{seconds:.6f} s left of the deadline: under 1 ms")
    if not grpc:
        return f"{millis // 1000}.{millis % 1000:03d}"
    if millis <= 99_999_999:  # gRPC: at most 8 digits
        return f"{millis}m"
    return f"{min(millis // 1000, 99_999_999)}S"


def outgoing(margin: float, where: str = "outgoing()") -> float | None:
    """The seconds a client adapter gives the next hop: :func:`caller_left` less ``margin``
    (the network's share, checked by the adapter when it was made), or None where nothing
    bounds the task. :class:`BudgetExhausted` (naming ``where``, the adapter) when no more
    than ``margin`` is left: the call would be sent with no time to do anything."""
    left = caller_left(where)[0]
    if left is None:
        return None
    if left <= margin:
        raise BudgetExhausted(
            f"{where}: {left:.3f} s left of the deadline, no more than the {margin:.3f} s "
            "kept for the network: not sent"
        )
    return left - margin


def caller_left(where: str) -> tuple[float | None, bool]:
    """:func:`budget` as a client adapter sees it, and whether the deadline it comes from
    cancels the current task when it passes (then a call awaited here ends with it, and needs
    no timeout of its own).

    Bounded also by the deadlines of the tasks awaiting this one: a client library that makes
    its call in a task of its own (``grpc.aio`` runs its interceptors in one, which the caller
    awaits) works on the caller's behalf, under the caller's timeouts, and a cancelled awaiter
    cancels the task it awaits: awaited directly, through ``asyncio.gather``, 3.11's
    ``wait_for`` or a ``TaskGroup`` (see :func:`_awaited_by`; not through ``asyncio.shield``,
    which does not cancel what it shields: then nothing is counted). A request's deadline
    read in a task the request started (its context's) is not this task's: the adapter bounds
    the call itself. The timeouts of the task and its awaiters are read together, as
    :func:`budget` reads them (the request's deadline first).
    :class:`BudgetExhausted` (naming ``where``) when none is left."""
    left: float | None = None
    chain: list[asyncio.Task[Any]] = []
    request = current.get()
    own = None if request is None else request.left()
    loop = _get_running_loop()
    task = None if loop is None else current_task(loop)
    if loop is not None and task is not None:  # only timeouts before the request's count
        chain = _awaited_by(task)
        before = math.inf if own is None or request is None else request.deadline
        left = tasks_left(loop, *chain, before=before)
    guarded = left is not None
    if own is not None and (left is None or own < left):
        left = own
        guarded = request is not None and request.task in chain
    if left is not None and left <= 0.0:
        raise BudgetExhausted(f"{left:.3f} s left of the deadline: {where} sends nothing")
    return left, guarded


DEFAULT_MARGIN: Final = 0.005
"""The seconds a client adapter keeps back for the network on each hop, by default.

A deadline crosses the wire as a duration (``grpc-timeout``, ``x-request-timeout``), which the
callee counts from when it arrives: without a margin it would see the time in transit more
than the caller has left, and give up after the caller. 5 ms covers a hop within a data
centre several times over, and keeps the callee's deadline before the caller's, so the callee
gives up first and the caller hears why (504, ``DEADLINE_EXCEEDED``) instead of timing out
itself. Across regions, pass a margin of the hop's round trip."""

_AWAITERS: Final = 8  # how far up a chain of awaiting tasks the budget looks


def _awaited_by(task: asyncio.Task[Any]) -> list[asyncio.Task[Any]]:
    """``task``, the task awaiting it, the one awaiting that, ... (:data:`_AWAITERS` up): the
    tasks whose cancellation cancels ``task``, so whose timeouts bound it. A task's wake-up
    among a task's done-callbacks is bound to the task that awaits it; asyncio's helpers that
    run a coroutine in a task of their own are followed to the task awaiting them: ``gather``
    (its children's callback closes over the future the caller awaits), 3.11's ``wait_for``
    (``_release_waiter`` of the future the caller awaits), a ``TaskGroup`` (its parent task).
    ``asyncio.shield`` is not followed: the shielded task is not cancelled with its awaiter."""
    chain = [task]
    for _ in range(_AWAITERS):
        awaiter = _awaiter_of(task)
        if awaiter is None or awaiter in chain:
            break
        chain.append(awaiter)
        task = awaiter
    return chain


def _awaiter_of(future: object) -> asyncio.Task[Any] | None:
    """The task whose cancellation cancels ``future`` (a task), or None."""
    for callback, _context in getattr(future, "_callbacks", None) or ():
        owner = getattr(callback, "__self__", None)
        if isinstance(owner, asyncio.Task):
            return owner  # its wake-up: it awaits the future
        if isinstance(owner, asyncio.TaskGroup):
            parent: asyncio.Task[Any] | None = getattr(owner, "_parent_task", None)
            return parent
        if isinstance(callback, functools.partial) and callback.func is _RELEASE_WAITER:
            found = _awaiter_of(callback.args[0] if callback.args else None)  # 3.11's wait_for
            if found is not None:
                return found
        outer = _gathering(callback)
        if outer is not None:
            found = _awaiter_of(outer)
            if found is not None:
                return found
    return None


_RELEASE_WAITER: Final[object] = getattr(asyncio.tasks, "_release_waiter", None)
_GATHER_DONE: Final = "gather.<locals>._done_callback"


def _gathering(callback: object) -> object:
    """The future ``asyncio.gather`` returned, if ``callback`` is its children's done-callback
    (a closure over it, ``outer``), else None."""
    if getattr(callback, "__qualname__", None) != _GATHER_DONE:
        return None
    code = getattr(callback, "__code__", None)
    cells = getattr(callback, "__closure__", None)
    if code is None or not cells:
        return None
    for name, cell in zip(code.co_freevars, cells, strict=False):
        if name == "outer":
            try:
                return cell.cell_contents
            except ValueError:  # not set yet: gather is still making its children
                return None
    return None
