"""``max_batch``: a due batch larger than it runs over several loop iterations (issue 39).

A mass expiry (thousands of idle timeouts due in one pass) used to run as one loop callback,
and every live connection's message waited behind all of it. Now at most ``max_batch`` due
callbacks run per iteration and the rest wait in the driver's backlog, in deadline order:
the loop polls its I/O between chunks. What must hold across chunks: deadline order (a timer
filed meanwhile, already due, joins the backlog in its place), nothing lost or doubled, a
cancel of a later chunk's timer honoured, errors reported as before, KeyboardInterrupt leaves
the loop with the rest run next time, and a virtual clock that does not move while a chunk
waits. Every test blocks the loop (``time.sleep``) past the deadlines so that they are due in
one pass whatever the machine's load, and asserts no timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import socket
import time
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from aiowheel._loopmode._loop import LoopFactory
from aiowheel._time._dispatch import DEFAULT_MAX_BATCH, PACE

pytestmark = pytest.mark.bases("asyncio", "uvloop")

N = 10
K = 4  # chunks: 0-3, 4-7, 8-9


def _pace_off(timer: Any) -> None:
    """One chunk per iteration however late the backlog: these tests block the loop past the
    deadlines (so they are due in one pass whatever the load) and look at the chunks; the
    pace, which adds chunks while the backlog is late, has tests of its own."""
    timer._driver._due._backlog.pace = math.inf


def _backlog(loop: asyncio.AbstractEventLoop) -> Any:
    return aiowheel.timer_of(loop)._driver._due._backlog


def _loop(
    base: Any, max_batch: int | None = K, pace: float | None = None
) -> asyncio.AbstractEventLoop:
    """A loop-mode loop; ``pace``: the backlog's pace (None: off, one chunk per iteration)."""
    # threshold 0: every deadline ahead goes to the wheel, however near.
    loop = aiowheel.new_event_loop(base, threshold=0.0, max_batch=max_batch)
    if pace is None:
        _pace_off(aiowheel.timer_of(loop))
    else:
        _backlog(loop).pace = pace
    return loop


def _run(loop: asyncio.AbstractEventLoop, seconds: float = 0.05) -> None:
    loop.run_until_complete(asyncio.sleep(seconds))


def _file_due_batch(
    loop: asyncio.AbstractEventLoop, ran: list[object], first: Any = None, work: float = 0.0
) -> tuple[list[asyncio.TimerHandle], float]:
    """N timers 20 ms ahead, 1 us apart, filed in reverse (deadline order is not filing
    order); the first (earliest) runs ``first`` too; each takes ``work`` s."""
    start = loop.time() + 0.02
    handles: list[asyncio.TimerHandle] = [None] * N  # type: ignore[list-item]

    def fire(index: int) -> None:
        ran.append(index)
        if index == 0 and first is not None:
            first()
        if work:
            time.sleep(work)

    for index in reversed(range(N)):
        handles[index] = loop.call_at(start + index * 1e-6, fire, index)
    return handles, start


def test_a_batch_larger_than_max_batch_runs_in_deadline_order_with_the_loop_between(
    base: Any,
) -> None:
    loop = _loop(base)
    ran: list[object] = []
    reader, writer = socket.socketpair()
    reader.setblocking(False)
    try:
        loop.add_reader(reader.fileno(), lambda: ran.append(("io", reader.recv(16))))

        def first() -> None:
            loop.call_soon(ran.append, "soon")
            writer.send(b"x")  # readable from the loop's next poll on

        # A chunk takes 2 ms: the loop's poll between two chunks is shorter than the fair
        # share's floor (aiowheel._time._dispatch.Backlog.run), so one chunk per iteration.
        _file_due_batch(loop, ran, first, work=0.0005)

        async def main() -> None:
            time.sleep(0.05)  # noqa: ASYNC251  # blocks: every timer due by the next pass
            await asyncio.sleep(0.05)

        loop.run_until_complete(main())
        timers = [x for x in ran if isinstance(x, int)]
        assert timers == list(range(N))
        # One chunk of K, then what the chunk queued, before the rest.
        assert ran[: K + 1] == [0, 1, 2, 3, "soon"]
        # The poll between chunks found the socket: its reader ran before the last chunk.
        assert ran.index(("io", b"x")) < ran.index(N - 1)
        assert aiowheel.timer_of(loop).max_batch == K  # type: ignore[union-attr]
    finally:
        loop.remove_reader(reader.fileno())
        reader.close()
        writer.close()
        loop.close()


