"""A Purgatory's signals across processes through Redis (issue 51, :mod:`aiowheel.redis`).

``python -m bench.redis_signals [--quick] [--url URL] [--transport stream|pubsub] [--json PATH]``

The workload: ``--workers`` (4) processes each park ``--ops`` (10,000) waiting operations on
``--keys`` (1,000) keys (10 per key, each awaited by a task; deadlines 60 s), on one channel of
a real redis-server (started here on a free port unless ``--url`` names one). This process,
the fifth, then signals each key once at ``--rate`` (1,000) signals per second, with
``RedisSignals.send(key, t)``, ``t`` its ``time.monotonic_ns()`` (one clock for every process
of the machine). Each waiting task, when it wakes, records ``now - t``: the time from
``send()`` in this process to the waiting task's completion in another. Figures:

- **latency** p50 / p99 / max over every woken operation (workers x ops), against the Redis
  round trip measured here (PING over redis-py's asyncio client, p50 / p99);
- **lost / twice**: operations not completed by their signal, and completed more than once
  (each worker counts its completions by operation, and its purgatory's counters);
- **publish rate**: signals per second this process publishes, ``--burst`` (200,000) keys
  signalled as fast as a loop can, until ``flush()`` returns (every message handed to Redis);
- **memory per waiting operation** (``tracemalloc``, its task included, as
  ``bench.purgatory`` measures it) on a ``Purgatory(signals=RedisSignals(...))``, subscribed,
  against a local-only ``Purgatory()``: after a warm-up, three alternating rounds of each,
  the median of each.

Goals (issue 51): p99 within 5 ms of a local Redis round trip at 1k signals/s; 0 lost, 0
twice; memory per waiting operation within 10% of the local purgatory's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

import aiowheel

from .purgatory import bytes_per_task

CHANNEL = "aiowheel-bench"
DEADLINE = 60.0

WORKER = """
import asyncio, json, sys, time
import aiowheel
from aiowheel.redis import RedisSignals

url, channel, ops, keys = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
deadline, transport = float(sys.argv[5]), sys.argv[6]
sent = {}
signals = RedisSignals(url, channel=channel, transport=transport,
                       on_data=lambda key, data: sent.__setitem__(key, data))
purgatory = aiowheel.Purgatory(signals=signals)
latencies, completions = [], [0] * ops

async def one(index, key):
    stamp = await purgatory.wait([key], lambda: sent.get(key), deadline)
    latencies.append(time.monotonic_ns() - int(stamp))
    completions[index] += 1

async def main():
    await signals.start()
    tasks = [asyncio.create_task(one(i, i % keys)) for i in range(ops)]
    await asyncio.sleep(0)
    print("ready", flush=True)
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(r) for r in results if r is not None][:3]
    stats = purgatory.stats()
    print(json.dumps({"latencies": latencies, "lost": completions.count(0),
                      "twice": sum(1 for c in completions if c > 1), "errors": errors,
                      "completed": stats.completed, "expired": stats.expired,
                      "received": signals.stats().received}), flush=True)
    await signals.aclose()

asyncio.run(main())
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    """A redis-server on a free port, no persistence, answering PING."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("bench.redis_signals: no redis-server (apt-get install redis-server)")
    port = _free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(500):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0"
        except OSError:
            time.sleep(0.01)
    proc.kill()
    raise SystemExit("bench.redis_signals: redis-server did not start")


def _ms(ns: float) -> float:
    return ns / 1e6


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def round_trip(url: str, count: int) -> dict[str, float]:
    """PING round trips over redis-py's asyncio client: p50 / p99 in ms."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    try:
        await client.ping()
        times = []
        for _ in range(count):
            start = time.perf_counter_ns()
            await client.ping()
            times.append(time.perf_counter_ns() - start)
    finally:
        await client.aclose()
    return {"p50_ms": _ms(_percentile(times, 0.5)), "p99_ms": _ms(_percentile(times, 0.99))}


async def publish(
    url: str, keys: int, rate: float, burst: int, transport: str = "stream"
) -> dict[str, float]:
    """Each key once at ``rate`` per second (with its send time), then ``burst`` keys flat
    out: signals per second until flushed."""
    from aiowheel.redis import RedisSignals

    # A queue that holds the whole burst: the rate is of signals published, none dropped.
    signals = RedisSignals(url, channel=CHANNEL, max_pending=keys + burst, transport=transport)
    purgatory = aiowheel.Purgatory(signals=signals)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for key in range(keys):
        signals.send(key, str(time.monotonic_ns()))
        delay = start + (key + 1) / rate - loop.time()
        await asyncio.sleep(max(0.0, delay))
    await signals.flush()
    began = time.perf_counter()
    for number in range(burst):
        purgatory.signal(keys + number)  # keys no worker waits for
        if number % 1000 == 999:
            await asyncio.sleep(0)
    await signals.flush()
    elapsed = time.perf_counter() - began
    stats = signals.stats()
    await signals.aclose()
    return {"burst_per_s": burst / elapsed, "messages": stats.published, "dropped": stats.dropped}


