"""Peers on loopback that exchange heartbeats and notice when one of them dies.

Each peer listens on 127.0.0.1, connects to every other peer, and sends ``HB <name>`` every
``interval`` seconds (``timer.interval``: fixed rate, no drift). For each remote peer it keeps
a ``timer.watchdog`` that every heartbeat pushes back (O(1)); when a peer falls silent for
``timeout`` seconds the watchdog fires and the peer is reported dead. Killing a peer is
therefore noticed within ``timeout + interval`` (its last heartbeat may have left up to one
interval before it died).

Run ``python examples/heartbeat.py --peers 5``: the peers start, one is killed after two
seconds, and each survivor prints when it noticed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from collections.abc import Callable

import aiowheel


class Peer:
    """One member of the mesh."""

    def __init__(
        self,
        name: str,
        interval: float,
        timeout: float,
        on_dead: Callable[[str, str], None],
    ) -> None:
        self.name = name
        self.interval = interval
        self.timeout = timeout
        self.on_dead = on_dead
        self.port = 0
        self.dead: set[str] = set()
        self._server: asyncio.Server | None = None
        self._watchdogs: dict[str, aiowheel.Watchdog] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        """Listen on an ephemeral loopback port."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def connect(self, peers: list[Peer]) -> None:
        """Start sending heartbeats to every other peer, and watching for theirs."""
        timer = aiowheel.get_timer()
        for peer in peers:
            if peer is self:
                continue
            self._watchdogs[peer.name] = timer.watchdog(self.timeout, self._declare_dead, peer.name)
            self._spawn(self._send_to(peer))

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _declare_dead(self, name: str) -> None:
        self.dead.add(name)
        self.on_dead(self.name, name)

    async def _send_to(self, peer: Peer) -> None:
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", peer.port)
            self._writers.append(writer)
            timer = aiowheel.get_timer()
            async for _ in timer.interval(self.interval, start=timer.time()):
                if writer.is_closing():
                    # The peer is gone. (asyncio's transports drop a write after the close,
                    # uvloop's raise RuntimeError: stop here either way.)
                    return
                writer.write(f"HB {self.name}\n".encode())
                await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.append(writer)
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while line := await reader.readline():
                _, name = line.decode().split()
                dog = self._watchdogs.get(name)
                if dog is not None:
                    dog.feed()

    async def stop(self) -> None:
        """Die: stop sending, stop listening, drop every connection."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for dog in self._watchdogs.values():
            dog.cancel()
        for writer in self._writers:
            writer.close()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


async def run_mesh(
    peers: int = 5, interval: float = 0.2, dead_after: float = 0.6, kill_after: float = 1.0
) -> dict[str, float]:
    """Start a mesh, kill the first peer, and return when each survivor noticed (seconds
    after the kill)."""
    loop = asyncio.get_running_loop()
    killed_at: list[float] = []
    noticed: dict[str, float] = {}

    def on_dead(observer: str, victim: str) -> None:
        if killed_at and victim == "peer-0":
            noticed[observer] = loop.time() - killed_at[0]
            print(f"{observer} noticed {victim} dead after {noticed[observer]:.3f} s")
        else:
            print(f"{observer} wrongly thinks {victim} is dead")

    mesh = [Peer(f"peer-{i}", interval, dead_after, on_dead) for i in range(peers)]
    for peer in mesh:
        await peer.start()
    for peer in mesh:
        peer.connect(mesh)
    await asyncio.sleep(kill_after)
    print(f"killing peer-0 (interval {interval} s, dead after {dead_after} s of silence)")
    await mesh[0].stop()
    killed_at.append(loop.time())
    await asyncio.sleep(dead_after + 2 * interval)
    for peer in mesh[1:]:
        await peer.stop()
    return noticed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", type=int, default=5)
    parser.add_argument("--interval", type=float, default=0.5)
    parser.add_argument("--timeout", type=float, default=1.5)
    args = parser.parse_args(argv)
    if args.peers < 2:
        parser.error("--peers must be at least 2")
    noticed = asyncio.run(run_mesh(args.peers, args.interval, args.timeout, kill_after=2.0))
    bound = args.timeout + args.interval
    late = {k: v for k, v in noticed.items() if v > bound}
    print(f"{len(noticed)} of {args.peers - 1} survivors noticed, all within {bound} s"
          if len(noticed) == args.peers - 1 and not late else "detection failed")  # fmt: skip
    return 0 if len(noticed) == args.peers - 1 and not late else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
