"""The example server and the heartbeat mesh, end to end over loopback with a real client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

import aiowheel
from examples.heartbeat import run_mesh
from examples.server import TIMED_OUT, TIMER, Config, make_app, parse
from tests.support import ROOT, free_port

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def serve(config: Config) -> AsyncIterator[tuple[web.Application, str]]:
    app = make_app(config)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def on_idle() -> None:
    pass


async def test_fast_answers_and_stats_parse() -> None:
    async with serve(Config()) as (app, url), aiohttp.ClientSession() as client:
        async with client.get(f"{url}/fast") as response:
            assert response.status == 200
            assert await response.json() == {"ok": True}
        # A timer on the loop, seen by the census on every loop (on the loop's shared Timer).
        handle = aiowheel.get_timer().call_later(60, on_idle)
        try:
            async with client.get(f"{url}/stats") as response:
                stats = await response.json()
        finally:
            handle.cancel()
        assert set(stats) >= {"pending", "fired", "cancelled", "wakeups", "max_lateness"}
        assert app[TIMER] is aiowheel.get_timer()
        # The census: at most ten [origin, count] pairs, most first.
        census = stats["census"]
        assert isinstance(census, list) and 1 <= len(census) <= 10
        for pair in census:
            assert isinstance(pair, list) and len(pair) == 2
            origin, count = pair
            assert isinstance(origin, str) and type(count) is int and count >= 1
        counts = [count for _, count in census]
        assert counts == sorted(counts, reverse=True)
        assert ["call on_idle", 1] in census
        # The loop's lag: percentiles and max in seconds, and how many timers fired.
        lag = stats["lag"]
        assert set(lag) == {"p50", "p90", "p99", "max", "count"}
        assert type(lag["count"]) is int and lag["count"] >= 0
        assert all(isinstance(lag[key], float) for key in ("p50", "p90", "p99", "max"))
        assert 0.0 <= lag["p50"] <= lag["p90"] <= lag["p99"] <= lag["max"]


async def test_overrunning_handler_gets_504_at_the_deadline_and_is_cancelled() -> None:
    loop = asyncio.get_running_loop()
    async with serve(Config(request_timeout=0.3)) as (app, url):
        async with aiohttp.ClientSession() as client:
            # Clock readings are compared with deadlines, never differences with durations:
            # a difference can round to 0.29999999999995 though nothing fired early.
            earliest = loop.time() + 0.3  # the server's deadline is no earlier than this
            async with client.get(f"{url}/slow?seconds=30") as response:
                answered = loop.time()
                assert response.status == 504
                body = await response.json()
        assert body == {"error": "gateway timeout", "timeout": 0.3}
        assert answered >= earliest  # never early, as the client sees it
        (lateness,) = app[TIMED_OUT]
        assert 0 <= lateness <= 1.0  # server side; generous: a loaded 2-core machine stalls
        # The handler's sleep was cancelled with its task: nothing is left in the wheel.
        assert len(app[TIMER]) == 0


async def test_slow_within_the_deadline_is_200() -> None:
    async with (
        serve(Config(request_timeout=1.0)) as (_, url),
        aiohttp.ClientSession() as client,
        client.get(f"{url}/slow?seconds=0.02") as response,
    ):
        assert response.status == 200
        assert (await response.json())["slept"] == 0.02


async def test_upstream_call_under_wait_for() -> None:
    # (a 1 s upstream timeout, not less: a loaded machine can stall the 1 ms answer past it)
    config = Config(request_timeout=2.0, upstream_timeout=1.0)
    async with serve(config) as (_, url), aiohttp.ClientSession() as client:
        async with client.get(f"{url}/upstream?seconds=0.001") as response:
            assert response.status == 200
            assert (await response.json())["upstream"] == "answered"
        async with client.get(f"{url}/upstream?seconds=5") as response:
            assert response.status == 504
            assert (await response.json())["error"] == "upstream timeout"


@pytest.mark.parametrize("query", ["seconds=abc", "seconds=-1", "seconds=nan", "seconds=1e9"])
async def test_malformed_query_is_400_never_500(query: str) -> None:
    async with serve(Config()) as (_, url), aiohttp.ClientSession() as client:
        for path in ("slow", "upstream"):
            async with client.get(f"{url}/{path}?{query}") as response:
                assert response.status == 400
                assert "seconds" in (await response.json())["error"]


@pytest.mark.once  # the example app's behaviour: CI's first pass
async def test_two_thousand_concurrent_overruns_all_504_and_the_wheel_empties() -> None:
    loop = asyncio.get_running_loop()
    timeout = 2.0
    async with serve(Config(request_timeout=timeout)) as (app, url):
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as client:

            async def get(path: str) -> tuple[int, bool]:
                earliest = loop.time() + timeout  # no server deadline is earlier than this
                async with client.get(f"{url}{path}") as response:
                    await response.read()
                    return response.status, loop.time() >= earliest

            slow = [asyncio.create_task(get("/slow?seconds=30")) for _ in range(2000)]
            await asyncio.sleep(0.2)
            fast_status, _ = await get("/fast")
            still_waiting = sum(not task.done() for task in slow)
            statuses = await asyncio.gather(*slow)
        assert fast_status == 200
        # The fast request was answered while the overrunning ones waited out their deadline.
        assert still_waiting == 2000
        assert [s for s, _ in statuses] == [504] * 2000
        assert all(not_early for _, not_early in statuses)
        for _ in range(200):  # the handlers' last unwinding; generous for a loaded machine
            if len(app[TIMER]) == 0:
                break
            await asyncio.sleep(0.01)
        assert len(app[TIMER]) == 0


async def test_websocket_heartbeats_and_a_silent_client_is_dropped() -> None:
    # The timeout is 1 s, not less: a stall of the loaded machine must not silence a client
    # that answers every heartbeat.
    config = Config(heartbeat_interval=0.05, heartbeat_timeout=1.0)
    loop = asyncio.get_running_loop()
    async with serve(config) as (_, url), aiohttp.ClientSession() as client:
        # A chatty client stays connected well past the timeout.
        async with client.ws_connect(f"{url}/ws") as ws:
            beats = 0
            until = loop.time() + 1.5
            while loop.time() < until:
                message = await ws.receive(timeout=1)
                assert message.type == aiohttp.WSMsgType.TEXT
                assert message.json()["type"] == "heartbeat"
                beats += 1
                await ws.send_str("alive")
            assert beats >= 5
            assert not ws.closed
        # A silent one is closed by the server once its watchdog expires.
        # The server arms the watchdog while it accepts the connection: not before this.
        earliest = loop.time() + 1.0
        async with client.ws_connect(f"{url}/ws") as ws:
            while True:
                message = await ws.receive(timeout=5)
                if message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED):
                    break
            assert loop.time() >= earliest
            assert ws.close_code == 4000


def test_bad_request_timeout_flag_refuses_to_start() -> None:
    with pytest.raises(SystemExit):
        parse(["--request-timeout", "0"])
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "server.py"), "--request-timeout", "-2"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "--request-timeout" in result.stderr
    assert "positive number of seconds" in result.stderr


async def test_heartbeat_mesh_notices_a_dead_peer_within_timeout_plus_interval() -> None:
    interval, timeout = 0.1, 0.3
    noticed = await run_mesh(peers=4, interval=interval, dead_after=timeout, kill_after=0.5)
    assert sorted(noticed) == ["peer-1", "peer-2", "peer-3"]
    for delay in noticed.values():
        # The last heartbeat left at most one interval before the kill, so the watchdog
        # fires between timeout - interval and timeout + interval after it. Slack: 10 ms
        # below for clock granularity (uvloop's clock moves in whole milliseconds), 1 s
        # above for delivery and loop latency on a loaded machine (CI has stalled 0.1 s).
        assert timeout - interval - 0.01 <= delay <= timeout + interval + 1.0


# -- the purgatory's examples: a long-poll endpoint, 2 of 3 acks ---------------------------------


async def test_the_long_poll_waits_for_a_publish_of_its_topic_and_only_that() -> None:
    from examples.longpoll import PURGATORY, make_app

    app = make_app(wait=5.0)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as client:
            news = asyncio.ensure_future(client.get(f"{url}/poll?topic=news"))
            sport = asyncio.ensure_future(client.get(f"{url}/poll?topic=sport&wait=0.05"))
            while app[PURGATORY].stats().live < 1 or not sport.done():
                await asyncio.sleep(0.005)  # both polls parked; sport's ran out
            assert (await sport).status == 204
            async with client.post(f"{url}/publish?topic=news", data="hello") as response:
                assert await response.json() == {"woken": 1, "pid": os.getpid()}
            async with await news as response:
                assert await response.json() == {
                    "messages": ["hello"],
                    "next": 1,
                    "pid": os.getpid(),
                }
            async with client.get(f"{url}/poll?topic=news") as response:  # at once: after=0
                assert (await response.json())["messages"] == ["hello"]
            async with client.get(f"{url}/stats") as response:
                stats = await response.json()
            assert (stats["live"], stats["completed"], stats["expired"]) == (0, 2, 1)
            async with client.get(f"{url}/poll") as response:
                assert response.status == 400
    finally:
        await runner.cleanup()


@pytest.mark.once  # the example's own command line, in a subprocess
def test_the_long_poll_example_cancels_the_wait_of_a_client_that_went_away() -> None:
    # aiohttp cancels a handler whose client disconnected only with handler_cancellation=True
    # (its run_app default is False): the example sets it, so the poll's wait leaves the
    # purgatory at once instead of waiting out its 30 s for nobody.
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "examples/longpoll.py", "--port", str(port), "--wait", "30"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip

    def stats() -> dict[str, int]:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=10) as answer:
            return json.load(answer)  # type: ignore[no-any-return]

    try:
        give_up = time.monotonic() + 30
        while True:
            try:
                assert stats()["live"] == 0
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < give_up, "no server"
                time.sleep(0.05)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(b"GET /poll?topic=news HTTP/1.1\r\nHost: x\r\n\r\n")
            while stats()["live"] != 1:  # the poll is parked in the purgatory
                assert time.monotonic() < give_up, "the poll never waited"
                time.sleep(0.02)
        # The client went away: within a few seconds (not the poll's 30), its wait is gone.
        gone_by = time.monotonic() + 10
        while (counters := stats())["live"] != 0:
            assert time.monotonic() < gone_by, f"the wait outlived its client: {counters}"
            time.sleep(0.02)
        assert (counters["completed"], counters["expired"]) == (0, 0)
    finally:
        server.send_signal(signal.SIGINT)
        output, _ = server.communicate(timeout=30)
    assert "Traceback" not in output, output


async def test_two_of_three_acks_or_a_timeout() -> None:
    from examples.acks import replicate

    purgatory = aiowheel.Purgatory()
    fast = {"replica-1": 0.001, "replica-2": 0.002, "replica-3": 1.0}
    assert await replicate(purgatory, "w1", fast, within=0.5) == ["replica-1", "replica-2"]
    slow = {"replica-1": 0.001, "replica-2": 1.0, "replica-3": 1.0}
    with pytest.raises(TimeoutError):
        await replicate(purgatory, "w2", slow, within=0.01)
    assert purgatory.stats().live == 0


def test_the_acks_example_runs() -> None:
    done = subprocess.run(
        [sys.executable, "examples/acks.py"], cwd=ROOT, capture_output=True, text=True,
        timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "write-2 timed out" in done.stdout and "committed by" in done.stdout
