"""aiowheel.testing (and aiowheel._virtual._virtual): a loop on a virtual clock, on every installed
base.

Wall-time bounds here are generous on purpose (seconds where the virtual run takes
milliseconds): they only tell "jumped" from "waited for real" (an hour, a minute).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import pickle
import random
import sys
import threading
import time
import warnings
from collections.abc import Callable, Coroutine
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiowheel
import aiowheel.testing as testing
from aiowheel._loopmode._loop import LoopFactory
from tests.support import Base

TICK = 0.001


def run(coro: Any, base: Base, **options: Any) -> Any:
    return testing.run(coro, base=base, **options)


# -- the clock and autojump -------------------------------------------------------------------


def test_an_hour_of_sleep_takes_no_wall_time(base: Base) -> None:
    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        before = loop.time()
        await asyncio.sleep(3600)
        return before, loop.time()

    wall = time.perf_counter()
    before, after = run(main(), base)
    assert before == 0.0
    assert after == 3600.0
    assert time.perf_counter() - wall < 60  # an hour of virtual time, not of real


def test_timeouts_fire_at_their_exact_deadlines(base: Base) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(10):
                await asyncio.sleep(100)
        seen.append(loop.time())
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.Event().wait(), 30)
        seen.append(loop.time())
        with pytest.raises(TimeoutError):
            async with aiowheel.timeout(2.5):
                await asyncio.Event().wait()
        seen.append(loop.time())
        return seen

    assert run(main(), base) == [10.0, 40.0, 42.5]


def test_a_callback_runs_at_its_own_deadline(base: Base) -> None:
    """At D exactly, not at D's tick; equal deadlines in filing order."""
    rng = random.Random(25)
    deadlines = [rng.uniform(0, 5) for _ in range(300)]
    deadlines += [0.007, 0.3, 1.0, 2.001, 0.0105, 0.0105]  # float-unfriendly tick boundaries

    async def main() -> list[tuple[int, float, float]]:
        loop = asyncio.get_running_loop()
        ran: list[tuple[int, float, float]] = []

        def record(index: int, deadline: float) -> None:
            ran.append((index, deadline, loop.time()))

        for index, deadline in enumerate(deadlines):
            loop.call_at(deadline, record, index, deadline)
        await asyncio.sleep(6)
        return ran

    ran = run(main(), base)
    assert sorted(index for index, _, _ in ran) == list(range(len(deadlines)))
    for _, deadline, at in ran:
        assert at == deadline
    times = [at for _, _, at in ran]
    assert times == sorted(times)
    # Within one tick, deadline order, and equal deadlines in the order they were filed: the
    # same run every time.
    assert [(deadline, index) for index, deadline, _ in ran] == sorted(
        (deadline, index) for index, deadline, _ in ran
    )
    assert [index for index, deadline, _ in ran if deadline == 0.0105] == [304, 305]


# -- exact time: each timer at its own deadline (issue 48) --------------------------------------

# Delays of every kind a test writes: decimal (0.1 is no binary float), binary fractions, thirds,
# tiny (below the tick) and huge (a year, 1e9 s), and any float.
_DELAYS = st.one_of(
    st.integers(0, 10**6).map(lambda n: n / 1000),
    st.integers(0, 10**6).map(lambda n: n / 1024),
    st.integers(1, 3000).map(lambda n: n / 3),
    st.sampled_from([0.1, 0.3, 1 / 3, 2 / 3, 1e-9, 1e-7, 3e-7, 5e-4, 86400.0 * 365, 1e9]),
    st.floats(0, 1e7, allow_nan=False, allow_infinity=False),
)
_KINDS = ("call_later", "call_at", "sleep", "timeout", "timer_sleep", "every", "watchdog")


