"""One small app for every server: ASGI (``asgi_app``) and aiohttp (``make_aiohttp_app``).

Neither knows about aiowheel beyond reporting on it: the handler uses ``asyncio.timeout`` and
``asyncio.sleep``, as any app does. Run under a server on a loop-mode loop, those timers, and
the server's own (keep-alive, shutdown), are on the loop's wheel:

    uvicorn examples.served:asgi_app --loop aiowheel.loops:auto
    gunicorn examples.served:asgi_app -k aiowheel.gunicorn.UvicornWorker
    gunicorn examples.served:make_aiohttp_app -k aiowheel.gunicorn.AiohttpWorker

Routes:

- ``GET /stats``: JSON with the worker's pid, its loop's class, whether the loop is a
  loop-mode loop, and its wheel's ``stats()``;
- ``GET /slow?sleep=S&timeout=T``: sleeps S seconds under ``asyncio.timeout(T)``; past T it
  answers ``504`` with the seconds it waited and ``early``: whether the loop's clock had not
  yet reached the deadline (never true).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from aiowheel import timer_of


def stats() -> dict[str, Any]:
    """What the /stats route answers, for the running loop."""
    loop = asyncio.get_running_loop()
    timer = timer_of(loop)
    return {
        "pid": os.getpid(),
        "loop": type(loop).__name__,
        "loop_mode": timer is not None,
        "wheel": None if timer is None else dataclasses.asdict(timer.stats()),
    }


async def slow(sleep: float, deadline: float) -> tuple[int, dict[str, Any]]:
    """Sleep ``sleep`` s under ``asyncio.timeout(deadline)``: (status, body), with the seconds
    waited by the loop's clock (the clock deadlines are kept by)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(deadline) as cm:
            await asyncio.sleep(sleep)
    except TimeoutError:
        now = loop.time()
        # "early" compares the clock with the deadline itself: the difference of two clock
        # readings can read a float rounding below ``deadline`` when nothing was early.
        return 504, {"error": "gateway timeout", "waited": now - started, "early": now < cm.when()}
    now = loop.time()
    return 200, {"slept": now - started, "early": now < started + sleep}


async def _route(path: str, query: str) -> tuple[int, dict[str, Any]]:
    if path == "/stats":
        return 200, stats()
    if path == "/slow":
        args = parse_qs(query)
        return await slow(float(args["sleep"][0]), float(args["timeout"][0]))
    return 404, {"error": "not found"}


async def asgi_app(
    scope: dict[str, Any],
    receive: Callable[[], Awaitable[dict[str, Any]]],
    send: Callable[[dict[str, Any]], Awaitable[None]],
) -> None:
    """The ASGI app (HTTP and lifespan)."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    status, body = await _route(scope["path"], scope.get("query_string", b"").decode())
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


async def make_aiohttp_app() -> Any:
    """The aiohttp app, made on the worker's loop (``gunicorn examples.served:make_aiohttp_app
    -k aiowheel.gunicorn.AiohttpWorker``: aiohttp's workers take an async app factory)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        status, body = await _route(request.path, request.query_string)
        return web.json_response(body, status=status)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    return app
