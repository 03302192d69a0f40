"""Start the chain's three services, each from its own command line, with one command.

    python -m examples.chain [--port 8080] [--mode propagated|stock|none] [--stock] [--loop-mode]

Starts the backend (gRPC), the service (aiohttp) and the gateway (uvicorn) as subprocesses,
waits until each answers, prints their addresses, and stops them on Ctrl-C (or SIGTERM).
``--stock`` is ``--mode stock``; ``--loop-mode`` runs each process on aiowheel's loop mode
(uvicorn's ``--loop aiowheel.loops:asyncio_loop``, ``aiowheel.run`` for the other two).

    curl -s -H 'x-request-timeout: 1' 'http://127.0.0.1:8080/work?seconds=5'  # 504 at 1 s
    curl -s -H 'x-request-timeout: 2' 'http://127.0.0.1:8080/work?seconds=0.1'  # the budgets
    curl -s 'http://127.0.0.1:SERVICE_PORT/backend/stats'  # what ran, until when
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.chain import METRICS_PORT, MODES

ROOT = Path(__file__).resolve().parent.parent.parent


def commands(
    ports: dict[str, int],
    mode: str,
    loop_mode: bool,
    python: str = sys.executable,
    metrics: dict[str, int] | None = None,
    wrap: tuple[str, ...] = (),
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each service's command line and extra environment, backend first; with ``metrics``
    (a port per service), each serves its deadlines' metrics there (``/metrics``); ``wrap``:
    words before each command line (``valgrind --tool=callgrind ...``: a bench's)."""
    found = _commands(ports, mode, loop_mode, python)
    for name, port in (metrics or {}).items():
        found[name][1][METRICS_PORT] = str(port)
    for command, _extra in found.values():
        command[:0] = wrap
    return found


def _commands(
    ports: dict[str, int], mode: str, loop_mode: bool, python: str
) -> dict[str, tuple[list[str], dict[str, str]]]:
    flag = ["--loop-mode"] if loop_mode else []
    loop = "aiowheel.loops:asyncio_loop" if loop_mode else "asyncio"
    return {
        "backend": (
            [python, "-m", "examples.chain.backend", "--port", str(ports["backend"]),
             "--mode", mode, *flag],
            {},
        ),
        "service": (
            [python, "-m", "examples.chain.service", "--port", str(ports["service"]),
             "--backend", f"127.0.0.1:{ports['backend']}", "--mode", mode, *flag],
            {},
        ),
        "gateway": (
            [python, "-m", "uvicorn", "--factory", "examples.chain.gateway:make_app",
             "--host", "127.0.0.1", "--port", str(ports["gateway"]), "--loop", loop,
             "--log-level", "warning", "--no-access-log", "--backlog", "4096"],
            {"CHAIN_MODE": mode, "CHAIN_SERVICE": f"http://127.0.0.1:{ports['service']}"},
        ),
    }  # fmt: skip


@dataclass
class Chain:
    """The running chain: its processes and ports."""

    ports: dict[str, int]
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    metrics: dict[str, int] = field(default_factory=dict)
    """Each service's metrics port (``http://127.0.0.1:PORT/metrics``), when served."""

    def url(self, name: str) -> str:
        """The base URL of ``gateway`` or ``service``."""
        return f"http://127.0.0.1:{self.ports[name]}"


def _answers(name: str, port: int) -> bool:
    try:
        if name == "backend":  # a gRPC server: listening is answering
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/stats?ids=", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@contextmanager
def started(
    mode: str = "propagated",
    loop_mode: bool = False,
    gateway_port: int | None = None,
    output: int | None = subprocess.PIPE,
    ready_within: float = 60.0,
    metrics: bool = False,
    root: Path = ROOT,
    wrap: tuple[str, ...] = (),
) -> Iterator[Chain]:
    """Start the three, each from its own command line, and wait until each answers;
    SIGTERM them at the end (SIGKILL if one has not stopped within 30 s). With ``output``
    PIPE (the default) each process's output is kept as ``process.output`` at the end; None
    leaves it on this process's stdout and stderr; DEVNULL drops it. With ``metrics``, each
    process's deadlines are instrumented and served for Prometheus (``chain.metrics``).
    ``root``: the checkout the three run from (another one's aiowheel: a bench's baseline).
    ``wrap``: words before each command line (see :func:`commands`)."""
    made: Chain | str = ""
    for _attempt in range(1 if gateway_port is not None else _STARTS):
        made = _start(mode, loop_mode, gateway_port, output, ready_within, metrics, root, wrap)
        if isinstance(made, Chain):
            break
    if not isinstance(made, Chain):
        raise RuntimeError(made)
    chain = made
    try:
        yield chain
    finally:
        stop(chain)


