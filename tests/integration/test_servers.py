"""Real servers on loop mode, started from their own command lines as a user starts them.

Each server runs ``examples/served.py`` in a subprocess on 127.0.0.1, bounded in time. A test
proves, through the app's ``/stats`` route, that the worker's loop is a loop-mode loop and that
the server's own keep-alive timer is on its wheel (seen from a second connection, the first
connection's keep-alive timer is one more timer pending on the wheel); that a
request past its ``asyncio.timeout`` gets its 504 on time and never early; and that the server
shuts down cleanly on SIGTERM (no traceback, no warning, no "Task was destroyed").

The servers come from the ``servers`` extra (``dev`` includes it); a server that is not
installed fails its test with the pip command to run, rather than being skipped.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support import ROOT, RedisServer, free_port, need_redis

BIN = Path(sys.executable).parent


def _get(conn: http.client.HTTPConnection, path: str) -> tuple[int, dict[str, Any]]:
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, json.loads(response.read())


@contextmanager
def served(command: list[str], port: int, **env: str) -> Iterator[subprocess.Popen[str]]:
    """Run ``command`` until it answers on ``port``; SIGTERM it at the end, and check how it
    stopped."""
    executable = BIN / command[0]
    assert executable.exists(), f"{command[0]} is not installed: pip install -e '.[servers]'"
    proc = subprocess.Popen(
        [str(executable), *command[1:]],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning", **env},
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"the server exited early:\n{proc.communicate()[0]}"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not start within 60 s"
                time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            output = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            output = proc.communicate()[0]
            pytest.fail(f"the server did not stop within 60 s of SIGTERM:\n{output}")
    for bad in ("Traceback", "Task was destroyed", "Warning", "never awaited"):
        assert bad not in output, output
    proc.output = output  # type: ignore[attr-defined]


def check_the_app_and_server_timers_are_on_the_wheel(
    port: int, loop_class: str, keepalive_on_wheel: bool = True
) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        status, first = _get(conn, "/stats")
        assert status == 200
        assert first["loop_mode"], first
        assert first["loop"] == loop_class
        time.sleep(0.2)  # the keep-alive timer is armed once the first response is sent
        # Seen from a second connection to the same worker, the first one's keep-alive timer
        # is one more timer pending on the wheel (the servers' other timers are periodic and
        # always pending: uvicorn's 0.1 s tick, gunicorn's 1 s notify).
        # uvicorn --workers 2: ask until the same worker answers. The periodic timers are not
        # pending for the moment between firing and their task sleeping again; a request
        # answered in that moment reads one less (seen once in CI): then ask again.
        for _ in range(20):
            other = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            try:
                status, second = _get(other, "/stats")
            finally:
                other.close()
            if second["pid"] == first["pid"] and (
                not keepalive_on_wheel
                or second["wheel"]["pending"] >= first["wheel"]["pending"] + 1
            ):
                break
        assert second["pid"] == first["pid"]
        if keepalive_on_wheel:
            assert second["wheel"]["pending"] >= first["wheel"]["pending"] + 1, (first, second)

        started = time.monotonic()
        status, body = _get(conn, "/slow?sleep=10&timeout=0.3")
        elapsed = time.monotonic() - started
        assert status == 504
        assert body["early"] is False  # by the worker's own clock, against the exact deadline
        assert body["waited"] >= 0.3 - 1e-6  # (two float clock readings: rounding only)
        assert elapsed < 5  # on time (generous: a loaded 2-core machine)
        status, body = _get(conn, "/slow?sleep=0.05&timeout=5")
        assert status == 200
        assert body["early"] is False
        assert body["slept"] >= 0.05 - 1e-6
        status, after = _get(conn, "/stats")
        assert after["pid"] == first["pid"]
        # the app's sleeps and timeouts went to the wheel
        assert after["wheel"]["fired"] + after["wheel"]["cancelled"] >= 3 + (
            first["wheel"]["fired"] + first["wheel"]["cancelled"]
        )
    finally:
        conn.close()


def _auto_class() -> str:
    import aiowheel.loops

    loop = aiowheel.loops.auto()
    loop.close()
    return type(loop).__name__


AUTO = _auto_class()  # what aiowheel.loops:auto makes here: zuvloop's on 3.14+, else uvloop's

# Every factory of aiowheel.loops that uvicorn can take: the class of loop each makes.
UVICORN_LOOPS = [
    pytest.param("aiowheel.loops:asyncio_loop", "WheelUnixSelectorEventLoop", id="asyncio"),
    pytest.param("aiowheel.loops:uvloop", "WheelLoop", id="uvloop"),
    pytest.param("aiowheel.loops:auto", AUTO, id="auto"),
]


@pytest.mark.parametrize(("loop", "loop_class"), UVICORN_LOOPS)
def test_uvicorn_with_two_workers_runs_on_loop_mode(loop: str, loop_class: str) -> None:
    port = free_port()
    command = ["uvicorn", "examples.served:asgi_app", "--host", "127.0.0.1",
               "--port", str(port), "--loop", loop, "--workers", "2"]  # fmt: skip
    with served(command, port):
        check_the_app_and_server_timers_are_on_the_wheel(port, loop_class)


GUNICORN_WORKERS = [
    pytest.param("UvicornWorker", "examples.served:asgi_app", AUTO, id="uvicorn-worker"),
    pytest.param("AsgiWorker", "examples.served:asgi_app", AUTO, id="gunicorn-asgi"),
    pytest.param(
        "AiohttpWorker",
        "examples.served:make_aiohttp_app",
        "WheelUnixSelectorEventLoop",
        id="aiohttp",
    ),
    pytest.param(
        "AiohttpUVLoopWorker", "examples.served:make_aiohttp_app", "WheelLoop", id="aiohttp-uvloop"
    ),
]


@pytest.mark.parametrize(("worker", "app", "loop_class"), GUNICORN_WORKERS)
def test_gunicorn_workers_run_on_loop_mode(worker: str, app: str, loop_class: str) -> None:
    port = free_port()
    command = ["gunicorn", app, "--bind", f"127.0.0.1:{port}", "--workers", "1",
               "-k", f"aiowheel.gunicorn.{worker}", "--graceful-timeout", "5"]  # fmt: skip
    with served(command, port):
        check_the_app_and_server_timers_are_on_the_wheel(port, loop_class)


@pytest.mark.parametrize(("base", "loop_class"), [
    ("asyncio", "WheelUnixSelectorEventLoop"), ("uvloop", "WheelLoop")
])  # fmt: skip
def test_hypercorn_recipe_runs_on_loop_mode(base: str, loop_class: str) -> None:
    port = free_port()
    command = ["python", "-m", "examples.run_hypercorn", "--bind", f"127.0.0.1:{port}",
               "--base", base]  # fmt: skip
    with served(command, port):
        check_the_app_and_server_timers_are_on_the_wheel(port, loop_class)


@pytest.mark.parametrize(("loop", "loop_class"), [
    ("asyncio", "WheelUnixSelectorEventLoop"), ("uvloop", "WheelLoop"), ("auto", AUTO)
])  # fmt: skip
def test_granian_runs_on_loop_mode(loop: str, loop_class: str) -> None:
    port = free_port()
    command = ["python", "-m", "aiowheel.granian", "--interface", "asgi",
               "examples.served:asgi_app", "--host", "127.0.0.1", "--port", str(port),
               "--loop", loop, "--workers", "2"]  # fmt: skip
    with served(command, port):
        # granian serves HTTP in Rust: its keep-alive is not an asyncio timer
        check_the_app_and_server_timers_are_on_the_wheel(port, loop_class, False)


def test_an_unknown_gunicorn_worker_name_is_an_attribute_error() -> None:
    import aiowheel.gunicorn

    with pytest.raises(AttributeError, match="has no attribute 'TornadoWorker'"):
        aiowheel.gunicorn.TornadoWorker  # noqa: B018


def test_the_fastapi_example_on_loop_mode() -> None:
    import asyncio

    import aiohttp

    port = free_port()
    command = ["uvicorn", "examples.fastapi_app:app", "--host", "127.0.0.1",
               "--port", str(port), "--loop", "aiowheel.loops:auto"]  # fmt: skip
    with served(command, port, REQUEST_TIMEOUT="0.3", HEARTBEAT_INTERVAL="0.2"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            status, body = _get(conn, "/work?ms=0")
            assert (status, body) == (200, {"slept_ms": 0.0})
            status, body = _get(conn, "/work?ms=5000")
            assert status == 504
            assert body["early"] is False  # by the loop's clock, against the exact deadline
            assert body["waited"] >= 0.3 - 1e-6
            status, body = _get(conn, "/stats")
            assert body["loop_mode"] and body["loop"] == AUTO
        finally:
            conn.close()

        async def websocket() -> tuple[list[object], int | None]:
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(f"ws://127.0.0.1:{port}/ws") as ws,
            ):
                seen: list[object] = []
                async with asyncio.timeout(10):
                    async for message in ws:  # heartbeats, then the close for our silence
                        seen.append(message.json())
                return seen, ws.close_code

        seen, code = asyncio.run(websocket())
        assert seen[:2] == [{"type": "heartbeat"}] * 2  # every 0.2 s, then closed at 0.6 s
        assert code == 4000


async def _polls_across_workers(port: int, workers: int, polls: int) -> None:
    """Until every worker says it is subscribed; then rounds of ``polls`` long polls and one
    publish, each poll answered with the round's message, until a round has a poll answered by
    a worker other than the one the publish reached (the kernel hands a shared socket's
    connections to whichever worker accepts first: on a loaded machine one may take them all)."""
    import aiohttp

    url = f"http://127.0.0.1:{port}"
    connector = aiohttp.TCPConnector(limit=0, force_close=True)  # a connection per request
    async with aiohttp.ClientSession(connector=connector) as client:
        subscribed: set[int] = set()
        deadline = time.monotonic() + 30
        while len(subscribed) < workers:
            assert time.monotonic() < deadline, f"subscribed workers: {subscribed}"
            async with client.get(f"{url}/stats") as response:
                stats = await response.json()
            if stats["redis"]["connected"]:
                subscribed.add(stats["pid"])

        async def poll(topic: str) -> tuple[int, dict[str, Any]]:
            async with client.get(f"{url}/poll?topic={topic}&wait=20") as response:
                return response.status, await response.json()

        rounds: list[tuple[set[int], int]] = []
        for number in range(8):
            topic, message = f"news{number}", f"hello {number}"
            tasks = [asyncio.ensure_future(poll(topic)) for _ in range(polls)]
            await asyncio.sleep(0.5)  # in flight: most are waiting in their workers by now
            assert not any(task.done() for task in tasks)
            async with client.post(f"{url}/publish?topic={topic}", data=message) as response:
                published = await response.json()
            start = time.monotonic()
            answers = await asyncio.gather(*tasks)
            assert time.monotonic() - start < 5.0
            assert all(status == 200 for status, _ in answers), answers
            assert all(body["messages"] == [message] for _, body in answers), answers
            pids = {body["pid"] for _, body in answers}
            rounds.append((pids, published["pid"]))
            if pids - {published["pid"]}:
                break
    assert any(pids - {publisher} for pids, publisher in rounds), rounds


LONG_POLL_SERVERS = [
    pytest.param(
        ["gunicorn", "examples.longpoll:make_app()", "--workers", "4",
         "-k", "aiowheel.gunicorn.AiohttpWorker", "--graceful-timeout", "5"],
        id="gunicorn-aiohttp",
    ),
    pytest.param(
        ["uvicorn", "examples.longpoll_asgi:app", "--workers", "4"], id="uvicorn-asgi"
    ),
]  # fmt: skip


@pytest.mark.once  # servers from their command lines: the same on every interpreter and build
@pytest.mark.parametrize("command", LONG_POLL_SERVERS)
def test_the_long_poll_answers_on_every_worker_through_redis(command: list[str]) -> None:
    redis_server = RedisServer(need_redis())
    redis_server.start()
    port = free_port()
    if command[0] == "gunicorn":
        command = [*command, "--bind", f"127.0.0.1:{port}"]
    else:
        command = [*command, "--host", "127.0.0.1", "--port", str(port)]
    try:
        with served(command, port, REDIS_URL=redis_server.url):
            asyncio.run(_polls_across_workers(port, 4, 40))
    finally:
        redis_server.kill()


@pytest.mark.once  # a server from its command line: the same on every interpreter and build
@pytest.mark.parametrize("worker", ["AiohttpWorker", "AiohttpUVLoopWorker"])
def test_a_poll_whose_client_went_away_is_cancelled_under_gunicorn(worker: str) -> None:
    # The documented command, the long-poll example without Redis: a client opens a 30 s
    # poll and goes away; its handler is cancelled (handler_cancellation=True) and its wait
    # leaves the purgatory at once, not at its timeout; and SIGTERM then stops the worker
    # at once, not after the 30 s.
    port = free_port()
    command = ["gunicorn", "examples.longpoll:make_app()", "--workers", "1",
               "-k", f"aiowheel.gunicorn.{worker}", "--graceful-timeout", "20",
               "--bind", f"127.0.0.1:{port}"]  # fmt: skip

    def stats() -> dict[str, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", "/stats")
            result: dict[str, Any] = json.loads(connection.getresponse().read())
            return result
        finally:
            connection.close()

    with served(command, port) as proc:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(b"GET /poll?topic=gone&wait=30 HTTP/1.1\r\nHost: x\r\n\r\n")
            deadline = time.monotonic() + 10
            while stats()["live"] != 1:
                assert time.monotonic() < deadline, stats()
                time.sleep(0.05)
        gone = time.monotonic()  # the client closed its connection
        while (counters := stats())["live"] != 0:
            assert time.monotonic() - gone < 10, counters
            time.sleep(0.05)
        assert counters["cancelled"] == 1 and counters["expired"] == 0, counters
        assert time.monotonic() - gone < 10  # not its 30 s
        stopping = time.monotonic()
    assert proc.returncode is not None and time.monotonic() - stopping < 15


@pytest.mark.once  # a server from its command line: the same on every interpreter and build
def test_a_message_published_while_redis_is_down_answers_every_worker_s_polls() -> None:
    # Issue 62's outage: gunicorn -w 4 with the long-poll example, 40 polls waiting across the
    # workers, Redis SIGKILLed (no persistence), one publish while it is down, Redis restarted
    # empty. The publishing worker answers its own polls at once and queues the message; once
    # Redis is back it is published, and every other worker, reading from its last id, reads
    # it: every poll is answered with it (pub/sub answered 1 to 4 of 12).
    import aiohttp

    redis_server = RedisServer(need_redis())
    redis_server.start()
    port = free_port()
    command = ["gunicorn", "examples.longpoll:make_app()", "--workers", "4",
               "-k", "aiowheel.gunicorn.AiohttpWorker", "--graceful-timeout", "5",
               "--bind", f"127.0.0.1:{port}"]  # fmt: skip

    async def outage() -> float:
        url = f"http://127.0.0.1:{port}"
        connector = aiohttp.TCPConnector(limit=0, force_close=True)
        async with aiohttp.ClientSession(connector=connector) as client:
            connected: set[int] = set()
            deadline = time.monotonic() + 30
            while len(connected) < 4:
                assert time.monotonic() < deadline, f"connected workers: {connected}"
                async with client.get(f"{url}/stats") as response:
                    stats = await response.json()
                if stats["redis"]["connected"]:
                    connected.add(stats["pid"])

            async def poll() -> tuple[int, Any]:
                async with client.get(f"{url}/poll?topic=outage&wait=25") as response:
                    return response.status, await response.json()

            polls = [asyncio.ensure_future(poll()) for _ in range(40)]
            await asyncio.sleep(0.5)
            await asyncio.to_thread(redis_server.kill)
            await asyncio.sleep(0.3)
            async with client.post(f"{url}/publish?topic=outage", data="while down") as response:
                publisher = (await response.json())["pid"]
            await asyncio.sleep(1.0)
            assert not all(task.done() for task in polls)  # the other workers' wait for Redis
            await asyncio.to_thread(redis_server.start)
            back = time.monotonic()
            answers = await asyncio.gather(*polls)
            assert all(status == 200 for status, _ in answers), answers
            assert all(body["messages"] == ["while down"] for _, body in answers), answers
            assert {body["pid"] for _, body in answers} - {publisher}, answers  # other workers
            return time.monotonic() - back

    try:
        with served(command, port, REDIS_URL=redis_server.url):
            recovered = asyncio.run(outage())
    finally:
        redis_server.kill()
    assert recovered < 5.0, recovered  # every poll answered within seconds of Redis