def test_a_late_backlog_runs_more_than_one_chunk_per_iteration(base: Any) -> None:
    # Blocked 50 ms past deadlines 20 ms ahead: the backlog is at least 30 ms late when it
    # first runs, so a pace of 20 ms adds a chunk (more on a loaded machine: lateness only
    # grows). The mechanism, at a pace the test can reach in milliseconds (PACE is larger).
    loop = _loop(base, pace=0.02)
    ran: list[object] = []
    try:
        _file_due_batch(loop, ran, lambda: loop.call_soon(ran.append, "soon"))
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert [x for x in ran if isinstance(x, int)] == list(range(N))
        assert ran.index("soon") >= 2 * K  # two chunks at least before the loop's next callback
    finally:
        loop.close()


def test_a_backlog_is_not_starved_by_a_busy_loop(base: Any) -> None:
    # 200 timers due together, max_batch=1, and from the first one on a loop busy elsewhere
    # for PACE / 10 per iteration (by a clock the test moves from then on: the lateness is
    # exact, and no time passes). One chunk per iteration would take 200 iterations, the last
    # timer 20 x PACE late; the pace adds a chunk for every PACE the backlog is late (one more
    # every 10 iterations here), so it drains in about 57, the last under 6 x PACE late.
    loop = _loop(base, max_batch=1, pace=PACE)
    real = loop.time
    moved: list[float] = []  # the test's clock, once the first timer has run

    def clock() -> float:
        return moved[0] if moved else real()

    loop.time = clock  # type: ignore[method-assign]
    ran: list[float] = []
    iterations = [0]
    count = 200

    def busy() -> None:
        iterations[0] += 1
        moved[0] += PACE / 10
        if len(ran) < count:
            loop.call_soon(busy)

    def fire(due: float) -> None:
        if not moved:
            moved.append(real())
            loop.call_soon(busy)
        ran.append(clock() - due)

    try:
        # One deadline for all: the first pass takes every one, and nothing after the clock
        # is the test's needs the base's own timers (uvloop's run on libuv's clock, and a
        # clock that runs ahead of it would make every later wake-up late).
        due = real() + 0.01
        for _ in range(count):
            loop.call_at(due, fire, due)
        loop.run_until_complete(_until(lambda: len(ran) == count))
        assert iterations[0] < count // 3, iterations[0]
        assert max(ran) < 8 * PACE, max(ran) / PACE
    finally:
        loop.close()


def test_a_backlog_a_little_late_runs_one_chunk_per_iteration(base: Any) -> None:
    # Under PACE late (a mass expiry's closes on a loop with time to spare): one chunk per
    # iteration, the loop's I/O and callbacks between every two, so live traffic waits for
    # one chunk at most. Blocked 50 ms past deadlines 20 ms ahead: 30 ms late, under PACE.
    assert PACE > 0.2
    loop = _loop(base, pace=PACE)
    ran: list[object] = []
    late: list[float] = []
    try:

        def first() -> None:
            late.append(loop.time() - start)
            loop.call_soon(ran.append, "soon")

        _, start = _file_due_batch(loop, ran, first)
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert [x for x in ran if isinstance(x, int)] == list(range(N))
        if late[0] < PACE:  # as good as certain: a stall of 200 ms would make it later
            assert ran.index("soon") == K  # the loop's callback right after the first chunk
    finally:
        loop.close()


async def _until(done: Any, iterations: int = 100_000) -> None:
    """Until ``done()``, a loop iteration at a time; a lost timer reads as a failure, not a
    hang (the loop's clock may be the test's, so the bound is iterations, not time)."""
    for _ in range(iterations):
        if done():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not done after {iterations:,} loop iterations")


def test_without_a_bound_the_batch_runs_in_one_go(base: Any) -> None:
    loop = _loop(base, max_batch=None)
    ran: list[object] = []
    try:
        _file_due_batch(loop, ran, lambda: loop.call_soon(ran.append, "soon"))
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert ran == [*range(N), "soon"]
        assert aiowheel.timer_of(loop).max_batch is None  # type: ignore[union-attr]
    finally:
        loop.close()


