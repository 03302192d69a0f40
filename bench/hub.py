"""A websocket hub where timers decide the outcome: ``python -m bench.hub``.

Every figure elsewhere on the performance page is a micro-benchmark or a request load where
timers are a small share. A hub of long-lived websockets is the opposite: each connection keeps
a heartbeat and an idle timeout, both reset on every message it sends (aiohttp's websocket did
exactly that until PR 12030 cut it to once per loop iteration, because cancelled handles stay
on asyncio's heap, PR 8608), and a network blip makes half of them expire at once while the
rest keep talking. Nobody publishes that load for Python; this is it, small enough to run on a
2-core VM and honest about what the machine can hold.

**The server** (``--serve``, one process per contender, started by the command) is aiohttp's
websocket server. Per connection it files two timers with the loop's own ``call_at``, the way
a server written on asyncio's primitives does: a heartbeat (a PING frame every ``--heartbeat``
seconds of silence) and an idle timeout (``--idle-timeout`` seconds without a message closes
the connection with a close frame). Both are cancelled and filed again on every text message,
which the server echoes. The frames of the heartbeat and of the close are written straight to
the transport (a PING and a close are two and four bytes): no task per ping, so what the
figures weigh is the timers, not task creation. Each firing checks itself against its own
deadline by the loop's clock (late by how much; early is counted), and the time spent arming
and cancelling (the resets) is summed with ``perf_counter_ns``, so the chatty phase can say
what share of the server's CPU the resets take. A probe timer every 10 ms measures the loop's
lag (how late it ran): the bound a closed connection is checked against.

**The clients** (``--client``, two processes, kept for the whole run) speak the websocket
protocol by hand on ``asyncio.Protocol`` (a handshake, masked text frames, pongs) over uvloop
where installed: the cheapest client there is, since on two cores every cycle a client spends
is one the server does not get. Each client process binds its own loopback address
(127.0.0.2, 127.0.0.3, ...), so that 50,000 connections do not run out of ephemeral ports.

**The phases**, in each run, against one freshly started server:

- *idle*: every connection sends a keep-alive message every ``--keepalive`` s (jittered), so
  heartbeats fire in the gaps and the idle timeouts are reset but never fire. Figures: the
  server's CPU seconds per minute, its RSS per connection (RSS after connecting minus before,
  over N), heartbeat lateness p50/p99, early heartbeats, connections lost (must be 0).
- *chatty*: every connection sends a message as soon as the echo of its last one is back (a
  closed loop of N messages in flight: the server is saturated). Figures: messages/s, echo
  latency p99, the resets' share of the server's CPU.
- *mass expiry*: every connection sends one message at once (the blip), then half go silent
  while the other half send one message every ``--live-interval`` s. Figures: the time from
  the blip until the last silent connection is closed (against the idle timeout), each silent
  connection's close against its own deadline (late by at most one tick plus the loop's lag,
  never early), and the live messages' latency p99 during it. Checked: every silent connection
  closed, no live one.

Contenders: stock asyncio and uvloop, loop mode over each (``aiowheel.new_event_loop(base)``:
every ``call_at`` of the server on the wheel), and every other base installed here
(:data:`aiowheel.loops.BASES`), stock and in loop mode. Rounds alternate which contender goes
first; the table gives each figure's median over the rounds with its worst and best. A run
fails (exit 1) when a connection that should live was closed, one that should close was not,
or a loop-mode timer fired early; the stock loops' early firings are measured and shown, not
failed (uvloop rounds a delay to the nearest millisecond: it runs timers up to 0.5 ms early).

``--quick`` is the smoke test (100 connections, stock asyncio against loop mode over it, one
round of about a second a phase). The file descriptor limit is raised to the hard limit (and
the hard limit too, where the process may), since every connection is one descriptor in the
server and one in a client. Only 127.0.0.x is ever contacted; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import random
import re
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from .fastapi_load import _rss_mib
from .server_load import free_port

ROOT = Path(__file__).resolve().parent.parent
PROBE = 0.01  # the lag probe's period (s)
CLIENTS = 2  # client processes


def raise_fd_limit(wanted: int) -> int:
    """Raise this process's open-file limit towards ``wanted`` (the hard limit too, where the
    process may: root can); return the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, wanted))
            return wanted
        except (ValueError, OSError):
            pass
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        return target
    return soft


