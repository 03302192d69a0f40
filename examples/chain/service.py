"""The chain's middle hop: an aiohttp web app that calls the gRPC backend.

    python -m examples.chain.service --port 8081 --backend 127.0.0.1:50051 \\
        [--mode propagated|stock|none] [--loop-mode]

- ``GET /work?id=I&seconds=S&burn=B``: blocks the loop B seconds (CPU work: time passes
  without an await, so a deadline cannot act), then calls the backend's ``Work`` (a query of
  S seconds); answers ``{"hop": "service", "budget": ..., "backend": <its answer>}``;
- ``GET /stream?id=I&count=N&interval=S``: reads the backend's ``Stream`` to its end;
  answers ``{"hop": "service", "budget": ..., "received": n}``;
- ``GET /stats?ids=a,b``: the records (see ``examples.chain``) and the process's CPU seconds;
- ``GET /backend/stats?ids=a,b``: the backend's.

``propagated``: ``aiowheel.aiohttp.deadline_middleware(timeout=10,
header="x-request-timeout")`` (the caller's header caps the deadline; past it the handler is
cancelled, its gRPC call with it, and the caller gets 504), and the channel's
``aiowheel.grpc.PropagateDeadline()`` sends each call with ``timeout=budget()`` (none left:
``BudgetExhausted``, the call never sent; a call that ends ``DEADLINE_EXCEEDED`` at the budget
raises ``BudgetExhausted`` too, which the middleware answers as its deadline, 504).
``stock``: the handler under its own ``asyncio.timeout(8)``, the gRPC call with a fixed
``timeout=8``, whatever the caller's deadline. ``none``: neither.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
from aiohttp import web

from examples.chain import (
    HEADER,
    MODES,
    SERVICE,
    STOCK_TIMEOUTS,
    TIMEOUT,
    Records,
    budget_seen,
    run,
    serve_metrics,
    until_signalled,
)
from examples.chain.backend import dumps, loads

RECORDS = web.AppKey("records", Records)
CHANNEL = web.AppKey("channel", grpc.aio.Channel)
MODE = web.AppKey("mode", str)


def _ids(request: web.Request) -> set[str] | None:
    ids = request.query.get("ids")
    return None if ids is None else set(ids.split(","))


@contextlib.asynccontextmanager
async def _own_timeout(mode: str) -> AsyncIterator[None]:
    """stock: the hop's own fixed timeout; otherwise nothing."""
    if mode == "stock":
        async with asyncio.timeout(STOCK_TIMEOUTS["service"]):
            yield
    else:
        yield


def _call_timeout(mode: str) -> float | None:
    """The gRPC call's own timeout: stock's fixed one; None otherwise (propagated: the
    channel's interceptor sends the budget)."""
    return STOCK_TIMEOUTS["service"] if mode == "stock" else None


async def work(request: web.Request) -> web.Response:
    """Call the backend's ``Work``."""
    mode = request.app[MODE]
    record = request.app[RECORDS].start(request.query.get("id", ""), "work")
    exc: BaseException | None = None
    try:
        async with _own_timeout(mode):
            burn = float(request.query.get("burn", "0"))
            if burn:
                time.sleep(burn)  # noqa: ASYNC251 (CPU work: no await, the deadline cannot act)
            record["budget"] = budget_seen(mode)
            call = request.app[CHANNEL].unary_unary(
                f"/{SERVICE}/Work", request_serializer=dumps, response_deserializer=loads
            )
            message = {"id": record["id"], "seconds": float(request.query.get("seconds", "0"))}
            answer = await call(message, timeout=_call_timeout(mode))
        return web.json_response({"hop": "service", "budget": record["budget"], "backend": answer})
    except BaseException as error:
        exc = error
        raise
    finally:
        Records.end(record, exc)


