"""Real programs under loop mode: the unmodified example server and aiohttp's own timeouts.

The server runs with its middleware on ``asyncio.timeout`` (``--timeouts asyncio``), so not one
line of it knows about aiowheel; on a loop-mode loop its deadlines, and aiohttp's keep-alive,
read and client timeouts, are filed in the loop's wheel.
"""

from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import uvloop
from aiohttp import web

import aiowheel
from aiowheel import timer_of
from examples.server import TIMED_OUT, Config, make_app
from tests.support import ROOT

# The async tests run on loop-mode loops only, over both bases.
on_loop_mode = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {"loop_factory": aiowheel.loop_factory()}), id="loop-mode"),
        pytest.param(
            ("asyncio", {"loop_factory": aiowheel.loop_factory(uvloop.Loop)}),
            id="loop-mode-uvloop",
        ),
    ],
)


def wheel() -> aiowheel.Timer:
    timer = timer_of(asyncio.get_running_loop())
    assert timer is not None, "not a loop-mode loop"
    return timer


@asynccontextmanager
async def serve(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.anyio
@on_loop_mode
async def test_unmodified_server_times_out_on_the_wheel() -> None:
    loop = asyncio.get_running_loop()
    timer = wheel()
    app = make_app(Config(request_timeout=0.3, timeouts="asyncio"))
    async with serve(app) as url, aiohttp.ClientSession() as client:
        fired_before = timer.stats().fired
        earliest = loop.time() + 0.3
        async with client.get(f"{url}/slow?seconds=30") as response:
            answered = loop.time()
            assert response.status == 504
        assert answered >= earliest
        (lateness,) = app[TIMED_OUT]
        assert 0 <= lateness <= 1.0  # generous: a loaded 2-core machine stalls
        # asyncio.timeout's handle was the wheel's: it fired there.
        assert timer.stats().fired > fired_before
        async with client.get(f"{url}/fast") as response:
            assert response.status == 200


@pytest.mark.anyio
@on_loop_mode
async def test_aiohttp_client_timeout_fires_from_the_wheel() -> None:
    loop = asyncio.get_running_loop()
    timer = wheel()
    # The server gives up after 1 s (so that its clean-up need not wait for a 30 s sleep);
    # the client's own 0.2 s timeout comes first.
    app = make_app(Config(request_timeout=1.0, timeouts="asyncio"))
    async with serve(app) as url:
        timeout = aiohttp.ClientTimeout(total=0.2)
        async with aiohttp.ClientSession(timeout=timeout) as client:
            fired_before = timer.stats().fired
            earliest = loop.time() + 0.2
            with pytest.raises(TimeoutError):
                async with client.get(f"{url}/slow?seconds=30") as response:
                    await response.read()
            assert loop.time() >= earliest
            assert timer.stats().fired > fired_before


@pytest.mark.anyio
@on_loop_mode
async def test_aiohttp_server_keepalive_timeout_closes_an_idle_connection() -> None:
    loop = asyncio.get_running_loop()
    timer = wheel()
    app = make_app(Config(timeouts="asyncio"))
    # 1 s, not less: the handle must still be pending when the client looks, on a loaded machine.
    async with serve(app, keepalive_timeout=1.0) as url:
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            writer.write(b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n")
            await writer.drain()
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            answered = loop.time()
            assert len(timer) >= 1  # the keep-alive handle waits in the wheel
            # aiohttp closes the idle connection once its keep-alive timer fires.
            rest = await asyncio.wait_for(reader.read(), 10)
            closed = loop.time()
        finally:
            writer.close()
        assert rest == b'{"ok": true}'  # the body, then the server's close
        # The server armed its 1 s keep-alive before the client read the answer: how long
        # before depends on when the client ran (0.5 s of slack for a stalled client); the
        # close is the keep-alive's, not an immediate one.
        assert 0.5 <= closed - answered <= 10


def test_example_server_process_with_loop_mode_flag() -> None:
    # The server as a user starts it: its own process, `--loop-mode`, middleware on asyncio.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, str(ROOT / "examples" / "server.py"), "--port", str(port),
               "--request-timeout", "0.2", "--timeouts", "asyncio", "--loop-mode"]  # fmt: skip
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not come up"
                assert server.poll() is None, server.stderr.read().decode()  # type: ignore[union-attr]
                time.sleep(0.1)

        async def client() -> tuple[int, dict[str, Any]]:
            async with aiohttp.ClientSession() as session:
                async with session.get(f"{url}/slow?seconds=30") as response:
                    status = response.status
                async with session.get(f"{url}/stats") as response:
                    return status, await response.json()

        status, stats = asyncio.run(client())
        assert status == 504
        assert stats["timed_out_requests"] == 1
        assert stats["early_timeouts"] == 0
        assert stats["fired"] >= 1  # the middleware's asyncio.timeout fired from the wheel
        assert not math.isnan(stats["max_lateness"])
    finally:
        server.terminate()
        server.wait(timeout=15)


def test_pytest_asyncio_runs_tests_on_a_loop_factory(tmp_path: Path) -> None:
    # pytest-asyncio's loop factories: a conftest hook naming aiowheel.loop_factory().
    (tmp_path / "conftest.py").write_text(
        "import aiowheel\n"
        "import uvloop\n\n\n"
        "def pytest_asyncio_loop_factories(config, item):\n"
        "    return {\n"
        "        'loop-mode': aiowheel.loop_factory(),\n"
        "        'loop-mode-uvloop': aiowheel.loop_factory(uvloop.Loop),\n"
        "    }\n"
    )
    (tmp_path / "test_user.py").write_text(
        "import asyncio\n\n"
        "import pytest\n\n"
        "from aiowheel import timer_of\n\n\n"
        "@pytest.mark.asyncio\n"
        "async def test_on_the_wheel():\n"
        "    timer = timer_of(asyncio.get_running_loop())\n"
        "    assert timer is not None\n"
        "    await asyncio.sleep(0.05)\n"
        "    assert timer.stats().fired == 1\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # Each factory the hook names ran the test, and nothing else ran.
    for name in ("loop-mode", "loop-mode-uvloop"):
        assert f"test_user.py::test_on_the_wheel[{name}] PASSED" in result.stdout, result.stdout
    assert re.search(r"\b2 passed\b", result.stdout), result.stdout