def test_a_cancel_of_a_later_chunks_timer_holds_and_a_new_one_runs_once(base: Any) -> None:
    loop = _loop(base)
    ran: list[object] = []
    try:
        handles: list[asyncio.TimerHandle] = []

        def first() -> None:
            handles[6].cancel()
            # Filed already due, earlier than what still waits: it joins the backlog in its
            # place (before 9 at the latest), once.
            timer = aiowheel.timer_of(loop)
            assert timer is not None
            timer.call_at(start - 1.0, ran.append, "past")
            loop.call_at(loop.time() + 0.03, ran.append, "later")
            time.sleep(0.005)  # the new one's bucket is due by the next pass

        filed, start = _file_due_batch(loop, ran, first)
        handles.extend(filed)
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop, 0.1)
        assert 6 not in ran
        assert handles[6].cancelled()
        assert sorted(x for x in ran if isinstance(x, int)) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
        assert [x for x in ran if isinstance(x, int)] == [0, 1, 2, 3, 4, 5, 7, 8, 9]
        assert ran.count("past") == 1 and ran.count("later") == 1
        assert ran.index("past") < ran.index(9) < ran.index("later")
        assert aiowheel.timer_of(loop).stats().pending == 0  # type: ignore[union-attr]
    finally:
        loop.close()


def test_heartbeats_and_loop_timers_keep_deadline_order_across_chunks(base: Any) -> None:
    # The compiled build holds loop timers in the native core and heartbeats in the driver:
    # the backlog is a merge of both.
    loop = _loop(base)
    ran: list[object] = []
    try:
        timer = aiowheel.timer_of(loop)
        assert timer is not None

        async def main() -> None:
            start = loop.time() + 0.02
            beats = []
            for index in reversed(range(N)):
                when = start + index * 1e-6
                if index % 3 == 0:
                    beats.append(timer.every(100.0, ran.append, index, start=when))
                else:
                    loop.call_at(when, ran.append, index)
            time.sleep(0.05)  # noqa: ASYNC251  # blocks the loop: all due in one pass
            await asyncio.sleep(0.05)
            for beat in beats:
                beat.cancel()

        loop.run_until_complete(main())
        assert ran == list(range(N))
    finally:
        loop.close()


def test_an_error_in_a_chunk_is_reported_and_the_rest_runs(base: Any) -> None:
    loop = _loop(base)
    ran: list[object] = []
    seen: list[dict[str, Any]] = []
    try:
        loop.set_exception_handler(lambda _, context: seen.append(context))

        def boom() -> None:
            raise ZeroDivisionError("boom")

        handles, start = _file_due_batch(loop, ran)
        handles[5].cancel()
        loop.call_at(start + 5e-6, boom)
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert ran == [0, 1, 2, 3, 4, 6, 7, 8, 9]
        [context] = seen
        assert isinstance(context["exception"], ZeroDivisionError)
    finally:
        loop.close()


def test_keyboard_interrupt_mid_chunk_leaves_the_loop_and_the_rest_runs_next(
    base: Any,
) -> None:
    loop = _loop(base)
    ran: list[object] = []
    try:

        def interrupt() -> None:
            ran.append("interrupt")
            raise KeyboardInterrupt

        handles, start = _file_due_batch(loop, ran)
        handles[5].cancel()
        loop.call_at(start + 5e-6, interrupt)  # in the second chunk: 4, interrupt, 6, 7
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        with pytest.raises(KeyboardInterrupt):
            loop.run_forever()
        assert ran[:6] == [0, 1, 2, 3, 4, "interrupt"]
        if base is None:  # asyncio's loop leaves at once (uvloop ends its iteration first)
            assert ran == [0, 1, 2, 3, 4, "interrupt"]
        _run(loop)
        assert ran == [0, 1, 2, 3, 4, "interrupt", 6, 7, 8, 9]
    finally:
        loop.close()


def test_debug_mode_runs_each_due_callback_in_order(base: Any) -> None:
    loop = _loop(base)
    loop.set_debug(True)
    ran: list[object] = []
    try:
        _file_due_batch(loop, ran)
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert ran == list(range(N))
    finally:
        loop.close()