def summary(values: list[float]) -> dict[str, float]:
    """Count, p50, p99 and max of ``values`` (NaN where there are none)."""
    if not values:
        return {"n": 0, "p50": float("nan"), "p99": float("nan"), "max": float("nan")}
    ordered = sorted(values)
    return {"n": len(ordered), "p50": ordered[len(ordered) // 2],
            "p99": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "max": ordered[-1]}  # fmt: skip


# -- the server -------------------------------------------------------------------------------


def make_loop(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory of fresh loops for contender ``name`` (``uvloop``, ``loop-mode/uvloop``...;
    ``loop-mode@64/uvloop``: loop mode with ``max_batch=64``, ``@none`` for no bound)."""
    import aiowheel
    import aiowheel.loops

    mode, _, base_name = name.rpartition("/")
    base = aiowheel.loops.base_class(base_name)
    mode, _, batch = mode.partition("@")
    if mode == "loop-mode":
        if batch:
            return aiowheel.loop_factory(base, max_batch=None if batch == "none" else int(batch))
        return aiowheel.loop_factory(base)
    return asyncio.new_event_loop if base is None else base


class Hub:
    """The server's timers and what they measured since the last ``/stats?reset=1``."""

    def __init__(self, heartbeat: float, idle_timeout: float) -> None:
        self.heartbeat = heartbeat
        self.idle_timeout = idle_timeout
        self.open = 0
        self.reset()

    def reset(self) -> None:
        """Start a new phase's figures."""
        self.beats: list[float] = []
        self.expiries: list[float] = []
        self.lags: list[float] = []
        self.lag_times: list[float] = []  # the loop's time of each lag probe
        self.expire_times: list[float] = []  # the loop's time of each idle timeout's firing
        self.messages = 0
        self.reset_ns = 0
        self.cpu = time.process_time()
        self.wall = time.perf_counter()

    def stats(self, loop: asyncio.AbstractEventLoop) -> dict[str, Any]:
        """The phase's figures (lateness in ms)."""
        import aiowheel

        timer = aiowheel.timer_of(loop)
        cpu = time.process_time() - self.cpu
        return {
            "open": self.open, "messages": self.messages, "cpu_s": cpu,
            "wall_s": time.perf_counter() - self.wall,
            # The resets are timed by the wall clock (a thread-CPU clock read costs a system
            # call): their share is of the phase's wall time, in which a saturated server is
            # always running or runnable; over its CPU time, preemption by other processes
            # would count against the resets. py-spy's samples agree (--profile).
            "reset_s": self.reset_ns / 1e9,
            "reset_share": self.reset_ns / 1e9 / (time.perf_counter() - self.wall),
            "beats": summary([x * 1e3 for x in self.beats]),
            "early_beats": sum(x < 0 for x in self.beats),
            "expiries": summary([x * 1e3 for x in self.expiries]),
            "early_expiries": sum(x < 0 for x in self.expiries),
            "lag": summary([x * 1e3 for x in self.lags]),
            "closing_lag": summary([x * 1e3 for x in self.closing_lags()]),
            "tick_ms": 0.0 if timer is None else timer.tick * 1e3,
            "rss_mib": _rss_mib(os.getpid()), "loop": type(loop).__name__,
        }  # fmt: skip

    def closing_lags(self) -> list[float]:
        """The probe's lags while the idle timeouts fired (first firing to last): how long the
        server's loop was blocked in the window the live messages are measured in."""
        if not self.expire_times:
            return []
        first, last = min(self.expire_times), max(self.expire_times)
        return [lag for at, lag in zip(self.lag_times, self.lags, strict=True)
                if first <= at <= last]  # fmt: skip


class Connection:
    """One websocket's two timers: the heartbeat and the idle timeout."""

    __slots__ = ("beat", "beat_due", "hub", "idle", "idle_due", "loop", "transport")

    def __init__(self, hub: Hub, loop: asyncio.AbstractEventLoop, transport: Any) -> None:
        self.hub, self.loop, self.transport = hub, loop, transport
        now = loop.time()
        self.idle_due = now + hub.idle_timeout
        self.idle = loop.call_at(self.idle_due, self.expire)
        # Connections arrive over time: their first beats spread over one interval.
        self.beat_due = now + random.uniform(0.5, 1.0) * hub.heartbeat
        self.beat = loop.call_at(self.beat_due, self.ping)

    def touch(self) -> None:
        """A message came: both timers start again (cancel and file anew)."""
        started = time.perf_counter_ns()
        loop, hub = self.loop, self.hub
        self.idle.cancel()
        self.beat.cancel()
        now = loop.time()
        self.idle_due = now + hub.idle_timeout
        self.idle = loop.call_at(self.idle_due, self.expire)
        self.beat_due = now + hub.heartbeat
        self.beat = loop.call_at(self.beat_due, self.ping)
        hub.reset_ns += time.perf_counter_ns() - started

    def ping(self) -> None:
        now = self.loop.time()
        self.hub.beats.append(now - self.beat_due)
        self.transport.write(b"\x89\x00")  # PING, no payload
        self.beat_due = now + self.hub.heartbeat
        self.beat = self.loop.call_at(self.beat_due, self.ping)

    def expire(self) -> None:
        now = self.loop.time()
        self.hub.expiries.append(now - self.idle_due)
        self.hub.expire_times.append(now)
        self.beat.cancel()
        self.transport.write(b"\x88\x02\x03\xe9")  # close 1001, going away
        self.transport.close()

    def stop(self) -> None:
        self.idle.cancel()
        self.beat.cancel()


def serve(args: argparse.Namespace) -> None:
    """Run the hub on contender ``args.serve`` until SIGINT / SIGTERM."""
    from aiohttp import WSMsgType, web

    raise_fd_limit(args.fds)
    hub = Hub(args.heartbeat, args.idle_timeout)

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True, max_msg_size=4096)
        await ws.prepare(request)
        loop = asyncio.get_running_loop()
        conn = Connection(hub, loop, request.transport)
        hub.open += 1
        try:
            async for msg in ws:
                if msg.type is WSMsgType.TEXT:
                    hub.messages += 1
                    conn.touch()
                    await ws.send_str(msg.data)
        finally:
            hub.open -= 1
            conn.stop()
        return ws

    async def stats(request: web.Request) -> web.Response:
        figures = hub.stats(asyncio.get_running_loop())
        if request.query.get("reset"):
            hub.reset()
        return web.json_response(figures)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        due = [loop.time() + PROBE]

        def probe() -> None:
            now = loop.time()
            hub.lags.append(now - due[0])
            hub.lag_times.append(now)
            due[0] = now + PROBE
            loop.call_at(due[0], probe)

        loop.call_at(due[0], probe)
        app = web.Application()
        app.add_routes([web.get("/ws", websocket), web.get("/stats", stats)])
        runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port, backlog=4096)
        await site.start()
        stop = asyncio.Event()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await runner.cleanup()

    with asyncio.Runner(loop_factory=make_loop(args.serve)) as runner:
        runner.run(main())


