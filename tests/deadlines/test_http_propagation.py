"""The deadline passed on by the HTTP clients (issue 50, 4): ``aiowheel.httpx.DeadlineTransport``
and ``aiowheel.aiohttp.propagate_deadline``, set up once on the client, against a real aiohttp
server on 127.0.0.1 and in process through ``httpx.ASGITransport``; and
``aiowheel._deadlines._propagate``, the one place their rules live (margin, rounding down, a header
the caller set)."""

from __future__ import annotations

import asyncio
import math
import re
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import httpx
import pytest
from aiohttp import web

import aiowheel
import aiowheel.aiohttp
import aiowheel.httpx
from aiowheel._deadlines._budget import header_value, outgoing
from aiowheel._deadlines._propagate import outgoing_header
from aiowheel.asgi import BudgetExhausted, DeadlineMiddleware, budget, parse_timeout_header
from aiowheel.httpx import DeadlineTransport
from tests.support import serve_aiohttp

GENEROUS = 2.0  # seconds of slack for a loaded machine, on bounds that are about wall time
ONE_LOOP_AND_LOOP_MODE = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"loop_factory": aiowheel.loop_factory()}), id="loop-mode"),
    ],
)
pytestmark = [pytest.mark.anyio, ONE_LOOP_AND_LOOP_MODE]

Timeouts = Callable[[float], Any]
TIMEOUTS = pytest.mark.parametrize(
    "timeout", [asyncio.timeout, aiowheel.timeout], ids=["asyncio.timeout", "aiowheel.timeout"]
)


# --- a real server, and an inner transport that records --------------------------------------


@dataclass
class Server:
    """An aiohttp server on 127.0.0.1: what its requests carried, how many came."""

    url: str = ""
    seen: list[dict[str, str | None]] = field(default_factory=list)
    slow_started: int = 0


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server()

    async def echo(request: web.Request) -> web.Response:
        state.seen.append(
            {name: request.headers.get(name) for name in ("x-request-timeout", "grpc-timeout")}
        )
        return web.json_response(state.seen[-1])

    async def slow(request: web.Request) -> web.Response:
        state.slow_started += 1
        await asyncio.sleep(5)
        return web.Response(text="late")

    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/slow", slow)
    runner, state.url = await serve_aiohttp(app)
    try:
        yield state
    finally:
        await runner.cleanup()


