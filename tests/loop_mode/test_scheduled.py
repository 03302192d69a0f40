"""``loop._scheduled`` on loop mode (issue 49): every pending timer to the code that reads it,
the real heap to the base loop's own; and ``handle._run()`` as asyncio's.

The readers here do what Home Assistant does (its ``async_fire_time_changed`` test helper, its
``verify_cleanup`` fixture, ``hass.async_stop``'s cancel of ``cancel_on_shutdown`` timers), a
drain loop and a diagnostic; each program runs on stock asyncio and on loop mode, and the
outcomes must be the same. Both builds (CI runs the suite on each).
"""

from __future__ import annotations

import asyncio
import copy
import gc
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import aiowheel
from aiowheel._loopmode._scheduled import Heap
from bench.empty_iteration import in_a_dict

Main = Callable[[], Coroutine[Any, Any, Any]]


def on_both(main: Main) -> tuple[Any, Any]:
    """``main()`` on stock asyncio, then on loop mode (asyncio's loop as the base)."""
    return asyncio.run(main()), aiowheel.run(main())


def fire_time_changed(loop: asyncio.AbstractEventLoop, seconds_ahead: float) -> int:
    """Home Assistant's ``async_fire_time_changed``, as its test helpers do it: every live
    ``asyncio.TimerHandle`` of ``loop._scheduled`` due by ``seconds_ahead`` from now is run
    (``_run()``) and then cancelled. The number run."""
    ran = 0
    for handle in list(loop._scheduled):  # type: ignore[attr-defined]
        if not isinstance(handle, asyncio.TimerHandle) or handle.cancelled():
            continue
        if seconds_ahead >= handle.when() - loop.time():
            handle._run()  # type: ignore[attr-defined]
            handle.cancel()
            ran += 1
    return ran


def live(loop: asyncio.AbstractEventLoop) -> list[asyncio.TimerHandle]:
    """What Home Assistant's ``verify_cleanup`` reports: the handles not cancelled."""
    return [h for h in loop._scheduled if not h.cancelled()]  # type: ignore[attr-defined]


