"""What one event loop runs for a :class:`aiowheel.redis.RedisSignals`: its link.

A RedisSignals serves one purgatory, which serves one loop at a time, but its signals may come
from several loops (a loop that only signals starts only a publisher). Each loop has a link:
the keys signalled in its current iteration (the batch), the messages waiting to be published
(the outbox, bounded by ``max_pending`` keys: past it the oldest message is dropped), the
events its publisher and ``flush`` wait on, its publisher and subscriber tasks, and whether
the subscriber is connected. A room of its own so that this per-loop state, and the bound on
its queue, read apart from the connection logic that drives them (:mod:`aiowheel.redis`,
which imports it) and from the messages' format (:mod:`aiowheel._purgatory._wire`). Pure Python in
both builds, like :mod:`aiowheel.redis`; it needs no redis-py and imports nothing of aiowheel's.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import Any

__all__: list[str] = []


class Link:
    """What one loop runs for a RedisSignals: its batch, its publish queue, its tasks."""

    __slots__ = (
        "batch",
        "connected",
        "drained",
        "failing",
        "flushing",
        "loop",
        "lost",
        "number",
        "outbox",
        "pending",
        "publisher",
        "seq",
        "subscribed",
        "subscriber",
        "wake",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, number: int) -> None:
        self.loop = loop
        self.number = number  # this loop's part of the sender id: each loop publishes in order
        self.seq = 0  # the number of this loop's next message (its id, with the sender's)
        self.batch: list[list[Any]] = []
        self.flushing = False
        self.outbox: collections.deque[tuple[bytes, int]] = collections.deque()
        self.pending = 0
        self.wake = asyncio.Event()
        self.drained = asyncio.Event()
        self.drained.set()
        self.publisher: asyncio.Task[None] | None = None
        self.subscriber: asyncio.Task[None] | None = None
        self.connected = False
        self.subscribed = asyncio.Event()  # set while connected
        self.failing = False  # the publisher cannot publish now
        self.lost = False  # the subscriber lost its connection and has not subscribed again

    def queue(self, messages: list[tuple[bytes, int]], max_pending: int) -> int:
        """Queue ``messages`` (each with its count of keys) to be published, then drop the
        oldest while more than ``max_pending`` keys wait (never the last message): how many
        keys were dropped."""
        dropped = 0
        for message, count in messages:
            self.outbox.append((message, count))
            self.pending += count
        while self.pending > max_pending and len(self.outbox) > 1:
            _, count = self.outbox.popleft()
            self.pending -= count
            dropped += count
        return dropped

    def tasks(self) -> list[asyncio.Task[None]]:
        """The publisher and the subscriber, those that were started."""
        return [task for task in (self.publisher, self.subscriber) if task is not None]


def cancel_elsewhere(link: Link) -> None:
    """Cancel ``link``'s tasks in their own loop (another thread's, or one not running)."""
    if link.loop.is_closed():
        return
    for task in link.tasks():
        with contextlib.suppress(RuntimeError):
            link.loop.call_soon_threadsafe(task.cancel)
