"""``aiowheel.at_deadline`` (issue 61, 3): a callback run when the request's deadline fires,
filed from the request's task or a worker thread its context reached, withdrawn by its
handle; and its bad input. The drivers' adapters built on it are tested against a real
PostgreSQL in ``test_into_the_database.py``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

import aiowheel
from aiowheel.asgi import DeadlineMiddleware
from tests.support import ASYNCIO_UVLOOP_AND_LOOP_MODE

pytestmark = pytest.mark.anyio
LOOPS = ASYNCIO_UVLOOP_AND_LOOP_MODE
SLACK = 1.0  # seconds: a loaded 2-core machine


def app_of(work: Callable[[], Awaitable[None]], timeout: float) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await work()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"in time"})

    return DeadlineMiddleware(app, timeout=timeout)


async def ask(app: Any) -> int:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        return (await client.get("/")).status_code


@LOOPS
async def test_the_callback_runs_when_the_deadline_fires_in_the_loop_s_thread() -> None:
    ran: list[tuple[float, int]] = []
    start = time.monotonic()

    async def work() -> None:
        aiowheel.at_deadline(lambda: ran.append((time.monotonic(), threading.get_ident())))
        await asyncio.sleep(5)

    assert await ask(app_of(work, 0.2)) == 504
    ((when, thread),) = ran
    assert start + 0.2 <= when + 0.002 and when < start + 0.2 + SLACK
    assert thread == threading.get_ident()


@LOOPS
async def test_from_a_worker_thread_the_callback_stops_the_thread_s_work() -> None:
    stop = threading.Event()
    ran_in: list[int] = []
    finished: list[float] = []
    start = time.monotonic()

    def blocking() -> None:  # a plain def endpoint's work, in a worker thread
        def stopped() -> None:
            ran_in.append(threading.get_ident())
            stop.set()

        with aiowheel.at_deadline(stopped):
            stop.wait(5)
        finished.append(time.monotonic())

    async def work() -> None:
        await asyncio.to_thread(blocking)

    assert await ask(app_of(work, 0.2)) == 504
    for _ in range(100):
        if finished:
            break
        await asyncio.sleep(0.05)
    assert ran_in == [threading.get_ident()]  # filed in the worker, run in the loop's thread
    assert finished and finished[0] < start + 0.2 + SLACK  # not the 5 s


@LOOPS
async def test_cancel_and_the_block_s_end_withdraw_it() -> None:
    ran: list[str] = []
    results: list[bool] = []

    async def work() -> None:
        handle = aiowheel.at_deadline(lambda: ran.append("cancelled"))
        results.append(handle.cancel())
        results.append(handle.cancel())
        with aiowheel.at_deadline(lambda: ran.append("block")):
            pass
        aiowheel.at_deadline(lambda: ran.append("kept"))
        await asyncio.sleep(5)

    assert await ask(app_of(work, 0.1)) == 504
    assert ran == ["kept"] and results == [True, False]


@LOOPS
async def test_a_request_that_ends_in_time_runs_none_and_refuses_more() -> None:
    ran: list[str] = []
    late: list[BaseException] = []

    async def work() -> None:
        aiowheel.at_deadline(lambda: ran.append("never"))

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await work()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"in time"})
        try:  # the response is complete: the request has ended
            aiowheel.at_deadline(lambda: ran.append("after"))
        except RuntimeError as exc:
            late.append(exc)

    assert await ask(DeadlineMiddleware(app, timeout=0.2)) == 200
    await asyncio.sleep(0.4)
    assert ran == []
    assert len(late) == 1 and "ended" in str(late[0])


@LOOPS
async def test_filed_after_the_deadline_fired_it_runs_at_once() -> None:
    ran: list[str] = []

    async def work() -> None:
        try:
            await asyncio.sleep(5)
        finally:  # the deadline has fired: its cancellation is why we are here
            aiowheel.at_deadline(lambda: ran.append("late"))

    assert await ask(app_of(work, 0.1)) == 504
    await asyncio.sleep(0.05)
    assert ran == ["late"]


@LOOPS
async def test_a_callback_that_raises_goes_to_the_exception_handler_and_504_stands() -> None:
    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    ran: list[str] = []

    def broken() -> None:
        raise ValueError("the callback's own bug")

    async def work() -> None:
        aiowheel.at_deadline(broken)
        aiowheel.at_deadline(lambda: ran.append("the next one"))
        await asyncio.sleep(5)

    try:
        assert await ask(app_of(work, 0.1)) == 504
    finally:
        loop.set_exception_handler(None)
    assert ran == ["the next one"]
    (context,) = seen
    assert isinstance(context["exception"], ValueError)
    assert "at_deadline" in context["message"]


@LOOPS
async def test_bad_input_and_outside_a_request() -> None:
    with pytest.raises(RuntimeError, match="no request deadline here"):
        aiowheel.at_deadline(lambda: None)

    async def work() -> None:
        with pytest.raises(TypeError, match="callback must be callable, got 42"):
            aiowheel.at_deadline(42)  # type: ignore[arg-type]

    assert await ask(app_of(work, 5)) == 200


@LOOPS
async def test_a_statement_s_failing_cancel_is_reported_once_and_tried_until_it_stops() -> None:
    # What the drivers' adapters do (aiowheel._deadlines._stop.stop_statement): the statement's
    # cancel is sent when the deadline fires, and again until the statement ends. A cancel that
    # fails (a refused connection to a loaded server) is reported once and tried again.
    from aiowheel._deadlines._stop import stop_statement

    loop = asyncio.get_running_loop()
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: seen.append(context))
    stop = threading.Event()
    tries: list[float] = []

    def cancel() -> None:
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise ConnectionRefusedError("the server is busy")
        stop.set()  # the third one reaches the statement

    ended: list[float] = []

    def blocking() -> None:  # a statement in a worker thread
        statement = stop_statement(cancel, "a test's statement")
        assert statement is not None
        with statement:
            stop.wait(5)
        ended.append(time.monotonic())

    async def work() -> None:
        await asyncio.to_thread(blocking)

    start = time.monotonic()
    try:
        assert await ask(app_of(work, 0.2)) == 504
        for _ in range(100):
            if ended:
                break
            await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(None)
    assert len(tries) == 3
    assert ended and ended[0] < start + 0.2 + SLACK  # not the 5 s
    (context,) = seen
    assert isinstance(context["exception"], ConnectionRefusedError)
    assert "cancelling a statement failed" in context["message"]
