"""The FastAPI example under uvicorn, on the stock loop and on loop mode, side by side.

``python -m bench.fastapi_load [--idle 3000] [--requests 6000] [--concurrency 200]
[--rounds 3] [--base uvloop] [--out DIR]`` starts ``uvicorn examples.fastapi_app:app`` as its own
process, once with ``--loop <base>`` (uvicorn's stock loop) and once with
``--loop aiowheel.loops:<base>`` (the same base on loop mode), alternating over the rounds. In
each it holds ``--idle`` idle keep-alive connections open (each has made one request, so each
has a keep-alive timer pending: ``--timeout-keep-alive 120``), then sends ``--requests``
requests, ``--concurrency`` at a time: 85% answer at once, 10% sleep 1-50 ms and 5% sleep
600-1000 ms, past the app's 0.5 s deadline (504). It reports requests/s, p50/p99 latency,
the server's RSS, the timers pending on its wheel, the 504s and how many came before their
deadline (early).
Medians over the rounds, written as JSON with a plot. Only 127.0.0.1 is contacted; every loop
is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

from .server_load import free_port, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 0.5


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _hold_idle(port: int, count: int) -> list[asyncio.StreamWriter]:
    """Open ``count`` connections, make one request on each, and keep them open, idle."""
    writers: list[asyncio.StreamWriter] = []
    request = b"GET /work?ms=0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"

    async def one() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request)
        await reader.readuntil(b"\r\n\r\n")
        writers.append(writer)

    for start in range(0, count, 200):  # in batches, so the listen backlog is never the limit
        await asyncio.gather(*(one() for _ in range(min(200, count - start))))
    return writers


def _pick(rng: random.Random) -> float:
    """A request's sleep in ms: most answer at once (only the deadline is armed and cancelled),
    some wait on an "upstream", and one in twenty overruns the deadline."""
    draw = rng.random()
    if draw < 0.05:
        return rng.uniform(600, 1000)
    if draw < 0.15:
        return rng.uniform(1, 50)
    return 0.0


async def drive(port: int, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One round against a running server: idle connections, then the request load."""
    url = f"http://127.0.0.1:{port}"
    await wait_ready(url, 60.0, "/stats")
    idle = await _hold_idle(port, args.idle)
    rng = random.Random(seed)
    plan = [_pick(rng) for _ in range(args.requests)]
    latencies: list[float] = []
    statuses: list[int] = []
    early = 0
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector) as client:
        queue = iter(plan)

        async def worker() -> None:
            nonlocal early
            for ms in queue:
                started = time.perf_counter()
                async with client.get(f"{url}/work?ms={ms:.1f}") as response:
                    body = await response.json()
                latencies.append(time.perf_counter() - started)
                statuses.append(response.status)
                if response.status == 504 and body["early"]:
                    early += 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
        elapsed = time.perf_counter() - started
        async with client.get(f"{url}/stats") as response:
            stats = await response.json()
    for writer in idle:
        writer.close()
    latencies.sort()
    wheel = stats["wheel"]
    return {
        "requests_per_s": len(latencies) / elapsed,
        "p50_ms": latencies[len(latencies) // 2] * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "timeouts_504": float(statuses.count(504)),
        "expected_504": float(sum(1 for ms in plan if ms / 1000 > DEADLINE)),
        "early_504": float(early),
        "wheel_pending": float("nan") if wheel is None else float(wheel["pending"]),
        "wheel_wakeups": float("nan") if wheel is None else float(wheel["wakeups"]),
        "loop_mode": float(stats["loop_mode"]),
    }


def run_one(contender: str, args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Start uvicorn for ``contender`` ("stock" or "loop mode"), load it, stop it."""
    port = free_port()
    loop = args.base if contender == "stock" else f"aiowheel.loops:{args.base}"
    command = [
        sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--host", "127.0.0.1",
        "--port", str(port), "--loop", loop, "--timeout-keep-alive", "120",
        "--log-level", "warning", "--no-access-log", "--backlog", "4096",
    ]  # fmt: skip
    server = subprocess.Popen(command, cwd=ROOT)
    try:
        figures = asyncio.run(drive(port, args, seed))
        figures["rss_mib"] = _rss_mib(server.pid)
        return figures
    finally:
        stop(server)


def plot(medians: dict[str, dict[str, float]], title: str, path: Path) -> bool:
    """Bars: requests/s, p99 latency and RSS, stock loop against loop mode."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    metrics = (("requests_per_s", "requests / s"), ("p99_ms", "p99 latency (ms)"),
               ("rss_mib", "server RSS (MiB)"))  # fmt: skip
    fig, axes = plt.subplots(1, len(metrics), figsize=(12, 4))
    names = list(medians)
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        values = [medians[name][metric] for name in names]
        ax.bar(names, values, color=["#888888", "#2a7ab9"][: len(names)])
        ax.set_title(label)
        for i, value in enumerate(values):
            ax.annotate(f"{value:,.0f}", (i, value), ha="center", va="bottom")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.fastapi_load", description=__doc__)
    parser.add_argument("--idle", type=int, default=3000, help="idle keep-alive connections")
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", choices=("asyncio", "uvloop"), default="uvloop")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    if min(args.idle, args.requests - 1, args.concurrency - 1, args.rounds - 1) < 0:
        parser.error("--idle must be >= 0, --requests, --concurrency and --rounds >= 1")
    raw: dict[str, list[dict[str, Any]]] = {"stock": [], "loop mode": []}
    for round_ in range(args.rounds):
        for contender in raw:
            figures = run_one(contender, args, seed=round_)
            raw[contender].append(figures)
            shown = ", ".join(f"{k}={v:,.1f}" for k, v in figures.items())
            print(f"round {round_ + 1}/{args.rounds} {contender:<9} {shown}", flush=True)
    medians = {
        name: {metric: statistics.median(r[metric] for r in runs) for metric in runs[0]}
        for name, runs in raw.items()
    }
    for name, figures in medians.items():
        print(f"median {name:<9} " + ", ".join(f"{k}={v:,.1f}" for k, v in figures.items()))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"python": sys.version.split()[0], "args": vars(args), "medians": medians,
                "raw": raw}  # fmt: skip
    (out / "fastapi-load.json").write_text(json.dumps(document, indent=2))
    title = (f"FastAPI on uvicorn, {args.base}: {args.idle:,} idle keep-alive connections + "
             f"{args.requests:,} requests, {args.concurrency} at a time (Python "
             f"{document['python']})")  # fmt: skip
    drawn = plot(medians, title, out / "fastapi-load.png")
    print(f"wrote {out / 'fastapi-load.json'}" + (" and fastapi-load.png" if drawn else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