# -- the clients ------------------------------------------------------------------------------


class Client(asyncio.Protocol):
    """One websocket client connection, by hand: a handshake, masked text frames, pongs."""

    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm
        self.buffer = bytearray()
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: Any = None  # uvloop's transports are not asyncio.Transport's
        self.sent_at = 0.0
        self.closed_at: float | None = None
        self.silent = False
        self.keeper: asyncio.TimerHandle | None = None
        self.pings = 0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        key = base64.b64encode(os.urandom(16)).decode()
        transport.write(
            f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            f"Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )

    def send(self, payload: bytes = b"m") -> None:
        """A masked text frame (a zero mask key: the payload goes as is)."""
        if self.closed_at is not None:
            return
        self.sent_at = time.perf_counter()
        self.transport.write(b"\x81" + bytes((0x80 | len(payload),)) + b"\0\0\0\0" + payload)

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer
        buffer += data
        if not self.upgraded.done():
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buffer[:end])
            del buffer[: end + 4]
            if b" 101 " not in head.split(b"\r\n", 1)[0]:
                self.upgraded.set_exception(RuntimeError(f"no upgrade: {head[:80]!r}"))
                return
            self.upgraded.set_result(None)
            swarm = self.swarm  # the keep-alives start at once: the server's idle timer has
            self.keeper = swarm.loop.call_later(random.uniform(0, swarm.keepalive), swarm.keep,
                                                self)  # fmt: skip
        while len(buffer) >= 2:
            opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
            start = 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            if len(buffer) < start + length:
                return
            payload = bytes(buffer[start : start + length])
            del buffer[: start + length]
            if opcode == 0x1:
                self.swarm.echoed(self)
            elif opcode == 0x9:
                self.pings += 1
                self.transport.write(b"\x8a" + bytes((0x80 | len(payload),)) + b"\0\0\0\0"
                                     + payload)  # fmt: skip
            elif opcode == 0x8:
                self.swarm.reasons["close frame"] = self.swarm.reasons.get("close frame", 0) + 1
                self.closed_at = time.perf_counter()
                self.transport.close()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed_at is None:
            reason = f"lost: {exc!r}"
            self.swarm.reasons[reason] = self.swarm.reasons.get(reason, 0) + 1
            self.closed_at = time.perf_counter()
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError("closed before the upgrade"))


