"""An aiohttp server using aiowheel for every deadline it has.

- Every request runs inside an aiowheel timeout (a middleware): a handler that overruns is
  cancelled and the client gets ``504 Gateway Timeout`` with a short JSON body.
- ``/fast`` answers at once; ``/slow?seconds=S`` sleeps S seconds (``sleep_until``);
  ``/upstream?seconds=S`` calls a slow "upstream" through ``aiowheel.wait_for``.
- ``/ws`` is a websocket that sends ``{"type": "heartbeat"}`` every interval
  (``timer.interval``) and closes a connection whose client stops sending (``timer.watchdog``,
  fed on every message).
- ``/stats`` shows the timer's counters as JSON, with what is pending on the loop by kind and
  origin (``aiowheel.timer_census``, the ten largest) and the loop's lag
  (``aiowheel.loop_lag``).

Run it with ``python examples/server.py --host 127.0.0.1 --port 8080`` (Ctrl-C stops it
cleanly), then e.g. ``curl -i 'http://127.0.0.1:8080/slow?seconds=5'``.
``--timeouts asyncio`` builds the same middleware on ``asyncio.timeout``, for comparison.
``--loop-mode`` runs it on ``aiowheel.new_event_loop()``: then every timer of the process,
``asyncio.timeout`` and aiohttp's own keep-alive and client timeouts included, is on the wheel,
with not a line of the app changed (try ``--timeouts asyncio --loop-mode``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from typing import Any

from aiohttp import WSMsgType, web

import aiowheel

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Config:
    """What the server is told on its command line."""

    request_timeout: float = 2.0
    upstream_timeout: float = 1.0
    heartbeat_interval: float = 1.0
    heartbeat_timeout: float = 3.0
    timeouts: str = "aiowheel"  # or "asyncio", for comparison


CONFIG: web.AppKey[Config] = web.AppKey("config", Config)
TIMER: web.AppKey[aiowheel.Timer] = web.AppKey("timer", aiowheel.Timer)
# How late each 504 was answered after its request's deadline, in seconds (never negative).
TIMED_OUT: web.AppKey[list[float]] = web.AppKey("timed_out", list)


def positive_seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return value


def _seconds_param(request: web.Request, name: str = "seconds") -> float:
    """A query parameter as seconds in [0, 3600], or 400 Bad Request naming the problem."""
    raw = request.query.get(name, "0")
    try:
        value = float(raw)
    except ValueError:
        raise _bad_request(f"{name} must be a number, got {raw!r}") from None
    if not 0 <= value <= 3600:
        raise _bad_request(f"{name} must be between 0 and 3600, got {raw!r}")
    return value


def _bad_request(message: str) -> web.HTTPBadRequest:
    return web.HTTPBadRequest(text=json.dumps({"error": message}), content_type="application/json")


@web.middleware
async def deadline_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Run the handler under the request deadline; 504 if it overruns."""
    config = request.app[CONFIG]
    if request.path in ("/ws", "/stats"):
        # A websocket lives as long as its heartbeats do; /stats is left out so that the
        # pending count it reports is not its own deadline.
        return await handler(request)
    timeout = request.app[TIMER].timeout if config.timeouts == "aiowheel" else asyncio.timeout
    deadline: float | None = None
    try:
        async with timeout(config.request_timeout) as cm:
            deadline = cm.when()
            return await handler(request)
    except TimeoutError:
        # How late the 504 is, judged against the deadline itself (a difference of two clock
        # readings compared with the timeout could read 0.29999999999995 without being early).
        if deadline is not None:
            lateness = asyncio.get_running_loop().time() - deadline
            request.app[TIMED_OUT].append(lateness)
        return web.json_response(
            {"error": "gateway timeout", "timeout": config.request_timeout}, status=504
        )


async def fast(request: web.Request) -> web.Response:
    """Answers at once."""
    return web.json_response({"ok": True})


async def slow(request: web.Request) -> web.Response:
    """Sleeps ``seconds`` (with sleep_until on the shared timer), then answers."""
    seconds = _seconds_param(request)
    timer = request.app[TIMER]
    await timer.sleep_until(timer.time() + seconds)
    return web.json_response({"ok": True, "slept": seconds})


async def _upstream(seconds: float) -> dict[str, Any]:
    """Stands in for a slow service this server depends on."""
    await aiowheel.sleep(seconds)
    return {"upstream": "answered", "after": seconds}