# A process that exits before answering is started again, on other ports, once: a port that was
# free when chosen can be taken by another process before the child binds it (the CI machine
# runs other servers beside), which no choice of ports rules out.
_STARTS = 2


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports: each held until all are chosen, so none is chosen twice."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _start(
    mode: str,
    loop_mode: bool,
    gateway_port: int | None,
    output: int | None,
    ready_within: float,
    metrics: bool,
    root: Path,
    wrap: tuple[str, ...] = (),
) -> Chain | str:
    """The three started and answering, or why not (every one started is stopped then)."""
    free = _free_ports(6)
    ports = {"backend": free[0], "service": free[1], "gateway": gateway_port or free[2]}
    chain = Chain(ports)
    if metrics:
        chain.metrics = dict(zip(ports, free[3:], strict=True))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop(METRICS_PORT, None)
    with contextlib.ExitStack() as files:
        # Dropped output is still kept for the error of a process that exits early.
        errors: dict[str, Any] = {}
        if output == subprocess.DEVNULL:
            errors = {name: files.enter_context(tempfile.TemporaryFile("w+")) for name in ports}
        try:
            for name, (command, extra) in commands(
                ports, mode, loop_mode, metrics=chain.metrics, wrap=wrap
            ).items():
                chain.processes[name] = subprocess.Popen(
                    command,
                    cwd=root,
                    env={**env, **extra},
                    stdout=output,
                    stderr=errors.get(name) or (None if output is None else subprocess.STDOUT),
                    text=True,
                )
            deadline = time.monotonic() + ready_within
            for name, process in chain.processes.items():
                while not _answers(name, ports[name]):
                    if process.poll() is not None:
                        out = process.communicate()[0] if output == subprocess.PIPE else ""
                        if name in errors:
                            errors[name].seek(0)
                            out = errors[name].read()[-4000:]
                        stop(chain)
                        return f"the {name} exited early:\n{out}"
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the {name} did not answer within {ready_within} s")
                    time.sleep(0.1)
        except BaseException:
            stop(chain)
            raise
    return chain


def stop(chain: Chain) -> None:
    """SIGTERM each process, the gateway first; SIGKILL one still running 30 s later. Each
    piped process's output is kept as ``process.output``."""
    for name in ("gateway", "service", "backend"):
        process = chain.processes.get(name)
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in chain.processes.values():
        try:
            out = process.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            process.kill()
            out = process.communicate()[0]
        process.output = out or ""  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.chain", description=__doc__)
    parser.add_argument("--port", type=int, default=8080, help="the gateway's port")
    parser.add_argument("--mode", choices=MODES, default="propagated")
    parser.add_argument("--stock", action="store_true", help="--mode stock")
    parser.add_argument("--loop-mode", action="store_true", help="run each on loop mode")
    args = parser.parse_args(argv)
    mode = "stock" if args.stock else args.mode
    # Ctrl-C, even where SIGINT came ignored (a job started with & by a script); SIGTERM too.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        with started(mode, args.loop_mode, args.port, output=None) as chain:
            for name in ("gateway", "service", "backend"):
                print(f"{name}: 127.0.0.1:{chain.ports[name]}", flush=True)
            print(f"chain up ({mode}{', loop mode' if args.loop_mode else ''}): Ctrl-C stops it")
            while all(p.poll() is None for p in chain.processes.values()):
                time.sleep(0.5)
            print("a service exited: stopping the others", file=sys.stderr)
            return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
