"""Purgatory signals across an outage of Redis: pub/sub and the stream side by side (issue 62).

``python -m bench.signals_outage [--quick] [--json PATH]``

For each transport: ``--workers`` (2) processes each a ``RedisSignals`` reader applying
payloads, and a publisher process sending one numbered payload every 5 ms (200/s) for
``--seconds`` (6), each with its send time (``time.time()``, one clock for every process of
the machine). A real redis-server (no persistence: the default of a fresh install) is
SIGKILLed a third of the way in, and restarted on the same port a second later. Figures, per
phase (a payload's phase is when it was sent: before the kill, while Redis was down, after it
was back), counted over (worker, payload) pairs: **lost** (that worker never applied it) and
**twice** (applied more than once there), and the **latency** from send to apply (p50 / p99 /
max, over every worker).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from .redis_signals import start_redis

WORKER = """
import asyncio, json, sys, time
import aiowheel
from aiowheel.redis import RedisSignals

url, transport, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
applied = []
signals = RedisSignals(url, channel="outage-bench", transport=transport,
                       on_data=lambda key, data: applied.append((int(data), time.time())))
purgatory = aiowheel.Purgatory(signals=signals)

async def main():
    await asyncio.wait_for(signals.start(), 10)
    print("ready", flush=True)
    end = sys.stdin.readline  # the driver says when the publisher is done
    await asyncio.to_thread(end)
    await asyncio.sleep(1.0)  # late ones, after the publisher flushed
    print(json.dumps(applied), flush=True)
    await signals.aclose()

asyncio.run(main())
"""

PUBLISHER = """
import asyncio, json, sys, time
import aiowheel
from aiowheel.redis import RedisSignals

url, transport, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
signals = RedisSignals(url, channel="outage-bench", transport=transport)
aiowheel.Purgatory(signals=signals)

async def main():
    sent = []
    for number in range(count):
        sent.append(time.time())
        signals.send("n", str(number))
        await asyncio.sleep(0.005)
    try:
        await asyncio.wait_for(signals.flush(), 20)
    except TimeoutError:
        pass
    print(json.dumps(sent), flush=True)
    await signals.aclose()

asyncio.run(main())
"""


def _run(source: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", source, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ms(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


def _restart(server: subprocess.Popen[bytes], url: str) -> subprocess.Popen[bytes]:
    """redis-server again, on ``url``'s port, answering PING (SIGKILL leaves nothing behind)."""
    port = url.rsplit(":", 1)[1].split("/")[0]
    args = [str(arg) for arg in server.args]  # type: ignore[union-attr]
    args[args.index("--port") + 1] = port
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    import redis

    client = redis.Redis.from_url(url)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    client.close()
    return proc


def measure(transport: str, workers: int, seconds: float) -> dict[str, Any]:
    """One run of ``transport`` through an outage: the figures of each phase."""
    count = int(seconds / 0.005)
    server, url = start_redis()
    readers = [_run(WORKER, url, transport, str(count)) for _ in range(workers)]
    try:
        for reader in readers:
            assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
        publisher = _run(PUBLISHER, url, transport, str(count))
        time.sleep(seconds / 3)
        server.kill()
        server.wait()
        killed = time.time()
        time.sleep(1.0)
        server = _restart(server, url)
        back = time.time()
        sent: list[float] = json.loads(publisher.communicate(timeout=60)[0])
        applied = []
        for reader in readers:
            out = reader.communicate("done\n", timeout=60)[0]
            applied.append(json.loads(out))
    finally:
        for proc in readers:
            if proc.poll() is None:
                proc.kill()
        server.kill()
        server.wait()
    phases: dict[str, dict[str, Any]] = {}
    for phase, low, high in (
        ("before", 0.0, killed),
        ("during", killed, back),
        ("after", back, float("inf")),
    ):
        numbers = [n for n, at in enumerate(sent) if low <= at < high]
        lost = twice = 0
        latencies: list[float] = []
        for pairs in applied:
            times: dict[int, list[float]] = {}
            for number, at in pairs:
                times.setdefault(number, []).append(at)
            for number in numbers:
                got = times.get(number, [])
                lost += not got
                twice += len(got) > 1
                latencies += [at - sent[number] for at in got[:1]]
        phases[phase] = {
            "signals": len(numbers),
            "lost": lost,
            "twice": twice,
            "p50_ms": _ms(latencies, 0.5),
            "p99_ms": _ms(latencies, 0.99),
            "max_ms": 1000 * max(latencies, default=0.0),
        }
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.signals_outage", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run (2 s each)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 6.0)
    results = {}
    print(f"bench.signals_outage: {args.workers} workers, 200 signals/s for {seconds:g} s, "
          "Redis SIGKILLed for 1 s (no persistence)")  # fmt: skip
    for transport in ("pubsub", "stream"):
        results[transport] = phases = measure(transport, args.workers, seconds)
        for phase, figures in phases.items():
            print(
                f"{transport:>6} {phase:>6}: {figures['signals']:4} signals x "
                f"{args.workers} workers: lost {figures['lost']}, twice {figures['twice']}, "
                "latency p50 "
                f"{figures['p50_ms']:.2f} ms, p99 {figures['p99_ms']:.2f} ms, "
                f"max {figures['max_ms']:.0f} ms"
            )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
