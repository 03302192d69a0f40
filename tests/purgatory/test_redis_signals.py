"""aiowheel.redis: a Purgatory whose signals travel through a real redis-server (issue 51).

Every test talks to a real ``redis-server`` started here (tests/support.py's RedisServer);
the cross-process ones run peers as separate interpreters (``sys.executable``), on the build
this run tests (the environment, AIOWHEEL_NO_EXTENSIONS included, is inherited).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

import aiowheel
from tests.support import ROOT, RedisServer, need_redis

CLOSED_PORT_URL = "redis://127.0.0.1:1/0"  # nothing listens on port 1


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    """One redis-server for the module's tests (each test uses its own channel)."""
    running = RedisServer(need_redis())
    running.start()
    yield running
    running.kill()


def _signals(url: str, channel: str, **options: Any) -> Any:
    from aiowheel.redis import RedisSignals

    return RedisSignals(url, channel=channel, **options)


async def _until(condition: Any, timeout: float = 5.0) -> None:
    """Poll ``condition()`` every 5 ms until it holds (AssertionError past ``timeout``)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


# A peer process: waits for "hello" and for 100 "seq" payloads, then sends its pid as "back"
# and waits for every peer's; prints what it saw as JSON.
PEER = """
import asyncio, json, os, sys
import aiowheel
from aiowheel.redis import RedisSignals

url, channel, peers, transport = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
seen = {}
signals = RedisSignals(url, channel=channel, transport=transport,
                       on_data=lambda key, data: seen.setdefault(key, []).append(data))
purgatory = aiowheel.Purgatory(signals=signals)

async def main():
    hello = purgatory.wait(["hello"], lambda: seen.get("hello"), 10)
    seq = purgatory.wait(["seq"], lambda: len(seen.get("seq", ())) >= 100, 10)
    while not signals.stats().connected:
        await asyncio.sleep(0.005)
    print("ready", flush=True)
    out = {"hello": await hello, "seq": await seq and seen["seq"]}
    signals.send("back", str(os.getpid()))
    out["back"] = await purgatory.wait(
        ["back"], lambda: len(seen.get("back", ())) >= peers and seen["back"], 10)
    s = signals.stats()
    out["echoes"], out["foreign"] = s.echoes, s.foreign
    await signals.aclose()
    print(json.dumps(out), flush=True)