async def memory_per_op(url: str | None, ops: int, keys: int) -> float:
    """Bytes per waiting operation (tracemalloc), its task included; with ``url``, on a
    purgatory whose signals go through Redis (subscribed first)."""
    if url is None:
        purgatory = aiowheel.Purgatory()
        signals = None
    else:
        from aiowheel.redis import RedisSignals

        signals = RedisSignals(url, channel=CHANNEL + "-memory")
        purgatory = aiowheel.Purgatory(signals=signals)
        await signals.start()
    never: dict[int, object] = {}
    await purgatory.wait(["bind"], lambda: True, 1)  # binds to the loop: not per operation
    per_wait = await bytes_per_task(
        lambda: [
            asyncio.create_task(purgatory.wait([i % keys], lambda i=i: never.get(i), DEADLINE))
            for i in range(ops)
        ],
        lambda: asyncio.sleep(0),
    )
    if signals is not None:
        await signals.aclose()
    return per_wait


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redis_signals", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run on small sizes")
    parser.add_argument("--url", default=None, help="a Redis to use (default: start one)")
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--ops", type=int, default=None, help="waiting operations per worker")
    parser.add_argument("--keys", type=int, default=None)
    parser.add_argument("--rate", type=float, default=1000.0, help="signals per second")
    parser.add_argument("--burst", type=int, default=None, help="signals for the publish rate")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--transport", default="stream", choices=["stream", "pubsub"])
    args = parser.parse_args(argv)
    workers = args.workers or (2 if args.quick else 4)
    ops = args.ops or (1_000 if args.quick else 10_000)
    keys = args.keys or (100 if args.quick else 1_000)
    burst = args.burst or (20_000 if args.quick else 200_000)
    server, url = (None, args.url) if args.url else start_redis()
    print(
        f"bench.redis_signals: {workers} workers x {ops:,} waiting operations on {keys:,} keys, "
        f"signals from a fifth process at {args.rate:,.0f}/s; Python {sys.version.split()[0]}, "
        f"aiowheel {'compiled' if aiowheel.COMPILED else 'pure-Python'}",
        flush=True,
    )
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(workers):
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-c",
                        WORKER,
                        url,
                        CHANNEL,
                        str(ops),
                        str(keys),
                        str(DEADLINE),
                        args.transport,
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=os.environ,
                )
            )
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if line != "ready\n":
                raise SystemExit(f"bench.redis_signals: a worker did not start: {line!r}")
        rtt = asyncio.run(round_trip(url, 2_000))
        published = asyncio.run(publish(url, keys, args.rate, burst, args.transport))
        outs = [json.loads(proc.communicate(timeout=DEADLINE + 30)[0]) for proc in procs]
        asyncio.run(memory_per_op(None, ops, keys))  # a warm-up: free lists, tables
        measured: dict[str | None, list[float]] = {None: [], url: []}
        for _ in range(3):  # alternating; the median of each
            for which in measured:
                measured[which].append(asyncio.run(memory_per_op(which, ops, keys)))
        local = statistics.median(measured[None])
        remote = statistics.median(measured[url])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
        if server is not None:
            server.kill()
            server.wait()
    latencies = [ns for out in outs for ns in out["latencies"]]
    results: dict[str, Any] = {
        "workers": workers,
        "ops": ops,
        "keys": keys,
        "rate": args.rate,
        "latency_ms": {
            "p50": _ms(_percentile(latencies, 0.5)) if latencies else None,
            "p99": _ms(_percentile(latencies, 0.99)) if latencies else None,
            "max": _ms(max(latencies)) if latencies else None,
            "mean": _ms(statistics.fmean(latencies)) if latencies else None,
        },
        "round_trip_ms": rtt,
        "woken": len(latencies),
        "lost": sum(out["lost"] for out in outs),
        "twice": sum(out["twice"] for out in outs),
        "expired": sum(out["expired"] for out in outs),
        "errors": [error for out in outs for error in out["errors"]],
        "publish": published,
        "bytes_per_op": {"local": local, "redis": remote, "ratio": remote / local},
        "python": sys.version.split()[0],
        "compiled": aiowheel.COMPILED,
    }
    lat = results["latency_ms"]
    print(
        f"latency send() -> completion in another process: p50 {lat['p50']:.2f} ms, "
        f"p99 {lat['p99']:.2f} ms, max {lat['max']:.2f} ms over {len(latencies):,} operations "
        f"(Redis round trip p50 {rtt['p50_ms']:.3f} ms, p99 {rtt['p99_ms']:.3f} ms)\n"
        f"lost {results['lost']}, completed twice {results['twice']}, expired "
        f"{results['expired']}\n"
        f"publish: {published['burst_per_s']:,.0f} signals/s ({burst:,} keys in "
        f"{published['messages']:,} messages, {published['dropped']} dropped)\n"
        f"memory per waiting operation: {remote:,.0f} bytes with RedisSignals, {local:,.0f} "
        f"local ({remote / local:.3f}x)",
        flush=True,
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    ok = (
        results["lost"] == 0
        and results["twice"] == 0
        and not results["errors"]
        and len(latencies) == workers * ops
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
