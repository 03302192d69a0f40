"""A purgatory's signals through Redis, :mod:`aiowheel.redis` (whose docstring is the user's
guide): ``RedisSignals``, the connection logic over :mod:`._redis_link`'s per-loop link and
:mod:`._wire`'s messages.

Two transports. ``"stream"`` (the default): each message is an entry of a Redis stream
(``XADD ... MAXLEN ~ retention``), and the process's reader reads it with ``XREAD BLOCK`` from
the id of the last entry it read (its cursor, one per RedisSignals: the state ``on_data``
writes is the process's, whatever loop runs the reader), so a reconnect, a blocked loop or a
publish that lands after a restart loses nothing the stream still holds; each message carries
``(sender, seq)``, and a reader applies a sender's message only if its seq is past the last
one it applied from that sender, so a message published twice (its first answer lost in an
outage) runs ``on_data`` once. ``"pubsub"``: the same messages on a pub/sub channel, at most
once (kept for those whose checks read their state elsewhere and want nothing kept in Redis).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import logging
import os
import random
import re
import uuid
from collections.abc import Callable, Hashable
from dataclasses import dataclass, fields
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from ._purgatory import Purgatory
from ._redis_io import Reading, block_seconds, cancel_not_lost, listen, read, send
from ._redis_link import Link, cancel_elsewhere
from ._signals import Signals
from ._wire import decode_message, encode_messages, wire_item

try:
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff
except ImportError as exc:  # pragma: no cover - the extra is installed in the tests
    raise ImportError(
        "aiowheel.redis needs redis-py (redis.asyncio): pip install aiowheel[redis]"
    ) from exc

__all__ = ["RedisSignals", "RedisSignalsStats"]

_log: Final = logging.getLogger("aiowheel.redis")

_BACKOFF_MIN: Final = 0.05
_BACKOFF_MAX: Final = 1.0  # so that a publish or a reader is back within a second of Redis
_CONNECT_TIMEOUT: Final = 5.0
_IDLE: Final = 30.0  # a subscriber that hears nothing for this long PINGs, and gives up after two
_TRANSPORTS: Final = ("stream", "pubsub")


@dataclass(frozen=True, slots=True)
class RedisSignalsStats:
    """A snapshot of a :class:`RedisSignals`' counters (see :meth:`RedisSignals.stats`)."""

    sent: int
    """Keys signalled here and queued for publishing."""
    published: int
    """Messages published (each one loop iteration's keys, up to 512)."""
    received: int
    """Messages from other processes received and applied."""
    duplicates: int
    """Messages received again (published twice after a lost answer), not applied again."""
    echoes: int
    """This process's own messages heard back, ignored (it re-checked locally)."""
    foreign: int
    """Messages on the channel not of this format or version (ignored)."""
    dropped: int
    """Keys dropped unpublished because ``max_pending`` were queued already."""
    publish_errors: int
    """Failed publish attempts (each retried after a backoff)."""
    connect_errors: int
    """Failures of the subscriber's (the stream reader's) connection (each followed by a
    reconnect)."""
    subscribes: int
    """Connections of the subscriber that worked (the first, then one per reconnect)."""
    rechecks: int
    """Keys re-checked because a message named them or because the subscriber (re)connected."""
    data_errors: int
    """Received data whose ``on_data`` raised (reported to the loop's exception handler)."""
    connected: bool
    """Whether a subscriber is subscribed now."""


# The counters kept as they happen: every field of RedisSignalsStats but ``connected``.
_COUNTERS: Final = tuple(field.name for field in fields(RedisSignalsStats))[:-1]


