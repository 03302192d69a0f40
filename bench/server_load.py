"""Load the example server over loopback and report what its deadlines cost.

``python -m bench.server_load [--requests 5000] [--concurrency 500] [--slow-share 0.2]``
starts ``examples/server.py`` as a separate process (once with its deadline middleware on
aiowheel, once on ``asyncio.timeout``), sends a bounded number of concurrent requests (a mix
of ``/fast`` and ``/slow`` requests that overrun the request timeout), and prints throughput,
p50/p99 latency, the count of 504s, and the server's pending timers at the end (must be 0).
``--loop-mode`` compares instead the unmodified server (middleware on ``asyncio.timeout``) on
the base loop and on its loop-mode twin (``examples/server.py --loop-mode``), where every
timer of the server is on the wheel; there every 504 must come, none early.
Only 127.0.0.1 is ever contacted; every loop is bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(server: subprocess.Popen[bytes]) -> None:
    """End a server process: SIGTERM, then SIGKILL if it has not exited within 60 s."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


async def wait_ready(url: str, seconds: float = 30.0, path: str = "/fast") -> None:
    """Poll ``url + path`` until it answers 200 (RuntimeError after ``seconds``)."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession() as client:
        while time.monotonic() < deadline:
            try:
                async with client.get(f"{url}{path}") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"server at {url} did not come up in {seconds} s")


async def drive(
    url: str, requests: int, concurrency: int, slow_share: float, overrun: float, seed: int = 1
) -> dict[str, Any]:
    """Send the requests, ``concurrency`` at a time; return the figures."""
    rng = random.Random(seed)
    paths = [
        f"/slow?seconds={overrun}" if rng.random() < slow_share else "/fast"
        for _ in range(requests)
    ]
    latencies: list[float] = []
    fast_latencies: list[float] = []
    statuses: dict[int, int] = {}
    queue = iter(paths)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as client:

        async def worker() -> None:
            for path in queue:
                started = time.perf_counter()
                async with client.get(f"{url}{path}") as response:
                    await response.read()
                    status = response.status
                elapsed = time.perf_counter() - started
                latencies.append(elapsed)
                if path == "/fast":
                    fast_latencies.append(elapsed)
                statuses[status] = statuses.get(status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - started
        await asyncio.sleep(0.2)  # let the server finish unwinding the last deadlines
        async with client.get(f"{url}/stats") as response:
            stats = await response.json()
    latencies.sort()
    fast_latencies.sort()
    return {
        "requests": requests,
        "wall_s": wall,
        "throughput_rps": requests / wall,
        "p50_ms": statistics.median(latencies) * 1e3,
        "p99_ms": latencies[int(len(latencies) * 0.99)] * 1e3,
        "fast_p50_ms": statistics.median(fast_latencies) * 1e3 if fast_latencies else None,
        "fast_p99_ms": fast_latencies[int(len(fast_latencies) * 0.99)] * 1e3
        if fast_latencies
        else None,
        "statuses": statuses,
        "count_504": statuses.get(504, 0),
        "expected_504": sum(1 for p in paths if p != "/fast"),
        "early_504": stats["early_timeouts"],
        "server_pending_at_end": stats["pending"],
        "server_stats": stats,
    }


# The contenders: the server's middleware on aiowheel or on asyncio.timeout; with --loop-mode,
# the unmodified server (middleware on asyncio.timeout) on the base loop or on its loop-mode
# twin, where asyncio.timeout and aiohttp's own timers land on the wheel.
CONTENDERS = {
    "aiowheel": ["--timeouts", "aiowheel"],
    "asyncio": ["--timeouts", "asyncio"],
    "base loop": ["--timeouts", "asyncio"],
    "loop mode": ["--timeouts", "asyncio", "--loop-mode"],
}


def run_one(contender: str, args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    command = [
        sys.executable, str(ROOT / "examples" / "server.py"), "--host", "127.0.0.1",
        "--port", str(port), "--request-timeout", str(args.request_timeout),
        *CONTENDERS[contender],
    ] + (["--uvloop"] if args.uvloop else [])  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        asyncio.run(wait_ready(url))
        return asyncio.run(
            drive(url, args.requests, args.concurrency, args.slow_share,
                  overrun=args.request_timeout * 3)
        )  # fmt: skip
    finally:
        server.send_signal(signal.SIGINT)  # the clean Ctrl-C shutdown
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.server_load", description=__doc__)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=500)
    parser.add_argument("--slow-share", type=float, default=0.2)
    parser.add_argument("--request-timeout", type=float, default=0.5)
    parser.add_argument("--uvloop", action="store_true", help="run the server on uvloop")
    parser.add_argument(
        "--loop-mode",
        action="store_true",
        help="compare the unmodified server (asyncio.timeout) on the base loop and on loop mode",
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if min(args.requests, args.concurrency, args.repeats) < 1 or not 0 <= args.slow_share <= 1:
        parser.error("--requests, --concurrency, --repeats must be >= 1; --slow-share in [0, 1]")
    pair = ("loop mode", "base loop") if args.loop_mode else ("aiowheel", "asyncio")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in pair}
    ok = True
    for rep in range(args.repeats):
        # Alternate which goes first, so warm-up and neighbours weigh on both alike.
        order = pair if rep % 2 == 0 else pair[::-1]
        for timeouts in order:
            print(f"[{rep + 1}/{args.repeats}] {timeouts} ...", flush=True)
            r = run_one(timeouts, args)
            runs[timeouts].append(r)
            print(f"  {r['requests']} requests in {r['wall_s']:.2f} s = "
                  f"{r['throughput_rps']:.0f}/s; latency p50 {r['p50_ms']:.1f} ms p99 "
                  f"{r['p99_ms']:.1f} ms; fast p50 {r['fast_p50_ms']:.1f} ms p99 "
                  f"{r['fast_p99_ms']:.1f} ms; 504s {r['count_504']} (expected "
                  f"{r['expected_504']}, early {r['early_504']}); server pending at end "
                  f"{r['server_pending_at_end']}", flush=True)  # fmt: skip
            ok = ok and r["count_504"] == r["expected_504"] and r["early_504"] == 0
            # In loop mode the wheel also holds aiohttp's keep-alive timers of the connections
            # still open, so only the middleware's own timer must be gone there.
            ok = ok and (timeouts == "loop mode" or r["server_pending_at_end"] == 0)
    results: dict[str, Any] = {}
    print(f"medians of {args.repeats}:")
    for timeouts, rs in runs.items():
        med = {
            k: statistics.median(r[k] for r in rs)
            for k in ("throughput_rps", "p50_ms", "p99_ms", "fast_p50_ms", "fast_p99_ms")
        }
        results[timeouts] = {"median": med, "runs": rs}
        print(f"  {timeouts:<9} {med['throughput_rps']:.0f} req/s, p50 {med['p50_ms']:.1f} ms, "
              f"p99 {med['p99_ms']:.1f} ms, fast p50 {med['fast_p50_ms']:.1f} ms, fast p99 "
              f"{med['fast_p99_ms']:.1f} ms")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    print("OK" if ok else "FAILED: a 504 was missing or extra, or timers were left pending")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