def test_readers_see_every_pending_timer_with_its_exact_deadline() -> None:
    async def main() -> tuple[list[float], int, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        now = loop.time()
        # The clock stands still (a test's replaced loop.time, which loop mode follows): the
        # near timer cannot come due, nor the sleep's deadline move, on a machine that stalls.
        loop.time = lambda: now  # type: ignore[method-assign]
        far = loop.call_at(now + 30.25, print)  # the wheel's in loop mode
        near = loop.call_at(now + 0.002, print)  # the heap's
        sleeper = asyncio.ensure_future(asyncio.sleep(60))
        await asyncio.sleep(0)
        seen = loop._scheduled  # type: ignore[attr-defined]
        result = (
            [round(h.when() - now, 3) for h in seen],
            len(seen),
            bool(seen),
            far in seen,
            all(isinstance(h, asyncio.TimerHandle) for h in list(seen)),
        )
        for handle in (far, near):
            handle.cancel()
        sleeper.cancel()
        del loop.time  # type: ignore[method-assign]
        return result

    stock, wheel = on_both(main)
    assert stock == wheel == ([0.002, 30.25, 60.0], 3, True, True, True)


def test_the_wheels_wake_up_is_never_shown_and_nothing_is_after_the_last_cancel() -> None:
    async def main() -> tuple[int, int, bool]:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(30, print)
        before = len(live(loop))
        handle.cancel()
        return before, len(loop._scheduled), bool(loop._scheduled)  # type: ignore[attr-defined]

    stock, wheel = on_both(main)
    # stock keeps the cancelled handle on its heap (a tombstone) until its time comes
    assert stock == (1, 1, True)
    assert wheel == (1, 0, False)


def test_fire_time_changed_runs_the_wheel_handles_due_and_cancels_them() -> None:
    # Home Assistant's test helper: time "passes" by running what is due by then.
    async def main() -> tuple[list[str], int, list[str], int]:
        loop = asyncio.get_running_loop()
        calls: list[str] = []
        loop.call_later(5, calls.append, "debounce")
        loop.call_later(30, calls.append, "refresh")
        loop.call_later(60, calls.append, "heartbeat")
        first = fire_time_changed(loop, 31)
        after_first = list(calls)
        await asyncio.sleep(0)
        return after_first, first, calls, len(live(loop))

    stock, wheel = on_both(main)
    assert stock == wheel == (["debounce", "refresh"], 2, ["debounce", "refresh"], 1)


def test_a_timer_run_by_hand_stays_pending_until_cancelled_or_due() -> None:
    # asyncio's _run() runs the callback and leaves the handle as it was: pending, for
    # cancel() to cancel (True in aiowheel: it cancelled it) or to run again at its time.
    async def main() -> tuple[list[int], bool, bool, bool, list[int]]:
        loop = asyncio.get_running_loop()
        calls: list[int] = []
        kept = loop.call_later(0.05, calls.append, 1)
        cancelled = loop.call_later(30, calls.append, 2)
        kept._run()  # type: ignore[attr-defined]
        cancelled._run()  # type: ignore[attr-defined]
        by_hand = list(calls)
        scheduled = cancelled._scheduled  # type: ignore[attr-defined]
        cancelled.cancel()
        await asyncio.sleep(0.2)
        kept._run()  # a handle that ran runs again, as asyncio's does
        return by_hand, scheduled, cancelled.cancelled(), cancelled in live(loop), calls

    stock, wheel = on_both(main)
    assert stock == wheel == ([1, 2], True, True, False, [1, 2, 1, 1])


def test_an_exception_of_a_timer_run_by_hand_goes_to_the_loops_handler() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        seen: list[str] = []
        loop.set_exception_handler(lambda _, context: seen.append(repr(context["exception"])))
        handle = loop.call_later(30, lambda: 1 / 0)
        handle._run()  # type: ignore[attr-defined]
        handle.cancel()
        handle._run()  # cancelled: nothing (asyncio's calls None and reports a TypeError)
        return seen

    assert aiowheel.run(main()) == ["ZeroDivisionError('division by zero')"]


def test_shutdown_cancels_the_timers_marked_to_be_cancelled_on_it() -> None:
    # hass.async_stop: every handle whose first argument is a job marked cancel_on_shutdown
    # is cancelled; a loop-mode timer missed there ran during the shutdown.
    class Job:
        def __init__(self, cancel_on_shutdown: bool) -> None:
            self.cancel_on_shutdown = cancel_on_shutdown

    ran: list[bool] = []

    def run_job(job: Job) -> None:  # as Home Assistant files a job: the job is the argument
        ran.append(job.cancel_on_shutdown)

    async def main() -> tuple[list[bool], list[bool]]:
        loop = asyncio.get_running_loop()
        handles = [loop.call_later(0.05, run_job, Job(marked)) for marked in (True, False, True)]
        for handle in list(loop._scheduled):  # type: ignore[attr-defined]
            job = handle._args[0] if handle._args else None
            if isinstance(job, Job) and job.cancel_on_shutdown:
                handle.cancel()
        await asyncio.sleep(0.2)
        return [h.cancelled() for h in handles], list(ran)

    stock = asyncio.run(main())
    ran.clear()
    assert aiowheel.run(main()) == stock == ([True, False, True], [False])


def test_a_drain_loop_runs_every_timer_once() -> None:
    # while loop._scheduled: loop._run_once() -- with the wheel's timers seen, it waits for
    # them too; none runs twice (the base's own reads must see only its heap).
    def program(loop: asyncio.AbstractEventLoop) -> list[int]:
        calls: list[int] = []
        for i in range(40):
            loop.call_later(0.001 * (i % 20) + (0.02 if i % 2 else 0.0), calls.append, i)
        while loop._ready or loop._scheduled:  # type: ignore[attr-defined]
            loop._run_once()  # type: ignore[attr-defined]
        return sorted(calls)

    stock = asyncio.new_event_loop()
    wheel = aiowheel.new_event_loop()
    try:
        assert program(stock) == program(wheel) == list(range(40))
    finally:
        stock.close()
        wheel.close()


def test_asyncios_rebuild_of_its_heap_keeps_the_view_and_runs_each_timer_once() -> None:
    # More than 100 handles on asyncio's heap, over half of them cancelled: _run_once
    # replaces the heap by a new list. It is the loop's Heap again, the wheel's timers still
    # seen, and every timer not cancelled runs once.
    async def main() -> tuple[bool, int, list[int], int]:
        loop = asyncio.get_running_loop()
        calls: list[int] = []
        first = loop._scheduled  # type: ignore[attr-defined]
        far = loop.call_later(30, calls.append, -1)
        near = [loop.call_later(0.004, calls.append, i) for i in range(300)]
        for handle in near[::3] + near[1::3]:
            handle.cancel()
        await asyncio.sleep(0.05)
        heap = loop._scheduled  # type: ignore[attr-defined]
        assert heap is not first  # rebuilt
        result = (type(heap) is Heap, len(heap), sorted(calls), list.__len__(heap))
        far.cancel()
        return result

    on_wheel = aiowheel.run(main())
    assert on_wheel[0] is True
    assert on_wheel[1] == 1  # the far timer, on the wheel
    assert on_wheel[2] == list(range(2, 300, 3))
    assert on_wheel[3] == 1  # the heap itself: the wheel's wake-up alone


def test_reading_it_in_every_iteration_changes_nothing_that_runs() -> None:
    # A diagnostic reading len(loop._scheduled) on every iteration while timers near and far
    # come due: each runs once, in deadline order.
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        order: list[int] = []
        for i in range(60):
            loop.call_later(0.001 * (60 - i) + (0.011 if i % 2 else 0.0), order.append, i)
        seen = 0
        while len(order) < 60:
            seen += len(loop._scheduled) + len(list(loop._scheduled))  # type: ignore[attr-defined]
            await asyncio.sleep(0)
        assert seen > 0
        return sorted(order)

    stock, wheel = on_both(main)
    assert stock == wheel == list(range(60))


def test_copies_and_reprs_are_what_readers_see() -> None:
    async def main() -> tuple[str, int, int]:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(30, print)
        heap = loop._scheduled  # type: ignore[attr-defined]
        result = (type(copy.copy(heap)).__name__, len(copy.copy(heap)), repr(heap).count("print"))
        handle.cancel()
        return result

    assert aiowheel.run(main()) == ("list", 1, 1)


def test_a_closed_loop_shows_nothing_and_a_collected_one_is_not_kept() -> None:
    loop = aiowheel.new_event_loop()
    loop.call_later(30, print)
    heap = loop._scheduled  # type: ignore[attr-defined]
    assert len(heap) == 1
    loop.close()
    assert len(heap) == 0
    del loop
    gc.collect()
    assert list(heap) == []


@pytest.mark.bases("uvloop")
def test_a_base_without_a_heap_in_python_has_none_on_loop_mode(base: Any) -> None:
    loop = aiowheel.new_event_loop(base)
    try:
        assert not hasattr(loop, "_scheduled")
    finally:
        loop.close()


def test_nothing_makes_the_loop_keep_itsin_a_dict() -> None:
    # The first version read vars(loop) once per loop: an empty iteration of asyncio's loop
    # went from 2.37 to 2.70 us on 3.11. Home Assistant sets loop.time on its loops: that
    # must not do it either.
    def exercise(loop: asyncio.AbstractEventLoop) -> None:
        loop.time = loop.time  # type: ignore[method-assign]  # as Home Assistant does
        handle = loop.call_later(30, print)
        len(loop._scheduled)  # type: ignore[attr-defined]
        handle.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        del loop.time

    # The control: a stock loop. From 3.13 an instance whose class's shared keys are full keeps
    # a dict; a stock loop given the three attributes loop mode once set on its instances
    # (_aiowheel, call_at, call_later) does (docs/performance.md). Loop mode keeps them on each
    # loop's own class (aiowheel._loopmode._loop._own_class), so its loop does not.
    stock: Any = asyncio.new_event_loop()
    wheel: Any = aiowheel.new_event_loop()
    second: Any = type(wheel)()  # a second loop of the same kind, made from the first's class
    try:
        for loop in (stock, wheel, second):
            exercise(loop)
        if in_a_dict(stock):
            pytest.skip("this interpreter keeps a stock loop's attributes in a dict")
        assert not in_a_dict(wheel)
        assert not in_a_dict(second)
        assert type(second) is not type(wheel)
        assert type(second).__base__ is type(wheel).__base__
        assert aiowheel.timer_of(second) is not aiowheel.timer_of(wheel)
    finally:
        second.close()
        stock.close()
        wheel.close()
