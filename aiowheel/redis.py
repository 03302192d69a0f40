"""A Purgatory whose signals reach every worker: a Redis stream (or pub/sub) as the transport.

``aiowheel.Purgatory`` re-checks the waits of a key in the process that signals it. Servers
run as several processes (``gunicorn -w 4``, ``uvicorn --workers 4``, a fleet), and the event
that answers a wait often arrives at another one. :class:`RedisSignals` carries the signals
through a Redis (or Valkey, 5.0+) stream, with redis-py's asyncio client
(``pip install aiowheel[redis]``)::

    signals = RedisSignals("redis://localhost:6379", channel="myapp")
    purgatory = aiowheel.Purgatory(signals=signals)

or with a client you configured (TLS, an ACL user, Sentinel's ``master_for``), used as it is
and never closed by RedisSignals: ``RedisSignals(client=redis.asyncio.Redis(...))``.

Then ``purgatory.signal(key)`` re-checks this process's waits of ``key`` at once (returning
how many completed, as always) and publishes ``key``; every other process's purgatory on the
channel re-checks its own waits of ``key`` when the message arrives. The choices, and why:

- **At least once through Redis, once in effect.** Each message is an entry of the stream
  ``channel`` (``XADD``), and each process reads it with ``XREAD BLOCK`` from the id of the
  last entry it read: after a reconnect (a killed connection, Redis restarted), or a loop
  blocked for seconds, it reads what it missed, as long as the stream still holds it. A
  process's first read starts at the stream's end (it does not replay history). A message
  carries its sender and its number in that sender's order; a message published twice (its
  publish retried after an answer lost in an outage) is applied once, counted as
  ``duplicates``. A signal published while Redis is down waits in the publisher's queue and
  is published when Redis is back; the readers, resuming from their last id, read it then.
- **What is not guaranteed.** Retention is bounded: the stream keeps about ``retention``
  messages (100,000 by default, ``XADD MAXLEN ~``, trimmed a node at a time, so at least
  that many): a process that falls further behind (a loop blocked, or a connection dead
  without a word, while 100,000 messages went by: 100 s at 1,000 messages/s) misses what was
  trimmed. A count, not an age: it bounds Redis's memory whatever the rate, and needs no
  clock. A Redis restarted empty (no persistence, or a failover to a replica that had not
  received them) has lost what it held: the messages a reader had not read yet are gone,
  and so are a publisher's keys past its queue's ``max_pending``. So the checks still read
  the state where they can, and on every (re)connect each key with live waits here is
  re-checked. Whatever Redis does, every wait completes or times out at its own deadline:
  the deadlines are on the local wheel and never wait on Redis. ``transport="pubsub"``
  keeps the at-most-once pub/sub channel (a message sent while a subscriber reconnects is
  gone; nothing is kept in Redis).
- **signal() never blocks and never raises for Redis.** It appends the key to this loop's
  batch; the keys signalled in one loop iteration go out as one message, published by one
  task per loop in order (so the signals of one publishing loop arrive in the order it sent
  them). A failed publish is retried after a backoff; failures are counted
  (:meth:`RedisSignals.stats`) and logged once per outage (logger ``aiowheel.redis``, with
  one line when it recovers). Its own errors are immediate and change nothing: a key that
  cannot go on the wire raises TypeError naming it before any local re-check, and a signal
  with no running loop in the thread raises RuntimeError (publishing needs the loop).
- **Keys on the wire** (the format: ``aiowheel._purgatory._wire``): ``str``, ``bytes`` and ``int``
  keys (and their subclasses, sent as the plain value: an ``IntEnum`` arrives as its int;
  ``True`` as 1, the key it equals in a dict anyway). Other keys raise TypeError: a tuple's or
  an object's identity does not survive a trip to another process. Waits may still use such
  keys; they cannot be signalled through a purgatory with signals.
- **Payloads: data applied before the re-check.** A check reads state; when that state lives
  in each process (the long-poll's messages), the signal must bring it.
  ``RedisSignals(..., on_data=apply)`` and ``signals.send(key, data)`` (``str`` or
  ``bytes``): ``apply(key, data)`` runs in the sending process at once and in every other
  process when the message arrives, each time just before that process re-checks ``key``, so
  the state every process's checks read is written by one function. An ``apply`` that
  raises: in the sender, the error goes to the caller and nothing is published; in a
  receiver, it goes to the loop's exception handler (counted; any exception, a
  ``CancelledError`` raised by ``apply`` included) and the re-check still runs.
  Not a separate message type: data and key travel in one message, so a receiver cannot
  re-check before the data is there.
- **Hearing only what matters.** One channel per application, subscribed once per process,
  not one channel per key: a per-key SUBSCRIBE would cost a round trip on each first wait of
  a key and would race with that wait's first check (a signal between the check and the
  subscription's confirmation would be lost). A received key this process has no waits for
  costs one dict lookup and is dropped (its data, if any, is still applied: it is state).
  Applications that share a Redis use distinct channels (the stream is a key of the URL's
  database; pub/sub channels are global to the server).
- **Messages say who wrote them.** JSON ``["aiowheel", 2, sender, seq, items]``: a format tag
  and version, a sender id (random, per RedisSignals, process and loop: a worker forked from a
  ``--preload`` master gets its own), the message's number, and the items. A process
  ignores its own echoes (it re-checked locally already); a message that is not this
  format, or of another version, is ignored and counted as ``foreign`` (the reader moves
  past it), never a crash.
- **Bounded memory.** The messages waiting to be published are at most ``max_pending`` keys
  per loop: past it the oldest message is dropped and its keys counted as ``dropped`` (the
  waits they were for still end at their deadlines). A stream reader reads 256 entries at a
  time from its last id; what it has not read waits in the stream. A pub/sub subscriber
  that falls behind reads one message at a time; what it has not read waits in Redis's
  output buffer for the client, which Redis bounds (``client-output-buffer-limit pubsub``,
  32 MB by default) by closing the connection: the subscriber reconnects and re-checks
  every key with live waits.
- **Lazy connect, per loop.** Making a RedisSignals connects nothing (so it can be made at
  module level, before the loop and before a server's workers fork); a malformed URL raises
  ValueError at once. A purgatory serves one loop at a time: when it binds to a loop (its
  first wait or watch there), the subscriber starts on that loop, and a loop that only
  signals starts only a publisher. Both are tasks of their loop, cancelled with it (as
  ``asyncio.run`` cancels what is left), closing their connections as they end.
  A loop that ends right after signalling may end before its last signals are published
  (``asyncio.run`` waits for no other task): end it with ``await signals.flush()`` or
  ``await signals.aclose()``, which publishes what is queued (for up to a second, unless
  Redis is down), stops this loop's tasks and closes their connections; it is final. An
  unreachable server at start is an outage like any other: counted, logged, retried with
  backoff (50 ms doubling to 1 s, jittered). A stream read blocks 30 s and is given up
  (reconnect) if no answer comes in 60 s; a pub/sub subscriber that hears nothing for 30 s
  sends a PING, and reconnects if 30 s more bring no answer: a connection that died without a word
  (a server paused, a network partition) is noticed within a minute, and the re-check
  follows.
"""

from ._purgatory._redis import (
    RedisSignals,
    RedisSignalsStats,
)

__all__ = [
    "RedisSignals",
    "RedisSignalsStats",
]