async def upstream(request: web.Request) -> web.Response:
    """Calls the slow upstream under its own, shorter deadline (aiowheel.wait_for)."""
    seconds = _seconds_param(request)
    config = request.app[CONFIG]
    try:
        body = await aiowheel.wait_for(_upstream(seconds), config.upstream_timeout)
    except TimeoutError:
        return web.json_response(
            {"error": "upstream timeout", "timeout": config.upstream_timeout}, status=504
        )
    return web.json_response(body)


async def websocket(request: web.Request) -> web.WebSocketResponse:
    """Heartbeats out every interval; closed when the client's heartbeats stop."""
    config = request.app[CONFIG]
    timer = request.app[TIMER]
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    closed = asyncio.Event()

    def peer_is_dead() -> None:
        closed.set()

    dog = timer.watchdog(config.heartbeat_timeout, peer_is_dead)

    async def send_heartbeats() -> None:
        async for deadline in timer.interval(config.heartbeat_interval, start=timer.time()):
            await ws.send_json({"type": "heartbeat", "at": deadline})

    async def receive() -> None:
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                dog.feed()  # any message from the client proves it is alive
        closed.set()

    sender = asyncio.create_task(send_heartbeats())
    receiver = asyncio.create_task(receive())
    try:
        await closed.wait()
    finally:
        dog.cancel()
        sender.cancel()
        receiver.cancel()
        await asyncio.gather(sender, receiver, return_exceptions=True)
        if not ws.closed:
            await ws.close(code=4000, message=b"heartbeat timeout")
    return ws


async def stats(request: web.Request) -> web.Response:
    """The timer's counters; what is pending on the loop, by kind and origin (the ten largest
    counts, as ``[origin, count]`` pairs); and the loop's lag, in seconds, since it began."""
    timer = request.app[TIMER]
    body: dict[str, Any] = asdict(timer.stats())
    body["timed_out_requests"] = len(request.app[TIMED_OUT])
    body["early_timeouts"] = sum(1 for lateness in request.app[TIMED_OUT] if lateness < 0)
    # A walk of the pending timers (milliseconds at 10k): for a poll every few seconds.
    body["census"] = [[origin, count] for origin, count in aiowheel.timer_census(top=10)]
    lag = aiowheel.loop_lag()
    body["lag"] = {
        "p50": lag.p50,
        "p90": lag.p90,
        "p99": lag.p99,
        "max": lag.max,
        "count": lag.count,
    }
    return web.json_response(body)


async def _bind_timer(app: web.Application) -> None:
    app[TIMER] = aiowheel.get_timer()  # the running loop's shared timer


def make_app(config: Config) -> web.Application:
    """The application, for ``web.run_app`` or an in-process test runner."""
    app = web.Application(middlewares=[deadline_middleware])
    app[CONFIG] = config
    app[TIMED_OUT] = []
    app.on_startup.append(_bind_timer)
    app.router.add_get("/fast", fast)
    app.router.add_get("/slow", slow)
    app.router.add_get("/upstream", upstream)
    app.router.add_get("/ws", websocket)
    app.router.add_get("/stats", stats)
    return app


def parse(argv: list[str]) -> tuple[argparse.Namespace, Config]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--request-timeout", type=positive_seconds, default=2.0)
    parser.add_argument("--upstream-timeout", type=positive_seconds, default=1.0)
    parser.add_argument("--heartbeat-interval", type=positive_seconds, default=1.0)
    parser.add_argument("--heartbeat-timeout", type=positive_seconds, default=3.0)
    parser.add_argument("--timeouts", choices=("aiowheel", "asyncio"), default="aiowheel")
    parser.add_argument("--uvloop", action="store_true", help="run on uvloop")
    parser.add_argument(
        "--loop-mode",
        action="store_true",
        help="run on aiowheel's loop mode: every loop timer (asyncio.timeout, aiohttp's own) "
        "on the wheel",
    )
    args = parser.parse_args(argv)
    config = Config(
        request_timeout=args.request_timeout,
        upstream_timeout=args.upstream_timeout,
        heartbeat_interval=args.heartbeat_interval,
        heartbeat_timeout=args.heartbeat_timeout,
        timeouts=args.timeouts,
    )
    return args, config


def main(argv: list[str]) -> int:
    args, config = parse(argv)
    base: type[asyncio.AbstractEventLoop] | None = None
    if args.uvloop:
        import uvloop

        base = uvloop.Loop
    if args.loop_mode:
        loop = aiowheel.new_event_loop(base)  # the one line: the app itself is unchanged
    else:
        loop = base() if base is not None else asyncio.new_event_loop()
    web.run_app(make_app(config), host=args.host, port=args.port, loop=loop)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
