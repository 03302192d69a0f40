"""A long-poll endpoint on aiohttp, on a :class:`aiowheel.Purgatory`.

``GET /poll?topic=T[&after=N][&wait=S]`` answers at once with the messages of topic ``T`` after
the ``N``-th, or waits up to ``S`` seconds (default ``--wait``, 30) for one to be published:
``200 {"messages": [...], "next": M}``, or ``204`` once the wait is over with nothing new.
``POST /publish?topic=T`` with a text body appends a message and signals the topic: only the
polls of that topic are re-checked, and only those whose condition now holds are woken.
``GET /stats`` gives the purgatory's counters. Every answer names the process (``pid``).

    python examples/longpoll.py --port 8080
    curl 'http://127.0.0.1:8080/poll?topic=news&wait=10' &
    curl -X POST --data hello 'http://127.0.0.1:8080/publish?topic=news'

**Across workers.** With ``REDIS_URL`` set (or ``--redis``), the purgatory's signals go
through Redis (:mod:`aiowheel.redis`): a publish on any worker carries its message to every
worker, whose polls of that topic answer with it. Each worker keeps its own log of a topic,
appended by the ``on_data`` handler in the order messages reach it (a real application keeps
them in Redis or a database, and sends only the key)::

    REDIS_URL=redis://127.0.0.1:6379 gunicorn -w 4 -k aiowheel.gunicorn.AiohttpWorker \
        --bind 127.0.0.1:8080 'examples.longpoll:make_app()'

A client that goes away cancels its handler, because ``main`` runs the app with
``handler_cancellation=True``, and so do ``aiowheel.gunicorn``'s aiohttp workers (aiohttp's
default is False: a handler runs to its end whatever its client does, and a long poll would
wait out its 30 s for nobody). Its wait leaves the
purgatory at once, timer and all: ``/stats`` shows it ``cancelled``, no longer ``live``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import os
from typing import Any

from aiohttp import web

import aiowheel

PURGATORY: web.AppKey[aiowheel.Purgatory] = web.AppKey("purgatory", aiowheel.Purgatory)
TOPICS: web.AppKey[dict[str, list[str]]] = web.AppKey("topics", dict)
WAIT: web.AppKey[float] = web.AppKey("wait", float)
SIGNALS: web.AppKey[Any] = web.AppKey("signals", object)  # a RedisSignals, or None


async def poll(request: web.Request) -> web.Response:
    """Messages of ``topic`` after ``after``, at once or within ``wait`` seconds; 204 if none."""
    topic = request.query.get("topic")
    if not topic:
        raise web.HTTPBadRequest(text="topic is required")
    try:
        after = int(request.query.get("after", "0"))
        wait = float(request.query.get("wait", request.app[WAIT]))
    except ValueError:
        raise web.HTTPBadRequest(text="after must be an int, wait a number") from None
    topics = request.app[TOPICS]

    def news() -> list[str] | None:
        log = topics.get(topic, [])
        return log[after:] or None

    try:
        messages = await request.app[PURGATORY].wait([topic], news, max(0.0, wait))
    except TimeoutError:
        return web.Response(status=204)
    return web.json_response(
        {"messages": messages, "next": after + len(messages), "pid": os.getpid()}
    )


async def publish(request: web.Request) -> web.Response:
    """Append the body to ``topic`` and wake that topic's polls."""
    topic = request.query.get("topic")
    if not topic:
        raise web.HTTPBadRequest(text="topic is required")
    message = await request.text()
    signals = request.app[SIGNALS]
    if signals is not None:  # on_data appends it here, then in every other worker
        woken = signals.send(topic, message)
    else:
        request.app[TOPICS].setdefault(topic, []).append(message)
        woken = request.app[PURGATORY].signal(topic)
    return web.json_response({"woken": woken, "pid": os.getpid()})


async def stats(request: web.Request) -> web.Response:
    """The purgatory's counters, and its operations in the loop's timer census."""
    counters = dataclasses.asdict(request.app[PURGATORY].stats())
    census = [pair for pair in aiowheel.timer_census(top=None) if pair[0].startswith("purgatory")]
    signals = request.app[SIGNALS]
    redis = None if signals is None else dataclasses.asdict(signals.stats())
    return web.json_response({**counters, "census": census, "pid": os.getpid(), "redis": redis})


def make_app(wait: float = 30.0, redis_url: str | None = None) -> web.Application:
    """The application: one purgatory, the topics' logs in memory; with ``redis_url`` (default:
    the ``REDIS_URL`` environment variable), its signals and messages reach every worker."""
    app = web.Application()
    topics: dict[str, list[str]] = {}
    redis_url = redis_url or os.environ.get("REDIS_URL") or None
    if redis_url:
        from aiowheel.redis import RedisSignals

        def append(topic: str, message: str | bytes) -> None:
            topics.setdefault(topic, []).append(str(message))

        signals = RedisSignals(redis_url, channel="aiowheel-longpoll", on_data=append)
        app[SIGNALS] = signals
        app[PURGATORY] = aiowheel.Purgatory(signals=signals)

        async def listen(app: web.Application) -> None:
            # Subscribed before the worker serves, so that no message passes it by; a Redis
            # that is down does not stop the worker (the subscriber retries meanwhile).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5.0):
                    await signals.start()

        async def close(app: web.Application) -> None:
            await signals.aclose()

        app.on_startup.append(listen)
        app.on_cleanup.append(close)
    else:
        app[SIGNALS] = None
        app[PURGATORY] = aiowheel.Purgatory()
    app[TOPICS] = topics
    app[WAIT] = wait
    app.router.add_get("/poll", poll)
    app.router.add_post("/publish", publish)
    app.router.add_get("/stats", stats)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--wait", type=float, default=30.0, help="a poll's longest wait, s")
    parser.add_argument("--redis", default=None, help="a Redis URL (default: $REDIS_URL)")
    args = parser.parse_args()
    web.run_app(
        make_app(args.wait, args.redis),
        host=args.host,
        port=args.port,
        loop=aiowheel.new_event_loop(),
        handler_cancellation=True,  # a client that goes away cancels its poll's wait
    )


if __name__ == "__main__":
    main()