asyncio.run(main())
"""


def _peer(url: str, channel: str, peers: int, transport: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", PEER, url, channel, str(peers), transport],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("transport", ["stream", "pubsub"])
def test_signals_and_payloads_reach_every_process_in_order(
    server: RedisServer, transport: str
) -> None:
    # Two peer processes and this one: the payloads this process sends reach both, in the
    # order sent (100 of them, some in one loop iteration, some in others), and each peer's
    # "back" reaches this process and the other peer; echoes are ignored, not applied twice.
    channel = f"each-to-all-{transport}"
    peers = [_peer(server.url, channel, 2, transport) for _ in range(2)]
    try:
        for peer in peers:
            assert peer.stdout is not None
            line = peer.stdout.readline()
            assert line == "ready\n", (line, peer.stderr.read() if peer.stderr else "")
        seen: dict[str, list[str]] = {}

        async def main() -> list[str]:
            signals = _signals(
                server.url,
                channel,
                transport=transport,
                on_data=lambda key, data: seen.setdefault(key, []).append(data),
            )
            purgatory = aiowheel.Purgatory(signals=signals)
            back = purgatory.wait(
                ["back"], lambda: len(seen.get("back", ())) >= 2 and seen["back"], 10
            )
            await _until(lambda: signals.stats().connected)
            assert signals.send("hello", "hi") == 0  # no wait of "hello" here
            for number in range(50):  # one loop iteration: one message
                signals.send("seq", str(number))
            for number in range(50, 100):  # one each
                signals.send("seq", str(number))
                await asyncio.sleep(0)
            result = await back
            stats = signals.stats()
            # Batched: the 50 sent in one loop iteration went as one message.
            assert stats.sent == 101 and 2 <= stats.published <= 52 and stats.foreign == 0
            assert stats.received == 2  # each peer's "back", once; its own echoes not counted
            await signals.aclose()
            return result

        back = asyncio.run(main())
        outs = []
        for peer in peers:
            out, err = peer.communicate(timeout=20)
            assert peer.returncode == 0, err
            outs.append(json.loads(out))
    finally:
        for peer in peers:
            if peer.poll() is None:
                peer.kill()
                peer.wait()
    pids = sorted(str(peer.pid) for peer in peers)
    assert sorted(back) == pids
    for out in outs:
        assert out["hello"] == ["hi"]
        assert out["seq"] == [str(number) for number in range(100)]  # the publisher's order
        assert sorted(out["back"]) == pids  # its own once (applied locally), the other's once
        assert out["foreign"] == 0
    assert seen["seq"] == [str(number) for number in range(100)]  # applied here once each


def test_reconnect_rechecks_live_waits_and_the_rest_time_out_on_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Redis killed while waits live, the state of one changes meanwhile (its signal is lost),
    # and Redis comes back on the same port: the subscriber reconnects and re-checks every
    # live key, so that wait completes; the other times out at its own deadline. signal()
    # during the outage neither blocks nor raises; the outage is logged once.
    server = RedisServer(need_redis())
    server.start()
    state: dict[str, str] = {}
    try:

        async def main() -> None:
            loop = asyncio.get_running_loop()
            signals = _signals(server.url, "reconnect", transport="pubsub")
            purgatory = aiowheel.Purgatory(signals=signals)
            start = loop.time()
            changed = asyncio.ensure_future(
                purgatory.wait(["changed"], lambda: state.get("changed"), 10)
            )
            unchanged = asyncio.ensure_future(
                purgatory.wait(["same"], lambda: state.get("same"), 1.0)
            )
            expired: list[float] = []
            unchanged.add_done_callback(lambda _: expired.append(loop.time()))
            await _until(lambda: signals.stats().connected)
            server.kill()
            await _until(lambda: not signals.stats().connected)
            state["changed"] = "yes"  # its signal went to a dead server
            before = time.perf_counter()
            assert purgatory.signal("changed") == 1  # here at once, whatever Redis does
            assert purgatory.signal("lost") == 0
            assert time.perf_counter() - before < 0.2  # never waits on Redis
            await _until(lambda: signals.stats().publish_errors >= 1)
            await asyncio.sleep(0.2)  # a few failed reconnects: still one log line
            state["changed"] = ""  # done locally; set again so only a re-check completes it
            changed2 = purgatory.wait(["changed2"], lambda: state.get("changed2"), 10)
            state["changed2"] = "also"  # changed while down, never signalled at all
            await asyncio.to_thread(server.start)
            assert await changed == "yes"
            assert await changed2 == "also"
            with pytest.raises(TimeoutError):
                await unchanged
            assert 1.0 <= expired[0] - start < 2.0  # on time: not early, not held up by Redis
            stats = signals.stats()
            assert stats.connect_errors >= 1 and stats.subscribes >= 2
            await _until(lambda: signals.stats().published >= 1)  # the queued ones went out
            await signals.aclose()

        with caplog.at_level(logging.WARNING, logger="aiowheel.redis"):
            asyncio.run(main())
    finally:
        server.kill()
    lost = [r for r in caplog.records if "lost its connection" in r.getMessage()]
    cannot = [r for r in caplog.records if "cannot publish" in r.getMessage()]
    again = [r for r in caplog.records if "subscribed to" in r.getMessage()]
    assert len(lost) == 1 and len(cannot) == 1 and len(again) == 1, caplog.text


@pytest.mark.parametrize("transport", ["stream", "pubsub"])
def test_foreign_messages_are_ignored_and_counted(server: RedisServer, transport: str) -> None:
    # Entries this project did not write (or another version wrote) are counted and passed
    # by: the reader goes on to the next one; a message published twice is applied once.
    import redis

    channel = f"foreign-{transport}"
    seen: dict[Any, Any] = {}
    raw = redis.Redis.from_url(server.url)
    foreign = [
        b"not json",
        b"\xff\xfe",
        b"{}",
        b'["aiowheel", 1, "x", [["k"]]]',  # an older version
        b'["aiowheel", 3, "x", 0, [["k"]]]',  # a later one
        b'["aiowheel", 2, "x", -1, [["k"]]]',  # a negative seq
        b'["other-app", 1, "x", [["k"]]]',
        b'["aiowheel", 2, "x", 0, [["k", 3]]]',  # data neither str nor bytes
        b'["aiowheel", 2, "x", 0, [[1.5]]]',  # a float key
        b'["aiowheel", 2, "x", 0, [[{"b": "***"}]]]',  # bad base64
        b'["aiowheel", 2, "x", 0, [[true]]]',
        b'["aiowheel", 2, "x", 0, "k"]',
        b"[" * 5000,
    ]

    def put(message: bytes | str, field: str = "m") -> None:
        if transport == "stream":
            raw.xadd(channel, {field: message})
        else:
            raw.publish(channel, message)

    async def main() -> None:
        signals = _signals(
            server.url, channel, transport=transport, on_data=lambda k, d: seen.__setitem__(k, d)
        )
        purgatory = aiowheel.Purgatory(signals=signals)
        waited = purgatory.wait([b"\x00k"], lambda: seen.get(b"\x00k"), 5)
        numbered = purgatory.wait([7], lambda: seen.get(7), 5)
        await _until(lambda: signals.stats().connected)
        for message in foreign:
            await asyncio.to_thread(put, message)
        extra = 0
        if transport == "stream":  # an entry without our field
            await asyncio.to_thread(put, "x", "other")
            extra = 1
        # A well-formed message from another sender, written by hand: bytes and int keys;
        # then the same message again (a publish retried after its answer was lost).
        good = json.dumps(
            ["aiowheel", 2, "someone.1", 0, [[{"b": "AGs="}, "v"], [7, {"b": "AA=="}]]]
        )
        await asyncio.to_thread(put, good)
        assert await waited == "v"
        assert await numbered == b"\x00"
        seen.clear()
        await asyncio.to_thread(put, good)
        assert purgatory.signal("mine") == 0  # its echo comes back and is ignored
        await _until(lambda: signals.stats().echoes == 1)
        stats = signals.stats()
        assert stats.foreign == len(foreign) + extra
        assert stats.received == 1 and stats.duplicates == 1 and seen == {}
        await signals.aclose()

    try:
        asyncio.run(main())
    finally:
        raw.close()


def test_two_channels_do_not_cross_talk(server: RedisServer) -> None:
    # Two applications on one server, each on its own channel: a signal on one completes the
    # other purgatory's wait on that channel only.
    state = {"k": True}

    async def main() -> None:
        first = [_signals(server.url, "app-a"), _signals(server.url, "app-a")]
        other = _signals(server.url, "app-b")
        a1, a2, b = (aiowheel.Purgatory(signals=s) for s in (*first, other))
        state["k"] = False
        on_a = a2.wait(["k"], lambda: state["k"], 5)
        on_b = asyncio.ensure_future(b.wait(["k"], lambda: state["k"], 0.3))
        a1.wait(["bind"], lambda: True, 1)  # binds a1: its subscriber starts
        await _until(lambda: all(s.stats().connected for s in (*first, other)))
        state["k"] = True
        assert a1.signal("k") == 0
        assert await on_a is True
        with pytest.raises(TimeoutError):
            await on_b
        assert other.stats().received == 0 and first[1].stats().received == 1
        for signals in (*first, other):
            await signals.aclose()

    asyncio.run(main())


def test_bad_input_is_refused_and_changes_nothing() -> None:
    need_redis()
    from aiowheel.redis import RedisSignals

    with pytest.raises(ValueError, match=r"malformed Redis URL 'http://example\.com'"):
        RedisSignals("http://example.com")
    with pytest.raises(ValueError, match=r"URL 'redis://:\*\*\*@h:1/x': the database must be"):
        RedisSignals("redis://:secret@h:1/x")  # the password is not repeated
    with pytest.raises(TypeError, match="url must be a str, got int"):
        RedisSignals(6379)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="channel must be a non-empty str"):
        RedisSignals(CLOSED_PORT_URL, channel="")
    with pytest.raises(ValueError, match="max_pending must be an int >= 1"):
        RedisSignals(CLOSED_PORT_URL, max_pending=0)
    with pytest.raises(TypeError, match="on_data must be callable"):
        RedisSignals(CLOSED_PORT_URL, on_data="print")  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"retention \(messages the stream keeps\) must be an int >= 1, got 0"
    ):
        RedisSignals(CLOSED_PORT_URL, retention=0)
    with pytest.raises(ValueError, match="retention .* got -5"):
        RedisSignals(CLOSED_PORT_URL, retention=-5)
    with pytest.raises(ValueError, match="transport must be 'stream' or 'pubsub', got 'kafka'"):
        RedisSignals(CLOSED_PORT_URL, transport="kafka")
    with pytest.raises(
        TypeError, match="client must be a redis.asyncio.Redis, got redis.client.Redis"
    ):
        import redis

        RedisSignals(client=redis.Redis())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="client must be a redis.asyncio.Redis, got builtins.str"):
        RedisSignals(client="redis://localhost")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="give a url or client=, not both"):
        import redis.asyncio

        RedisSignals(CLOSED_PORT_URL, client=redis.asyncio.Redis())
    with pytest.raises(TypeError, match=r"give a url or client= \(a redis.asyncio.Redis\)"):
        RedisSignals()
    with pytest.raises(TypeError, match="signals must be an aiowheel.redis.RedisSignals"):
        aiowheel.Purgatory(signals="redis://localhost")
    signals = RedisSignals(CLOSED_PORT_URL, channel="bad-input")
    purgatory = aiowheel.Purgatory(signals=signals)
    with pytest.raises(ValueError, match="serve another Purgatory already"):
        aiowheel.Purgatory(signals=signals)
    with pytest.raises(RuntimeError, match="signal in a running event loop"):
        purgatory.signal("k")
    assert signals.stats().sent == 0
    checks: list[int] = []

    async def main() -> None:
        waiting = purgatory.wait([(1, 2)], lambda: checks.append(1), 5)
        assert checks == [1]
        with pytest.raises(TypeError, match=r"key \(1, 2\) \(tuple\) cannot be sent"):
            purgatory.signal((1, 2))
        with pytest.raises(TypeError, match="key 1.5 .float. cannot be sent"):
            signals.send(1.5, "x")
        with pytest.raises(TypeError, match="data must be str or bytes, got int"):
            signals.send("k", 3)
        assert checks == [1]  # no re-check ran: nothing changed
        assert signals.stats().sent == 0  # nothing queued for publishing
        assert purgatory.signal(True) == 0  # a bool key goes as the int it equals
        waiting.cancel()
        await signals.aclose()  # Redis unreachable: returns at once

    asyncio.run(main())


@pytest.mark.parametrize(
    "url",
    [
        "redis://:hunter2@h:1/x",
        "redis://user:hunter2@h:1/x",
        "redis://h:1/x?password=hunter2",
        "redis://user:hunter2@h:notaport/0",
        "redis://h:1/0?db=zero&password=hunter2",
        "redis://:hunter2@h:1/0?password=hunter2&db=nine",
        "redis://user:hun%40ter2@h:1/x",
    ],
)
def test_a_malformed_url_is_refused_without_its_password(url: str) -> None:
    # Every form redis-py reads a password from (userinfo with or without a user, the query),
    # in the URL shown and in redis-py's own reason, quoted or not.
    need_redis()
    from aiowheel.redis import RedisSignals

    with pytest.raises(ValueError, match="malformed Redis URL") as caught:
        RedisSignals(url)
    text = str(caught.value)
    assert "hunter2" not in text and "hun%40ter2" not in text and "hun@ter2" not in text, text
    assert "***" in text


def test_a_full_publish_queue_drops_the_oldest_and_logs_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    need_redis()

    async def main() -> None:
        signals = _signals(CLOSED_PORT_URL, "full", max_pending=10)
        purgatory = aiowheel.Purgatory(signals=signals)
        for number in range(100):  # one message each: the server is unreachable
            assert purgatory.signal(number) == 0
            await asyncio.sleep(0)
        await _until(lambda: signals.stats().publish_errors >= 1)
        stats = signals.stats()
        assert stats.sent == 100 and stats.dropped == 90 and stats.published == 0
        await signals.aclose()
        left = [t for t in asyncio.all_tasks() if "RedisSignals" in repr(t.get_coro())]
        assert left == []

    with caplog.at_level(logging.WARNING, logger="aiowheel.redis"):
        asyncio.run(main())
    assert len([r for r in caplog.records if "cannot publish" in r.getMessage()]) == 1


def test_a_module_level_purgatory_listens_in_each_loop_and_leaves_no_connection(
    server: RedisServer,
) -> None:
    # One purgatory serves two asyncio.run in turn: the subscriber binds to each loop, and
    # ends with it (asyncio.run cancels it), closing its connection; aclose leaves no task.
    import redis

    raw = redis.Redis.from_url(server.url)
    signals = _signals(server.url, "loops")
    purgatory = aiowheel.Purgatory(signals=signals)
    sending = _signals(server.url, "loops")
    sender = aiowheel.Purgatory(signals=sending)
    state: dict[str, int] = {"k": 0}

    async def one_run(round_: int) -> None:
        waiting = purgatory.wait(["k"], lambda: state["k"] == round_, 5)
        await _until(lambda: signals.stats().connected)
        state["k"] = round_
        sender.signal("k")
        assert await waiting is True

    try:
        for round_ in (1, 2):
            asyncio.run(one_run(round_))
            clients = [c for c in raw.client_list() if c.get("cmd") != "client|list"]
            assert clients == [], clients  # the subscriber and the publisher closed theirs
        assert signals.stats().subscribes == 2

        async def closing() -> None:
            purgatory.wait(["x"], lambda: True, 1)
            sender.wait(["x"], lambda: True, 1)
            await _until(lambda: signals.stats().connected)
            await signals.aclose()
            await sending.aclose()
            left = [t for t in asyncio.all_tasks() if "RedisSignals" in repr(t.get_coro())]
            assert left == []
            assert not signals.stats().connected
            assert purgatory.signal("k") == 0  # closed: local only, nothing queued
            assert signals.stats().sent == 0  # the listener never signalled

        asyncio.run(closing())
        assert [c for c in raw.client_list() if c.get("cmd") != "client|list"] == []
    finally:
        raw.close()


def test_a_subscriber_that_falls_behind_is_cut_off_by_redis_and_rechecks(
    server: RedisServer,
) -> None:
    # The subscriber's loop is busy while a flood arrives: what it has not read waits in
    # Redis's output buffer for it, not in this process. Past the buffer's limit (64 kB here,
    # 32 MB by default) Redis closes the connection; the subscriber reconnects and re-checks
    # every live key, so a wait whose state changed meanwhile completes.
    import redis

    raw = redis.Redis.from_url(server.url)
    raw.config_set("client-output-buffer-limit", "pubsub 64kb 32kb 1")
    state: dict[str, bool] = {}
    flood = 1_000

    def publish_flood() -> None:
        with raw.pipeline(transaction=False) as pipe:
            for _ in range(flood):
                pipe.publish("behind", b"x" * 16_384)  # 16 MB in all, foreign to aiowheel
            pipe.execute()

    async def main() -> None:
        signals = _signals(server.url, "behind", transport="pubsub")
        purgatory = aiowheel.Purgatory(signals=signals)
        waiting = purgatory.wait(["late"], lambda: state.get("late"), 10)
        await _until(lambda: signals.stats().connected)
        flooding = threading.Thread(target=publish_flood)
        flooding.start()
        flooding.join(10)  # the loop is blocked: the subscriber reads nothing meanwhile
        state["late"] = True  # changed meanwhile; no signal for it
        assert await waiting is True
        stats = signals.stats()
        assert stats.connect_errors >= 1 and stats.subscribes >= 2, stats
        assert stats.foreign < flood  # Redis dropped what it could not hand over
        await signals.aclose()

    try:
        asyncio.run(main())
    finally:
        raw.config_set("client-output-buffer-limit", "pubsub 32mb 8mb 60")
        raw.close()


@pytest.mark.parametrize("transport", ["stream", "pubsub"])
def test_a_server_that_stops_answering_is_noticed_and_rechecked(transport: str) -> None:
    # A connection that dies without a word (the server paused: SIGSTOP, as a partition
    # would): a quiet subscriber PINGs, gives up on no answer, reconnects once the server
    # answers again, and re-checks. While all is well, the PINGs are answered: no reconnect.
    server = RedisServer(need_redis())
    server.start()
    state: dict[str, bool] = {}
    try:

        async def main() -> None:
            signals = _signals(server.url, "paused", transport=transport)
            signals._idle = 0.1
            purgatory = aiowheel.Purgatory(signals=signals)
            waiting = purgatory.wait(["paused"], lambda: state.get("paused"), 10)
            await _until(lambda: signals.stats().connected)
            await asyncio.sleep(0.35)  # quiet: PINGs, answered
            assert signals.stats().connect_errors == 0 and signals.stats().subscribes == 1
            assert server.process is not None
            server.process.send_signal(signal.SIGSTOP)
            try:
                await _until(lambda: not signals.stats().connected)
                state["paused"] = True  # changed meanwhile; its signal would be lost
                await asyncio.sleep(0.1)
            finally:
                server.process.send_signal(signal.SIGCONT)
            assert await waiting is True
            stats = signals.stats()
            assert stats.connect_errors >= 1 and stats.subscribes >= 2, stats
            await signals.aclose()

        asyncio.run(main())
    finally:
        server.kill()


def _reader_ids(raw: Any) -> list[int]:
    """The ids of the connections blocked in (or last running) an XREAD."""
    return [int(c["id"]) for c in raw.client_list() if c.get("cmd", "").startswith("xread")]


def test_a_stream_loses_nothing_across_a_killed_connection_a_blocked_loop_and_a_restart(
    tmp_path: Any,
) -> None:
    # A publisher in another thread's loop sends numbered payloads all along, while this
    # loop's reader has its connection killed (CLIENT KILL), then its loop blocked 2 s, then
    # Redis SIGKILLed and restarted (append-only file, fsynced): every payload is applied
    # here exactly once, in the order sent, and the ones sent during the outage arrive soon
    # after Redis is back.
    import redis

    server = RedisServer(need_redis(), persist=str(tmp_path))
    server.start()
    channel = "outage"
    sent: list[int] = []
    stop = threading.Event()
    go = threading.Event()

    def publishing() -> None:
        async def run() -> None:
            signals = _signals(server.url, channel)
            aiowheel.Purgatory(signals=signals)  # signals only: no reader in this thread
            go.wait(10)
            number = 0
            while not stop.is_set():
                signals.send("n", str(number))
                sent.append(number)
                number += 1
                await asyncio.sleep(0.005)
            async with asyncio.timeout(15):
                await signals.flush()
            await signals.aclose()

        asyncio.run(run())

    applied: list[int] = []
    raw = redis.Redis.from_url(server.url)
    publisher = threading.Thread(target=publishing)
    publisher.start()
    try:

        async def main() -> float:
            signals = _signals(server.url, channel, on_data=lambda k, d: applied.append(int(d)))
            aiowheel.Purgatory(signals=signals)
            await asyncio.wait_for(signals.start(), 5)
            go.set()
            await _until(lambda: len(applied) >= 20)
            # 1. Its connection killed by the server.
            (reader,) = await asyncio.to_thread(_reader_ids, raw)
            await asyncio.to_thread(raw.client_kill_filter, _id=reader)
            await _until(lambda: signals.stats().connect_errors >= 1)
            count = len(applied)
            await _until(lambda: len(applied) >= count + 20)
            # 2. Its loop blocked 2 s (what the publisher sent meanwhile waits in the stream).
            time.sleep(2.0)  # noqa: ASYNC251 - the point: the loop blocked
            count = len(applied)
            await _until(lambda: len(applied) >= count + 20)
            # 3. Redis SIGKILLed, down for half a second, restarted from its file.
            server.kill()
            await asyncio.sleep(0.5)
            await asyncio.to_thread(server.start)
            back = time.monotonic()
            during = len(sent)  # sent by now: all during the outage or before
            await _until(lambda: len(applied) >= during, timeout=10)
            recovered = time.monotonic() - back
            stop.set()
            await asyncio.to_thread(publisher.join, 20)
            await _until(lambda: len(applied) >= len(sent), timeout=10)
            await asyncio.sleep(0.2)  # anything applied twice would show by now
            stats = signals.stats()
            assert stats.connect_errors >= 2 and stats.foreign == 0, stats
            await signals.aclose()
            return recovered

        recovered = asyncio.run(main())
    finally:
        stop.set()
        go.set()
        publisher.join(20)
        raw.close()
        server.kill()
    assert not publisher.is_alive()
    assert len(sent) > 200
    assert applied == sent  # none lost, none twice, in order
    assert recovered < 4.0, recovered  # the backoff is at most 1 s (a loaded machine: slack)


def test_a_receiver_that_raises_even_cancellederror_is_reported_and_the_reader_goes_on(
    server: RedisServer,
) -> None:
    # on_data raising anything (CancelledError included: a sync function's CancelledError is
    # not a cancellation of the reader) goes to the loop's exception handler, counted; the
    # re-check still runs and the next messages are applied. aclose still ends the reader.
    state: dict[str, str] = {}
    reported: list[BaseException] = []

    def apply(key: Any, data: Any) -> None:
        if data == "cancel":
            raise asyncio.CancelledError
        if data == "boom":
            raise RuntimeError("boom")
        state[key] = data

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: reported.append(context["exception"]))
        receiving = _signals(server.url, "raising", on_data=apply)
        sending = _signals(server.url, "raising")
        receiver = aiowheel.Purgatory(signals=receiving)
        sender = aiowheel.Purgatory(signals=sending)
        rechecked = receiver.wait(["x"], lambda: state.get("x") == "ok" or None, 5)
        await asyncio.wait_for(receiving.start(), 5)
        sender.wait(["bind"], lambda: True, 1)
        sending.send("x", "cancel")
        sending.send("y", "boom")
        await asyncio.sleep(0)
        sending.send("x", "ok")
        assert await rechecked is True
        stats = receiving.stats()
        assert stats.data_errors == 2 and stats.received == 2 and stats.connected, stats
        assert [type(exc) for exc in reported] == [asyncio.CancelledError, RuntimeError]
        await receiving.aclose()
        await sending.aclose()
        left = [t for t in asyncio.all_tasks() if "RedisSignals" in repr(t.get_coro())]
        assert left == []

    asyncio.run(main())


def test_a_client_given_is_used_as_it_is_and_left_open(server: RedisServer) -> None:
    # RedisSignals(client=...) reads and publishes through the redis.asyncio.Redis given (here
    # with decode_responses=True and a client name, which a URL would not set), and aclose
    # leaves it open for its owner.
    import redis.asyncio

    state: dict[str, str] = {}

    async def main() -> None:
        client = redis.asyncio.Redis(
            port=server.port, decode_responses=True, client_name="mine", socket_timeout=1
        )
        receiving = _signals_client(client, on_data=lambda k, d: state.__setitem__(k, d))
        sending = _signals(server.url, "given")
        receiver = aiowheel.Purgatory(signals=receiving)
        aiowheel.Purgatory(signals=sending)
        waiting = receiver.wait(["k"], lambda: state.get("k"), 5)
        await asyncio.wait_for(receiving.start(), 5)
        names = [c.get("name") for c in await client.client_list()]
        assert names.count("mine") >= 2  # the reader's connection and this one
        sending.send("k", "v")
        assert await waiting == "v"
        # Ends though the client's socket_timeout (redis-py sends under asyncio.wait_for,
        # which on 3.11 can swallow the cancellation): within half that timeout.
        await asyncio.wait_for(receiving.aclose(), 5)
        await sending.aclose()
        assert await client.ping() is True  # still open
        assert receiving.stats().received == 1
        await client.aclose()

    asyncio.run(main())


def _signals_client(client: Any, **options: Any) -> Any:
    from aiowheel.redis import RedisSignals

    return RedisSignals(client=client, channel="given", **options)


def _message(sender: str, seq: int, key: str, data: str) -> str:
    """A well-formed message, written by hand (as another process would send it)."""
    return json.dumps(["aiowheel", 2, sender, seq, [[key, data]]])


def test_a_reader_starts_at_the_stream_s_end_and_the_stream_keeps_about_its_retention(
    server: RedisServer,
) -> None:
    # History is not replayed: what the stream held before the process first read is not
    # applied; what comes after is. And the stream is trimmed to about `retention` entries
    # (MAXLEN ~: whole nodes of 100 entries, so at least that many and not much more).
    import redis

    channel = "history"
    raw = redis.Redis.from_url(server.url)
    for seq in range(5):
        raw.xadd(channel, {"m": _message("old.1", seq, "k", f"old {seq}")})
    applied: list[str] = []

    async def main() -> None:
        signals = _signals(server.url, channel, on_data=lambda k, d: applied.append(d))
        aiowheel.Purgatory(signals=signals)
        await asyncio.wait_for(signals.start(), 5)
        await asyncio.to_thread(raw.xadd, channel, {"m": _message("new.1", 0, "k", "new")})
        await _until(lambda: applied == ["new"])
        await signals.aclose()
        sending = _signals(server.url, channel, retention=10)
        aiowheel.Purgatory(signals=sending)
        for number in range(1000):  # one message each
            sending.send("n", str(number))
            await asyncio.sleep(0)
        await asyncio.wait_for(sending.flush(), 10)
        await sending.aclose()

    try:
        asyncio.run(main())
        assert applied == ["new"]
        assert 10 <= raw.xlen(channel) <= 10 + 200, raw.xlen(channel)
    finally:
        raw.close()


def test_what_a_redis_restarted_empty_lost_is_lost_and_the_waits_are_rechecked() -> None:
    # The documented limit: a message added while a reader is away, and Redis restarted
    # empty (no persistence) before it came back: that message is gone for it (Redis lost
    # it), and its live waits are re-checked on the reconnect, so a wait whose state
    # changed meanwhile completes anyway; what is sent after the restart arrives.
    import redis

    server = RedisServer(need_redis())
    server.start()
    channel = "empty"
    applied: list[str] = []
    state: dict[str, bool] = {}

    async def main() -> None:
        signals = _signals(server.url, channel, on_data=lambda k, d: applied.append(d))
        purgatory = aiowheel.Purgatory(signals=signals)
        waiting = purgatory.wait(["w"], lambda: state.get("w"), 10)
        await asyncio.wait_for(signals.start(), 5)
        # All with this loop blocked, so the reader cannot reconnect in between: Redis killed,
        # back, given a message, killed again before the reader could read it, back empty.
        server.kill()
        server.start()
        raw = redis.Redis.from_url(server.url)
        raw.xadd(channel, {"m": _message("other.1", 0, "k", "lost")})
        raw.close()
        server.kill()
        server.start()  # empty
        state["w"] = True  # changed meanwhile; its signal was in what Redis lost
        assert await waiting is True  # the re-check on reconnect
        raw = redis.Redis.from_url(server.url)
        await asyncio.to_thread(raw.xadd, channel, {"m": _message("other.1", 1, "k", "after")})
        raw.close()
        await _until(lambda: applied == ["after"])
        assert signals.stats().connect_errors >= 1
        await signals.aclose()

    try:
        asyncio.run(main())
    finally:
        server.kill()
    assert applied == ["after"]
