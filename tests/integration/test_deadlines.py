"""Request deadlines that stop the work (aiowheel.asgi, aiowheel.aiohttp), in process: httpx's
ASGI transport and aiohttp's test server; and once from a real uvicorn.

The core test runs on asyncio's loop, uvloop, loop mode over each, and a virtual clock over
asyncio and uvloop; the rest on a virtual clock (exact, and no wall time) or, for aiohttp's
sockets, on short real deadlines. Times are compared with deadlines by the loop's clock, never
as tight wall-time bounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from aiohttp import ClientPayloadError, web
from aiohttp.test_utils import TestClient, TestServer
from fastapi import Depends, FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import aiowheel
import aiowheel._deadlines._inbound
import aiowheel.testing
from aiowheel.aiohttp import deadline_middleware
from aiowheel.asgi import (
    BudgetExhausted,
    DeadlineMiddleware,
    Expired,
    budget,
    budget_header,
    deadline,
    set_deadline,
)
from aiowheel.asgi import parse_timeout_header as parse
from tests.support import BASES, ROOT, free_port, http_scope, raw_call

pytestmark = pytest.mark.anyio

DEADLINE = 0.05  # real clock: short; on the virtual clock any deadline takes no wall time

UVLOOP = BASES["uvloop"]
VIRTUAL = pytest.param(
    ("asyncio", {"loop_factory": aiowheel.testing.virtual_loop_factory()}), id="virtual"
)
VIRTUAL_UVLOOP = pytest.param(
    ("asyncio", {"loop_factory": aiowheel.testing.virtual_loop_factory(UVLOOP)}),
    id="virtual-uvloop",
)
REAL = [
    pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("asyncio", {"loop_factory": aiowheel.loop_factory()}), id="loop-mode"),
    pytest.param(
        ("asyncio", {"loop_factory": aiowheel.loop_factory(UVLOOP)}), id="loop-mode-uvloop"
    ),
]
EVERY_LOOP = pytest.mark.parametrize("anyio_backend", [*REAL, VIRTUAL, VIRTUAL_UVLOOP])
ON_VIRTUAL = pytest.mark.parametrize("anyio_backend", [VIRTUAL])
ON_REAL = pytest.mark.parametrize("anyio_backend", REAL[:1])


def client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://test")


def now() -> float:
    return asyncio.get_running_loop().time()


class Work:
    """What the endpoints saw: their budget, their cancellation, their cleanup."""

    def __init__(self) -> None:
        self.left: list[float | None] = []
        self.cancelled = 0
        self.cleaned = 0
        self.running = 0

    async def overrun(self, seconds: float = 30.0) -> None:
        self.left.append(aiowheel.time_left())
        self.running += 1
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running -= 1
            self.cleaned += 1


def starlette_app(work: Work, **options: Any) -> Starlette:
    async def slow(request: Request) -> Response:
        await work.overrun(float(request.query_params.get("s", "30")))
        return JSONResponse({"ok": True})

    async def fast(request: Request) -> Response:
        return JSONResponse({"left": aiowheel.time_left(), "budget": budget()})

    app = Starlette(routes=[Route("/slow", slow), Route("/fast", fast), Route("/export/{n}", slow)])
    app.add_middleware(DeadlineMiddleware, **{"timeout": DEADLINE, **options})
    return app


# --- ASGI: the core contract on every loop --------------------------------------------------


@EVERY_LOOP
async def test_an_overrunning_endpoint_is_cancelled_cleaned_up_and_answered_504() -> None:
    work = Work()
    async with client(starlette_app(work)) as http:
        earliest = now() + DEADLINE  # no deadline the middleware arms is earlier than this
        response = await http.get("/slow")
        answered = now()
        assert response.status_code == 504
        assert response.json() == {"error": "gateway timeout"}
        assert response.headers["content-type"] == "application/json"
        assert answered >= earliest  # never early, by the loop's clock
        # The endpoint's own task was cancelled: CancelledError seen, finally run, nothing left.
        assert (work.cancelled, work.cleaned, work.running) == (1, 1, 0)
        assert aiowheel.pending_timers() == []
        # Its budget was the request's deadline, read inside it.
        (left,) = work.left
        assert left is not None and 0 < left <= DEADLINE + 1e-6  # (float clock readings)
        fast = await http.get("/fast")
        assert fast.status_code == 200
        assert 0 < fast.json()["left"] <= DEADLINE + 1e-6
    assert aiowheel.time_left() is None  # the deadline was the request's, not the test's


# --- ASGI: on a virtual clock (exact, no wall time) -----------------------------------------


@ON_VIRTUAL
async def test_the_answer_is_made_at_the_deadline_and_its_body_is_configurable() -> None:
    seen: list[Expired] = []

    def body(expired: Expired) -> bytes:
        seen.append(expired)
        return json.dumps({"waited": expired.waited, "path": expired.path}).encode()

    work = Work()
    app = starlette_app(work, timeout=2, status=503, body=body, content_type="text/x-json")
    async with client(app) as http:
        response = await http.get("/slow")
    assert response.status_code == 503
    assert response.headers["content-type"] == "text/x-json"
    (expired,) = seen
    assert expired.path == "/slow"
    assert expired.deadline == expired.started + 2
    assert expired.deadline <= expired.now <= expired.deadline + 0.002  # within a tick
    assert response.json() == {"waited": expired.waited, "path": "/slow"}
    assert work.cleaned == 1


@ON_VIRTUAL
async def test_a_started_response_is_cut_off_never_passed_off_as_complete() -> None:
    work = Work()

    async def streaming(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"partial", "more_body": True})
        await work.overrun()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    sent: list[dict[str, Any]] = []
    with pytest.raises(TimeoutError):  # re-raised: the server aborts the connection
        sent = await raw_call(DeadlineMiddleware(streaming, timeout=1), http_scope())
    assert (work.cancelled, work.cleaned) == (1, 1)
    assert not any(m.get("more_body") is False for m in sent)

    # The same through Starlette's StreamingResponse and httpx: the client never gets a whole
    # response (Starlette's own error middleware re-raises once a response has started).
    async def chunks() -> Any:
        yield b"first chunk"
        await work.overrun()
        yield b"never sent"

    async def stream(request: Request) -> Response:
        return StreamingResponse(chunks())

    app = Starlette(routes=[Route("/stream", stream)])
    app.add_middleware(DeadlineMiddleware, timeout=1)
    async with client(app) as http:
        with pytest.raises(TimeoutError):
            await http.get("/stream")
    assert work.cleaned == 2
    assert aiowheel.pending_timers() == []


@ON_VIRTUAL
async def test_websocket_and_lifespan_scopes_pass_through_untouched() -> None:
    seen: list[tuple[str, Any, Any, float | None]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope["type"], receive, send, aiowheel.time_left()))
        await asyncio.sleep(10)  # far past the middleware's deadline: not its business

    middleware = DeadlineMiddleware(app, timeout=1)

    async def receive() -> dict[str, Any]:
        return {}

    async def send(message: Any) -> None:
        pass

    for kind in ("websocket", "lifespan"):
        await middleware({"type": kind, "path": "/"}, receive, send)
    assert seen == [("websocket", receive, send, None), ("lifespan", receive, send, None)]


@ON_VIRTUAL
async def test_a_route_has_its_own_deadline_longer_or_shorter() -> None:
    answers: list[Expired] = []

    def body(expired: Expired) -> bytes:
        answers.append(expired)
        return b"{}"

    async def extend(request: Request) -> Response:
        set_deadline(5)  # from the request's start: later than the default
        await asyncio.sleep(3)
        return JSONResponse({"ok": True})

    api = FastAPI()

    @api.get("/report", dependencies=[Depends(deadline(0.25))])
    async def report() -> dict[str, bool]:
        await asyncio.sleep(30)
        return {"ok": True}

    @api.get("/slow")
    async def slow() -> dict[str, bool]:
        await asyncio.sleep(30)
        return {"ok": True}

    api.add_api_route("/extend", extend)

    @api.get("/{rest:path}")
    async def anything(rest: str) -> dict[str, bool]:
        await asyncio.sleep(30)
        return {"ok": True}

    overrides = {"/slow": 0.5, "/export/*": 4, "/export/big/*": 8}
    api.add_middleware(DeadlineMiddleware, timeout=1, overrides=overrides, body=body)
    async with client(api) as http:
        for path in ("/slow", "/report", "/export/1", "/export/big/2", "/exports"):
            assert (await http.get(path)).status_code == 504, path
        assert (await http.get("/extend")).status_code == 200
    given = {e.path: round(e.deadline - e.started, 6) for e in answers}
    # /exports matches no prefix ("/export/*" is "/export/..."): the default.
    assert given == {"/slow": 0.5, "/report": 0.25, "/export/1": 4, "/export/big/2": 8,
                     "/exports": 1}  # fmt: skip
    assert aiowheel.pending_timers() == []


@ON_VIRTUAL
@pytest.mark.parametrize(
    ("value", "given"),
    # The route extends its deadline to 60 s: the caller's cap holds it back, unless the
    # caller allows more (90 s).
    [("0.5", 0.5), ("250m", 0.25), ("1S", 1.0), ("90", 60.0)],
)
async def test_the_inbound_header_caps_the_deadline(value: str, given: float) -> None:
    answers: list[Expired] = []

    def body(expired: Expired) -> bytes:
        answers.append(expired)
        return b"{}"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        set_deadline(60)  # never past what the caller allows
        await asyncio.sleep(3600)

    middleware = DeadlineMiddleware(app, timeout=2, header="X-Request-Timeout", body=body)
    sent = await raw_call(middleware, http_scope(headers=[(b"x-request-timeout", value.encode())]))
    assert sent[0]["status"] == 504
    (expired,) = answers
    assert expired.deadline - expired.started == pytest.approx(given)


@ON_VIRTUAL
async def test_a_bad_inbound_header_is_ignored_logged_and_the_default_applies(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = ["", "abc", "-1", "0", "0m", "1e3", "inf", "nan", "1.5.2", "+3", "123456789m", "2 S",
           "10h", "\u0661", "1" * 100]  # fmt: skip
    deadlines: list[float] = []
    monkeypatch.setattr(
        aiowheel._deadlines._inbound, "_bad_headers", aiowheel._deadlines._inbound._Warnings()
    )
    now = [1000.0]
    monkeypatch.setattr(
        aiowheel._deadlines._inbound, "time", SimpleNamespace(monotonic=lambda: now[0])
    )

    def body(expired: Expired) -> bytes:
        deadlines.append(expired.deadline - expired.started)
        return b"{}"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    middleware = DeadlineMiddleware(app, timeout=2, header="x-request-timeout", body=body)

    async def call(values: list[str], client: str) -> None:
        header = [(b"x-request-timeout", value.encode()) for value in values]
        sent = await raw_call(middleware, http_scope(headers=header, client=(client, 5000)))
        assert sent[0]["status"] == 504, values  # never a 500

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "aiowheel.asgi"]

    with caplog.at_level(logging.WARNING, logger="aiowheel.asgi"):
        for i, value in enumerate(bad):  # each from a client of its own
            await call([value], f"10.0.0.{i}")
        # Sent twice, even if each is good: which one the client meant is unknown.
        await call(["1", "1.5"], "10.1.0.1")
    assert deadlines == [2.0] * (len(bad) + 1)
    # A flood of bad headers from many clients: the first ten in the minute are logged.
    limit = aiowheel._deadlines._inbound.WARNINGS_PER_MINUTE
    assert len(logged()) == limit
    assert "ignored the x-request-timeout header 'abc' from 10.0.0.1" in logged()[1].getMessage()
    assert all(r.levelno == logging.WARNING for r in logged())
    caplog.clear()
    now[0] += 61.0  # a minute later, one client floods: logged once, saying what was left out
    with caplog.at_level(logging.WARNING, logger="aiowheel.asgi"):
        for _ in range(5):
            await call(["soon"], "10.2.0.1")
        await call(["1", "2"], "10.3.0.1")
    (first, second) = logged()
    assert "'soon' from 10.2.0.1" in first.getMessage()
    assert f"({len(bad) + 1 - limit} more bad headers not logged)" in first.getMessage()
    assert "'1, 2' from 10.3.0.1" in second.getMessage()
    assert "(4 more bad headers not logged)" in second.getMessage()


@ON_VIRTUAL
async def test_envoys_milliseconds_header_caps_the_deadline() -> None:
    # A header named ...-ms is whole milliseconds: Envoy's x-envoy-expected-rq-timeout-ms.
    deadlines: list[float] = []

    def body(expired: Expired) -> bytes:
        deadlines.append(expired.deadline - expired.started)
        return b"{}"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    header = "x-envoy-expected-rq-timeout-ms"
    middleware = DeadlineMiddleware(app, timeout=2, header=header, body=body)
    for value in ("1500", "250", "999999999999", "1.5", "100m", "0", "-5"):
        sent = await raw_call(middleware, http_scope(headers=[(header.encode(), value.encode())]))
        assert sent[0]["status"] == 504
    assert deadlines == pytest.approx([1.5, 0.25, 2.0, 2.0, 2.0, 2.0, 2.0])


def test_the_header_parser_is_strict() -> None:
    good = {"2": 2.0, "2.5": 2.5, " 0.100 ": 0.1, "100m": 0.1, "3S": 3.0, "2M": 120.0,
            "1H": 3600.0, "1500u": 0.0015, "99999999n": 0.099999999}  # fmt: skip
    assert {value: parse(value) for value in good} == pytest.approx(good)
    for value in ("", "1e3", "-2", "0", "00", "0.0", "5x", "1.5m", "1 m", "inf", "0x10"):
        assert parse(value) is None, value


@ON_VIRTUAL
async def test_the_budget_is_read_passed_on_and_fails_fast() -> None:
    seen: dict[str, Any] = {}

    async def endpoint(request: Request) -> Response:
        await asyncio.sleep(0.25)
        seen["budget"] = budget()
        seen["header"] = budget_header()
        seen["grpc"] = budget_header(grpc=True)
        async with asyncio.timeout(0.5):  # an inner, tighter timeout is the budget there
            seen["inner"] = budget()
        # A task the request starts sees the request's deadline too.
        seen["child"] = await asyncio.create_task(asyncio.sleep(0, budget()))
        budget(0.9)  # less than 0.9 s is left: fails fast, answered as the deadline
        seen["not reached"] = True
        return Response()

    app = Starlette(routes=[Route("/", endpoint)])
    app.add_middleware(DeadlineMiddleware, timeout=1)
    async with client(app) as http:
        response = await http.get("/")
    assert response.status_code == 504
    assert seen == {"budget": pytest.approx(0.75), "header": "0.750", "grpc": "750m",
                    "inner": pytest.approx(0.5), "child": pytest.approx(0.75)}  # fmt: skip
    assert budget() is None and budget_header() is None  # no deadline here
    async with asyncio.timeout(0.0005):
        with pytest.raises(BudgetExhausted, match="under 1 ms"):
            budget_header()
        with pytest.raises(BudgetExhausted, match="under the 1.000 s"):
            budget(1)
    with pytest.raises(RuntimeError, match="no request deadline here"):
        set_deadline(1)


@ON_VIRTUAL
async def test_deadlines_are_filed_only_for_requests_that_wait_and_share_a_tick() -> None:
    timer = aiowheel.get_timer()
    answers: list[Expired] = []

    def body(expired: Expired) -> bytes:
        answers.append(expired)
        return b"{}"

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/late":
            await asyncio.sleep(0.5)
            set_deadline(0.25)  # already passed: answered at once, never filed
        if scope["path"] != "/fast":
            await asyncio.sleep(30)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    middleware = DeadlineMiddleware(app, timeout=1, overrides={"/short": 0.5}, body=body)
    # Answered in its first step, a request's deadline never reaches the wheel.
    before = timer.stats()
    for _ in range(50):
        assert (await raw_call(middleware, http_scope("/fast")))[0]["status"] == 200
    after = timer.stats()
    assert (after.pending, after.cancelled, after.fired) == (0, before.cancelled, before.fired)

    # 40 waiting requests, arriving 0.25 ms apart (4 a tick), two deadlines: one entry a tick.
    async def call(index: int) -> int:
        await asyncio.sleep(index * 0.00025)
        path = ("/slow", "/short")[index % 2]
        return int((await raw_call(middleware, http_scope(path)))[0]["status"])

    calls = asyncio.gather(*(call(index) for index in range(40)))
    await asyncio.sleep(0.02)
    # One entry a tick, named by its first request's route and how many more it guards.
    entries = [t for t in aiowheel.pending_timers() if t.origin.startswith("request deadline")]
    assert 0 < len(entries) <= 2 * 10 + 2  # ticks, not requests
    named = re.compile(r"request deadline GET /(slow|short)( \+[1-9][0-9]* more)?")
    assert all(named.fullmatch(t.origin) for t in entries), [t.origin for t in entries]
    assert any(t.origin.endswith("more") for t in entries)  # 4 requests a tick, 2 deadlines
    statuses = await calls
    assert statuses == [504] * 40
    for expired in answers:  # never early; at most the wheel's tick late
        assert expired.deadline <= expired.now <= expired.deadline + timer.tick + 1e-9
    assert sorted({round(e.deadline - e.started, 6) for e in answers}) == [0.5, 1.0]
    assert (await raw_call(middleware, http_scope("/late")))[0]["status"] == 504
    late = answers[-1]
    assert (late.deadline - late.started, late.now - late.started) == pytest.approx((0.25, 0.5))
    assert aiowheel.pending_timers() == []


@ON_VIRTUAL
async def test_a_body_function_not_returning_bytes_is_named_and_latin1_settings_work() -> None:
    async def slow(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(10)

    wrong = DeadlineMiddleware(slow, timeout=1, body=lambda expired: "text")  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match=re.escape(
        "DeadlineMiddleware(): body must return bytes from its Expired, got str"
    )):  # fmt: skip
        await raw_call(wrong, http_scope())
    # Latin-1 settings, allowed, are sent as such.
    fine = DeadlineMiddleware(slow, timeout=1, header="X-Timeout", content_type="text/caf\u00e9")
    sent = await raw_call(fine, http_scope(headers=[(b"x-timeout", b"0.5")]))
    assert sent[0]["status"] == 504
    assert (b"content-type", "text/caf\u00e9".encode("latin-1")) in sent[0]["headers"]


@ON_VIRTUAL
async def test_an_endpoint_that_swallows_its_cancellation_still_gets_the_504() -> None:
    async def stubborn(scope: Any, receive: Any, send: Any) -> None:
        with contextlib.suppress(asyncio.CancelledError):  # and returns without answering
            await asyncio.sleep(10)

    sent = await raw_call(DeadlineMiddleware(stubborn, timeout=1), http_scope())
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 504


@ON_VIRTUAL
async def test_the_fastapi_example_answers_its_documented_504() -> None:
    from examples import fastapi_app

    async with client(fastapi_app.app) as http:
        assert (await http.get("/work?ms=0")).json() == {"slept_ms": 0.0}
        response = await http.get("/work?ms=5000")
    assert response.status_code == 504
    body = response.json()
    assert set(body) == {"error", "waited", "early"}
    assert body["error"] == "gateway timeout" and body["early"] is False
    assert fastapi_app.REQUEST_TIMEOUT <= body["waited"] <= fastapi_app.REQUEST_TIMEOUT + 0.002


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: DeadlineMiddleware(ok_app, timeout=-1), ValueError,
         "DeadlineMiddleware(): timeout must be a positive, finite number of seconds, got -1"),
        (lambda: DeadlineMiddleware(ok_app, timeout=math.inf), ValueError, "got inf"),
        (lambda: DeadlineMiddleware(ok_app, timeout=math.nan), ValueError, "got nan"),
        (lambda: DeadlineMiddleware(ok_app, timeout=0), ValueError, "got 0"),
        (lambda: DeadlineMiddleware(ok_app, timeout="5"), TypeError,
         "DeadlineMiddleware(): timeout must be a number of seconds, got str"),
        (lambda: DeadlineMiddleware(ok_app, timeout=True), TypeError, "got bool"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, overrides={"/a": 0}), ValueError,
         "DeadlineMiddleware(): overrides['/a'] must be a positive"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, overrides={"a": 1}), ValueError,
         "keys must be paths"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, overrides=[("/a", 1)]), TypeError,
         "overrides must be a mapping"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, overrides={1: 1}), TypeError,
         "DeadlineMiddleware(): overrides keys must be paths starting with '/', got int"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, header=""), ValueError,
         "DeadlineMiddleware(): header must be a header name"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, header=5), TypeError,
         "DeadlineMiddleware(): header must be a header name (a str) or None, got int"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, header="x-d\u00e9lai"), ValueError,
         "DeadlineMiddleware(): header must be a header name (ASCII letters, digits and "
         "!#$%&'*+-.^_`|~) or None, got 'x-d\u00e9lai'"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, header="x timeout"), ValueError,
         "header must be a header name"),
        (lambda: deadline_middleware(timeout=1, header="x-d\u00e9lai"), ValueError,
         "deadline_middleware(): header must be a header name"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, content_type="text/\u65e5"), ValueError,
         "DeadlineMiddleware(): content_type must be a header value (latin-1, no control "
         "characters), got 'text/\u65e5'"),
        (lambda: deadline_middleware(timeout=1, content_type="text/plain\r\nx-evil: 1"),
         ValueError, "deadline_middleware(): content_type must be a header value"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, status=999), ValueError,
         "DeadlineMiddleware(): status must be an HTTP status code, got 999"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, status="504"), TypeError,
         "DeadlineMiddleware(): status must be an HTTP status code (an int), got str"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, content_type=b"x"), TypeError,
         "DeadlineMiddleware(): content_type must be a str, got bytes"),
        (lambda: DeadlineMiddleware(ok_app, timeout=1, body="text"), TypeError, "body"),
        (lambda: DeadlineMiddleware(None, timeout=1), TypeError, "app must be an ASGI app"),
        (lambda: deadline_middleware(timeout=-1), ValueError,
         "deadline_middleware(): timeout must be a positive, finite number of seconds, got -1"),
        (lambda: deadline(0), ValueError, "deadline(): seconds must be a positive"),
        (lambda: set_deadline(-1), ValueError, "set_deadline(): seconds must be a positive"),
        (lambda: budget(-1), ValueError, "budget(): minimum must be >= 0"),
        (lambda: budget("1"), TypeError, "budget(): minimum must be a number of seconds, got str"),
        (lambda: budget_header(-1), ValueError, "budget_header(): minimum must be >= 0"),
        (lambda: budget_header(grpc=1), TypeError, "budget_header(): grpc must be a bool, got int"),
        (lambda: parse(5), TypeError,
         "parse_timeout_header(): value must be a str, got int"),
    ],
)  # fmt: skip
def test_bad_arguments_are_refused_at_once_naming_the_middleware(
    make: Callable[[], object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        make()


async def ok_app(scope: Any, receive: Any, send: Any) -> None:
    pass


# --- aiohttp's web server (real sockets, so a real clock and short deadlines) ----------------


def aiohttp_app(work: Work, **options: Any) -> web.Application:
    async def slow(request: web.Request) -> web.StreamResponse:
        await work.overrun()
        return web.json_response({"ok": True})

    async def fast(request: web.Request) -> web.StreamResponse:
        return web.json_response({"left": aiowheel.time_left(), "budget": budget()})

    async def stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse()
        await response.prepare(request)  # headers out: the response has started
        await work.overrun()
        return response

    app = web.Application(middlewares=[deadline_middleware(**{"timeout": DEADLINE, **options})])
    app.router.add_get("/slow", slow)
    app.router.add_get("/fast", fast)
    app.router.add_get("/stream", stream)
    app.router.add_get("/items/{id}", slow)
    return app


@pytest.mark.parametrize("anyio_backend", REAL)
async def test_aiohttp_an_overrunning_handler_is_cancelled_cleaned_up_and_answered_504() -> None:
    work = Work()
    async with TestClient(TestServer(aiohttp_app(work))) as http:
        earliest = now() + DEADLINE
        response = await http.get("/slow")
        assert response.status == 504
        assert await response.json() == {"error": "gateway timeout"}
        assert now() >= earliest
        assert (work.cancelled, work.cleaned, work.running) == (1, 1, 0)
        (left,) = work.left
        assert left is not None and 0 < left <= DEADLINE + 1e-6  # (float clock readings)
        fast = await http.get("/fast")
        assert fast.status == 200
        figures = await fast.json()
        assert 0 < figures["left"] <= DEADLINE + 1e-6
        assert 0 < figures["budget"] <= DEADLINE + 1e-6
        # None of the requests' timers is left (the server's keep-alive is, on loop mode).
        assert [t for t in aiowheel.pending_timers() if t.kind in ("sleep", "timeout")] == []


@ON_REAL
async def test_aiohttp_a_started_response_is_cut_off_and_routes_and_headers_set_deadlines(
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = Work()
    options = {"timeout": 5, "overrides": {"/items/{id}": DEADLINE, "/stream": DEADLINE},
               "header": "grpc-timeout"}  # fmt: skip
    async with TestClient(TestServer(aiohttp_app(work, **options))) as http:
        response = await http.get("/stream")
        assert response.status == 200  # the headers went out before the deadline
        with pytest.raises(ClientPayloadError):  # and the body never completes
            await response.read()
        # A route's canonical form names its own deadline.
        assert (await http.get("/items/7")).status == 504
        # The caller's header caps the 5 s default; a bad one is ignored, logged.
        assert (await http.get("/slow", headers={"grpc-timeout": "50m"})).status == 504
        with caplog.at_level(logging.WARNING, logger="aiowheel.asgi"):
            assert (await http.get("/fast", headers={"grpc-timeout": "soon"})).status == 200
        assert "deadline_middleware: ignored the grpc-timeout header 'soon'" in caplog.text
    assert (work.cancelled, work.cleaned, work.running) == (3, 3, 0)


# --- a real uvicorn ---------------------------------------------------------------------------


def test_under_uvicorn_on_loop_mode_the_work_stops_and_the_server_says_its_loop() -> None:
    # The bench's app (bench/deadlines.py), the middleware shape; uvicorn with uvloop on
    # loop mode, which logs so at startup.
    port = free_port()
    command = [sys.executable, "-m", "uvicorn", "--factory", "bench.deadlines:make_app",
               "--host", "127.0.0.1", "--port", str(port), "--loop", "aiowheel.loops:uvloop",
               "--no-access-log"]  # fmt: skip
    env = {"DEADLINE_SHAPE": "middleware", "DEADLINE_TIMEOUT": "0.1"}
    server = subprocess.Popen(
        command, cwd=ROOT, env={**os.environ, **env},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        give_up = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/inflight", timeout=5) as answer:
                    assert json.load(answer)["inflight"] == 0
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < give_up, "no server"
                time.sleep(0.05)
        try:
            urllib.request.urlopen(f"{url}/work?ms=5000", timeout=10)
            raise AssertionError("no 504")
        except urllib.error.HTTPError as error:
            assert error.code == 504
            body = json.load(error)
        assert body["waited"] >= 0.1 - 1e-6 and body["early"] is False
        with urllib.request.urlopen(f"{url}/inflight", timeout=5) as answer:
            assert json.load(answer)["inflight"] == 0  # the endpoint's work stopped
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
    assert "aiowheel: loop mode on, base loop uvloop.Loop" in output, output