def test_debug_mode_turned_on_while_a_backlog_waits_runs_it_in_order_once(base: Any) -> None:
    loop = _loop(base)
    ran: list[object] = []
    seen: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: seen.append(context))
    try:

        def first() -> None:
            loop.set_debug(True)  # read by the next pass, which hands the backlog to the loop
            timer = aiowheel.timer_of(loop)
            assert timer is not None
            timer.call_at(start - 1.0, ran.append, "past")
            time.sleep(0.005)

        _, start = _file_due_batch(loop, ran, first)
        loop.run_until_complete(asyncio.sleep(0.0))
        time.sleep(0.05)
        _run(loop)
        assert [x for x in ran if isinstance(x, int)] == list(range(N))
        assert ran.count("past") == 1 and ran.index("past") < ran.index(N - 1)
        # The chunk still queued found the backlog gone, and did nothing. (uvloop's own
        # TimerHandle fails when debug mode comes on while it runs, as without aiowheel:
        # `loop.call_later(0.001, loop.set_debug, True)` on uvloop 0.23 reports the same.)
        errors = [c["exception"] for c in seen]
        if base is not None:
            errors = [e for e in errors if not isinstance(e, UnboundLocalError)]
        assert not errors
    finally:
        loop.close()


def test_a_plain_timer_chunks_its_batch_too() -> None:
    ran: list[object] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        async with aiowheel.Timer(max_batch=K) as timer:
            _pace_off(timer)
            start = timer.time() + 0.02
            for index in reversed(range(N)):
                timer.call_at(start + index * 1e-6, ran.append, index)
            timer.call_at(start, loop.call_soon, ran.append, "soon")
            time.sleep(0.05)  # noqa: ASYNC251  # blocks the loop: all due in one pass
            await asyncio.sleep(0.05)

    asyncio.run(main())
    assert [x for x in ran if isinstance(x, int)] == list(range(N))
    # The first chunk is 0, the call_soon, 1, 2; what it queued runs before the next chunk.
    assert ran[:K] == [0, 1, 2, "soon"]


def test_a_virtual_clock_does_not_move_while_a_chunk_waits(base: Any) -> None:
    # Every timer due at one virtual deadline runs at that time, chunk after chunk (a queued
    # chunk is work: the loop is not idle, so the clock cannot jump to the next wake-up).
    factory = aiowheel.testing.virtual_loop_factory(base)
    factory = LoopFactory(dataclasses.replace(factory.config, max_batch=K))
    seen: list[tuple[object, float]] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert aiowheel.timer_of(loop).max_batch == K  # type: ignore[union-attr]
        start = loop.time()
        loop.call_at(start + 1.0, loop.call_soon, lambda: seen.append(("soon", loop.time())))
        for index in range(N):
            loop.call_at(start + 1.0, lambda i=index: seen.append((i, loop.time())))
        loop.call_at(start + 1.002, lambda: seen.append(("next", loop.time())))
        await asyncio.sleep(2.0)

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    labels = [label for label, _ in seen]
    assert labels[:K] == [0, 1, 2, "soon"]  # the first chunk: the call_soon, 0, 1, 2
    assert labels[-1] == "next"
    times = {label: when for label, when in seen}
    assert {times[i] for i in range(N)} == {times["soon"]} == {1.0}
    assert times["next"] > 1.0


@pytest.mark.once
@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("4", TypeError)],
)
def test_a_bad_max_batch_is_refused_everywhere(value: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="max_batch must be a positive int or None"):
        aiowheel.loop_factory(max_batch=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="max_batch must be a positive int or None"):
        aiowheel.new_event_loop(max_batch=value)  # type: ignore[arg-type]
    with pytest.raises(error, match="max_batch must be a positive int or None"):
        aiowheel.Timer(max_batch=value)  # type: ignore[arg-type]


@pytest.mark.once
def test_the_setting_is_kept_and_shown() -> None:
    assert aiowheel.Timer().max_batch is DEFAULT_MAX_BATCH is None  # asyncio's: no bound
    assert aiowheel.Timer(max_batch=None).max_batch is None
    factory = aiowheel.loop_factory(max_batch=32)
    assert factory.max_batch == factory.config.max_batch == 32
    assert "max_batch=32" in repr(factory)
    assert "max_batch" not in repr(aiowheel.loop_factory())
    assert aiowheel.loop_factory().max_batch is None
