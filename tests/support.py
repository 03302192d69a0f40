"""What the test rooms share: the loop matrix, a free port, Python in a subprocess, and an
asyncio loop on a clock the test controls.

The loop matrix is :func:`aiowheel.loops.installed`, the same list ``python -m bench`` runs
on, so a base loop that installs here is tested and measured without a name list to update:

- ``base`` (a fixture, see ``conftest.py``): the base loop *class* of a loop-mode loop (None
  for asyncio's default loop), every installed base; a test marked
  ``@pytest.mark.bases("asyncio", "uvloop")`` runs on those only;
- ``anyio_backend``: every ``@pytest.mark.anyio`` test on asyncio's loop, on uvloop, and on
  the loop-mode twin of each.
"""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

import aiowheel
import aiowheel.loops

ROOT = Path(__file__).resolve().parent.parent
"""The checkout: the working directory of every subprocess a test starts."""

PACKAGE = Path(aiowheel.__file__).resolve().parent
"""The package under test, where it was imported from: the checkout's ``aiowheel/``, or an
installed wheel's (CI runs the suite against a manylinux wheel too)."""

Base = type[asyncio.AbstractEventLoop] | None
"""A base loop class as ``aiowheel.run(base=...)`` takes it (None: asyncio's default)."""

FREE_THREADED: bool = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
"""A free-threaded interpreter (3.14t): no GIL serializes the threads of a test."""

BASES: dict[str, Base] = aiowheel.loops.installed()
"""Every base loop installed here, by name: asyncio and uvloop always (the dev extra), rloop
and zuvloop where they install."""


def base_params(names: tuple[str, ...] | None = None) -> list[Any]:
    """``pytest.param(base_class, id=name)`` for every installed base (or those of ``names``
    that are installed: asyncio and uvloop always are)."""
    return [
        pytest.param(base, id=name)
        for name, base in BASES.items()
        if names is None or name in names
    ]


def anyio_backends() -> list[Any]:
    """anyio's ``asyncio`` backend on asyncio's loop, on uvloop, and on the loop-mode twin of
    each (``aiowheel.loop_factory``), where every loop timer is on a wheel."""
    uvloop = BASES["uvloop"]
    return [
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
        pytest.param(("asyncio", {"loop_factory": aiowheel.loop_factory()}), id="loop-mode"),
        pytest.param(
            ("asyncio", {"loop_factory": aiowheel.loop_factory(uvloop)}),
            id="loop-mode-uvloop",
        ),
    ]


