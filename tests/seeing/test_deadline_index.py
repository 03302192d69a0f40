"""The deadline guarding a task, read in the time of its own timeouts (issue 61, item 5): the
wheels' index of the timeouts guarding each task (aiowheel._time._observe.Guards) and the
pruned walk of the loop's heap (_census._heap_deadline_for) answer exactly what one pass over
every pending timer answers (``scanned_deadline``), whatever the tasks do with their timeouts,
and the index lets go of what no longer guards anything."""

from __future__ import annotations

import asyncio
import gc
import math
import random
import sys
import sysconfig
import weakref
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import aiowheel
import aiowheel.loops
import aiowheel.testing as testing
from aiowheel._deadlines._budget import budget
from aiowheel._seeing import _census
from aiowheel._seeing._census import deadline_before, scanned_deadline, task_deadline
from aiowheel._time._binding import listed_on

# Delays: near ones go to the loop's own heap on loop mode, the rest to the wheel.
DELAYS = (0.0, 0.0004, 0.003, 0.05, 0.3, 2.0, 30.0, 3600.0)


async def worker(rng: random.Random, depth: int, scale: float) -> None:
    """Timeouts of every kind entered, nested, rescheduled, expired and left."""
    loop = asyncio.get_running_loop()
    kind = rng.choice(("asyncio", "aiowheel", "wait_for", "none"))
    delay = rng.choice(DELAYS) * scale

    async def body() -> None:
        await asyncio.sleep(rng.choice((0.0, 0.002, 0.1, 0.5)) * scale)
        if depth and rng.random() < 0.6:
            await worker(rng, depth - 1, scale)
        await asyncio.sleep(rng.choice((0.0, 0.01, 0.4)) * scale)

    try:
        if kind == "asyncio" or kind == "aiowheel":
            made = asyncio.timeout(delay) if kind == "asyncio" else aiowheel.timeout(delay)
            async with made as cm:
                await asyncio.sleep(0)
                if rng.random() < 0.3:  # moved: later, sooner, or off
                    when = rng.choice((None, loop.time() + rng.choice(DELAYS) * scale))
                    cm.reschedule(when)
                await body()
        elif kind == "wait_for":
            await asyncio.wait_for(body(), delay or None)
        else:
            await body()
    except TimeoutError:
        pass


async def compare(seed: int, scale: float, steps: int) -> int:
    """Workers at work while a checker compares the fast reading with the full pass for each
    of them, at random moments; returns how many comparisons found a deadline."""
    rng = random.Random(seed)
    loop = asyncio.get_running_loop()
    workers = [
        asyncio.ensure_future(worker(random.Random(rng.random()), 3, scale)) for _ in range(12)
    ]
    found = 0
    for step in range(steps):
        await asyncio.sleep(rng.choice((0.0, 0.001, 0.05, 0.3)) * scale)
        for task in workers:
            if task.done():
                continue
            expected = scanned_deadline(loop, task)
            assert task_deadline(loop, task) == expected, (seed, step)
            bound = loop.time() + rng.choice(DELAYS) * scale
            before = deadline_before(loop, (task,), bound)
            assert before == (expected if expected is not None and expected < bound else None)
            found += expected is not None
        if all(task.done() for task in workers):
            workers = [
                asyncio.ensure_future(worker(random.Random(rng.random()), 3, scale))
                for _ in range(12)
            ]
    for task in workers:
        task.cancel()
    await asyncio.gather(*workers, return_exceptions=True)
    return found


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_index_answers_what_a_pass_over_every_timer_answers_on_loop_mode(seed: int) -> None:
    # A virtual clock: minutes of timeouts in a moment, exactly.
    assert testing.run(compare(seed, 1.0, 150)) > 100


@pytest.mark.parametrize("factory", [asyncio.new_event_loop, aiowheel.loops.asyncio_loop])
def test_the_heap_walk_answers_what_a_pass_answers_on_a_real_clock(factory: Any) -> None:
    # asyncio's own loop (every timeout on its heap) and loop mode on a real clock, the delays
    # scaled down to keep it short.
    loop = factory()
    try:
        assert loop.run_until_complete(compare(7, 0.02, 120)) > 50
    finally:
        loop.close()


def test_the_index_lets_go_of_finished_tasks_and_spent_timeouts() -> None:
    async def main() -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        (driver,) = listed_on(loop)
        assert aiowheel.time_left() is None and driver.guards.active  # kept from the first ask

        async def one() -> None:
            async with asyncio.timeout(30):
                async with aiowheel.timeout(20):
                    await asyncio.sleep(0)

        refs = []
        for _ in range(2000):
            task = asyncio.ensure_future(one())
            refs.append(weakref.ref(task))
            await task
        del task
        gc.collect()
        alive = sum(ref() is not None for ref in refs)
        return len(driver.guards), alive

    noted, alive = aiowheel.run(main())
    assert noted <= 512  # 4,000 noted in all: swept as it goes, never more than a sweep's worth
    assert alive <= 256  # the tasks themselves let go (those since the last sweep at most)