class RedisSignals(Signals):
    """Signals of a :class:`aiowheel.Purgatory` that reach every process reading one Redis
    stream (or pub/sub channel) named ``channel`` (give it as ``Purgatory(signals=...)``; one
    purgatory each).

    Give either ``url``, a redis-py URL (``redis://host:port/db``, ``rediss://`` for TLS,
    ``unix:///path``), or ``client``, a ``redis.asyncio.Redis`` you configured (TLS, an ACL
    user, Sentinel's ``master_for``), used as it is and never closed here; nothing connects
    until a loop uses the purgatory (a malformed URL raises ValueError here).
    ``on_data(key, data)``, if given, applies the data of :meth:`send` in every process, this
    one included, before that process re-checks ``key``. At most ``max_pending`` keys per loop
    wait to be published (the oldest are dropped past it, counted). ``transport`` is
    ``"stream"`` (at-least-once delivery, each message applied once; the stream keeps about
    ``retention`` messages, ``XADD MAXLEN ~``) or ``"pubsub"`` (at most once). The design and
    its reasons: :mod:`aiowheel.redis`.

    >>> signals = RedisSignals("redis://localhost:6379", channel="orders")
    >>> purgatory = aiowheel.Purgatory(signals=signals)
    >>> purgatory.signal("order-17")      # here at once, in every other worker soon
    0
    """

    _idle = _IDLE  # seconds (the tests shorten it)

    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        channel: str = "aiowheel",
        on_data: Callable[[Any, str | bytes], object] | None = None,
        max_pending: int = 10_000,
        transport: str = "stream",
        retention: int = 100_000,
    ) -> None:
        _check_connection(url, client)
        if not isinstance(channel, str) or not channel:
            raise ValueError(f"RedisSignals(): channel must be a non-empty str, got {channel!r}")
        if on_data is not None and not callable(on_data):
            raise TypeError(
                f"RedisSignals(): on_data must be callable or None, got {type(on_data).__name__}"
            )
        if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
            raise ValueError(
                f"RedisSignals(): max_pending must be an int >= 1, got {max_pending!r}"
            )
        if transport not in _TRANSPORTS:
            raise ValueError(
                f"RedisSignals(): transport must be 'stream' or 'pubsub', got {transport!r}"
            )
        if isinstance(retention, bool) or not isinstance(retention, int) or retention < 1:
            raise ValueError(
                "RedisSignals(): retention (messages the stream keeps) must be an int >= 1, "
                f"got {retention!r}"
            )
        self._url = url
        self._given = client
        self._transport = transport
        self._retention = retention
        self._reading = Reading()  # the process's: the state on_data writes is the process's
        self._numbers = 0  # links made (each loop's number in the sender id)
        self._channel = channel
        self._on_data = on_data
        self._max_pending = max_pending
        self._purgatory: Purgatory | None = None
        self._links: dict[asyncio.AbstractEventLoop, Link] = {}
        self._closed = False
        self._pid = -1
        self._id = ""
        self._counts = dict.fromkeys(_COUNTERS, 0)

    @property
    def channel(self) -> str:
        """The application's namespace on the server, which is the stream's key (or the
        pub/sub channel's name)."""
        return self._channel

    @property
    def transport(self) -> str:
        """``"stream"`` (at-least-once, each message applied once) or ``"pubsub"``."""
        return self._transport

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<RedisSignals {self._transport} channel={self._channel!r} {state}>"

    def stats(self) -> RedisSignalsStats:
        """Counters: keys sent, messages published and received, echoes and foreign messages
        ignored, keys dropped, publish and connection failures, re-checks."""
        connected = any(link.connected for link in self._links.values())
        return RedisSignalsStats(**self._counts, connected=connected)

    # -- sending ---------------------------------------------------------------------------

    def send(self, key: Hashable, data: str | bytes) -> int:
        """Signal ``key`` with ``data``: ``on_data(key, data)`` runs here at once, then the
        local waits of ``key`` are re-checked (their count is returned), and key and data go
        to every other process, which applies the data and re-checks there.

        ``data`` is a ``str`` or ``bytes`` (serialize anything else yourself). Bad input
        (a key that cannot go on the wire, data of another type, no purgatory yet) raises
        before anything happens.

        >>> signals.send("news", json.dumps({"text": "hello"}))
        1
        """
        if not isinstance(data, str | bytes):
            raise TypeError(
                f"RedisSignals.send(): data must be str or bytes, got {type(data).__name__}"
            )
        purgatory = self._purgatory
        if purgatory is None:
            raise RuntimeError("RedisSignals.send(): not given to a Purgatory(signals=...) yet")
        return self._signal(purgatory, key, data)

    async def start(self) -> None:
        """Listen in the running loop now, not at the purgatory's first wait there, and return
        once subscribed (while Redis is down, that waits for it: bound it with
        ``asyncio.timeout``). A server's worker calls it at start-up, so that the data of
        :meth:`send` reaches it before any request waits."""
        purgatory = self._purgatory
        if purgatory is None:
            raise RuntimeError("RedisSignals.start(): not given to a Purgatory(signals=...) yet")
        if self._closed:
            raise RuntimeError("RedisSignals.start(): closed")
        loop = asyncio.get_running_loop()
        if purgatory._loop is not loop:
            purgatory._bind("start", loop)  # attaches (or refuses: it serves another loop)
        else:
            self._attach(purgatory, loop)  # a subscriber that ended (aclose) is not restarted
        await self._link(loop).subscribed.wait()

    async def flush(self) -> None:
        """Wait until what this loop signalled has been published (while Redis is down, that
        waits for it: bound it with ``asyncio.timeout``)."""
        link = self._links.get(asyncio.get_running_loop())
        if link is None:
            return
        while link.batch or link.outbox:
            if link.batch:
                self._flush(link)
            await link.drained.wait()

    async def aclose(self) -> None:
        """Publish what this loop queued (for up to a second), then stop this loop's tasks and
        close their connections; other loops' tasks are cancelled in their loops. Final: later
        signals are local only."""
        if self._closed:
            return
        link = self._links.get(asyncio.get_running_loop())
        if link is not None:
            if link.batch:
                self._flush(link)
            deadline = link.loop.time() + 1.0
            # Until published, or a second, or a failed publish (Redis down: nothing to wait for).
            while link.outbox and not link.failing and link.loop.time() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
        self._closed = True
        running = asyncio.get_running_loop()
        links, self._links = self._links, {}
        for link in links.values():
            if link.loop is running:
                tasks = link.tasks()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            else:
                cancel_elsewhere(link)

    # -- the purgatory's seam (aiowheel._purgatory._signals)
    # ----------------------------------------------

    def _adopt(self, purgatory: Any) -> None:
        if self._purgatory is not None:
            raise ValueError(
                "Purgatory(): these RedisSignals serve another Purgatory already (make one "
                "RedisSignals per Purgatory)"
            )
        self._purgatory = purgatory

    def _attach(self, purgatory: Any, loop: asyncio.AbstractEventLoop) -> None:
        if self._closed:
            return
        for other in list(self._links.values()):
            if other.loop is loop:
                continue
            if other.loop.is_closed():
                del self._links[other.loop]
            elif other.subscriber is not None:  # the purgatory moved: listen in one loop only
                task, other.subscriber = other.subscriber, None
                with contextlib.suppress(RuntimeError):
                    other.loop.call_soon_threadsafe(task.cancel)
        link = self._link(loop)
        if link.subscriber is None or link.subscriber.done():
            # A context of its own: not the one of the request whose wait started it.
            link.subscriber = loop.create_task(
                self._subscribe(purgatory, link), context=contextvars.Context()
            )

    def _signal(self, purgatory: Any, key: Hashable, data: Any) -> int:
        item = wire_item(key, data)
        loop = asyncio._get_running_loop()
        if loop is None:
            raise RuntimeError(
                "Purgatory.signal(): with RedisSignals, signal in a running event loop (from "
                "another thread: loop.call_soon_threadsafe(purgatory.signal, key))"
            )
        if data is not None and self._on_data is not None:
            self._on_data(key, data)
        completed: int = purgatory._recheck(key)
        if not self._closed:
            link = self._link(loop)
            link.batch.append(item)
            self._counts["sent"] += 1
            if not link.flushing:
                link.flushing = True
                link.drained.clear()
                loop.call_soon(self._flush, link)
        return completed

    # -- publishing ----------------------------------------------------------------------------

    def _link(self, loop: asyncio.AbstractEventLoop) -> Link:
        link = self._links.get(loop)
        if link is None:
            for other in [other for other in self._links if other.is_closed()]:
                del self._links[other]
            self._numbers += 1
            link = self._links[loop] = Link(loop, self._numbers)
        return link

    def _sender(self) -> str:
        """This process's sender id (a forked worker makes its own)."""
        pid = os.getpid()
        if pid != self._pid:
            self._pid = pid
            self._id = uuid.uuid4().hex
        return self._id

    def _flush(self, link: Link) -> None:
        """The loop iteration's keys, as messages of up to 512 keys (aiowheel._purgatory._wire), to
        the publisher."""
        link.flushing = False
        items, link.batch = link.batch, []
        if not items or self._closed:
            return
        messages = encode_messages(f"{self._sender()}.{link.number}", link.seq, items)
        link.seq += len(messages)
        self._counts["dropped"] += link.queue(messages, self._max_pending)
        if link.publisher is None or link.publisher.done():
            link.publisher = link.loop.create_task(
                self._publish(link), context=contextvars.Context()
            )
        link.wake.set()

    def _client(self, **options: Any) -> aioredis.Redis:
        """A client of its own for a task (closed by it), or the one given (never closed)."""
        if self._given is not None:
            return self._given
        assert self._url is not None
        return aioredis.Redis.from_url(
            self._url,
            retry=Retry(NoBackoff(), 0),  # the reconnecting is ours: counted and backed off
            socket_connect_timeout=_CONNECT_TIMEOUT,
            # None, not redis-py's default (5 s): with a socket_timeout, redis-py sends under
            # asyncio.wait_for, whose 3.11 version can swallow a cancellation that lands as
            # the send completes (aclose and asyncio.run's end then hang); the tasks bound
            # their commands with asyncio.timeout instead.
            socket_timeout=None,
            socket_keepalive=True,
            **options,
        )

    async def _publish(self, link: Link) -> None:
        """The loop's publisher: its messages in order, each retried until it goes out."""
        client: aioredis.Redis | None = None
        delay = _BACKOFF_MIN
        failing = False
        transport, retention = self._transport, self._retention
        try:
            while True:
                if not link.outbox:
                    if not link.batch:
                        link.drained.set()
                    link.wake.clear()
                    await link.wake.wait()
                    continue
                message, count = link.outbox[0]
                try:
                    if client is None:
                        client = self._client()
                    # Bounded here, not by a socket_timeout (see _client).
                    async with asyncio.timeout(_CONNECT_TIMEOUT):
                        await send(client, transport, self._channel, message, retention)
                    cancel_not_lost()
                except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:
                    self._counts["publish_errors"] += 1
                    link.failing = True
                    if not failing:
                        failing = True
                        _log.warning("aiowheel.redis: cannot publish on %r: %r", self._channel, exc)
                    await self._close_client(client)
                    client = None
                    await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                    delay = min(delay * 2, _BACKOFF_MAX)
                    continue
                if link.outbox and link.outbox[0][0] is message:
                    link.outbox.popleft()
                    link.pending -= count
                self._counts["published"] += 1
                link.failing = False
                if failing:
                    failing = False
                    delay = _BACKOFF_MIN
                    _log.warning("aiowheel.redis: publishing on %r again", self._channel)
        finally:
            await self._close_client(client)

    # -- subscribing ---------------------------------------------------------------------------

    async def _subscribe(self, purgatory: Any, link: Link) -> None:
        """The loop's subscriber: connect, then read the stream or listen to the channel
        (:mod:`._redis_io`); on any failure, count it, log it once per outage, and
        reconnect after a backoff (from the shortest again once a connection worked)."""
        delay = _BACKOFF_MIN
        try:
            while True:
                client: aioredis.Redis | None = None
                pubsub: Any = None
                subscribes = self._counts["subscribes"]
                try:
                    client = self._client()
                    receive = functools.partial(self._receive, purgatory, link)
                    connected = functools.partial(self._subscribed, purgatory, link)
                    if self._transport == "stream":
                        block = block_seconds(client, self._given is not None, self._idle)
                        args = (self._reading, self._idle, block, receive, connected)
                        await read(client, self._channel, *args)
                    else:
                        pubsub = client.pubsub()
                        await pubsub.subscribe(self._channel)
                        await listen(pubsub, self._idle, receive, connected)
                except (asyncio.CancelledError, KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:
                    self._counts["connect_errors"] += 1
                    if not link.lost:
                        link.lost = True
                        _log.warning(
                            "aiowheel.redis: subscriber of %r lost its connection: %r (retrying)",
                            self._channel,
                            exc,
                        )
                finally:
                    link.connected = False
                    link.subscribed.clear()
                    if pubsub is not None:
                        with contextlib.suppress(Exception):
                            await pubsub.aclose()
                    await self._close_client(client)
                if self._counts["subscribes"] != subscribes:
                    delay = _BACKOFF_MIN
                await asyncio.sleep(delay * random.uniform(0.5, 1.0))
                delay = min(delay * 2, _BACKOFF_MAX)
        finally:
            link.connected = False

    def _subscribed(self, purgatory: Any, link: Link) -> None:
        """A connection of the subscriber works: say so, and re-check every live key."""
        link.connected = True
        link.subscribed.set()
        self._counts["subscribes"] += 1
        if link.lost:
            link.lost = False
            _log.warning("aiowheel.redis: subscribed to %r again", self._channel)
        self._recheck_all(purgatory, link)

    def _recheck_all(self, purgatory: Any, link: Link) -> None:
        """On (re)connect: what was published while not connected may be lost (pub/sub; a
        stream restarted empty or trimmed past the cursor), so every key with live waits here
        is re-checked."""
        if purgatory._loop is not link.loop:
            return
        for key in list(purgatory._watchers):
            self._counts["rechecks"] += 1
            purgatory._recheck(key)

    def _receive(self, purgatory: Any, link: Link, payload: object) -> None:
        """One message: decoded whole (or ignored, counted), an echo or a message applied
        already ignored (counted), then each item's data applied and its key re-checked."""
        decoded = decode_message(payload)
        if decoded is None:
            self._counts["foreign"] += 1
            return
        sender, seq, items = decoded
        if sender.partition(".")[0] == self._sender():
            self._counts["echoes"] += 1
            return
        if not self._reading.first(sender, seq):
            self._counts["duplicates"] += 1
            return
        self._counts["received"] += 1
        on_data = self._on_data
        here = purgatory._loop is link.loop
        for key, data in items:
            if data is not None and on_data is not None:
                try:
                    on_data(key, data)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except BaseException as exc:  # CancelledError too: it is on_data's, not ours
                    self._counts["data_errors"] += 1
                    link.loop.call_exception_handler(
                        {
                            "message": f"Exception in RedisSignals on_data for key {key!r}",
                            "exception": exc,
                        }
                    )
            if here:
                self._counts["rechecks"] += 1
                purgatory._recheck(key)

    async def _close_client(self, client: aioredis.Redis | None) -> None:
        """Close ``client`` (None, or the one given: nothing), never raising."""
        if client is not None and client is not self._given:
            with contextlib.suppress(Exception):
                await client.aclose()


def _check_connection(url: object, client: object) -> None:
    """RedisSignals' ``url`` or ``client=`` (exactly one of them), or the error naming what is
    wrong: a URL redis-py cannot read (its passwords hidden), a client of another type."""
    if client is not None:
        if url is not None:
            raise TypeError("RedisSignals(): give a url or client=, not both")
        if not isinstance(client, aioredis.Redis):
            raise TypeError(
                "RedisSignals(): client must be a redis.asyncio.Redis, got "
                f"{type(client).__module__}.{type(client).__qualname__}"
            )
    elif url is None:
        raise TypeError("RedisSignals(): give a url or client= (a redis.asyncio.Redis)")
    elif not isinstance(url, str):
        raise TypeError(f"RedisSignals(): url must be a str, got {type(url).__name__}")
    else:
        try:
            aioredis.ConnectionPool.from_url(url)  # parses only: connects nothing
            parts = urlsplit(url)
            database = parts.path.lstrip("/")
            if parts.scheme in ("redis", "rediss") and database and not database.isdigit():
                raise ValueError(f"the database must be a number, got {database!r}")
        except (ValueError, TypeError) as exc:
            raise ValueError(
                f"RedisSignals(): malformed Redis URL {_redacted(url)!r}: "
                f"{_scrubbed(str(exc), url)}"
            ) from None


# The password of a URL, in each form redis-py reads it: userinfo ("redis://:PASS@",
# "redis://user:PASS@") and the query ("?password=PASS"). The userinfo is everything before the
# last "@" of the part after the scheme, so that a password with an unquoted "@", "/" or "?"
# is still hidden whole (a URL with an "@" in its query loses more to the stars, never less).
_QUERY_PASSWORD: Final = re.compile(r"(?i)([?&;]password=)([^&#;]*)")


def _redacted(url: str) -> str:
    """``url`` with every password in it as ``***`` (error messages and logs)."""
    scheme, sep, rest = url.partition("://")
    if sep:
        at = rest.rfind("@")
        user, colon, password = rest[:at].partition(":") if at >= 0 else ("", "", "")
        if colon and password:
            rest = f"{user}:***{rest[at:]}"
        url = f"{scheme}{sep}{rest}"
    return _QUERY_PASSWORD.sub(r"\1***", url)


def _scrubbed(text: str, url: str) -> str:
    """``text`` (an error's message about ``url``) with ``url``'s passwords, quoted or not,
    as ``***``."""
    secrets: set[str] = set()
    _, sep, rest = url.partition("://")
    at = rest.rfind("@") if sep else -1
    if at >= 0:
        secrets.add(rest[:at].partition(":")[2])
    secrets.update(match.group(2) for match in _QUERY_PASSWORD.finditer(url))
    secrets |= {unquote(secret) for secret in secrets}
    for secret in sorted(secrets - {""}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text