class Recording(httpx.AsyncBaseTransport):
    """A test double for the inner transport: keeps each request, answers 200."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.closed = False

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return httpx.Response(200, json={})

    async def aclose(self) -> None:
        self.closed = True


def seconds_of(value: str | None) -> float:
    assert value is not None
    seconds = parse_timeout_header(value)
    assert seconds is not None, value
    return seconds


async def echo_app(scope: Any, receive: Any, send: Any) -> None:
    """An ASGI callee answering with the deadline header it got and the time it has left."""
    headers = {k.decode(): v.decode() for k, v in scope.get("headers", [])}
    body = (
        f'{{"header": "{headers.get("x-request-timeout", "")}", '
        f'"left": {aiowheel.time_left() or 0.0}}}'
    ).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})


# --- httpx -------------------------------------------------------------------------------------


async def test_httpx_outside_any_budget_sends_no_header_and_leaves_the_timeouts(
    server: Server,
) -> None:
    inner = Recording()
    async with httpx.AsyncClient(transport=DeadlineTransport(inner), timeout=7) as client:
        await client.get("http://callee.test/")
    async with httpx.AsyncClient(transport=DeadlineTransport()) as client:
        response = await client.get(f"{server.url}/echo")
    assert response.json() == {"x-request-timeout": None, "grpc-timeout": None}
    (request,) = inner.requests
    assert "x-request-timeout" not in request.headers
    assert request.extensions["timeout"] == httpx.Timeout(7).as_dict()


async def test_httpx_caps_each_timeout_by_what_is_left_and_never_raises_one() -> None:
    # In a task the request started (its deadline cancels only the request's task), each of
    # the client's timeouts is capped by what is left: the caps alone bound the call.
    inner = Recording()
    timeouts = httpx.Timeout(30, connect=0.25, pool=None)
    seen: list[float | None] = []
    async with httpx.AsyncClient(transport=DeadlineTransport(inner), timeout=timeouts) as client:

        async def call() -> None:
            seen.append(budget())
            await client.get("http://callee.test/")

        async def endpoint(scope: Any, receive: Any, send: Any) -> None:
            await asyncio.wait([asyncio.create_task(call())])  # not awaited: not cancelled
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b""})

        front = httpx.ASGITransport(DeadlineMiddleware(endpoint, timeout=2))
        async with httpx.AsyncClient(transport=front) as caller:
            assert (await caller.get("http://caller.test/")).status_code == 200
        (left,) = seen
        assert left is not None
        sent = inner.requests[0].extensions["timeout"]
        assert sent["connect"] == 0.25  # already under the budget: kept
        for phase in ("read", "write", "pool"):  # 30 s and None: capped
            assert 0 < sent[phase] <= left, (phase, sent)
            assert sent[phase] > left - GENEROUS
        # In the task its deadline cancels, the call ends with that task: no timer of its own
        # (httpx's timeouts are a timer per read and write), the header all the same.
        async with asyncio.timeout(2):
            await client.get("http://callee.test/")
        assert inner.requests[1].extensions["timeout"] == timeouts.as_dict()
        assert 0 < float(inner.requests[1].headers["x-request-timeout"]) <= 2


async def test_httpx_with_nothing_left_raises_budget_exhausted_and_sends_nothing(
    server: Server,
) -> None:
    inner = Recording()
    transport = DeadlineTransport(inner, margin=0)
    # A timeout filed on the loop, then passed without a suspension: 0 left, not yet cancelled.
    # (One already passed when entered, asyncio.timeout(0), goes to call_soon, and budget()
    # sees no deadline until its cancellation starts.)
    async with asyncio.timeout(0.01):
        time.sleep(0.02)  # noqa: ASYNC251 (blocking on purpose: the task must not suspend)
        with pytest.raises(BudgetExhausted, match=r"^0\.000 s left"):
            await transport.handle_async_request(httpx.Request("GET", "http://callee.test/"))
    async with httpx.AsyncClient(transport=DeadlineTransport(margin=5)) as client:
        async with asyncio.timeout(2):
            with pytest.raises(BudgetExhausted, match="margin"):  # less left than the margin
                await client.get(f"{server.url}/echo")
    assert inner.requests == []
    assert server.seen == []


async def test_httpx_grpc_timeout_takes_grpc_s_form(server: Server) -> None:
    transport = DeadlineTransport(header="grpc-timeout")
    async with httpx.AsyncClient(transport=transport) as client:
        async with asyncio.timeout(2):
            left = budget()
            response = await client.get(f"{server.url}/echo")
    assert left is not None
    value = response.json()["grpc-timeout"]
    assert re.fullmatch(r"\d{1,8}m", value), value
    assert 0 < int(value[:-1]) <= (left - 0.005) * 1000
    assert response.json()["x-request-timeout"] is None


async def test_httpx_through_asgi_transport_and_a_header_the_caller_set() -> None:
    transport = DeadlineTransport(httpx.ASGITransport(echo_app))
    async with httpx.AsyncClient(transport=transport, base_url="http://callee.test") as client:
        async with asyncio.timeout(2):
            left = budget()
            plain = (await client.get("/")).json()
            smaller = (await client.get("/", headers={"x-request-timeout": "0.2"})).json()
            larger = (await client.get("/", headers={"x-request-timeout": "100"})).json()
            malformed = (await client.get("/", headers={"x-request-timeout": "soon"})).json()
    assert left is not None
    assert 0 < seconds_of(plain["header"]) <= left
    assert smaller["header"] == "0.2"  # the caller's own, smaller: kept as it is
    for got in (larger, malformed):  # larger or not a deadline: the budget's
        assert 0 < seconds_of(got["header"]) <= left


async def test_httpx_in_a_chain_each_hop_is_told_no_more_than_its_caller_has() -> None:
    callee = DeadlineMiddleware(echo_app, timeout=30, header="x-request-timeout")
    onward = httpx.AsyncClient(
        transport=DeadlineTransport(httpx.ASGITransport(callee)), base_url="http://callee.test"
    )
    seen: dict[str, Any] = {}

    async def caller(scope: Any, receive: Any, send: Any) -> None:
        seen["left"] = budget()
        seen["callee"] = (await onward.get("/")).json()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    front = httpx.ASGITransport(DeadlineMiddleware(caller, timeout=1.5))
    async with onward, httpx.AsyncClient(transport=front) as client:
        assert (await client.get("http://caller.test/")).text == "ok"
    left = seen["left"]
    told = seconds_of(seen["callee"]["header"])
    assert 0 < told <= left <= 1.5
    assert 0 < seen["callee"]["left"] <= told  # the callee's own deadline: the header's


async def test_httpx_transport_closes_and_enters_as_its_inner_one() -> None:
    inner = Recording()
    async with DeadlineTransport(inner) as transport:
        assert transport.transport is inner
    assert inner.closed
    made = DeadlineTransport()
    assert isinstance(made.transport, httpx.AsyncHTTPTransport)
    await made.aclose()


# --- aiohttp's client --------------------------------------------------------------------------


def session(**options: Any) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(middlewares=[aiowheel.aiohttp.propagate_deadline(**options)])


async def test_aiohttp_grpc_form_and_a_header_the_caller_set(server: Server) -> None:
    async with session(header="grpc-timeout") as client:
        async with asyncio.timeout(2):
            left = budget()
            async with client.get(f"{server.url}/echo") as response:
                own = (await response.json())["grpc-timeout"]
            headers = {"grpc-timeout": "150m"}
            async with client.get(f"{server.url}/echo", headers=headers) as response:
                kept = (await response.json())["grpc-timeout"]
            headers = {"grpc-timeout": "0.1"}  # seconds' form: not gRPC's, replaced
            async with client.get(f"{server.url}/echo", headers=headers) as response:
                replaced = (await response.json())["grpc-timeout"]
    assert left is not None
    assert re.fullmatch(r"\d{1,8}m", own), own
    assert 0 < int(own[:-1]) <= (left - 0.005) * 1000
    assert kept == "150m"
    assert re.fullmatch(r"\d{1,8}m", replaced), replaced


async def test_aiohttp_with_nothing_left_raises_budget_exhausted_and_sends_nothing(
    server: Server,
) -> None:
    async with session(margin=5) as client:
        async with asyncio.timeout(2):
            with pytest.raises(BudgetExhausted, match="margin"):
                await client.get(f"{server.url}/echo")
    assert server.seen == []


async def test_aiohttp_server_under_deadline_middleware_calls_onward(server: Server) -> None:
    seen: dict[str, Any] = {}

    async def handler(request: web.Request) -> web.Response:
        seen["left"] = budget()
        async with client.get(f"{server.url}/echo") as response:
            seen["callee"] = await response.json()
        return web.Response(text="ok")

    app = web.Application(middlewares=[aiowheel.aiohttp.deadline_middleware(timeout=1.5)])
    app.router.add_get("/", handler)
    runner, url = await serve_aiohttp(app)
    try:
        async with (
            session() as client,
            aiohttp.ClientSession() as outside,
            outside.get(f"{url}/") as response,
        ):
            assert await response.text() == "ok"
    finally:
        await runner.cleanup()
    assert 0 < seconds_of(seen["callee"]["x-request-timeout"]) <= seen["left"] <= 1.5


# --- a background job: no request, a timeout of its own -----------------------------------------


# --- both clients: the same contract ----------------------------------------------------------


async def via_httpx(url: str) -> dict[str, Any]:
    """GET ``url`` through an httpx client on a DeadlineTransport: the answer's JSON."""
    async with httpx.AsyncClient(transport=DeadlineTransport()) as client:
        response = await client.get(url)
        response.raise_for_status()
        answer: dict[str, Any] = response.json()
        return answer