async def stream(request: web.Request) -> web.Response:
    """Read the backend's ``Stream`` to its end."""
    mode = request.app[MODE]
    record = request.app[RECORDS].start(request.query.get("id", ""), "stream")
    exc: BaseException | None = None
    try:
        async with _own_timeout(mode):
            record["budget"] = budget_seen(mode)
            call = request.app[CHANNEL].unary_stream(
                f"/{SERVICE}/Stream", request_serializer=dumps, response_deserializer=loads
            )
            message = {
                "id": record["id"],
                "count": int(request.query.get("count", "10")),
                "interval": float(request.query.get("interval", "0.1")),
            }
            received = 0
            async for _ in call(message, timeout=_call_timeout(mode)):
                received += 1
        return web.json_response(
            {"hop": "service", "budget": record["budget"], "received": received}
        )
    except BaseException as error:
        exc = error
        raise
    finally:
        Records.end(record, exc)


async def stats(request: web.Request) -> web.Response:
    """This process's records and CPU seconds."""
    return web.json_response(request.app[RECORDS].stats(_ids(request)))


async def backend_stats(request: web.Request) -> web.Response:
    """The backend's records and CPU seconds."""
    call = request.app[CHANNEL].unary_unary(
        f"/{SERVICE}/Stats", request_serializer=dumps, response_deserializer=loads
    )
    ids = _ids(request)
    answer = await call({} if ids is None else {"ids": sorted(ids)}, timeout=30)
    return web.json_response(answer)


def make_app(backend: str, mode: str) -> web.Application:
    """The app, calling the backend at ``backend`` (``host:port``) in ``mode``."""
    middlewares: list[Any] = []
    interceptors: list[Any] = []
    if mode == "propagated":
        import aiowheel.grpc
        from aiowheel.aiohttp import deadline_middleware

        middlewares.append(deadline_middleware(timeout=TIMEOUT, header=HEADER))
        interceptors.append(aiowheel.grpc.PropagateDeadline())
    elif mode == "layers":  # the same places, layers that do nothing
        middlewares.append(_pass_through)
        interceptors.extend((_UnaryPassThrough(), _StreamPassThrough()))
    app = web.Application(middlewares=middlewares)
    app[RECORDS] = Records()
    app[MODE] = mode

    async def channel(app: web.Application) -> AsyncIterator[None]:
        async with grpc.aio.insecure_channel(backend, interceptors=interceptors) as opened:
            app[CHANNEL] = opened
            yield

    app.cleanup_ctx.append(channel)
    app.router.add_get("/work", work)
    app.router.add_get("/stream", stream)
    app.router.add_get("/stats", stats)
    app.router.add_get("/backend/stats", backend_stats)
    return app


async def serve(port: int, backend: str, mode: str) -> None:
    """Serve on 127.0.0.1:``port`` until SIGTERM or SIGINT."""
    runner = web.AppRunner(make_app(backend, mode), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print(f"service: http on 127.0.0.1:{port} ({mode})", flush=True)
    try:
        await until_signalled()
    finally:
        await runner.cleanup()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.chain.service", description=__doc__)
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--backend", default="127.0.0.1:50051", help="the backend's host:port")
    parser.add_argument("--mode", choices=MODES, default="propagated")
    parser.add_argument("--loop-mode", action="store_true", help="run on aiowheel's loop mode")
    args = parser.parse_args(argv)
    serve_metrics("service")
    run(lambda: serve(args.port, args.backend, args.mode), args.loop_mode)
    return 0


@web.middleware
async def _pass_through(request: web.Request, handler: Any) -> web.StreamResponse:
    """``layers``: an aiohttp middleware that does nothing, where deadline_middleware sits."""
    response: web.StreamResponse = await handler(request)
    return response


class _UnaryPassThrough(grpc.aio.UnaryUnaryClientInterceptor):
    """``layers``: a client interceptor that passes the call on, where PropagateDeadline sits
    (one per kind: grpc.aio files an interceptor under its first kind only)."""

    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(details, request)


class _StreamPassThrough(grpc.aio.UnaryStreamClientInterceptor):
    """``layers``: the same, for calls with a stream of responses."""

    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(details, request)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
