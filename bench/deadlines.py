"""Request deadlines under uvicorn: does the work stop, how late is the 504, what does it cost.

``python -m bench.deadlines [--requests 8000] [--bursts 10] [--concurrency 50]
[--storm 400] [--timeout 0.5] [--rounds 5] [--quick] [--out DIR]`` serves one FastAPI app
(:func:`build_app`, below) under uvicorn with uvloop, stock (``--loop uvloop``) and on loop
mode (``--loop aiowheel.loops:uvloop``), in four shapes:

- ``none``: no deadline at all (the throughput reference);
- ``passthrough``: a pure ASGI middleware that does nothing (the floor under any middleware);
- ``middleware``: :class:`aiowheel.asgi.DeadlineMiddleware`;
- ``basehttp``: the shape most apps use, ``@app.middleware("http")`` around
  ``asyncio.timeout`` (Starlette's ``BaseHTTPMiddleware``: the endpoint runs in another task).

Each round serves the four shapes side by side, stock then loop mode (the next round the other
way round), and measures:

- throughput: ``--requests`` fast requests per server, ``--concurrency`` at a time, in
  ``--bursts`` bursts that alternate between the four servers, so that what else the machine
  does falls on each alike (a shared machine moved whole sequential runs by 2x); the median
  burst, and the median of each deadline shape's per-burst ratio to no deadline (goal: the
  middleware within 3%); and each server's CPU time per request in each burst (its main
  thread's, ``/proc/PID/schedstat``) with the same ratio: what a CPU-bound server loses, which
  the rates on a shared machine (client and servers on the same two cores) blur;
- a storm of ``--storm`` concurrent requests whose endpoint sleeps 10 s, far past the
  ``--timeout`` deadline: every one must get its 504, none early, and the moment the last has,
  the server is asked how many endpoints are still running (goal: 0, the work stopped). The
  504's lateness is read by the server's loop clock (``waited`` minus the deadline; the loop's
  own lag p99 beside it, from :func:`aiowheel.loop_lag`) and by the client (latency minus the
  deadline);
- the middleware's own cost per request, in process (raw ASGI calls: no sockets, no client),
  CPU time added to the FastAPI app's request and to a minimal ASGI app's (steadier).

Figures are medians over the rounds, with min and max. ``--quick``: one round, small counts (a
smoke test). Only 127.0.0.1 is contacted; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from .server_load import free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("none", "passthrough", "middleware", "basehttp")
STORMED = ("middleware", "basehttp")  # the shapes with a deadline
LOOPS = {"stock": "uvloop", "loop mode": "aiowheel.loops:uvloop"}
OVERRUN_MS = 10_000


# --- the server side: one app, four shapes ---------------------------------------------------


def make_app() -> Any:
    """The bench's app (:func:`build_app`) in the shape env ``DEADLINE_SHAPE`` names with a
    ``DEADLINE_TIMEOUT`` s deadline (default 0.5): for ``uvicorn --factory
    bench.deadlines:make_app``."""
    shape = os.environ.get("DEADLINE_SHAPE", "middleware")
    if shape not in SHAPES:
        raise SystemExit(f"DEADLINE_SHAPE must be one of {', '.join(SHAPES)}, got {shape!r}")
    return build_app(shape, float(os.environ.get("DEADLINE_TIMEOUT", "0.5")))


def build_app(shape: str, timeout: float) -> Any:
    """A FastAPI app in ``shape`` (``none``, ``middleware``, ``basehttp``) with a ``timeout``
    s deadline: ``GET /work?ms=N`` sleeps N ms (a 504 body says ``waited`` and ``early`` by
    the loop's clock), ``GET /inflight`` counts the ``/work`` endpoints still running and
    reads the loop's lag."""
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse

    import aiowheel
    from aiowheel.asgi import DeadlineMiddleware, Expired

    app = FastAPI()
    inflight = [0]

    @app.get("/work")
    async def work(ms: float = 0.0) -> dict[str, float]:
        inflight[0] += 1
        try:
            if ms:
                await asyncio.sleep(ms / 1000)
        finally:
            inflight[0] -= 1
        return {"slept_ms": ms}

    @app.get("/inflight")
    async def get_inflight() -> dict[str, float]:
        lag = aiowheel.loop_lag(reset=True)
        return {"inflight": inflight[0], "lag_p99_ms": lag.p99 * 1e3}

    if shape == "middleware":

        def body(expired: Expired) -> bytes:
            early = expired.now < expired.deadline
            return json.dumps({"waited": expired.waited, "early": early}).encode()

        app.add_middleware(DeadlineMiddleware, timeout=timeout, body=body)
    elif shape == "basehttp":

        @app.middleware("http")
        async def request_deadline(
            request: Request, call_next: Callable[[Request], Awaitable[Response]]
        ) -> Response:
            loop = asyncio.get_running_loop()
            started = loop.time()
            try:
                async with asyncio.timeout(timeout) as cm:
                    return await call_next(request)
            except TimeoutError:
                now = loop.time()
                when = cm.when()
                early = when is not None and now < when
                return JSONResponse({"waited": now - started, "early": early}, 504)

    elif shape == "passthrough":
        app.add_middleware(Passthrough)

    return app


class Passthrough:
    """A pure ASGI middleware that does nothing (awaits the app): the floor under any
    middleware's cost, beside the deadline's."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


# --- the client side ----------------------------------------------------------------------------


def server_cpu(pid: int) -> Callable[[], float]:
    """A reader of process ``pid``'s CPU time in seconds: its main thread's time on a CPU,
    in ns, from ``/proc/PID/schedstat`` (uvicorn serves from that thread); NaN where there
    is no such file."""
    path = Path(f"/proc/{pid}/schedstat")

    def read() -> float:
        try:
            return int(path.read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            return math.nan

    return read


async def bursts(
    urls: dict[str, str],
    requests: int,
    concurrency: int,
    count: int,
    cpu: dict[str, Callable[[], float]],
) -> Any:
    """Requests/s of each server in ``urls``, in ``count`` bursts of ``requests / count`` fast
    requests (``concurrency`` at a time) that alternate between the servers, so that what
    else the machine does falls on each alike; each server's rate per burst, its CPU time
    per request in each burst (``cpu``: a reader of each server's CPU time; what the server
    spends, not what the shared machine lets it have), and how many requests were not
    answered 200 (a fast request past its deadline: a stalled machine)."""
    rates: dict[str, list[float]] = {name: [] for name in urls}
    cpus: dict[str, list[float]] = {name: [] for name in urls}
    not_ok = dict.fromkeys(urls, 0.0)
    per_burst = max(1, requests // count)
    connector = aiohttp.TCPConnector(limit=concurrency * len(urls))
    async with aiohttp.ClientSession(connector=connector) as client:

        async def burst(name: str) -> float:
            left = iter(range(per_burst))

            async def worker() -> None:
                for _ in left:
                    async with client.get(f"{urls[name]}/work?ms=0") as response:
                        await response.read()
                        not_ok[name] += response.status != 200

            started = time.perf_counter()
            cpu_before = cpu[name]()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            cpus[name].append((cpu[name]() - cpu_before) / per_burst * 1e6)
            return per_burst / (time.perf_counter() - started)

        names = list(urls)
        for name in names:  # warm the connections up
            await burst(name)
        cpus = {name: [] for name in urls}
        for index in range(count):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                rates[name].append(await burst(name))
    return rates, cpus, not_ok


async def storm(url: str, count: int, deadline: float) -> dict[str, float]:
    """``count`` concurrent overrunning requests; the figures of their 504s and what kept
    running once the last was answered."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:

        async def one() -> tuple[int, float, dict[str, Any]]:
            started = time.perf_counter()
            async with client.get(f"{url}/work?ms={OVERRUN_MS}") as response:
                body = await response.json()
                return response.status, time.perf_counter() - started, body

        async with client.get(f"{url}/inflight") as response:
            await response.read()  # a fresh lag window
        answers = await asyncio.gather(*(one() for _ in range(count)))
        async with client.get(f"{url}/inflight") as response:
            after = await response.json()
    statuses = [status for status, _, _ in answers]
    late_server = sorted(body["waited"] - deadline for _, _, body in answers)
    late_client = sorted(latency - deadline for _, latency, _ in answers)
    return {
        "inflight_after": float(after["inflight"]),
        "answered_504": float(statuses.count(504)),
        "early_504": float(sum(bool(body.get("early")) for _, _, body in answers)),
        "late_p50_ms": late_server[len(late_server) // 2] * 1e3,
        "late_p99_ms": late_server[int(len(late_server) * 0.99)] * 1e3,
        "client_late_p99_ms": late_client[int(len(late_client) * 0.99)] * 1e3,
        "lag_p99_ms": float(after["lag_p99_ms"]),
    }


def serve(shape: str, loop: str, timeout: float) -> tuple[subprocess.Popen[bytes], str]:
    """Start uvicorn serving ``shape`` on ``loop``; the process and its URL."""
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "bench.deadlines:make_app",
        "--host", "127.0.0.1", "--port", str(port), "--loop", LOOPS[loop],
        "--log-level", "warning", "--no-access-log", "--backlog", "4096",
    ]  # fmt: skip
    env = {**os.environ, "DEADLINE_SHAPE": shape, "DEADLINE_TIMEOUT": str(timeout)}
    return subprocess.Popen(command, cwd=ROOT, env=env), f"http://127.0.0.1:{port}"


def run_round(loop: str, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """The four shapes on ``loop``, served side by side: their throughput in alternating
    bursts (the median burst of each, and of each deadline shape's ratio to no deadline),
    then a storm against each deadline shape."""
    servers = {shape: serve(shape, loop, args.timeout) for shape in SHAPES}
    try:

        async def measure() -> dict[str, dict[str, float]]:
            urls = {shape: url for shape, (_, url) in servers.items()}
            for url in urls.values():
                await wait_ready(url, 60.0, "/inflight")
            cpu = {shape: server_cpu(server.pid) for shape, (server, _) in servers.items()}
            rates, cpus, not_ok = await bursts(
                urls, args.requests, args.concurrency, args.bursts, cpu
            )
            figures: dict[str, dict[str, float]] = {}
            for shape in SHAPES:
                figures[shape] = {
                    "requests_per_s": statistics.median(rates[shape]),
                    "server_cpu_us": statistics.median(cpus[shape]),
                    "fast_not_200": not_ok[shape],
                }
                if shape != "none":
                    ratios = [a / b for a, b in zip(rates[shape], rates["none"], strict=True)]
                    figures[shape]["vs_none_pct"] = 100 * (statistics.median(ratios) - 1)
                    # The server's CPU per request against no deadline's, burst by burst: the
                    # throughput a CPU-bound server loses, steadier than the rates on a
                    # shared machine.
                    cpu_ratios = [a / b for a, b in zip(cpus[shape], cpus["none"], strict=True)]
                    figures[shape]["cpu_vs_none_pct"] = 100 * (statistics.median(cpu_ratios) - 1)
                if shape in STORMED:
                    figures[shape].update(await storm(urls[shape], args.storm, args.timeout))
            return figures

        return asyncio.run(measure())
    finally:
        for server, _ in servers.values():
            stop(server)


def inprocess_cost(loop: str, requests: int, rounds: int) -> dict[str, float]:
    """CPU microseconds per request of the app called in process (a raw ASGI call, no
    sockets, no client): no deadline and the middleware, ``requests`` each, alternating over
    ``rounds``; the median of each and of their difference. The middleware's own cost, free
    of the network's noise; and the same around a minimal ASGI app (``20 * requests`` each)."""
    import aiowheel
    import aiowheel.loops
    from aiowheel.asgi import DeadlineMiddleware

    apps = {shape: build_app(shape, 30.0) for shape in ("none", "middleware")}

    async def bare(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}", "more_body": False})

    # The middleware around a minimal ASGI app: its own cost, steadier than FastAPI's ~50 us
    # request beside it (whose allocations move the CPU time by several us from run to run).
    apps["bare"] = bare
    apps["bare middleware"] = DeadlineMiddleware(bare, timeout=30.0)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": "/work", "raw_path": b"/work", "query_string": b"ms=0",
             "root_path": "", "headers": [(b"host", b"bench")], "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80)}  # fmt: skip

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    async def run(app: Any) -> float:
        # CPU time of this process, not wall time: on a shared machine the time another
        # process holds the core is not counted (wall times here moved by 2x between runs).
        count = requests if app in (apps["none"], apps["middleware"]) else requests * 20
        started = time.process_time()
        for _ in range(count):
            await app(dict(scope), receive, send)
        return (time.process_time() - started) / count * 1e6

    async def measure() -> dict[str, list[float]]:
        times: dict[str, list[float]] = {shape: [] for shape in apps}
        for app in apps.values():
            await run(app)  # warm up
        for index in range(rounds):
            order = list(apps) if index % 2 == 0 else list(apps)[::-1]
            for shape in order:
                times[shape].append(await run(apps[shape]))
        return times

    factory = aiowheel.loops.uvloop if loop == "loop mode" else aiowheel.loops.base_class("uvloop")
    assert factory is not None
    event_loop = factory()
    try:
        times = event_loop.run_until_complete(measure())
    finally:
        event_loop.close()
    added = [m - n for m, n in zip(times["middleware"], times["none"], strict=True)]
    bare_added = [m - n for m, n in zip(times["bare middleware"], times["bare"], strict=True)]
    return {
        "none_us": statistics.median(times["none"]),
        "middleware_us": statistics.median(times["middleware"]),
        "added_us": statistics.median(added),
        "bare_us": statistics.median(times["bare"]),
        "bare_added_us": statistics.median(bare_added),
    }


def spread(values: list[float]) -> str:
    """Median (min-max)."""
    return f"{statistics.median(values):,.1f} ({min(values):,.1f} to {max(values):,.1f})"


def table(raw: dict[str, list[dict[str, float]]]) -> list[str]:
    """One line per contender and figure: median (min to max) over the rounds."""
    lines = []
    for name, runs in raw.items():
        for metric in runs[0]:
            lines.append(f"  {name:<24} {metric:<20} {spread([r[metric] for r in runs])}")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadlines", description=__doc__)
    parser.add_argument("--requests", type=int, default=8000, help="fast requests per server")
    parser.add_argument("--bursts", type=int, default=10, help="bursts they are sent in")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--storm", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 round, small counts")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.bursts, args.concurrency, args.storm, args.rounds = 200, 2, 10, 20, 1
    counts = (args.requests, args.bursts, args.concurrency, args.storm, args.rounds)
    if min(counts) < 1 or args.timeout <= 0:
        parser.error("every count must be >= 1 and --timeout > 0")
    raw: dict[str, list[dict[str, float]]] = {}
    loops = list(LOOPS)
    for round_ in range(args.rounds):
        for loop in loops if round_ % 2 == 0 else loops[::-1]:  # alternate which goes first
            for shape, figures in run_round(loop, args).items():
                raw.setdefault(f"{shape} / {loop}", []).append(figures)
                shown = ", ".join(f"{k}={v:,.1f}" for k, v in figures.items())
                print(f"round {round_ + 1}/{args.rounds} {shape} / {loop}: {shown}", flush=True)
            cost = inprocess_cost(loop, 200 if args.quick else 500, 3 if args.quick else 41)
            raw.setdefault(f"in process / {loop}", []).append(cost)
            shown = ", ".join(f"{k}={v:,.1f}" for k, v in cost.items())
            print(f"round {round_ + 1}/{args.rounds} in process / {loop}: {shown}", flush=True)
    print("medians (min to max) over the rounds:")
    print("\n".join(table(raw)))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"python": sys.version.split()[0], "args": vars(args), "raw": raw}
    (out / "deadlines.json").write_text(json.dumps(document, indent=2))
    print(f"wrote {out / 'deadlines.json'}")
    # The checks hold for the middleware (aiowheel's timers never fire early; the work stops);
    # the BaseHTTPMiddleware shape is measured, not judged (stock uvloop's timers can run early).
    failed = [
        name
        for name, runs in raw.items()
        if name.startswith("middleware")
        and any(
            r["answered_504"] != args.storm or r["early_504"] or r["inflight_after"] for r in runs
        )
    ]
    if failed:
        print(f"FAILED: a storm request without its 504, early, or still running: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