async def via_aiohttp(url: str) -> dict[str, Any]:
    """GET ``url`` through an aiohttp session with propagate_deadline: the answer's JSON."""
    async with session() as client, client.get(url, raise_for_status=True) as response:
        answer: dict[str, Any] = await response.json()
        return answer


Fetch = Callable[[str], Any]
CLIENTS = pytest.mark.parametrize("fetch", [via_httpx, via_aiohttp], ids=["httpx", "aiohttp"])


@CLIENTS
@TIMEOUTS
async def test_a_real_server_is_told_what_is_left_and_nothing_outside_a_budget(
    server: Server, fetch: Fetch, timeout: Timeouts
) -> None:
    async with timeout(2):
        left = budget()
        got = await fetch(f"{server.url}/echo")
    outside = await fetch(f"{server.url}/echo")
    assert left is not None
    told = seconds_of(got["x-request-timeout"])
    assert 0 < told <= left - 0.005  # the default margin off, rounded down
    assert told > left - GENEROUS
    assert re.fullmatch(r"\d+\.\d{3}", got["x-request-timeout"])
    assert outside == {"x-request-timeout": None, "grpc-timeout": None}


@CLIENTS
async def test_a_slow_callee_is_cut_at_the_caller_s_budget(server: Server, fetch: Fetch) -> None:
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await fetch(f"{server.url}/slow")
    assert time.monotonic() - started < 0.5 + GENEROUS
    assert server.slow_started == 1


@pytest.mark.parametrize(
    ("fetch", "cut"),
    [(via_httpx, "read timeout"), (via_aiohttp, "no response")],
    ids=["httpx", "aiohttp"],
)
async def test_a_task_the_request_started_is_cut_by_the_caps(
    server: Server, fetch: Fetch, cut: str
) -> None:
    # A task the request started reads its deadline (budget()), but the deadline cancels only
    # the request's task: here the caps alone bound the call, raising BudgetExhausted.
    spawned: list[asyncio.Task[Any]] = []

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        spawned.append(asyncio.create_task(fetch(f"{server.url}/slow")))
        await asyncio.sleep(10)

    front = httpx.ASGITransport(DeadlineMiddleware(endpoint, timeout=0.5))
    async with httpx.AsyncClient(transport=front) as caller:
        started = time.monotonic()
        assert (await caller.get("http://caller.test/")).status_code == 504
        with pytest.raises(BudgetExhausted, match=cut):
            await spawned[0]
        assert time.monotonic() - started < 0.5 + GENEROUS