def test_a_long_task_entering_timeout_after_timeout_keeps_a_short_list() -> None:
    async def main() -> int:
        loop = asyncio.get_running_loop()
        (driver,) = listed_on(loop)
        aiowheel.time_left()
        for _ in range(1000):
            async with asyncio.timeout(30):
                await asyncio.sleep(0)
        async with asyncio.timeout(40):
            assert aiowheel.time_left() == pytest.approx(40, abs=1)
            return max(len(guards) for guards in driver.guards._by_task.values())

    assert aiowheel.run(main()) <= 5


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="3.11's wait_for has a timer of its own")
def test_3_11_wait_for_is_noted_in_the_task_that_awaits_it() -> None:
    async def main() -> float | None:
        async def inner() -> float | None:  # in a task of its own, which wait_for awaits
            await asyncio.sleep(0)
            return budget()

        return await asyncio.wait_for(inner(), 25)

    left = aiowheel.run(main())
    assert left is not None and 24 < left <= 25


def test_nothing_is_noted_until_a_deadline_is_asked_then_what_was_pending_is_found() -> None:
    # A loop nobody asks keeps no index (its timeouts pay no note); the first ask finds every
    # timeout already pending, and those moved or entered later are noted as they are filed.
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        (driver,) = listed_on(loop)
        seen: list[object] = []
        async with asyncio.timeout(300) as outer, aiowheel.timeout(None) as own:
            inner = asyncio.timeout(None)
            async with inner:
                await asyncio.sleep(0)
                seen.append((driver.guards.active, len(driver.guards)))
                start = loop.time()
                seen.append(round(aiowheel.current_deadline() - start))  # type: ignore[operator]
                seen.append(driver.guards.active)
                own.reschedule(start + 200)  # entered before the index: noted when moved
                seen.append(round(aiowheel.current_deadline() - start))  # type: ignore[operator]
                inner.reschedule(start + 100)
                seen.append(round(aiowheel.current_deadline() - start))  # type: ignore[operator]
                outer.reschedule(start + 50)
                seen.append(round(aiowheel.current_deadline() - start))  # type: ignore[operator]
            seen.append(round(aiowheel.current_deadline() - start))  # type: ignore[operator]
        seen.append(aiowheel.current_deadline())
        return seen

    for run in (aiowheel.run, testing.run):
        assert run(main()) == [(False, 0), 300, True, 200, 100, 50, 50, None]


FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


@pytest.mark.skipif(_census._heap_guard is None, reason="the pure build has no native walk")
@pytest.mark.parametrize("seed", range(4))
def test_the_native_heap_walk_answers_what_the_python_walk_answers(seed: int) -> None:
    # Heaps of asyncio's TimerHandles: asyncio.timeout expiries for the asked tasks and for
    # others, plain callbacks, cancelled tombstones, deadlines before and after the bound. The
    # native walk answers the Python one's answer, or NotImplemented only where it says it
    # must (an item of another type, a `_when` that is not a float).
    rng = random.Random(seed)
    loop = asyncio.new_event_loop()
    try:
        asked = (object(), object())
        for _ in range(300):
            heap: list[Any] = []
            foreign = rng.random() < 0.1
            for _ in range(rng.randrange(0, 40)):
                when: Any = rng.choice((0.5, 1.0, 2.0, 3.0, 10.0, rng.uniform(0, 20)))
                kind = rng.random()
                if kind < 0.4:
                    timeout = asyncio.Timeout(None)
                    timeout._task = rng.choice((*asked, object(), None))  # type: ignore[attr-defined]
                    handle = asyncio.TimerHandle(when, timeout._on_timeout, (), loop)
                else:
                    handle = asyncio.TimerHandle(when, print, ("x",), loop)
                if rng.random() < 0.3:
                    handle.cancel()
                heap.append(handle)
            if foreign:
                heap.insert(rng.randrange(len(heap) + 1), rng.choice((object(), 1)))
            before = rng.choice((math.inf, 2.5, 12.0))
            tasks = asked[: rng.randrange(1, 3)]
            native = _census._heap_guard(heap, tasks, before)
            if foreign or FREE_THREADED:  # free-threaded builds always walk in Python
                assert native is NotImplemented
            else:
                assert native is not NotImplemented
                assert native == _census._walk(heap, tasks, before)
        # An int deadline (loop.call_at(5)): the Python walk reads it.
        timeout = asyncio.Timeout(None)
        timeout._task = asked[0]  # type: ignore[attr-defined]
        handle = asyncio.TimerHandle(5, timeout._on_timeout, (), loop)  # type: ignore[arg-type]
        assert _census._heap_guard([handle], asked, math.inf) is NotImplemented
        assert _census._heap_deadline_for(loop, asked) is None  # nothing on this loop's heap
    finally:
        loop.close()