def _at_own_deadlines(
    delays: list[float], kinds: list[str], fuzzed: bool = False
) -> Callable[[], Coroutine[Any, Any, list[tuple[str, float, float]]]]:
    """A program filing one timer of each kind per delay, all at once; it returns the timers
    that ran at a time other than their deadline: (kind, deadline, loop.time())."""

    async def main() -> list[tuple[str, float, float]]:
        loop = asyncio.get_running_loop()
        own = aiowheel.timer_of(loop)
        assert own is not None
        misses: list[tuple[str, float, float]] = []

        def check(kind: str, when: float) -> None:
            now = loop.time()
            if now != when and not (fuzzed and now > when):
                misses.append((kind, when, now))

        async def one(kind: str, delay: float) -> None:
            done = loop.create_future()
            if kind == "call_later":
                handle = loop.call_later(
                    delay, lambda: (check(kind, handle.when()), done.set_result(None))
                )
                await done
            elif kind == "call_at":
                when = loop.time() + delay
                loop.call_at(when, lambda: (check(kind, when), done.set_result(None)))
                await done
            elif kind == "sleep":
                when = loop.time() + delay
                await asyncio.sleep(delay)
                check(kind, when)
            elif kind == "timeout":
                try:
                    async with asyncio.timeout(delay) as scope:
                        await loop.create_future()
                except TimeoutError:
                    when = scope.when()
                    assert when is not None
                    check(kind, when)
            elif kind == "timer_sleep":
                when = loop.time() + delay
                await own.sleep(delay)
                check(kind, when)
            elif (
                kind == "every" and delay >= 1e-6 and loop.time() + 2 * delay > loop.time() + delay
            ):
                # (A period below the clock's float spacing never moves on: not a schedule.)
                first = loop.time() + delay
                beat = own.every(
                    delay,
                    lambda: (
                        (check(kind, first), done.set_result(None)) if not done.done() else None
                    ),
                )
                await done
                beat.cancel()
            elif kind == "watchdog" and delay > 0:
                when = loop.time() + delay
                own.watchdog(delay, lambda: (check(kind, when), done.set_result(None)))
                await done

        await asyncio.gather(*(one(kind, delay) for delay in delays for kind in kinds))
        return misses

    return main


@pytest.mark.bases("asyncio", "uvloop")
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    delays=st.lists(_DELAYS, min_size=1, max_size=8),
    start=st.sampled_from([0.0, 0.1, 1e6, 1.7e9]),
)
def test_every_timer_runs_with_the_clock_at_its_own_deadline(
    base: Base, delays: list[float], start: float
) -> None:
    """loop.time() == the timer's deadline when it runs (not its tick's time), for every kind
    of timer: the loop's call_later / call_at (the native core in the compiled build), sleeps,
    timeouts, and the Timer's own entries (sleep, every, watchdog: the driver's wheel)."""
    assert run(_at_own_deadlines(delays, list(_KINDS))(), base, start=start) == []


def test_six_hundred_sleeps_of_a_tenth_end_at_sixty(base: Base) -> None:
    """The issue's program: 600 x sleep(0.1) ended at 60.288 (each sleep ran at its deadline
    rounded up to the tick, and the next one counted from there)."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        for _ in range(600):
            await asyncio.sleep(0.1)
        return loop.time() - start

    assert run(main(), base) == pytest.approx(60.0, abs=1e-9)


def test_the_docs_ticks_print_on_time(base: Base) -> None:
    """docs/testing-time.md's example: [0.1, 0.2, 0.3], not [0.1, 0.2, 0.301]."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        for _ in range(3):
            await asyncio.sleep(0.1)
            seen.append(round(loop.time(), 6))
        return seen

    assert run(main(), base) == [0.1, 0.2, 0.3]


