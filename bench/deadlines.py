"""Request deadlines under uvicorn: does the work stop, how late is the 504, what does it cost.

``python -m bench.deadlines [--requests 8000] [--concurrency 50] [--storm 400]
[--timeout 0.5] [--rounds 5] [--quick] [--out DIR]`` starts uvicorn with uvloop, stock
(``--loop uvloop``) and on loop mode (``--loop aiowheel.loops:uvloop``), serving one FastAPI
app (:func:`make_app`, below) in three shapes:

- ``none``: no deadline at all (the throughput reference);
- ``middleware``: :class:`aiowheel.asgi.DeadlineMiddleware`;
- ``basehttp``: the shape most apps use, ``@app.middleware("http")`` around
  ``asyncio.timeout`` (Starlette's ``BaseHTTPMiddleware``: the endpoint runs in another task).

Against each (the six alternate within every round; medians over the rounds, with the worst
and best): requests/s of ``--requests`` fast requests, ``--concurrency`` at a time; then a
storm of ``--storm`` concurrent requests whose endpoint sleeps 10 s, far past the ``--timeout``
deadline: every one must get its 504, and the moment the last has, the server is asked how
many endpoints are still running (goal: 0: the deadline stopped the work). The 504's lateness
is read twice: by the server's loop clock (the answer's ``waited`` minus the deadline; the
loop's own lag p99 beside it, from :func:`aiowheel.loop_lag`) and by the client (latency minus
the deadline). ``--quick``: one round, small counts (a smoke test). Only 127.0.0.1 is
contacted; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from .server_load import free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ("none", "middleware", "basehttp")
LOOPS = {"stock": "uvloop", "loop mode": "aiowheel.loops:uvloop"}
OVERRUN_MS = 10_000


# --- the server side: one app, three shapes --------------------------------------------------


def make_app() -> Any:
    """The bench's FastAPI app, in the shape env ``DEADLINE_SHAPE`` names (``none``,
    ``middleware``, ``basehttp``) with a ``DEADLINE_TIMEOUT`` s deadline (default 0.5):
    ``GET /work?ms=N`` sleeps N ms (a 504 body says ``waited`` and ``early`` by the loop's
    clock), ``GET /inflight`` counts the ``/work`` endpoints still running and reads the
    loop's lag. For ``uvicorn --factory bench.deadlines:make_app``."""
    from fastapi import FastAPI, Request, Response
    from fastapi.responses import JSONResponse

    import aiowheel
    from aiowheel.asgi import DeadlineMiddleware, Expired

    shape = os.environ.get("DEADLINE_SHAPE", "middleware")
    timeout = float(os.environ.get("DEADLINE_TIMEOUT", "0.5"))
    if shape not in SHAPES:
        raise SystemExit(f"DEADLINE_SHAPE must be one of {', '.join(SHAPES)}, got {shape!r}")
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

    return app


# --- the client side ----------------------------------------------------------------------------


async def throughput(url: str, requests: int, concurrency: int) -> tuple[float, float]:
    """Requests/s of ``requests`` fast requests, ``concurrency`` at a time, and how many were
    not answered 200 (a fast request past the deadline: a stalled machine)."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    not_ok = 0
    async with aiohttp.ClientSession(connector=connector) as client:
        left = iter(range(requests))

        async def worker() -> None:
            nonlocal not_ok
            for _ in left:
                async with client.get(f"{url}/work?ms=0") as response:
                    await response.read()
                    not_ok += response.status != 200

        for _ in range(concurrency):  # warm the connections up
            async with client.get(f"{url}/work?ms=0") as response:
                await response.read()
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests / (time.perf_counter() - started), float(not_ok)


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


def run_one(shape: str, loop: str, args: argparse.Namespace) -> dict[str, float]:
    """Start uvicorn serving ``shape`` on ``loop``, measure it, stop it."""
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "bench.deadlines:make_app",
        "--host", "127.0.0.1", "--port", str(port), "--loop", LOOPS[loop],
        "--log-level", "warning", "--no-access-log", "--backlog", "4096",
    ]  # fmt: skip
    env = {**os.environ, "DEADLINE_SHAPE": shape, "DEADLINE_TIMEOUT": str(args.timeout)}
    server = subprocess.Popen(command, cwd=ROOT, env=env)
    try:

        async def measure() -> dict[str, float]:
            url = f"http://127.0.0.1:{port}"
            await wait_ready(url, 60.0, "/inflight")
            rate, not_ok = await throughput(url, args.requests, args.concurrency)
            figures = {"requests_per_s": rate, "fast_not_200": not_ok}
            if shape != "none":
                figures.update(await storm(url, args.storm, args.timeout))
            return figures

        return asyncio.run(measure())
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def spread(values: list[float]) -> str:
    """Median (worst-best), the worst being the smallest for a rate, the largest otherwise."""
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}-{max(values):,.1f})"


def table(raw: dict[str, list[dict[str, float]]]) -> list[str]:
    """One line per contender and figure: median (min-max) over the rounds; and the
    throughput of each deadline shape against no deadline, per round then the median."""
    lines = []
    for name, runs in raw.items():
        for metric in runs[0]:
            lines.append(f"  {name:<24} {metric:<20} {spread([r[metric] for r in runs])}")
    for loop in LOOPS:
        reference = raw[f"none / {loop}"]
        for shape in SHAPES[1:]:
            ratios = [
                100 * (r["requests_per_s"] / ref["requests_per_s"] - 1)
                for r, ref in zip(raw[f"{shape} / {loop}"], reference, strict=True)
            ]
            rounds = ", ".join(f"{x:+.1f}%" for x in ratios)
            lines.append(
                f"  {shape} / {loop}: requests/s vs no deadline, per round {rounds}; "
                f"median {statistics.median(ratios):+.1f}%"
            )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadlines", description=__doc__)
    parser.add_argument("--requests", type=int, default=8000)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--storm", type=int, default=400)
    parser.add_argument("--timeout", type=float, default=0.5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="1 round, small counts")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.concurrency, args.storm, args.rounds = 200, 10, 20, 1
    if min(args.requests, args.concurrency, args.storm, args.rounds) < 1 or args.timeout <= 0:
        parser.error("--requests, --concurrency, --storm and --rounds must be >= 1, --timeout > 0")
    contenders = [(shape, loop) for loop in LOOPS for shape in SHAPES]
    raw: dict[str, list[dict[str, float]]] = {f"{s} / {lo}": [] for s, lo in contenders}
    for round_ in range(args.rounds):
        shift = round_ % len(contenders)  # alternate: each round starts with another contender
        for shape, loop in contenders[shift:] + contenders[:shift]:
            figures = run_one(shape, loop, args)
            raw[f"{shape} / {loop}"].append(figures)
            shown = ", ".join(f"{k}={v:,.1f}" for k, v in figures.items())
            print(f"round {round_ + 1}/{args.rounds} {shape} / {loop}: {shown}", flush=True)
    lines = table(raw)
    print("medians (worst-best) over the rounds:")
    print("\n".join(lines))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"python": sys.version.split()[0], "args": vars(args), "raw": raw}
    (out / "deadlines.json").write_text(json.dumps(document, indent=2))
    print(f"wrote {out / 'deadlines.json'}")
    # The checks hold for the middleware (aiowheel's timers never fire early; the work stops);
    # the BaseHTTPMiddleware shape is measured, not judged (stock uvloop's timers do run early).
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
