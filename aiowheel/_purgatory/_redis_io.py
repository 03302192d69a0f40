"""The commands of :class:`aiowheel.redis.RedisSignals` on one connection: publishing a message,
reading the stream from a cursor, listening to a pub/sub channel; and what a process remembers
of what it read (:class:`Reading`: the stream's cursor, each sender's last message applied).

A room of its own so that the transports' Redis commands read apart from the connection logic
that drives them (connect, count, log, back off, re-check: :mod:`aiowheel._purgatory._redis`,
which imports it) and from the messages' format (:mod:`aiowheel._purgatory._wire`). It takes
redis-py's clients as they are handed (it imports nothing, redis-py included) and reports what
it reads through the callbacks it is given. Pure Python in both builds.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, Final

__all__ = ["Reading", "block_seconds", "cancel_not_lost", "listen", "read", "send"]

_READ_COUNT: Final = 256  # stream entries read at most per XREAD
_SENDERS: Final = 4096  # senders whose last message number is remembered (the oldest forgotten)


class Reading:
    """What a process has read: the id of the last stream entry (None until its first
    connect, which starts at the stream's end), and each sender's last message number
    applied, so that a message published twice is applied once."""

    __slots__ = ("cursor", "seen")

    def __init__(self) -> None:
        self.cursor: str | None = None
        self.seen: OrderedDict[str, int] = OrderedDict()

    def first(self, sender: str, seq: int) -> bool:
        """Whether message ``seq`` of ``sender`` is new here (and note it as applied). A
        sender publishes in order, so a number not past its last one was applied already."""
        seen = self.seen
        last = seen.get(sender)
        if last is not None and seq <= last:
            return False
        seen[sender] = seq
        seen.move_to_end(sender)
        if len(seen) > _SENDERS:
            seen.popitem(last=False)
        return True


async def send(client: Any, transport: str, key: str, message: bytes, retention: int) -> None:
    """Publish one message: an entry of the stream ``key`` (trimmed to about ``retention``
    entries, ``MAXLEN ~``: a node at a time) or a message on the channel ``key``."""
    if transport == "stream":
        await client.xadd(key, {"m": message}, maxlen=retention, approximate=True)
    else:
        await client.publish(key, message)


async def read(
    client: Any,
    key: str,
    reading: Reading,
    idle: float,
    block: float,
    receive: Callable[[object], None],
    connected: Callable[[], None],
) -> None:
    """Read the stream ``key`` from ``reading.cursor`` until the connection fails, handing each
    entry's payload to ``receive``. A process's first connect starts at the stream's end
    (history is not replayed); every read after starts where the last one stopped, so what
    was added meanwhile is read now. The first read of a connection does not block: its
    answer proves the connection (``connected()``, after what it brought is received). Later
    reads block up to ``block`` seconds; an answer that does not come within twice ``idle`` (a
    server paused, a partition) fails the read (TimeoutError): the caller reconnects."""
    if reading.cursor is None:
        last = await client.xrevrange(key, count=1)
        reading.cursor = _text(last[0][0]) if last else "0-0"
    blocking: int | None = None
    while True:
        async with asyncio.timeout(2 * idle):
            reply = await client.xread({key: reading.cursor}, count=_READ_COUNT, block=blocking)
        cancel_not_lost()
        for entry_id, entry in _entries(reply):
            reading.cursor = _text(entry_id)
            receive(entry.get(b"m", entry.get("m")) if isinstance(entry, dict) else None)
        if blocking is None:
            connected()
            blocking = max(1, int(block * 1000))


async def listen(
    pubsub: Any, idle: float, receive: Callable[[object], None], connected: Callable[[], None]
) -> None:
    """Read the channel until the connection fails: on the subscription's confirmation (each
    connect) ``connected()``; a message's payload to ``receive``. A quiet connection is PINGed,
    and given up (ConnectionError) if a second quiet spell brings no answer."""
    pinged = False
    while True:
        message = await pubsub.get_message(timeout=idle)
        if message is None:  # quiet: is the server still there?
            if pinged:
                raise ConnectionError(f"no answer to PING in {idle:g} s")
            pinged = True
            await pubsub.ping()
            continue
        pinged = False
        kind = message.get("type")
        if kind == "message":
            receive(message.get("data"))
        elif kind == "subscribe":
            connected()


def block_seconds(client: Any, given: bool, idle: float) -> float:
    """How long a stream read blocks: ``idle``, within half a given client's socket timeout (a
    read that outlasts it would fail as if the server were gone)."""
    timeout = client.connection_pool.connection_kwargs.get("socket_timeout")
    if given and isinstance(timeout, int | float) and timeout > 0:
        return min(idle, timeout / 2)
    return idle


def cancel_not_lost() -> None:
    """Raise CancelledError if this task was cancelled and the cancellation got lost on its
    way: a client given with a socket_timeout sends under asyncio.wait_for, which on 3.11 can
    swallow a cancellation landing as the send completes; the command then goes on (a read
    blocks up to half that timeout) and this check, after it, ends the task as asked."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


def _text(value: object) -> str:
    """A stream id as redis-py gives it (bytes, or str with decode_responses) as a str."""
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def _entries(reply: object) -> Iterable[tuple[object, object]]:
    """The (id, fields) entries of an XREAD reply of one stream: a list of [key, entries]
    (RESP2) or a dict of key: entries (RESP3); nothing on a timeout."""
    if not reply:
        return ()
    streams: Any = reply.values() if isinstance(reply, dict) else [s[1] for s in reply]  # type: ignore[attr-defined]
    return [(entry[0], entry[1]) for entries in streams for entry in entries]