LOOPS = [asyncio.new_event_loop, aiowheel.loops.asyncio_loop]


def _noop() -> None:
    pass


def run_on(factory: Any, main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``main()`` run on a new loop from ``factory``, closed after (its queue dropped)."""
    loop = factory()
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()


@pytest.mark.parametrize("factory", LOOPS)
def test_a_read_looks_only_at_the_callbacks_queued_since_the_last(factory: Any) -> None:
    # A passed timeout waits among the ready callbacks, so a budget read looks there; with
    # 10,000 callbacks queued (a busy server) a pass per read cost 1 ms. Each callback is
    # looked at once, by the first read after it was queued.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(10_000):
            loop.call_soon(_noop)
        async with asyncio.timeout(30):
            assert aiowheel.time_left() is not None
            index = _census._READY_INDEXES[id(loop._ready)]  # type: ignore[attr-defined]
            looked = index.looked
            assert 10_000 <= looked < 10_100
            for _ in range(100):
                aiowheel.time_left()
            assert index.looked == looked  # nothing queued since: nothing looked at
            for _ in range(3):
                loop.call_soon(_noop)
            aiowheel.time_left()
            assert index.looked == looked + 3

    run_on(factory, main)


@pytest.mark.parametrize("kind", ["asyncio", "aiowheel"])
@pytest.mark.parametrize("factory", LOOPS)
def test_a_passed_timeout_is_read_through_the_index_until_it_runs_or_goes(
    factory: Any, kind: str
) -> None:
    # A timeout entered with its deadline passed is handed to call_soon. Read after more
    # callbacks were queued behind it, after it was moved later (its expiry cancelled), moved
    # into the past again, and after its block was left: each read answers what one pass over
    # the whole queue answers, and what the index notes is let go once it no longer waits.
    def make(delay: float) -> Any:
        return asyncio.timeout(delay) if kind == "asyncio" else aiowheel.timeout(delay)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        for _ in range(500):
            loop.call_soon(_noop)

        def check(expected: float | None) -> None:
            assert _census.current_deadline() == expected == scanned_deadline(loop, task)

        async with make(30) as outer:
            check(outer.when())
            async with make(0) as passed:
                check(passed.when())
                assert aiowheel.time_left() == 0.0
                for _ in range(5):
                    loop.call_soon(_noop)
                check(passed.when())  # found again: noted by the read before
                passed.reschedule(loop.time() + 60)  # later: its expiry is cancelled
                check(outer.when())
                passed.reschedule(loop.time() - 1)  # passed again: a new expiry queued
                check(passed.when())
            check(outer.when())  # left without an await: its expiry cancelled
            index = _census._READY_INDEXES[id(loop._ready)]  # type: ignore[attr-defined]
            assert index.noted == {}  # nothing held for what no longer waits

    run_on(factory, main)


@pytest.mark.parametrize("factory", LOOPS)
def test_the_index_lets_go_once_the_loop_has_run_what_it_noted(factory: Any) -> None:
    # A passed timeout that fires: its task is cancelled, and the next read, an iteration
    # later, finds the queue run past what it had seen and drops its notes, the task with them.
    async def victim() -> None:
        async with asyncio.timeout(0):
            assert aiowheel.time_left() == 0.0  # noted here
            await asyncio.sleep(1)

    async def main() -> weakref.ref[Any]:
        loop = asyncio.get_running_loop()
        task = asyncio.ensure_future(victim())
        with pytest.raises(TimeoutError):
            await task
        await asyncio.sleep(0)
        aiowheel.time_left()  # a read in another task, after the loop ran past the note
        index = _census._READY_INDEXES[id(loop._ready)]  # type: ignore[attr-defined]
        assert index.noted == {}
        return weakref.ref(task)

    gone = run_on(factory, main)
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("factory", LOOPS)
def test_a_subclass_of_asyncio_timeout_guards_its_task_like_asyncio_s(factory: Any) -> None:
    # Its expiry is asyncio's _on_timeout: filed (the wheels' index on loop mode, the heap on
    # asyncio's loop) or passed (the ready callbacks), its deadline is read as asyncio's.
    class Mine(asyncio.Timeout):
        pass

    async def main() -> None:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        async with Mine(loop.time() + 30) as later:
            assert _census.current_deadline() == later.when() == scanned_deadline(loop, task)
            async with Mine(loop.time() - 1) as passed:
                assert _census.current_deadline() == passed.when()
                assert aiowheel.time_left() == 0.0
            assert _census.current_deadline() == later.when()

    run_on(factory, main)