class Swarm:
    """A client process's connections and what the current phase does with an echo."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.conns: list[Client] = []
        self.latencies: list[float] = []
        self.sent: list[float] = []  # mass expiry: when each message of ``latencies`` was sent
        self.record_sent = False
        self.reasons: dict[str, int] = {}  # why connections closed: the close frame, or not
        self.closed_loop = False  # chatty: send again at once on every echo
        self.recording = False
        self.loop = asyncio.get_running_loop()
        self.keepalive = 1.0

    def echoed(self, conn: Client) -> None:
        if self.recording:
            self.latencies.append(time.perf_counter() - conn.sent_at)
            if self.record_sent:
                self.sent.append(conn.sent_at)
        if self.closed_loop:
            conn.send()

    async def connect(self, port: int, count: int, keepalive: float) -> dict[str, Any]:
        loop = self.loop = asyncio.get_running_loop()
        self.keepalive = keepalive
        for start in range(0, count, 250):  # in batches: the listen backlog is never the limit
            made = await asyncio.gather(*(
                loop.create_connection(lambda: Client(self), "127.0.0.1", port,
                                       local_addr=(self.source, 0))
                for _ in range(min(250, count - start))
            ))  # fmt: skip
            conns = [protocol for _, protocol in made]
            async with asyncio.timeout(60):  # a server out of descriptors accepts none
                await asyncio.gather(*(conn.upgraded for conn in conns))
            self.conns.extend(conns)
        return {"connected": len(self.conns)}

    def disconnect(self) -> dict[str, Any]:
        for conn in self.conns:
            if conn.keeper is not None:
                conn.keeper.cancel()
            if conn.transport is not None:
                conn.transport.close()
        self.conns = []
        return {}

    def lost(self, conns: list[Client]) -> int:
        return sum(conn.closed_at is not None for conn in conns)

    def keep(self, conn: Client) -> None:
        """A connection's keep-alive: a message every ``self.keepalive`` s, from its upgrade
        to its close or its silence (the idle timeouts never fire until the mass expiry)."""
        if conn.closed_at is None and not conn.silent:
            conn.send(b"k")
            conn.keeper = self.loop.call_later(self.keepalive, self.keep, conn)

    async def idle(self, seconds: float) -> dict[str, Any]:
        """The keep-alives go on; nothing else is sent."""
        await asyncio.sleep(seconds)
        return {"lost": self.lost(self.conns), "pings": sum(c.pings for c in self.conns),
                "reasons": self.reasons}  # fmt: skip

    async def chatty(self, seconds: float) -> dict[str, Any]:
        """A closed loop: each connection sends again as soon as its echo is back."""
        self.latencies = []
        self.closed_loop = True
        for conn in self.conns:
            conn.send()
        await asyncio.sleep(0.2)  # warm-up: every connection has a message in flight
        self.latencies, self.recording = [], True
        started = time.perf_counter()
        await asyncio.sleep(seconds)
        self.recording = False
        done, elapsed = len(self.latencies), time.perf_counter() - started
        self.closed_loop = False
        await asyncio.sleep(0.2)  # the last echoes come back
        return {"messages": done, "seconds": elapsed, "lost": self.lost(self.conns),
                "latencies_ms": _sample([x * 1e3 for x in self.latencies])}  # fmt: skip

    async def expire(self, share: float, interval: float, wait: float) -> dict[str, Any]:
        """The blip: all send once, then ``share`` of them go silent; the rest send every
        ``interval`` s until the silent ones are all closed (or ``wait`` s have passed)."""
        loop = asyncio.get_running_loop()
        silent = self.conns[: int(len(self.conns) * share)]
        live = self.conns[len(silent) :]
        self.latencies, self.sent, self.recording, self.record_sent = [], [], True, True
        blip = time.perf_counter()
        for conn in self.conns:
            conn.send()
        for conn in silent:
            conn.silent = True
        handles: list[asyncio.TimerHandle] = []

        def talk(conn: Client) -> None:
            if conn.closed_at is None:
                conn.send()
                handles.append(loop.call_later(interval, talk, conn))

        for conn in live:
            handles.append(loop.call_later(random.uniform(0, interval), talk, conn))
        # This client's own loop lag: a live message's latency is the server's delay plus the
        # time its echo waits here, and the client shares the two cores with the server.
        lags: list[tuple[float, float]] = []  # (perf_counter, how late)

        def probe(due: float) -> None:
            now = loop.time()
            lags.append((time.perf_counter(), now - due))
            if self.recording:
                handles.append(loop.call_at(now + PROBE, probe, now + PROBE))

        probe(loop.time())
        while time.perf_counter() - blip < wait:
            if all(conn.closed_at is not None for conn in silent):
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # a live connection wrongly closed would show by now
        self.recording = self.record_sent = False
        for handle in handles:
            handle.cancel()
        closes = [c.closed_at - blip for c in silent if c.closed_at is not None]
        # The live messages sent while this client's silent connections were being closed
        # (first close to last): the ones that could wait behind the closes. The blip's own
        # echoes, 10 s before, are not among them.
        first, last = blip + min(closes, default=0.0), blip + max(closes, default=0.0)
        closing = [lat for lat, sent in zip(self.latencies, self.sent, strict=True)
                   if first <= sent <= last]  # fmt: skip
        closing_lags = [lag * 1e3 for at, lag in lags if first <= at <= last]
        return {"silent": len(silent), "silent_closed": len(closes),
                "last_close_s": max(closes, default=float("nan")),
                "first_close_s": min(closes, default=float("nan")),
                "live": len(live), "live_lost": self.lost(live),
                "latencies_ms": _sample([x * 1e3 for x in self.latencies]),
                "closing_latencies_ms": _sample([x * 1e3 for x in closing]),
                "closing_lag": summary(closing_lags)}  # fmt: skip


def _sample(values: list[float], most: int = 50_000) -> list[float]:
    """At most ``most`` of ``values``, evenly spread (percentiles survive), rounded to 1 us."""
    step = max(1, len(values) // most)
    return [round(x, 3) for x in values[::step]]


def client(args: argparse.Namespace) -> None:
    """Serve the orchestrator's commands (one JSON line each on stdin, answers on stdout)."""
    raise_fd_limit(args.fds)
    try:
        import uvloop

        factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    except ImportError:
        factory = asyncio.new_event_loop

    async def main() -> None:
        swarm = Swarm(args.source)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := await reader.readline():
            command = json.loads(line)
            name = command.pop("do")
            method = getattr(swarm, name)
            async with asyncio.timeout(900):  # a hung phase ends the run, not the machine
                answer = await method(**command) if name != "disconnect" else method()
            sys.stdout.write(json.dumps(answer) + "\n")
            sys.stdout.flush()

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


# -- the orchestrator -------------------------------------------------------------------------