async def test_a_background_job_passes_its_timeout_on_through_both_clients(server: Server) -> None:
    async def job() -> tuple[float | None, str, str]:
        async with asyncio.timeout(1):
            left = budget()
            by_httpx = await via_httpx(f"{server.url}/echo")
            by_aiohttp = await via_aiohttp(f"{server.url}/echo")
        return left, by_httpx["x-request-timeout"], by_aiohttp["x-request-timeout"]

    left, by_httpx, by_aiohttp = await asyncio.create_task(job())
    assert left is not None
    assert 0 < seconds_of(by_aiohttp) <= seconds_of(by_httpx) <= left <= 1


# --- bad input, refused when the client is set up ----------------------------------------------


BAD = [
    ({"margin": -1}, ValueError, "margin must be >= 0 and finite, got -1"),
    ({"margin": math.nan}, ValueError, "margin must be >= 0 and finite, got nan"),
    ({"margin": math.inf}, ValueError, "margin must be >= 0 and finite, got inf"),
    ({"margin": "x"}, TypeError, "margin must be a number of seconds, got str"),
    ({"margin": True}, TypeError, "margin must be a number of seconds, got bool"),
    ({"header": "bad header"}, ValueError, "header must be a header name (ASCII"),
    ({"header": ""}, ValueError, "header must be a header name (ASCII"),
    ({"header": b"x-request-timeout"}, TypeError, "header must be a header name (a str), got"),
]


@pytest.mark.parametrize(("options", "error", "message"), BAD)
@pytest.mark.parametrize(
    ("make", "owner"),
    [
        (DeadlineTransport, "DeadlineTransport()"),
        (aiowheel.aiohttp.propagate_deadline, "propagate_deadline()"),
    ],
    ids=["httpx", "aiohttp"],
)
async def test_bad_input_is_refused_at_construction_naming_the_function_and_argument(
    make: Callable[..., object],
    owner: str,
    options: dict[str, object],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error) as caught:
        make(**options)
    assert str(caught.value).startswith(f"{owner}: {message}"), str(caught.value)


async def test_a_transport_that_is_not_one_is_refused() -> None:
    with pytest.raises(TypeError, match=r"^DeadlineTransport\(\): transport must be an httpx"):
        DeadlineTransport("http://callee.test")  # type: ignore[arg-type]


# --- the rules, in one place ---------------------------------------------------------------


async def test_header_values_are_rounded_down_never_more_than_is_left() -> None:
    assert header_value(1.2349, grpc=False) == "1.234"
    assert header_value(1.2349, grpc=True) == "1234m"
    assert header_value(0.001, grpc=False) == "0.001"
    assert header_value(99_999.999, grpc=True) == "99999999m"  # 8 digits of ms: the most
    assert header_value(200_000.0, grpc=True) == "200000S"  # 9 digits of ms: whole seconds
    assert header_value(1e12, grpc=True) == "99999999S"
    with pytest.raises(BudgetExhausted, match="under 1 ms"):  # neither form can say it
        header_value(0.0009, grpc=False)
    for seconds in (0.0015, 0.3, 2.9999, 12.3456):
        assert seconds_of(header_value(seconds, grpc=False)) <= seconds
        assert seconds_of(header_value(seconds, grpc=True)) <= seconds


async def test_the_explicit_header_rule() -> None:
    assert outgoing_header(1.0, "seconds", ["0.5"]) == "0.5"
    assert outgoing_header(1.0, "seconds", [" 250m "]) == "250m"  # either form, seconds header
    assert outgoing_header(1.0, "seconds", ["2", "0.75"]) == "0.75"  # the smallest valid one
    assert outgoing_header(1.0, "seconds", ["2"]) == "1.000"
    assert outgoing_header(1.0, "seconds", ["-1", "0", "1e-3"]) == "1.000"
    assert outgoing_header(1.0, "grpc", ["0.5"]) == "1000m"  # gRPC's header takes gRPC's form
    assert outgoing_header(1.2349, "ms") == "1234"  # a ...-ms header: whole milliseconds
    assert outgoing_header(1.0, "ms", ["250"]) == "250"
    assert outgoing_header(1.0, "ms", ["0.5", "2000"]) == "1000"


async def test_outgoing_is_none_outside_a_budget_and_the_margin_off_inside() -> None:
    assert outgoing(0.005) is None
    async with asyncio.timeout(2):
        left = budget()
        given = outgoing(0.25)
    assert left is not None and given is not None
    assert left - 0.25 - GENEROUS < given <= left - 0.25