ASYNCIO_UVLOOP_AND_LOOP_MODE = pytest.mark.parametrize("anyio_backend", anyio_backends()[:3])
"""A test on asyncio's loop, uvloop, and loop mode over asyncio's (the matrix but loop mode
over uvloop): where what differs is whose timer fires first, not the base under the wheel."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_python(
    args: list[str], stdin: str = "", *, timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    """Run this interpreter with ``args`` in the checkout, output captured as text; ``env``
    is added to the environment. Never raises for a non-zero exit: the test looks."""
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=ROOT,
        env={**os.environ, **env},
    )


def json_from_build(no_extensions: bool, script: str, *args: str, timeout: float = 120) -> Any:
    """Run ``python -c script *args`` on one build (the pure one if ``no_extensions``) and
    return what it prints, read as JSON."""
    env = dict(os.environ)
    env.pop("AIOWHEEL_NO_EXTENSIONS", None)
    if no_extensions:
        env["AIOWHEEL_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    )
    return json.loads(done.stdout)


def collect_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    """Route ``loop``'s exception handler into a list, returned (and filled as errors come)."""
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose clock the test controls: idle time passes instantly.

    Whenever the loop would block waiting for its next timer, the virtual clock jumps to that
    timer instead, so a schedule of 10,000 ticks runs in well under a second and the results
    do not depend on how loaded the machine is. ``advance(seconds)`` simulates a callback
    that blocks the loop. (asyncio's default loop only.)
    """

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 1000.0
        selector = self._selector  # type: ignore[attr-defined]
        real_select = selector.select

        def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            events: list[Any] = real_select(0)
            if not events and timeout is not None and timeout > 0:
                self._virtual_now += timeout
            elif not events and timeout is None:
                events = real_select(0.01)  # nothing scheduled: wait a little for real
            return events

        selector.select = select

    def time(self) -> float:
        """The virtual clock."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward as if the loop had been blocked for ``seconds``."""
        self._virtual_now += seconds


def run_virtual(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh :class:`VirtualClockLoop`."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


async def raw_call(
    app: Any, scope: dict[str, Any], messages: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Call an ASGI app as a server would; the messages it sent."""
    sent: list[dict[str, Any]] = []
    inbox = list(messages or [{"type": "http.request", "body": b"", "more_body": False}])

    async def receive() -> dict[str, Any]:
        if inbox:
            return inbox.pop(0)
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


def http_scope(
    path: str = "/",
    headers: list[tuple[bytes, bytes]] | None = None,
    client: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """An ASGI ``http`` scope for a GET of ``path`` (from ``client``, if given)."""
    scope: dict[str, Any] = {"type": "http", "method": "GET", "path": path}
    scope["headers"] = headers or []
    if client is not None:
        scope["client"] = client
    return scope


# -- grpcio (aiowheel.grpc; issue 50) ---------------------------------------------------------

REQUIRE_GRPC = "AIOWHEEL_REQUIRE_GRPC"
"""Set to 1 (CI does, where grpcio has wheels) to make a missing grpcio fail the tests."""


def grpc_installed() -> bool:
    """Whether grpcio can be imported here; False fails the calling test where
    AIOWHEEL_REQUIRE_GRPC=1 (CI, on every interpreter grpcio has wheels for)."""
    try:
        import grpc.aio  # noqa: F401
    except ImportError:
        if os.environ.get(REQUIRE_GRPC, "") not in ("", "0"):
            pytest.fail(f"no grpcio ({REQUIRE_GRPC} is set)")
        return False
    return True


def need_grpc() -> None:
    """Skip the calling test module where grpcio is not installed (no wheel for this
    interpreter: 3.14t), or fail it if AIOWHEEL_REQUIRE_GRPC=1, saying how to get it."""
    try:
        import grpc.aio  # noqa: F401
    except ImportError:
        problem = "no grpcio: pip install -e '.[dev,grpc]' (it has no free-threaded wheel)"
        if os.environ.get(REQUIRE_GRPC, "") not in ("", "0"):
            pytest.fail(f"{problem} ({REQUIRE_GRPC} is set)")
        pytest.skip(problem, allow_module_level=True)


# -- a real redis-server (aiowheel.redis; issue 51) --------------------------------------------

REQUIRE_REDIS = "AIOWHEEL_REQUIRE_REDIS"
"""Set to 1 (CI does) to make a missing redis-server or redis-py fail the tests, not skip."""


def need_redis() -> str:
    """The redis-server binary; skips the test (fails it with AIOWHEEL_REQUIRE_REDIS=1) where
    there is none, or no redis-py, saying how to get them."""
    import shutil

    problem = ""
    binary = shutil.which("redis-server")
    if binary is None:
        problem = "no redis-server on PATH: apt-get install redis-server (Debian/Ubuntu)"
    else:
        try:
            import redis.asyncio  # noqa: F401
        except ImportError:
            problem = "no redis-py: pip install -e '.[dev]' (or aiowheel[redis])"
    if problem:
        if os.environ.get(REQUIRE_REDIS, "") not in ("", "0"):
            pytest.fail(f"{problem} ({REQUIRE_REDIS} is set)")
        pytest.skip(problem)
    assert binary is not None
    return binary


class RedisServer:
    """A real ``redis-server`` on 127.0.0.1:``port``, no persistence unless given a directory
    (``persist``: an append-only file, fsynced at each write); :meth:`start` again on the same
    port after :meth:`kill` (the reconnect tests)."""

    def __init__(self, binary: str, port: int | None = None, persist: str | None = None) -> None:
        self.binary = binary
        self.persist = persist  # a directory: an append-only file there, fsynced at each write
        self.port = port or free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start it and wait until it answers PING."""
        import time

        self.process = subprocess.Popen(
            [
                *(self.binary, "--port", str(self.port), "--bind", "127.0.0.1"),
                *("--save", "", "--loglevel", "warning"),
                *(
                    ("--appendonly", "no")
                    if self.persist is None
                    else ("--appendonly", "yes", "--appendfsync", "always", "--dir", self.persist)
                ),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"redis-server did not start on port {self.port}")
            time.sleep(0.01)

    def kill(self) -> None:
        """Stop it at once (SIGKILL: its clients see their connections drop)."""
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


async def serve_aiohttp(app: Any) -> tuple[Any, str]:
    """The aiohttp ``app`` served on 127.0.0.1 (a free port; handlers cancelled when their
    client goes, shut down within 0.1 s): its runner, to clean up, and its base URL."""
    from aiohttp import web

    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"