def test_timers_in_one_tick_each_run_at_their_own_deadline_in_order(base: Base) -> None:
    """Several distinct deadlines in one bucket: the clock lands on each in turn, and a timer
    filed at one of them for a deadline still inside the tick runs at that deadline too."""

    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        ran: list[tuple[str, float]] = []
        for when in (0.0104, 0.0101, 0.0103, 0.0101):
            loop.call_at(when, lambda w=when: ran.append((f"at {w}", loop.time())))

        def refile() -> None:
            ran.append(("refile", loop.time()))
            loop.call_at(0.01025, lambda: ran.append(("inner", loop.time())))

        loop.call_at(0.0102, refile)
        await asyncio.sleep(1)
        return ran

    assert run(main(), base) == [
        ("at 0.0101", 0.0101),
        ("at 0.0101", 0.0101),
        ("refile", 0.0102),
        ("inner", 0.01025),
        ("at 0.0103", 0.0103),
        ("at 0.0104", 0.0104),
    ]


@pytest.mark.bases("asyncio", "uvloop")
def test_advance_lands_on_each_exact_deadline(base: Base) -> None:
    delays = [0.1, 0.3, 1 / 3, 0.0105, 2.0000001, 7 / 1024, 5e-7]

    async def main() -> tuple[list[tuple[str, float, float]], float]:
        task = asyncio.ensure_future(_at_own_deadlines(delays, list(_KINDS))())
        await asyncio.sleep(0)
        await testing.advance(3)
        assert task.done()
        return task.result(), asyncio.get_running_loop().time()

    assert run(main(), base, autojump=False) == ([], 3.0)


@pytest.mark.bases("asyncio", "uvloop")
def test_exact_under_max_batch(base: Base) -> None:
    """max_batch=2: a due batch runs two callbacks per loop iteration; each still runs at its
    own deadline (the clock does not move while a chunk waits, nor land a tick late)."""
    factory = testing.virtual_loop_factory(base)
    factory = LoopFactory(dataclasses.replace(factory.config, max_batch=2))
    delays = [0.1, 0.1, 0.1, 0.1001, 0.1002, 1 / 3, 1 / 3, 0.3]
    with asyncio.Runner(loop_factory=factory) as runner:
        assert runner.run(_at_own_deadlines(delays, ["call_later", "call_at", "sleep"])()) == []


@pytest.mark.bases("asyncio", "uvloop")
@pytest.mark.parametrize("seed", range(4))
def test_a_fuzzed_clock_is_exact_plus_its_seeded_lateness(base: Base, seed: int) -> None:
    """Under fuzzing each timer runs late by at most the jitter past its own deadline (before:
    past its deadline's tick, a tick more)."""
    jitter = 0.0005

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        late: list[float] = []

        async def one(delay: float) -> None:
            when = loop.time() + delay
            await asyncio.sleep(delay)
            late.append(loop.time() - when)

        await asyncio.gather(*(one(d) for d in [0.1, 0.2001, 1 / 3, 0.0107, 0.5, 0.7003] * 5))
        return late

    late = run(main(), base, seed=seed, jitter=jitter)
    assert min(late) >= 0.0
    assert max(late) <= jitter + 1e-9, max(late)


def test_start_and_time_never_goes_back(base: Base) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        readings = [loop.time()]
        for delay in (0.5, 0, 0.25, 3, 0.001):
            await asyncio.sleep(delay)
            readings.append(loop.time())
        return readings

    readings = run(main(), base, start=1000.0)
    assert readings[0] == 1000.0
    assert readings == sorted(readings)
    assert readings[-1] == pytest.approx(1003.751)


def test_executor_work_is_waited_for_not_skipped(base: Base) -> None:
    """While run_in_executor / to_thread work runs, the clock does not jump."""

    async def main() -> tuple[bool, bool, float]:
        loop = asyncio.get_running_loop()
        job = loop.run_in_executor(None, time.sleep, 0.3)
        sleeper = asyncio.ensure_future(asyncio.sleep(100))
        done, _ = await asyncio.wait([job, sleeper], return_when=asyncio.FIRST_COMPLETED)
        job_first = job in done and sleeper not in done
        await sleeper
        thread = asyncio.ensure_future(asyncio.to_thread(time.sleep, 0.2))
        other = asyncio.ensure_future(asyncio.sleep(50))
        done, _ = await asyncio.wait([thread, other], return_when=asyncio.FIRST_COMPLETED)
        thread_first = thread in done and other not in done
        await other
        return job_first, thread_first, loop.time()

    assert run(main(), base) == (True, True, 150.0)