class Clients:
    """The client processes, commanded together."""

    def __init__(self, count: int, fds: int) -> None:
        command = [sys.executable, "-m", "bench.hub", "--client", "--fds", str(fds), "--source"]
        pipe = subprocess.PIPE
        self.procs = [
            subprocess.Popen([*command, f"127.0.0.{i + 2}"], cwd=ROOT, stdin=pipe, stdout=pipe,
                             text=True)
            for i in range(count)
        ]  # fmt: skip

    def ask(self, commands: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Send each process its command at once; wait for every answer."""
        for proc, command in zip(self.procs, commands, strict=True):
            stdin: IO[str] = proc.stdin  # type: ignore[assignment]
            stdin.write(json.dumps(command) + "\n")
            stdin.flush()
        answers = []
        for proc in self.procs:
            line = proc.stdout.readline() if proc.stdout else ""
            if not line:
                raise RuntimeError(f"a client process died (exit {proc.poll()})")
            answers.append(json.loads(line))
        return answers

    def same(self, **command: Any) -> list[dict[str, Any]]:
        return self.ask([dict(command) for _ in self.procs])

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def stats(port: int, reset: bool = False) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port}/stats" + ("?reset=1" if reset else "")
    with urllib.request.urlopen(url, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
    return answer


def start_server(contender: str, args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "bench.hub", "--serve", contender, "--port", str(port),
         "--heartbeat", str(args.heartbeat), "--idle-timeout", str(args.idle_timeout),
         "--fds", str(args.connections + 4096)],
        cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            stats(port)
            return server, port
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                server.kill()
                raise RuntimeError(f"the {contender} server did not come up") from None
            time.sleep(0.05)


def stop_server(server: subprocess.Popen[bytes]) -> None:
    """Kill the server: its figures are in, and a clean shutdown of 10,000 websockets takes
    aiohttp tens of seconds on the shared machine, for nothing measured."""
    server.kill()
    server.wait()


# Frames that are timer work: the server's resets and firings, the loops' call_at / cancel, and
# asyncio's heap (heapq is C: its time shows as the line of _run_once calling it).
TIMER_FRAMES = ("touch (", "ping (", "expire (", "call_at (", "call_later (", "cancel (",
                "_timer_handle_cancelled (", "heappush", "heappop", "heapify")  # fmt: skip


def profile_start(pid: int, name: str, seconds: float, args: argparse.Namespace) -> Any:
    """Start ``py-spy record`` on the server for ``seconds`` (None without --profile)."""
    if not args.profile:
        return None
    args.profile.mkdir(parents=True, exist_ok=True)
    out = args.profile / f"{name.replace('/', '-')}.txt"
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy on PATH (pip install py-spy)")
    command = [
        spy,
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(seconds))),
        "--rate",
        "200",
        "--format",
        "raw",
        "--nonblocking",
        "-o",
        str(out),
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out


def _function(frame: str) -> str:
    """A py-spy frame without its line number: ``f (file.py:12)`` -> ``f (file.py)``."""
    return re.sub(r":\d+\)$", ")", frame)


def profile_read(spy: Any) -> dict[str, Any] | None:
    """The samples' share in timer frames, the functions most samples end in (self time) and
    the functions most samples pass through (inclusive time)."""
    if spy is None:
        return None
    proc, out = spy
    proc.wait(timeout=120)
    total, timers = 0, 0
    leaves: dict[str, int] = {}
    through: dict[str, int] = {}
    for line in out.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        total += n
        if any(frame in stack for frame in TIMER_FRAMES):
            timers += n
        frames = stack.split(";")
        leaves[frames[-1]] = leaves.get(frames[-1], 0) + n
        for function in {_function(frame) for frame in frames}:
            through[function] = through.get(function, 0) + n

    def top(counts: dict[str, int], most: int) -> list[tuple[str, float]]:
        ordered = sorted(counts.items(), key=lambda item: -item[1])[:most]
        return [(frame, n / total) for frame, n in ordered]

    return {"samples": total, "timer_share": timers / total if total else 0.0,
            "top": top(leaves, 12), "inclusive": top(through, 25)}  # fmt: skip


def run_one(contender: str, clients: Clients, args: argparse.Namespace) -> dict[str, Any]:
    """One contender through the three phases; its figures and its failed checks."""
    server, port = start_server(contender, args)
    per = args.connections // len(clients.procs)
    try:
        rss_before = _rss_mib(server.pid)
        clients.same(do="connect", port=port, count=per, keepalive=args.keepalive)
        connected = per * len(clients.procs)
        s_connect = stats(port, reset=True)  # while connecting: no idle timeout may fire
        # idle
        idle = clients.same(do="idle", seconds=args.idle_seconds)
        s_idle = stats(port, reset=True)
        # chatty (profiled from outside by py-spy with --profile: it slows nothing it samples)
        spy = profile_start(server.pid, contender, args.chatty_seconds, args)
        chat = clients.same(do="chatty", seconds=args.chatty_seconds)
        profile = profile_read(spy)
        s_chat = stats(port, reset=True)
        # mass expiry (profiled from just before the first idle timeout is due, for 4 s: the
        # closes, and the live messages beside them)
        closing_spy: list[Any] = []
        starter = threading.Timer(args.idle_timeout - 0.5, lambda: closing_spy.append(
            profile_start(server.pid, f"{contender}-closing", 4, args)))  # fmt: skip
        starter.start()
        wait = args.idle_timeout * 2 + 5
        try:
            exp = clients.same(do="expire", share=args.silent_share,
                               interval=args.live_interval, wait=wait)  # fmt: skip
        finally:
            starter.cancel()
            starter.join()
        closing_profile = profile_read(closing_spy[0] if closing_spy else None)
        s_exp = stats(port, reset=True)
    finally:
        stop_server(server)
        clients.same(do="disconnect")
    chat_s = max(c["seconds"] for c in chat)
    chat_lat = summary([x for c in chat for x in c["latencies_ms"]])
    live_lat = summary([x for c in exp for x in c["latencies_ms"]])
    closing_lat = summary([x for c in exp for x in c.get("closing_latencies_ms", [])])
    silent = sum(c["silent"] for c in exp)
    bound_ms = s_exp["tick_ms"] + s_exp["lag"]["max"]
    figures = {
        "idle_cpu_s_per_min": s_idle["cpu_s"] / s_idle["wall_s"] * 60,
        "rss_kib_per_conn": (s_idle["rss_mib"] - rss_before) * 1024 / connected,
        "beat_late_p50_ms": s_idle["beats"]["p50"],
        "beat_late_p99_ms": s_idle["beats"]["p99"],
        "beats": s_idle["beats"]["n"],
        "early_beats": s_idle["early_beats"],
        "chatty_msgs_per_s": sum(c["messages"] for c in chat) / chat_s,
        "chatty_p99_ms": chat_lat["p99"],
        "chatty_reset_share": s_chat["reset_share"],
        "chatty_cpu_share": s_chat["cpu_s"] / s_chat["wall_s"],
        "expiry_all_closed_s": max(c["last_close_s"] for c in exp),
        "expiry_first_closed_s": min(c["first_close_s"] for c in exp),
        "expiry_late_p50_ms": s_exp["expiries"]["p50"],
        "expiry_late_max_ms": s_exp["expiries"]["max"],
        "expiry_bound_ms": bound_ms,
        "expiry_over_bound": float(s_exp["expiries"]["max"] > bound_ms),
        "early_expiries": s_exp["early_expiries"],
        "expiry_lag_max_ms": s_exp["lag"]["max"],
        "live_p99_ms": live_lat["p99"],
        "live_msgs": live_lat["n"],
        "live_closing_p99_ms": closing_lat["p99"],
        "live_closing_msgs": closing_lat["n"],
        "closing_server_lag_max_ms": s_exp["closing_lag"]["max"],
        "closing_client_lag_max_ms": max(
            (c["closing_lag"]["max"] for c in exp if c["closing_lag"]["n"]), default=float("nan")
        ),
    }
    loop_mode = contender.startswith("loop-mode")
    problems = []
    lost_idle = sum(c["lost"] for c in chat)  # a count since the connect, chatty's the last
    if lost_idle:
        problems.append(f"{lost_idle} connections lost in the idle or chatty phase")
    if s_connect["expiries"]["n"] or s_idle["expiries"]["n"] or s_chat["expiries"]["n"]:
        problems.append("an idle timeout fired before the mass expiry")
    closed = sum(c["silent_closed"] for c in exp)
    if closed != silent or s_exp["expiries"]["n"] != silent:
        problems.append(f"{closed} of {silent} silent connections closed "
                        f"({s_exp['expiries']['n']} idle timeouts fired)")  # fmt: skip
    live_lost = sum(c["live_lost"] for c in exp)
    if live_lost:
        problems.append(f"{live_lost} live connections closed in the mass expiry")
    if loop_mode and (s_idle["early_beats"] or s_exp["early_expiries"]):
        problems.append(f"early on loop mode: {s_idle['early_beats']} heartbeats, "
                        f"{s_exp['early_expiries']} idle timeouts")  # fmt: skip
    if s_exp["loop"].startswith("Wheel") != loop_mode:
        problems.append(f"the server ran {s_exp['loop']}, not {contender}")
    return {"figures": figures, "problems": problems, "closed_why": idle[-1]["reasons"],
            "profile": profile, "closing_profile": closing_profile,
            "server": {"connect": s_connect, "idle": s_idle, "chatty": s_chat,
                       "expiry": s_exp}}  # fmt: skip


# Lower is better for these; higher for the rest (messages/s).
HIGHER_BETTER = {"chatty_msgs_per_s", "beats", "live_msgs"}
SHOWN = (
    ("idle", "idle_cpu_s_per_min", "CPU s/min", 2), ("idle", "rss_kib_per_conn", "KiB/conn", 1),
    ("idle", "beat_late_p50_ms", "beat late p50 ms", 3),
    ("idle", "beat_late_p99_ms", "beat late p99 ms", 3), ("idle", "early_beats", "early", 0),
    ("chatty", "chatty_msgs_per_s", "msgs/s", 0), ("chatty", "chatty_p99_ms", "p99 ms", 1),
    ("chatty", "chatty_reset_share", "resets' time share", 3),
    ("expiry", "expiry_all_closed_s", "all closed s", 3),
    ("expiry", "expiry_late_max_ms", "close late max ms", 2),
    ("expiry", "expiry_bound_ms", "bound ms", 2), ("expiry", "early_expiries", "early", 0),
    ("expiry", "live_p99_ms", "live p99 ms", 1),
    ("expiry", "live_closing_p99_ms", "live p99 while closing ms", 1),
    ("expiry", "closing_server_lag_max_ms", "server loop lag max while closing ms", 1),
    ("expiry", "closing_client_lag_max_ms", "client loop lag max while closing ms", 1),
)  # fmt: skip


def spread(metric: str, values: list[float]) -> tuple[float, float, float]:
    """(median, worst, best) for the metric's own sense."""
    ordered = sorted(values, reverse=metric in HIGHER_BETTER)  # best first
    return statistics.median(values), ordered[-1], ordered[0]


def table(runs: dict[str, list[dict[str, float]]]) -> str:
    lines = []
    for phase in ("idle", "chatty", "expiry"):
        lines.append(f"{phase}: median (worst-best) over {max(map(len, runs.values()))} rounds")
        for _, metric, label, digits in (row for row in SHOWN if row[0] == phase):
            cells = []
            for name, figures in runs.items():
                values = [f[metric] for f in figures]
                med, worst, best = spread(metric, values)
                cells.append(f"{name} {med:.{digits}f} ({worst:.{digits}f}-{best:.{digits}f})")
            lines.append(f"  {label:>18}: " + "; ".join(cells))
    return "\n".join(lines)


def markdown(document: dict[str, Any]) -> str:
    """The performance page's table of a run's JSON: a row per figure, a column per
    contender, each cell the median with worst and best (``--markdown JSON``)."""
    runs = {name: [r["figures"] for r in rs] for name, rs in document["runs"].items()}
    names = list(runs)
    lines = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for phase, metric, label, digits in SHOWN:
        cells = []
        for name in names:
            med, worst, best = spread(metric, [f[metric] for f in runs[name]])
            cells.append(f"{med:,.{digits}f} ({worst:,.{digits}f} to {best:,.{digits}f})")
        lines.append(f"| {phase}: {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def contenders(requested: str | None, quick: bool) -> list[str]:
    import aiowheel.loops

    bases = list(aiowheel.loops.installed())
    every = [f"{mode}{base}" for base in bases for mode in ("", "loop-mode/")]
    if requested:
        chosen = [c.strip() for c in requested.split(",") if c.strip()]
        # loop-mode@K/base: loop mode with max_batch=K (none: no bound), to compare settings
        unknown = [c for c in chosen if re.sub(r"^loop-mode@(\d+|none)/", "loop-mode/", c)
                   not in every]  # fmt: skip
        if unknown:
            raise SystemExit(f"unknown or not installed: {', '.join(unknown)}; "
                             f"here: {', '.join(every)}")  # fmt: skip
        return chosen
    return ["asyncio", "loop-mode/asyncio"] if quick else every


def main(argv: list[str]) -> int:
    summary_line = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.hub", description=summary_line)
    parser.add_argument("--quick", action="store_true", help="smoke test: 100 connections, "
                        "asyncio and loop mode over it, one round of ~1 s a phase")  # fmt: skip
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--contenders", help="comma-separated (default: every base installed, "
                        "stock and loop mode; loop-mode@K/BASE: loop mode with max_batch=K, "
                        "@none for no bound)")  # fmt: skip
    parser.add_argument("--heartbeat", type=float, default=2.0, help="s of silence per PING")
    parser.add_argument("--idle-timeout", type=float, default=10.0)
    parser.add_argument("--keepalive", type=float, default=3.0, help="s between messages")
    parser.add_argument("--idle-seconds", type=float, default=12.0)
    parser.add_argument("--chatty-seconds", type=float, default=5.0)
    parser.add_argument("--silent-share", type=float, default=0.5)
    parser.add_argument("--live-interval", type=float, default=1.0,
                        help="mass expiry: s between a live connection's messages")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--profile", type=Path, help="py-spy the server into this directory: "
                        "the chatty phase, and the mass expiry's closes (timer frames' share "
                        "of the samples, self and inclusive tops)")  # fmt: skip
    parser.add_argument("--plot", type=Path, help="draw the figures here (matplotlib)")
    parser.add_argument("--markdown", type=Path, help="only print a run's JSON as a table")
    parser.add_argument("--fds", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--source", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.markdown:
        document = json.loads(args.markdown.read_text())
        print(markdown(document))
        if args.plot:  # drawn again from a run's JSON
            drawn = {name: [r["figures"] for r in rs] for name, rs in document["runs"].items()}
            drawn_args = argparse.Namespace(**document["args"], python=document["python"])
            plot(drawn, drawn_args, args.plot)
        return 0
    if args.serve:
        serve(args)
        return 0
    if args.client:
        client(args)
        return 0
    if args.quick:
        args.connections, args.rounds = 100, 1
        args.heartbeat, args.idle_timeout, args.keepalive = 0.08, 0.5, 0.2
        args.idle_seconds, args.chatty_seconds, args.live_interval = 0.3, 0.2, 0.05
    if not args.heartbeat < args.keepalive < args.idle_timeout:
        parser.error("--heartbeat < --keepalive < --idle-timeout, so beats fire and idle "
                     "timeouts do not, until the mass expiry")  # fmt: skip
    names = contenders(args.contenders, args.quick)
    args.fds = args.connections // CLIENTS + 4096
    fds = raise_fd_limit(args.fds)
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    # The server holds every connection in one process: refuse a count it cannot open at
    # once, rather than failing after the first phase's minute of connecting.
    server_fds = raise_fd_limit(args.connections + 4096)
    if server_fds < args.connections + 64:
        parser.error(f"{args.connections:,} connections need as many descriptors in the "
                     f"server process; this machine allows {server_fds:,} per process (hard "
                     f"limit {hard:,}, which this user may not raise)")  # fmt: skip
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
          f"{os.sysconf('SC_PHYS_PAGES') * os.sysconf('SC_PAGE_SIZE') / 2**30:.0f} GiB, "
          f"open files {fds} (hard {hard}); {args.connections:,} connections over {CLIENTS} "
          f"client processes; contenders {', '.join(names)}", flush=True)  # fmt: skip
    clients = Clients(CLIENTS, args.fds)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    failures = []
    try:
        for round_no in range(args.rounds):
            order = names if round_no % 2 == 0 else names[::-1]
            for name in order:
                result = run_one(name, clients, args)
                runs[name].append(result["figures"])
                raw[name].append(result)
                f = result["figures"]
                print(f"round {round_no + 1}/{args.rounds} {name:<18} "
                      f"idle {f['idle_cpu_s_per_min']:.2f} CPU s/min, beat p99 "
                      f"{f['beat_late_p99_ms']:.2f} ms, early {f['early_beats']}; chatty "
                      f"{f['chatty_msgs_per_s']:,.0f}/s p99 {f['chatty_p99_ms']:.1f} ms; expiry "
                      f"all closed {f['expiry_all_closed_s']:.3f} s, live p99 "
                      f"{f['live_p99_ms']:.1f} ms, while closing {f['live_closing_p99_ms']:.1f} ms"
                      + (f"; FAILED: {'; '.join(result['problems'])}"
                                                      if result["problems"] else ""),
                      flush=True)  # fmt: skip
                for phase, key in (("chatty", "profile"), ("closing", "closing_profile")):
                    spied = result.get(key)
                    if not spied:
                        continue
                    print(f"  py-spy, {phase}: {spied['timer_share']:.1%} of {spied['samples']} "
                          "samples in timer frames; most samples end in: " + "; ".join(
                              f"{leaf} {share:.1%}" for leaf, share in spied["top"][:6])
                          + "; most pass through: " + "; ".join(
                              f"{frame} {share:.1%}" for frame, share in spied["inclusive"][:12]),
                          flush=True)  # fmt: skip
                failures += [f"{name} round {round_no + 1}: {p}" for p in result["problems"]]
    finally:
        clients.close()
    print(table(runs))
    if args.json:
        args.json.write_text(json.dumps({
            "python": sys.version.split()[0], "cpus": os.cpu_count(), "open_files": fds,
            "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "medians": {n: {m: spread(m, [f[m] for f in fs])[0] for m in fs[0]}
                        for n, fs in runs.items()},
            "runs": raw, "failures": failures,
        }, indent=1, default=str))  # fmt: skip
    if args.plot:
        plot(runs, args, args.plot)
    print("OK" if not failures else "FAILED:\n  " + "\n  ".join(failures))
    return 0 if not failures else 1


