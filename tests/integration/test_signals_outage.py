"""Purgatory signals through a Redis stream across real processes and real outages (issue 62).

Four worker processes and a publisher process, each a ``RedisSignals(url)`` on one stream, a
real ``redis-server`` (an append-only file, fsynced at each write), and outages made by killing
the real thing: every reader's connection killed (``CLIENT KILL``), a worker's loop blocked for
2 s, Redis SIGKILLed and restarted while the publisher publishes. Each worker must apply every
payload exactly once, in the order sent, and the payloads published while Redis was down must
arrive soon after it is back.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support import ROOT, RedisServer, need_redis

CHANNEL = "outage"
COUNT = 1200  # payloads, one every 5 ms: about 6 s of publishing, the outages in between

WORKER = """
import asyncio, json, sys, time
import aiowheel
from aiowheel.redis import RedisSignals

url, index, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
applied, at = [], []

def apply(key, data):
    if key == "n":
        applied.append(int(data))
        at.append(time.time())
    elif key == "block" and data == index:
        time.sleep(2.0)  # this worker's loop blocked: what comes meanwhile waits in the stream

signals = RedisSignals(url, channel="outage", on_data=apply)
purgatory = aiowheel.Purgatory(signals=signals)

async def main():
    await asyncio.wait_for(signals.start(), 10)
    print("ready", flush=True)
    await purgatory.wait(["n"], lambda: len(applied) >= count, 60)
    await asyncio.sleep(0.3)  # anything applied twice would show by now
    s = signals.stats()
    print(json.dumps({"applied": applied, "at": at, "duplicates": s.duplicates,
                      "foreign": s.foreign, "connect_errors": s.connect_errors}), flush=True)
    await signals.aclose()

asyncio.run(main())
"""

PUBLISHER = """
import asyncio, json, sys, time
import aiowheel
from aiowheel.redis import RedisSignals

signals = RedisSignals(sys.argv[1], channel="outage")
aiowheel.Purgatory(signals=signals)

async def main():
    sent = []
    for number in range(int(sys.argv[2])):
        signals.send("n", str(number))
        sent.append(time.time())
        await asyncio.sleep(0.005)
    print("sent", flush=True)
    await asyncio.wait_for(signals.flush(), 30)
    s = signals.stats()
    print(json.dumps({"sent": sent, "publish_errors": s.publish_errors}), flush=True)
    await signals.aclose()

asyncio.run(main())
"""


def _start(source: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", source, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def test_four_workers_apply_every_payload_once_across_outages(tmp_path: Path) -> None:
    import redis

    server = RedisServer(need_redis(), persist=str(tmp_path))
    server.start()
    workers = [_start(WORKER, server.url, str(index), str(COUNT)) for index in range(4)]
    publisher: subprocess.Popen[str] | None = None
    raw: Any = None
    try:
        for worker in workers:
            assert worker.stdout is not None
            line = worker.stdout.readline()
            assert line == "ready\n", (line, worker.stderr.read() if worker.stderr else "")
        raw = redis.Redis.from_url(server.url)
        publisher = _start(PUBLISHER, server.url, str(COUNT))
        time.sleep(1.0)
        # 1. Every reader's connection killed by the server.
        readers = [c["id"] for c in raw.client_list() if c.get("cmd", "").startswith("xread")]
        assert len(readers) == 4, raw.client_list()
        for reader in readers:
            raw.client_kill_filter(_id=reader)
        time.sleep(0.5)
        # 2. Worker 0's loop blocked 2 s (a message written by hand: sender "driver.1").
        raw.xadd(CHANNEL, {"m": json.dumps(["aiowheel", 2, "driver.1", 0, [["block", "0"]]])})
        time.sleep(0.5)
        # 3. Redis SIGKILLed while the publisher publishes, down 1 s, restarted from its file.
        raw.close()
        raw = None
        server.kill()
        time.sleep(1.0)
        server.start()
        back = time.time()
        assert publisher.stdout is not None
        outs = []
        for worker in workers:
            out, err = worker.communicate(timeout=60)
            assert worker.returncode == 0, err
            outs.append(json.loads(out))
        published = json.loads(publisher.communicate(timeout=60)[0].splitlines()[-1])
        assert publisher.returncode == 0
    finally:
        for proc in [*workers, publisher]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if raw is not None:
            raw.close()
        server.kill()
    sent = published["sent"]
    assert published["publish_errors"] >= 1  # the outage was seen by the publisher
    during = [n for n, at in enumerate(sent) if at < back]
    lags = []
    for out in outs:
        assert out["applied"] == list(range(COUNT))  # none lost, none twice, in order
        assert out["duplicates"] >= 0 and out["foreign"] == 0
        assert out["connect_errors"] >= 2  # the CLIENT KILL and the restart
        # The payloads sent while Redis was down, applied after it came back: how long after.
        lags.append(max(out["at"][n] - max(back, sent[n]) for n in during))
    print(f"\nlatest payload of the outage applied {max(lags):.3f} s after Redis was back")
    assert max(lags) < 4.0, lags  # backoff at most 1 s; slack for a loaded machine