def test_the_default_executor_is_joined_not_jumped_over(base: Base) -> None:
    """asyncio.run joins the default executor's threads under a 300 s timeout on the loop's
    clock (3.12+): a job still running when main returns is waited for, in real time, with no
    "did not finish joining" warning (the clock would otherwise jump the 300 s at once)."""
    finished: list[bool] = []

    def job() -> None:
        time.sleep(0.3)
        finished.append(True)

    async def main() -> None:
        asyncio.get_running_loop().run_in_executor(None, job)  # not awaited

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run(main(), base)
    assert finished == [True]
    assert [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)] == []


def test_a_same_loop_tcp_echo_is_not_skipped_over(base: Base) -> None:
    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()

        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(await reader.read(100))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with asyncio.timeout(5):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            for _ in range(20):
                writer.write(b"ping")
            await writer.drain()
            data = await reader.read(100)
            while len(data) < 80:
                more = await reader.read(100)
                if not more:
                    break
                data += more
        writer.close()
        server.close()
        await server.wait_closed()
        return data, loop.time()

    data, now = run(main(), base)
    assert data == b"ping" * 20
    assert now < 5.0  # the timeout never came due: no jump while the echo was under way


def test_idle_io_lets_the_clock_jump(base: Base) -> None:
    """A reader waiting on a socket with nothing coming is idle: its timeout fires (looptime's
    "idle I/O" nuance) at exactly its deadline."""

    async def main() -> float:
        loop = asyncio.get_running_loop()
        # The server's side is kept open: a StreamWriter dropped unclosed closes its transport
        # (3.13+), and the reader would see EOF instead of waiting.
        accepted: list[asyncio.StreamWriter] = []
        server = await asyncio.start_server(lambda r, w: accepted.append(w), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(30):
                await reader.read(1)
        writer.close()
        for peer in accepted:
            peer.close()
        server.close()
        return loop.time()

    wall = time.perf_counter()
    assert run(main(), base) == 30.0
    assert time.perf_counter() - wall < 20


def test_an_event_set_by_a_timer_is_not_finalized_early(base: Base) -> None:
    """looptime's "premature finalization": a task awaiting what a later timer sets is
    still waiting when the clock gets there, and then finishes."""

    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        loop.call_later(7, event.set)
        seen = []

        async def waiter() -> None:
            await event.wait()
            seen.append(loop.time())

        await asyncio.gather(waiter(), waiter())
        return seen

    assert run(main(), base) == [7.0, 7.0]


def test_a_reply_from_another_process_within_the_real_idle_time(base: Base) -> None:
    """autojump=0.5: a peer in another process answering after 0.1 s of real time does not
    trip a 5 s timeout."""
    code = "import time; time.sleep(0.1); print('pong', flush=True)"

    async def main() -> tuple[bytes, float]:
        loop = asyncio.get_running_loop()
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE
        )
        assert process.stdout is not None
        async with asyncio.timeout(5):
            line = await process.stdout.readline()
            await process.wait()
        return line, loop.time()

    line, now = run(main(), base, autojump=0.5)
    assert line == b"pong\n"
    assert now < 5.0


def test_autojump_after_real_idle_time_still_jumps(base: Base) -> None:
    async def main() -> float:
        await asyncio.sleep(20)
        return asyncio.get_running_loop().time()

    wall = time.perf_counter()
    assert run(main(), base, autojump=0.05) == 20.0
    assert time.perf_counter() - wall < 10


# -- advance ----------------------------------------------------------------------------------