def _label(name: str) -> str:
    """A contender's name on two or three lines: ``loop-mode@64/uvloop`` is "loop mode",
    "max_batch=64", "uvloop"."""
    mode, _, base = name.rpartition("/")
    if not mode:
        return base
    mode, _, batch = mode.partition("@")
    return "\n".join(["loop mode", *([f"max_batch={batch}"] if batch else []), base])


def plot(runs: dict[str, list[dict[str, float]]], args: argparse.Namespace, path: Path) -> bool:
    """One bar a contender for each phase's headline figure, worst-best as an error bar."""
    from .plots import _pyplot

    plt = _pyplot()
    if plt is None:
        return False
    metrics = (("beat_late_p99_ms", "idle: heartbeat late p99 (ms)"),
               ("idle_cpu_s_per_min", "idle: server CPU s / min"),
               ("chatty_msgs_per_s", "chatty: messages / s"),
               ("live_p99_ms", "mass expiry: live latency p99 (ms)"),
               ("live_closing_p99_ms", "... while the closes ran (ms)"))  # fmt: skip
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4.5))
    names = list(runs)
    colours = ["#888888" if "/" not in n else "#2a7ab9" for n in names]
    for ax, (metric, label) in zip(axes, metrics, strict=True):
        meds, lows, highs = [], [], []
        for name in names:
            values = [f[metric] for f in runs[name]]
            meds.append(statistics.median(values))
            lows.append(meds[-1] - min(values))
            highs.append(max(values) - meds[-1])
        ax.bar(range(len(names)), meds, yerr=[lows, highs], color=colours, capsize=3)
        ax.set_xticks(range(len(names)), [_label(n) for n in names], fontsize=8)
        ax.set_title(label, fontsize=10)
    python = getattr(args, "python", None) or sys.version.split()[0]  # a run's, when drawn again
    fig.suptitle(
        f"websocket hub, {args.connections:,} connections (Python "
        f"{python}, 2 cores): median of {args.rounds}, bars worst-best"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
