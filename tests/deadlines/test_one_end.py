"""The deadline's end is one event (issue 61, 1 and the 500s of 2): a failure that happens
because the budget ran out is the caller's deadline, whoever noticed it first; one that comes
while the caller still has budget beyond the margin it passed on is the callee's own.

- HTTP: a callee's 504 at the end of what it was told reaches the caller as
  ``BudgetExhausted`` (its middleware answers 504, with no code at the call site: the gateway
  here returns what it got, and answered 200 before); a callee's own shorter deadline stays a
  504 response (httpx's transport and aiohttp's client middleware).
- gRPC: ``DEADLINE_EXCEEDED`` at the end of the deadline the call was given is
  ``BudgetExhausted``; the callee's own shorter deadline stays the ``AioRpcError`` it is.
- A server: a timeout set from the budget (``asyncio.timeout(aiowheel.time_left())``), or a
  driver's error raised once the deadline's cancellation has landed, answers 504, not 500;
  an error well before the deadline is the error it is.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

import aiowheel
import aiowheel.aiohttp
from aiowheel._deadlines._deadline import END_WINDOW
from aiowheel.asgi import BudgetExhausted, DeadlineMiddleware
from aiowheel.httpx import DeadlineTransport
from tests.support import ASYNCIO_UVLOOP_AND_LOOP_MODE, serve_aiohttp

pytestmark = pytest.mark.anyio
LOOPS = ASYNCIO_UVLOOP_AND_LOOP_MODE
SLACK = 1.0  # seconds: a loaded 2-core machine; the callees' work is 5 s


@pytest.fixture
async def callee() -> AsyncIterator[Callable[..., Awaitable[str]]]:
    """Real aiohttp servers on 127.0.0.1 under ``deadline_middleware(timeout)`` reading the
    ``x-request-timeout`` header, whose ``/slow`` sleeps 5 s (or, given ``onward``, calls that
    URL through ``propagate_deadline()`` and answers 200 with its status):
    ``await callee(timeout, onward=None)`` is the base URL of one."""
    runners: list[web.AppRunner] = []

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(5)
        return web.Response(text="late")

    async def start(timeout: float, onward: str | None = None) -> str:
        async def middle(request: web.Request) -> web.Response:
            assert onward is not None
            return web.json_response({"callee": await via_aiohttp(onward)})

        middleware = aiowheel.aiohttp.deadline_middleware(timeout, header="x-request-timeout")
        app = web.Application(middlewares=[middleware])
        app.router.add_get("/slow", slow if onward is None else middle)
        runner, base = await serve_aiohttp(app)
        runners.append(runner)
        return base

    yield start
    for runner in runners:
        await runner.cleanup()


async def via_httpx(url: str) -> int:
    async with httpx.AsyncClient(transport=DeadlineTransport()) as client:
        return (await client.get(url)).status_code


async def via_aiohttp(url: str) -> int:
    middlewares = (aiowheel.aiohttp.propagate_deadline(),)
    async with aiohttp.ClientSession(middlewares=middlewares) as session, session.get(url) as got:
        return got.status


CLIENTS = pytest.mark.parametrize("fetch", [via_httpx, via_aiohttp], ids=["httpx", "aiohttp"])


def gateway(fetch: Callable[[str], Awaitable[int]], url: str, timeout: float) -> Any:
    """An ASGI gateway under ``DeadlineMiddleware(timeout)`` whose endpoint calls ``url`` and
    answers 200 with the callee's status in its body: the call site that returns what it got."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        status = await fetch(url)
        body = json.dumps({"callee": status}).encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    return DeadlineMiddleware(app, timeout=timeout)


async def ask(app: Any) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gateway"
    ) as client:
        return await client.get("/")


@LOOPS
@CLIENTS
async def test_the_callee_s_504_at_the_end_of_the_budget_is_the_caller_s_own_504(
    callee: Callable[..., Awaitable[str]], fetch: Callable[[str], Awaitable[int]]
) -> None:
    url = await callee(30) + "/slow"  # the callee's own deadline is far: the budget's is ours
    loop = asyncio.get_running_loop()
    start = loop.time()
    response = await ask(gateway(fetch, url, timeout=0.3))
    took = loop.time() - start
    assert response.status_code == 504, response.text  # was 200, {"callee": 504}
    assert 0.3 - 0.01 <= took < 0.3 + SLACK


@LOOPS
@CLIENTS
async def test_the_callee_s_own_shorter_deadline_stays_its_504_response(
    callee: Callable[..., Awaitable[str]], fetch: Callable[[str], Awaitable[int]]
) -> None:
    url = await callee(0.1) + "/slow"  # the callee gives up long before the caller's budget
    response = await ask(gateway(fetch, url, timeout=5))
    assert response.status_code == 200, response.text
    assert response.json() == {"callee": 504}


@LOOPS
@CLIENTS
async def test_outside_a_request_the_budget_s_end_is_a_budget_exhausted(
    callee: Callable[..., Awaitable[str]], fetch: Callable[[str], Awaitable[int]]
) -> None:
    url = await callee(30) + "/slow"
    with pytest.raises(TimeoutError) as raised:
        async with asyncio.timeout(0.3):
            await fetch(url)
    # The callee (told 0.295 s) answered first: its 504 is this timeout's end, BudgetExhausted;
    # or this task's own timeout came first on a loaded machine. Never a 504 returned.
    assert isinstance(raised.value, BudgetExhausted) or raised.value.__cause__ is not None