def test_manual_mode_moves_only_by_advance(base: Base) -> None:
    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        sleeper = asyncio.ensure_future(asyncio.sleep(10))
        seen: list[Any] = []
        await asyncio.sleep(0)
        for _ in range(20):  # left alone, the clock stays where it is
            await asyncio.sleep(0)
        seen.append((sleeper.done(), loop.time()))
        await testing.advance(9.999)
        seen.append((sleeper.done(), loop.time()))
        await testing.advance(0.001)
        await asyncio.sleep(0)
        seen.append((sleeper.done(), loop.time()))
        return seen

    assert run(main(), base, autojump=False) == [(False, 0.0), (False, 9.999), (True, 10.0)]


def test_advance_runs_each_timer_at_its_own_deadline_and_lets_tasks_run(base: Base) -> None:
    """Each timer on the way at its deadline, in order; a task woken at a deadline runs (and
    files its next timer) before the clock moves past it."""

    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        log: list[tuple[str, float]] = []

        async def heartbeat() -> None:
            while True:
                await asyncio.sleep(1)
                log.append(("beat", loop.time()))

        task = asyncio.ensure_future(heartbeat())
        loop.call_later(2.5, lambda: log.append(("call", loop.time())))
        await asyncio.sleep(0)
        await testing.advance(3.2)
        log.append(("advanced", loop.time()))
        task.cancel()
        return log

    log = run(main(), base, autojump=False)
    assert log == [
        ("beat", 1.0),
        ("beat", 2.0),
        ("call", 2.5),
        ("beat", 3.0),
        ("advanced", 3.2),
    ]


def test_advance_under_autojump_and_zero(base: Base) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        await testing.advance(0)
        seen.append(loop.time())
        await testing.advance(12.5)
        seen.append(loop.time())
        return seen

    assert run(main(), base) == [0.0, 12.5]


@pytest.mark.parametrize(
    ("seconds", "error", "message"),
    [
        (-1, ValueError, "non-negative"),
        (math.nan, ValueError, "NaN"),
        (math.inf, ValueError, "finite"),
        ("1", TypeError, "seconds"),
        (True, TypeError, "bool"),
    ],
)
def test_advance_refuses_bad_seconds(seconds: Any, error: type[Exception], message: str) -> None:
    async def main() -> float:
        loop = asyncio.get_running_loop()
        with pytest.raises(error, match=message):
            await testing.advance(seconds)
        return loop.time()

    assert testing.run(main(), autojump=False) == 0.0  # nothing moved


def test_advance_on_a_real_loop_says_so() -> None:
    async def main() -> None:
        with pytest.raises(RuntimeError, match="virtual clock"):
            await testing.advance(1)

    asyncio.run(main())
    aiowheel.run(main())


# -- the factory, the clock object, bad input -------------------------------------------------


def test_the_factory_pickles_and_says_what_it_makes() -> None:
    factory = testing.virtual_loop_factory(autojump=0.25, start=5.0)
    copy = pickle.loads(pickle.dumps(factory))
    assert copy == factory
    assert "virtual_loop_factory" in repr(factory)
    assert "autojump=0.25" in repr(factory)
    loop = copy()
    try:
        assert loop.time() == 5.0
        clock = testing.clock_of(loop)
        assert clock is not None
        assert clock.now == 5.0
        assert clock.autojump == 0.25
        assert aiowheel.timer_of(loop) is not None
        config = aiowheel.config_of(loop)
        assert config is not None and config.clock == testing.VirtualTime(0.25, 5.0)
    finally:
        loop.close()
    assert factory != aiowheel.loop_factory()
    plain = aiowheel.new_event_loop()
    try:
        assert testing.clock_of(plain) is None
    finally:
        plain.close()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"autojump": "yes"}, TypeError, "autojump"),
        ({"autojump": -1}, ValueError, "autojump"),
        ({"autojump": math.nan}, ValueError, "autojump"),
        ({"start": math.nan}, ValueError, "start"),
        ({"start": math.inf}, ValueError, "start"),
        ({"start": "0"}, TypeError, "start"),
        ({"tick": 0}, ValueError, "tick"),
        ({"base": int}, TypeError, "base"),
    ],
)
def test_the_factory_refuses_bad_input(
    options: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        testing.virtual_loop_factory(**options)


def test_run_refuses_inside_a_running_loop_and_closes_the_coroutine() -> None:
    async def main() -> None:
        inner = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="running event loop"):
            testing.run(inner)

    asyncio.run(main())


