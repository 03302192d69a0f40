"""A FastAPI app with a request deadline and a websocket heartbeat, run on loop mode by uvicorn.

    pip install -e '.[examples]'
    uvicorn examples.fastapi_app:app --loop aiowheel.loops:auto

Not a line of it knows about aiowheel: the deadline is ``asyncio.timeout`` in a middleware and
the heartbeat is ``asyncio.sleep`` / ``asyncio.timeout`` in the websocket handler. On a
loop-mode loop those timers, and uvicorn's own (keep-alive, its 0.1 s tick), are on the wheel.

- ``GET /work?ms=N``: sleeps N ms; past ``REQUEST_TIMEOUT`` (env ``REQUEST_TIMEOUT``, default
  0.5 s) the middleware answers ``504 {"error": "gateway timeout", "waited": seconds,
  "early": false}`` (``early``: the loop's clock had not reached the deadline; never true);
- ``GET /stats``: the worker's loop and its wheel's ``stats()`` (examples/served.py);
- ``WS /ws``: the server sends ``{"type": "heartbeat"}`` every ``HEARTBEAT_INTERVAL`` s (env,
  default 1.0) and closes with code 4000 a client that sends nothing for three intervals.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

from fastapi import FastAPI, Request, Response, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from examples.served import stats

REQUEST_TIMEOUT = float(os.environ.get("REQUEST_TIMEOUT", "0.5"))
HEARTBEAT_INTERVAL = float(os.environ.get("HEARTBEAT_INTERVAL", "1.0"))

app = FastAPI(title="aiowheel example")


@app.middleware("http")
async def request_deadline(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """Every request under ``asyncio.timeout(REQUEST_TIMEOUT)``: 504 past it.

    ``waited`` is measured by the loop's clock, the one deadlines are kept by (uvloop's lags
    ``time.monotonic()`` by up to a loop iteration: it is read once per iteration)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT) as cm:
            return await call_next(request)
    except TimeoutError:
        now = loop.time()
        body = {"error": "gateway timeout", "waited": now - started, "early": now < cm.when()}
        return JSONResponse(body, status_code=504)


@app.get("/work")
async def work(ms: float = 0.0) -> dict[str, float]:
    """Sleep ``ms`` milliseconds (an upstream call, say)."""
    await asyncio.sleep(ms / 1000)
    return {"slept_ms": ms}


@app.get("/stats")
async def get_stats() -> dict[str, object]:
    """The worker's loop and its wheel's counters."""
    return stats()


@app.websocket("/ws")
async def heartbeat(websocket: WebSocket) -> None:
    """Heartbeats out every interval; a client silent for three intervals is closed."""
    await websocket.accept()

    async def beat() -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL)
            await websocket.send_json({"type": "heartbeat"})

    beats = asyncio.create_task(beat())
    try:
        while True:
            async with asyncio.timeout(3 * HEARTBEAT_INTERVAL):
                await websocket.receive_text()
    except TimeoutError:
        await websocket.close(code=4000, reason="no heartbeat")
    except WebSocketDisconnect:
        pass
    finally:
        beats.cancel()
