"""The long poll of ``examples/longpoll.py`` as an ASGI app (FastAPI), for uvicorn's workers.

The same endpoints: ``GET /poll?topic=T[&after=N][&wait=S]``, ``POST /publish?topic=T`` (the
body is the message), ``GET /stats``; every answer names the worker (``pid``). With
``REDIS_URL`` set, the purgatory's signals and the messages go through Redis
(:mod:`aiowheel.redis`), so a publish on any worker answers the polls on every worker::

    REDIS_URL=redis://127.0.0.1:6379 uvicorn examples.longpoll_asgi:app --workers 4

Each worker imports this module and makes its own purgatory and RedisSignals (which connect
nothing until the app starts: the lifespan subscribes before the worker serves, and closes
the connections at shutdown). Without ``REDIS_URL`` it is one process's long poll.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request, Response

import aiowheel

TOPICS: dict[str, list[str]] = {}
WAIT = 30.0


def _append(topic: Any, message: str | bytes) -> None:
    TOPICS.setdefault(str(topic), []).append(str(message))


if os.environ.get("REDIS_URL"):
    from aiowheel.redis import RedisSignals

    SIGNALS: RedisSignals | None = RedisSignals(
        os.environ["REDIS_URL"], channel="aiowheel-longpoll-asgi", on_data=_append
    )
    PURGATORY = aiowheel.Purgatory(signals=SIGNALS)
else:
    SIGNALS = None
    PURGATORY = aiowheel.Purgatory()


@contextlib.asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Subscribed before serving (a Redis that is down does not stop the worker); closed at
    shutdown."""
    if SIGNALS is not None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(5.0):
                await SIGNALS.start()
    yield
    if SIGNALS is not None:
        await SIGNALS.aclose()


app = FastAPI(lifespan=lifespan)


@app.get("/poll")
async def poll(topic: str, after: int = 0, wait: float = WAIT) -> Any:
    """Messages of ``topic`` after ``after``, at once or within ``wait`` seconds; 204 if none."""

    def news() -> list[str] | None:
        return TOPICS.get(topic, [])[after:] or None

    try:
        messages = await PURGATORY.wait([topic], news, max(0.0, wait))
    except TimeoutError:
        return Response(status_code=204)
    return {"messages": messages, "next": after + len(messages), "pid": os.getpid()}


@app.post("/publish")
async def publish(topic: str, request: Request) -> Any:
    """Append the body to ``topic`` (in every worker, with Redis) and wake its polls."""
    message = (await request.body()).decode()
    if SIGNALS is not None:
        woken = SIGNALS.send(topic, message)
    else:
        _append(topic, message)
        woken = PURGATORY.signal(topic)
    return {"woken": woken, "pid": os.getpid()}


@app.get("/stats")
async def stats() -> Any:
    """The purgatory's counters, and the Redis signals' (None without Redis)."""
    redis = None if SIGNALS is None else dataclasses.asdict(SIGNALS.stats())
    return {**dataclasses.asdict(PURGATORY.stats()), "pid": os.getpid(), "redis": redis}