def test_a_virtual_loop_runs_on_another_thread_too() -> None:
    result: list[float] = []

    async def main() -> None:
        await asyncio.sleep(60)
        result.append(asyncio.get_running_loop().time())

    thread = threading.Thread(target=testing.run, args=(main(),))
    thread.start()
    thread.join(30)
    assert result == [60.0]


# -- one clock for the loop, a fake one included ----------------------------------------------


def _fake_clock_run(loop_factory: Any) -> list[Any]:
    """What a test that replaces ``loop.time`` sees (aiolimiter's tests do this)."""

    async def main() -> list[Any]:
        loop = asyncio.get_running_loop()
        kept = loop.call_later(3600, lambda: None)  # filed by the loop's own clock
        shift = [time.monotonic()]
        seen: list[Any] = []
        fired: list[float] = []
        with mock.patch.object(loop, "time", lambda: time.monotonic() - shift[0]):
            handle = loop.call_at(0.0, lambda: None)
            seen.append(round(handle.when(), 6))
            later = loop.call_later(30, lambda: fired.append(loop.time()))
            seen.append(round(later.when()))
            await asyncio.sleep(0.02)
            seen.append(list(fired))
            shift[0] -= 60  # the fake clock jumps a minute
            await asyncio.sleep(0.05)
            seen.append(len(fired))
        seen.append(kept.cancelled())
        seen.append(round(kept.when() - loop.time()))
        kept.cancel()
        return seen

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(main())


@pytest.mark.bases("asyncio")
def test_a_fake_loop_time_files_and_fires_every_timer(base: Base) -> None:
    """As on asyncio: timers filed and fired by the replaced clock, and by the loop's own
    once the replacement is removed."""
    expected = _fake_clock_run(asyncio.new_event_loop)
    assert expected == [0.0, 30, [], 1, False, 3600]
    assert _fake_clock_run(aiowheel.loop_factory(base)) == expected


def test_autojump_true_and_one_second_are_different_clocks_and_so_are_false_and_zero() -> None:
    """True == 1.0 and False == 0 in Python; the loop classes are cached by config: each must
    still get the clock it asked for, whatever ran before in the process."""

    async def quick() -> float:
        await asyncio.sleep(50)
        return asyncio.get_running_loop().time()

    async def advanced() -> float:
        sleeper = asyncio.ensure_future(asyncio.sleep(50))
        await testing.advance(50)
        await sleeper
        return asyncio.get_running_loop().time()

    assert testing.run(quick(), autojump=True) == 50.0
    wall = time.perf_counter()
    assert testing.run(quick(), autojump=1.0) == 50.0
    assert time.perf_counter() - wall >= 1.0  # a second of real idle time first, not at once
    assert testing.run(advanced(), autojump=False) == 50.0
    # 0 s of real idle time: it jumps (on False's clock it would wait forever: a thread, so a
    # regression fails here instead of hanging the suite).
    result: list[float] = []
    thread = threading.Thread(
        target=lambda: result.append(testing.run(quick(), autojump=0)), daemon=True
    )
    thread.start()
    thread.join(60)
    assert result == [50.0]
    factories = {testing.virtual_loop_factory(autojump=a) for a in (True, 1.0, False, 0)}
    assert len({f.config for f in factories}) == 4