@LOOPS
@CLIENTS
async def test_three_hops_each_answers_504_when_the_first_caller_s_budget_runs_out(
    callee: Callable[..., Awaitable[str]], fetch: Callable[[str], Awaitable[int]]
) -> None:
    # The last hop runs out first (told the least), the middle hears its 504 a margin before
    # its own deadline and answers 504 (x-deadline-ended: caller), which reaches the gateway
    # a margin before the end of what it told the middle: judged by the time alone, the
    # middle's 504 would be the middle's own, and the gateway would answer 200.
    last = await callee(30) + "/slow"
    middle = await callee(30, onward=last) + "/slow"
    response = await ask(gateway(fetch, middle, timeout=0.3))
    assert response.status_code == 504, response.text


@LOOPS
async def test_a_504_says_whose_deadline_ended_it(
    callee: Callable[..., Awaitable[str]],
) -> None:
    base = await callee(0.1)
    async with aiohttp.ClientSession() as session:
        async with session.get(base + "/slow") as response:  # no budget sent: its own 0.1 s
            assert response.status == 504
            assert response.headers["x-deadline-ended"] == "own"
        headers = {"x-request-timeout": "0.05"}  # the caller's budget, shorter than its own
        async with session.get(base + "/slow", headers=headers) as response:
            assert response.status == 504
            assert response.headers["x-deadline-ended"] == "caller"
    answered = await ask(DeadlineMiddleware(endpoint(timeout_from_the_budget), timeout=0.05))
    assert answered.headers["x-deadline-ended"] == "own"


@pytest.fixture
async def plain() -> AsyncIterator[str]:
    """A callee that is not aiowheel's (a real aiohttp server, no deadline middleware): it
    honours the budget it is told (``x-request-timeout``), and its own 0.3 s, answering 504
    at the sooner with nothing saying whose deadline it was. Its URL."""

    async def honours(request: web.Request) -> web.Response:
        told = float(request.headers.get("x-request-timeout", "30"))
        await asyncio.sleep(min(told, 0.3))
        return web.Response(status=504, text="upstream timed out")

    app = web.Application()
    app.router.add_get("/", honours)
    runner, base = await serve_aiohttp(app)
    yield base + "/"
    await runner.cleanup()


@LOOPS
@CLIENTS
async def test_a_callee_that_does_not_say_is_judged_by_the_time(
    plain: str, fetch: Callable[[str], Awaitable[int]]
) -> None:
    async with asyncio.timeout(5):  # 4.7 s left when its 504 comes: its own
        assert await fetch(plain) == 504
    with pytest.raises(TimeoutError) as raised:
        async with asyncio.timeout(0.2):  # told 0.195 s: its 504 then is the budget's end
            await fetch(plain)
    # BudgetExhausted, or on a loaded machine this timeout's own end: never the 504 returned.
    assert isinstance(raised.value, BudgetExhausted) or type(raised.value) is TimeoutError


# --- a server: a timeout set from the budget, a driver's error at the deadline ----------------


def endpoint(work: Callable[[], Awaitable[None]]) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await work()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"in time"})

    return app


async def timeout_from_the_budget() -> None:
    left = aiowheel.time_left()
    assert left is not None
    async with asyncio.timeout(left):  # the careful developer's one extra line
        await asyncio.sleep(5)


async def driver_error_on_cancel() -> None:
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        # What a driver does when its query is cancelled under it and its connection closes.
        raise ConnectionResetError("connection was closed in the middle of operation") from None


async def wait_for_from_the_budget() -> None:
    await asyncio.wait_for(asyncio.sleep(5), aiowheel.time_left())


@LOOPS
@pytest.mark.parametrize(
    "work",
    [timeout_from_the_budget, wait_for_from_the_budget, driver_error_on_cancel],
    ids=["asyncio.timeout", "wait_for", "driver-error"],
)
async def test_a_failure_at_the_deadline_answers_504_not_500(
    work: Callable[[], Awaitable[None]],
) -> None:
    for _ in range(5):  # a race each time: the budget's timer against the deadline's
        response = await ask(DeadlineMiddleware(endpoint(work), timeout=0.05))
        assert response.status_code == 504, response.text


async def fails_early() -> None:
    await asyncio.sleep(0.01)
    raise ValueError("the app's own error, long before the deadline")


@LOOPS
async def test_an_error_well_before_the_deadline_is_the_error_it_is() -> None:
    with pytest.raises(ValueError, match="the app's own error"):
        await ask(DeadlineMiddleware(endpoint(fails_early), timeout=5))


@LOOPS
async def test_the_aiohttp_server_answers_a_timeout_from_the_budget_with_504() -> None:
    async def handler(request: web.Request) -> web.Response:
        await timeout_from_the_budget()
        return web.Response(text="in time")

    app = web.Application(middlewares=[aiowheel.aiohttp.deadline_middleware(0.05)])
    app.router.add_get("/", handler)
    runner, base = await serve_aiohttp(app)
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(5):
                async with session.get(base + "/") as response:
                    assert response.status == 504, await response.text()
    finally:
        await runner.cleanup()


def test_the_window_is_the_instant_s_width() -> None:
    assert END_WINDOW == 0.001
