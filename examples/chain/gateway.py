"""The chain's first hop: a FastAPI app under uvicorn that calls the aiohttp service.

    CHAIN_SERVICE=http://127.0.0.1:8081 CHAIN_MODE=propagated \\
        uvicorn --factory examples.chain.gateway:make_app --port 8080 \\
        [--loop aiowheel.loops:asyncio_loop]

- ``GET /work?id=I&seconds=S&gateway_burn=B``: blocks the loop B seconds (CPU work), then
  calls the service's ``/work`` with the other parameters (its backend query takes S seconds,
  after the service's own ``burn``); answers ``{"hop": "gateway",
  "budget": ..., "service": <its answer>}`` (the service's 504 as a 504, another error as a
  502);
- ``GET /stream?id=I&count=N&interval=S``: the service's ``/stream``;
- ``GET /stats?ids=a,b``: the records (see ``examples.chain``) and the process's CPU seconds.

``propagated`` (env ``CHAIN_MODE``): :class:`aiowheel.asgi.DeadlineMiddleware` with
``timeout=10, header="x-request-timeout"`` (the client's header caps the deadline; past it
the endpoint is cancelled, its call to the service with it, and the client gets 504), and an
``httpx.AsyncClient(transport=aiowheel.httpx.DeadlineTransport())`` that sends what is left
in the same header and caps the call's timeouts by it; the service's 504 for that budget is
raised by the transport as the gateway's own deadline (no code here converts it).
``stock``: the endpoint under its own ``asyncio.timeout(10)``, the call with a fixed
``timeout=10``, the client's header ignored. ``none``: neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from examples.chain import (
    HEADER,
    MODES,
    STOCK_TIMEOUTS,
    TIMEOUT,
    Records,
    budget_seen,
    serve_metrics,
)


def make_app() -> FastAPI:
    """The app, calling the service at env ``CHAIN_SERVICE`` in mode env ``CHAIN_MODE``
    (default ``propagated``): for ``uvicorn --factory examples.chain.gateway:make_app``."""
    mode = os.environ.get("CHAIN_MODE", "propagated")
    if mode not in MODES:
        raise SystemExit(f"CHAIN_MODE must be one of {', '.join(MODES)}, got {mode!r}")
    service = os.environ.get("CHAIN_SERVICE", "http://127.0.0.1:8081")
    serve_metrics("gateway")
    return build_app(service, mode)


def build_app(service: str, mode: str) -> FastAPI:
    """The gateway in ``mode``, calling the service at ``service``."""
    records = Records()
    clients: dict[str, httpx.AsyncClient] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if mode == "propagated":
            import aiowheel.httpx

            client = httpx.AsyncClient(
                base_url=service, transport=aiowheel.httpx.DeadlineTransport(), timeout=TIMEOUT
            )
        elif mode == "stock":
            client = httpx.AsyncClient(base_url=service, timeout=STOCK_TIMEOUTS["gateway"])
        elif mode == "layers":
            client = httpx.AsyncClient(
                base_url=service, transport=_Forward(httpx.AsyncHTTPTransport()), timeout=TIMEOUT
            )
        else:
            client = httpx.AsyncClient(base_url=service, timeout=None)
        clients["service"] = client
        async with client:
            yield

    app = FastAPI(title="aiowheel chain: gateway", lifespan=lifespan)
    if mode == "propagated":
        from aiowheel.asgi import DeadlineMiddleware

        app.add_middleware(DeadlineMiddleware, timeout=TIMEOUT, header=HEADER)
    elif mode == "layers":
        app.add_middleware(_PassThrough)

    @contextlib.asynccontextmanager
    async def own_timeout() -> AsyncIterator[None]:
        if mode == "stock":
            async with asyncio.timeout(STOCK_TIMEOUTS["gateway"]):
                yield
        else:
            yield

    async def forward(path: str, what: str, request: Request) -> Any:
        record = records.start(request.query_params.get("id", ""), what)
        exc: BaseException | None = None
        try:
            async with own_timeout():
                burn = float(request.query_params.get("gateway_burn", "0"))
                if burn:
                    time.sleep(burn)  # noqa: ASYNC251 (CPU work: no await, the deadline cannot act)
                record["budget"] = budget_seen(mode)
                params = {k: v for k, v in request.query_params.items() if k != "gateway_burn"}
                response = await clients["service"].get(path, params=params)
            # In "propagated" mode the service's 504 at the end of the budget never gets here:
            # DeadlineTransport raises it as BudgetExhausted (our own deadline, answered 504).
            if response.status_code != 200:  # the other modes: the service's status passed on
                return JSONResponse(
                    {"hop": "gateway", "budget": record["budget"], "service_status":
                     response.status_code},
                    status_code=504 if response.status_code == 504 else 502,
                )  # fmt: skip
            return {"hop": "gateway", "budget": record["budget"], "service": response.json()}
        except BaseException as error:
            exc = error
            raise
        finally:
            Records.end(record, exc)

    @app.get("/work")
    async def work(request: Request) -> Any:
        """The service's ``/work``: a backend query of ``seconds``."""
        return await forward("/work", "work", request)

    @app.get("/stream")
    async def stream(request: Request) -> Any:
        """The service's ``/stream``."""
        return await forward("/stream", "stream", request)

    @app.get("/stats")
    async def get_stats(ids: str | None = None) -> dict[str, Any]:
        """This process's records and CPU seconds."""
        return records.stats(None if ids is None else set(ids.split(",")))

    return app


class _PassThrough:
    """``layers``: a pure ASGI middleware that does nothing, where DeadlineMiddleware sits."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class _Forward(httpx.AsyncBaseTransport):
    """``layers``: a transport that forwards, where DeadlineTransport sits."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.transport.handle_async_request(request)

    async def aclose(self) -> None:
        await self.transport.aclose()
