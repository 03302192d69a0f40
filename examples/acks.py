"""Wait for 2 of 3 acks or time out: a replicated write, on a :class:`aiowheel.Purgatory`.

A leader sends a write to three replicas and answers the client once two have acknowledged it,
or fails it after ``timeout`` seconds: Kafka's ``acks`` with ``min.insync.replicas=2``, the
operation its purgatory was built for. Each ack signals the write's key; the wait's check
counts the acks. Shown twice: awaited (``purgatory.wait``) and in the callback form
(:class:`aiowheel.DelayedOperation`, for code that does not await).

    python examples/acks.py
"""

from __future__ import annotations

import asyncio
import random

import aiowheel

REPLICAS = ("replica-1", "replica-2", "replica-3")
NEEDED = 2


async def replicate(
    purgatory: aiowheel.Purgatory, write: str, delays: dict[str, float], within: float
) -> list[str]:
    """Send ``write`` to every replica (each acks after its delay); return the first
    ``NEEDED`` that acked, or raise TimeoutError after ``within`` seconds."""
    acks: list[str] = []
    loop = asyncio.get_running_loop()

    def ack(replica: str) -> None:
        acks.append(replica)
        purgatory.signal(write)

    handles = [loop.call_later(delays[replica], ack, replica) for replica in REPLICAS]
    try:
        return await purgatory.wait([write], lambda: acks[:NEEDED] if len(acks) >= NEEDED else None,
                                    within)  # fmt: skip
    finally:
        for handle in handles:
            handle.cancel()  # the slow replica's ack is no longer awaited


class Write(aiowheel.DelayedOperation):
    """The callback form: completes once ``NEEDED`` replicas acked, reports either way."""

    def __init__(self, name: str, done: asyncio.Event) -> None:
        super().__init__()
        self.name, self.acks, self.done, self.result = name, set[str](), done, ""

    def try_complete(self) -> bool:
        return len(self.acks) >= NEEDED

    def on_complete(self) -> None:
        self.result = f"{self.name}: committed by {sorted(self.acks)}"
        self.done.set()

    def on_expiration(self) -> None:
        self.result = f"{self.name}: timed out with {len(self.acks)} of {NEEDED} acks"
        self.done.set()


async def main() -> None:
    purgatory = aiowheel.Purgatory()
    fast = {"replica-1": 0.01, "replica-2": 0.03, "replica-3": 0.5}
    print("write-1 acked by", await replicate(purgatory, "write-1", fast, within=0.2))
    slow = {"replica-1": 0.01, "replica-2": 0.5, "replica-3": 0.6}
    try:
        await replicate(purgatory, "write-2", slow, within=0.1)
    except TimeoutError:
        print("write-2 timed out: only one replica acked within 0.1 s")

    # The callback form: no task waits; acks arrive as callbacks.
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    write = Write("write-3", done)
    purgatory.watch(write, ["write-3"], 0.2)
    for replica in random.sample(REPLICAS, 2):

        def ack(replica: str = replica) -> None:
            write.acks.add(replica)
            purgatory.signal("write-3")

        loop.call_later(0.02, ack)
    await done.wait()
    print(write.result)
    print(purgatory.stats())


if __name__ == "__main__":
    aiowheel.run(main())
