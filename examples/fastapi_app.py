"""A FastAPI app with a request deadline and a websocket heartbeat, run on loop mode by uvicorn.

    pip install -e '.[examples]'
    uvicorn examples.fastapi_app:app --loop aiowheel.loops:auto

The deadline is :class:`aiowheel.asgi.DeadlineMiddleware`, a pure ASGI middleware that awaits
the endpoint in the request's own task: past the deadline the endpoint's work is cancelled, not
just answered for (``@app.middleware("http")`` around ``asyncio.timeout`` answers the 504 and
leaves the endpoint running: docs/deadlines.md). The heartbeat is plain ``asyncio.sleep`` /
``asyncio.timeout`` in the websocket handler. On a loop-mode loop those timers, and uvicorn's
own (keep-alive, its 0.1 s tick), are on the wheel.

- ``GET /work?ms=N``: sleeps N ms; past ``REQUEST_TIMEOUT`` (env ``REQUEST_TIMEOUT``, default
  0.5 s) the sleep is cancelled and the middleware answers ``504 {"error": "gateway timeout",
  "waited": seconds, "early": false}`` (``early``: the loop's clock had not reached the
  deadline; never true);
- ``GET /stats``: the worker's loop and its wheel's ``stats()`` (examples/served.py);
- ``WS /ws``: the server sends ``{"type": "heartbeat"}`` every ``HEARTBEAT_INTERVAL`` s (env,
  default 1.0) and closes with code 4000 a client that sends nothing for three intervals.
"""

from __future__ import annotations

import asyncio
import json
import os

from fastapi import FastAPI, WebSocket, WebSocketDisconnect

from aiowheel.asgi import DeadlineMiddleware, Expired
from examples.served import stats

REQUEST_TIMEOUT = float(os.environ.get("REQUEST_TIMEOUT", "0.5"))
HEARTBEAT_INTERVAL = float(os.environ.get("HEARTBEAT_INTERVAL", "1.0"))

app = FastAPI(title="aiowheel example")


def gateway_timeout(expired: Expired) -> bytes:
    """The 504's body. ``waited`` is measured by the loop's clock, the one deadlines are kept
    by (uvloop's lags ``time.monotonic()`` by up to a loop iteration: it is read once per
    iteration)."""
    early = expired.now < expired.deadline
    return json.dumps(
        {"error": "gateway timeout", "waited": expired.waited, "early": early}
    ).encode()


# Every request under REQUEST_TIMEOUT: past it the endpoint is cancelled, the client gets 504.
app.add_middleware(DeadlineMiddleware, timeout=REQUEST_TIMEOUT, body=gateway_timeout)


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
