"""Seeing every timer (aiowheel._seeing._census): pending_timers, timer_census, track_origins,
loop_lag, current_deadline / time_left, and the wheel's wake-up as lingering-timer checks see
it; on every installed base, loop mode and aiowheel's own API alike."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import sys
import time
from collections import Counter
from typing import Any

import pytest

import aiowheel
import aiowheel.loops
import aiowheel.testing as testing
from tests.support import Base


def cb(*args: object) -> None:
    pass


def on_loop_mode(coro: Any, base: Base, **options: Any) -> Any:
    return aiowheel.run(coro, base=base, **options)


def kinds_and_origins(loop: asyncio.AbstractEventLoop | None = None) -> list[tuple[str, str]]:
    return [(t.kind, t.origin) for t in aiowheel.pending_timers(loop)]


# -- pending_timers ----------------------------------------------------------------------------


async def sleeper() -> None:
    await asyncio.sleep(60)


async def guarded() -> None:
    async with asyncio.timeout(30):
        await asyncio.sleep(100)


async def every_kind() -> list[aiowheel.PendingTimer]:
    """One timer of each kind, filed through loop mode (asyncio's API) and aiowheel's."""
    loop = asyncio.get_running_loop()
    timer = aiowheel.get_timer()
    call = loop.call_later(5, cb)
    loop.call_later(6, cb).cancel()  # cancelled: not pending
    tasks = [asyncio.ensure_future(sleeper()), asyncio.ensure_future(guarded())]
    beat = timer.every(1, cb)
    dog = timer.watchdog(2, cb)
    scheduled = timer.schedule_later(3, sleeper())

    async def own_timeout() -> None:
        async with aiowheel.timeout(20):
            await timer.sleep(90)

    tasks.append(asyncio.ensure_future(own_timeout()))
    await asyncio.sleep(0.05)
    found = aiowheel.pending_timers()
    for task in tasks:
        task.cancel()
    call.cancel()
    beat.cancel()
    dog.cancel()
    scheduled.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert aiowheel.pending_timers() == []  # every one of them gone with its cancel
    return found


def test_every_kind_is_listed_in_deadline_order_with_its_origin(base: Base) -> None:
    found = on_loop_mode(every_kind(), base)
    assert [t.when for t in found] == sorted(t.when for t in found)
    assert Counter((t.kind, t.origin) for t in found) == Counter(
        {
            ("heartbeat", "cb"): 1,
            ("watchdog", "cb"): 1,
            ("scheduled", "sleeper"): 1,
            ("call", "cb"): 1,
            ("timeout", "every_kind.<locals>.own_timeout"): 1,
            ("timeout", "guarded"): 1,  # asyncio.timeout, on the wheel by loop mode
            ("sleep", "sleeper"): 1,  # asyncio.sleep
            ("sleep", "guarded"): 1,
            ("sleep", "every_kind.<locals>.own_timeout"): 1,  # aiowheel's own sleep
        }
    )
    by_kind = {t.kind: t for t in found}
    assert by_kind["call"].callback is cb and by_kind["heartbeat"].callback is cb
    assert by_kind["timeout"].callback is None  # asyncio's machinery is not the user's callback
    for timer in found:
        if timer.kind in ("sleep", "timeout"):
            assert isinstance(timer.task, asyncio.Task), timer
            assert timer.task.get_coro().__qualname__ == timer.origin  # type: ignore[union-attr]


def test_the_snapshot_is_immutable() -> None:
    async def main() -> aiowheel.PendingTimer:
        asyncio.get_running_loop().call_later(5, cb)
        return aiowheel.pending_timers()[0]

    snapshot = on_loop_mode(main(), None)
    with pytest.raises(AttributeError):
        snapshot.when = 0.0  # type: ignore[misc]


@pytest.mark.bases("asyncio")
def test_the_base_heap_is_listed_as_loop_and_the_wake_up_never(base: Base) -> None:
    async def main() -> list[tuple[str, str]]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.002, cb)  # under the threshold: on asyncio's own heap
        loop.call_later(5, cb)  # on the wheel; its wake-up is on the heap, never listed
        return kinds_and_origins()

    assert on_loop_mode(main(), base) == [("loop", "cb"), ("call", "cb")]

    async def plain() -> list[tuple[str, str]]:
        loop = asyncio.get_running_loop()
        loop.call_later(5, cb)
        loop.call_later(1, cb).cancel()
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)
        aiowheel.get_timer().call_later(3, cb)  # aiowheel's Timer: wake-up on the heap
        found = kinds_and_origins()
        task.cancel()
        return found

    # A plain asyncio loop: its heap as "loop", asyncio.sleep named by its task.
    assert asyncio.run(plain()) == [("call", "cb"), ("loop", "cb"), ("loop", "sleeper")]


def test_bad_loops_and_closed_loops() -> None:
    with pytest.raises(TypeError, match=r"^pending_timers\(\): loop must be an asyncio event"):
        aiowheel.pending_timers("loop")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match=r"^pending_timers\(\): no running event loop.*"
                       r"pending_timers\(loop\)$"):  # fmt: skip
        aiowheel.pending_timers()
    loop = aiowheel.new_event_loop()
    loop.call_later(5, cb)
    assert [t.kind for t in aiowheel.pending_timers(loop)] == ["call"]
    loop.close()
    assert aiowheel.pending_timers(loop) == []
    with pytest.raises(ValueError, match=r"^timer_census\(\): top must be .*, got 0$"):
        aiowheel.timer_census(loop, top=0)
    with pytest.raises(TypeError, match=r"^timer_census\(\): top must be .*, got float$"):
        aiowheel.timer_census(loop, top=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="enabled must be a bool, got str"):
        aiowheel.track_origins("yes", loop=loop)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reset must be a bool, got int"):
        aiowheel.loop_lag(loop, reset=1)  # type: ignore[arg-type]


# -- origins -----------------------------------------------------------------------------------


def test_origin_tracking_names_the_line_and_the_task(base: Base) -> None:
    async def main() -> list[aiowheel.PendingTimer]:
        loop = asyncio.get_running_loop()
        loop.call_later(5, cb)  # before tracking: named by its callback
        aiowheel.track_origins()
        loop.call_later(6, cb)
        line = sys._getframe().f_lineno - 1
        task = asyncio.ensure_future(sleeper())
        await asyncio.sleep(0)
        found = aiowheel.pending_timers()
        aiowheel.track_origins(False)
        loop.call_later(1000, cb)  # the last by deadline
        found += aiowheel.pending_timers()[-1:]
        task.cancel()
        where = "test_origin_tracking_names_the_line_and_the_task.<locals>.main"
        assert found[1].origin == f"{__file__}:{line} in {where}"
        return found

    found = on_loop_mode(main(), base)
    assert found[0].origin == "cb"
    assert found[1].task is not None and found[1].task.get_coro().__qualname__.endswith("main")
    assert found[2].origin.endswith("in sleeper")  # the line in sleeper() that slept
    assert found[3].origin == "cb"  # tracking off again


def test_a_timer_filed_by_an_installed_librarys_helper_is_named_by_its_callers_line(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Home Assistant's async_call_later (in site-packages) files the loop timer for a test:
    # the lingering report names the test's line, not the helper's.
    library = tmp_path / "site-packages"
    library.mkdir()
    (library / "helperlib.py").write_text(
        "import asyncio\n"
        "def call_later(delay, action):\n"
        "    return asyncio.get_running_loop().call_later(delay, action)\n"
    )
    monkeypatch.syspath_prepend(str(library))
    import aiowheel._time._debug

    monkeypatch.setattr(aiowheel._time._debug, "_LIBRARIES", (str(library) + os.sep,))
    import helperlib  # type: ignore[import-not-found]

    async def main() -> str:
        handle = helperlib.call_later(5, cb)
        line = sys._getframe().f_lineno - 1
        origin = aiowheel.pending_timers()[0].origin
        handle.cancel()
        where = "test_a_timer_filed_by_an_installed_librarys_helper_is_named_by_its_callers_line"
        assert origin == f"{__file__}:{line} in {where}.<locals>.main"
        return origin

    assert on_loop_mode(main(), None, debug=True).startswith(f"{__file__}:")


def test_debug_mode_tracks_origins() -> None:
    async def main() -> str:
        asyncio.get_running_loop().call_later(5, cb)
        return aiowheel.pending_timers()[0].origin

    assert on_loop_mode(main(), None, debug=True).startswith(f"{__file__}:")
    assert on_loop_mode(main(), None, debug=False) == "cb"


def test_the_census_counts_by_kind_and_origin(base: Base) -> None:
    async def main() -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
        loop = asyncio.get_running_loop()
        for _ in range(300):
            loop.call_later(10, cb)
        tasks = [asyncio.ensure_future(sleeper()) for _ in range(20)]
        await asyncio.sleep(0)
        top = aiowheel.timer_census(top=1)
        everything = aiowheel.timer_census(top=None)
        for task in tasks:
            task.cancel()
        return top, everything

    top, everything = on_loop_mode(main(), base)
    assert top == [("call cb", 300)]
    assert everything == [("call cb", 300), ("sleep sleeper", 20)]


# -- what lingering-timer checks see -------------------------------------------------------------


def home_assistant_lingering(loop: asyncio.AbstractEventLoop) -> list[Any]:
    """Home Assistant's verify_cleanup check: every handle on loop._scheduled that does not
    say it is cancelled."""
    return [handle for handle in loop._scheduled if not handle.cancelled()]  # type: ignore[attr-defined]


def test_home_assistants_check_reports_the_users_timers_never_the_wheels_wake_up() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        handle = loop.call_later(5, cb)  # a wheel timer: its wake-up is on the heap
        assert len(loop._scheduled) == 1  # type: ignore[attr-defined]
        assert home_assistant_lingering(loop) == [handle]  # the timer, as stock reports it
        # indexing is the readers' list too (issue 59: a slice held the wake-up, and cancelling
        # each of its handles wedged the wheel); the heap itself holds the wake-up
        assert loop._scheduled[0] is handle  # type: ignore[attr-defined]
        assert "aiowheel wheel wake-up" in repr(list.__getitem__(loop._scheduled, 0))  # type: ignore[attr-defined]
        handle.cancel()
        assert home_assistant_lingering(loop) == []  # nothing after the last timer is cancelled
        assert len(loop._scheduled) == 0  # type: ignore[attr-defined]
        near = loop.call_later(0.002, cb)  # on the heap itself: the user's, reported
        assert home_assistant_lingering(loop) == [near]
        near.cancel()
        # The wake-up still wakes the wheel: a timer filed now fires.
        fired = asyncio.Event()
        loop.call_later(0.02, fired.set)
        await asyncio.wait_for(fired.wait(), 5)

    on_loop_mode(main(), None)


# -- loop lag ----------------------------------------------------------------------------------


def test_loop_lag_counts_each_timer_with_the_lateness_of_its_pass(base: Base) -> None:
    async def main() -> tuple[aiowheel.LoopLag, aiowheel.LoopLag, aiowheel.LoopLag]:
        loop = asyncio.get_running_loop()
        fresh = aiowheel.loop_lag()
        done = asyncio.Event()
        for _ in range(10):
            loop.call_later(0.02, cb)
        loop.call_later(0.021, done.set)
        time.sleep(0.2)  # noqa: ASYNC251  # the loop blocked past their deadlines: ~0.18 s lag
        await asyncio.wait_for(done.wait(), 10)
        blocked = aiowheel.loop_lag(reset=True)
        after_reset = aiowheel.loop_lag()
        return fresh, blocked, after_reset

    fresh, blocked, after_reset = on_loop_mode(main(), base)
    assert (fresh.count, fresh.p50, fresh.max) == (0, 0.0, 0.0)
    assert blocked.count >= 11  # every timer that fired counts (other timers may add)
    assert 0.15 <= blocked.max < 10  # generous: a loaded machine only makes it later
    assert blocked.p50 <= blocked.p90 <= blocked.p99 <= blocked.max
    assert blocked.p99 >= 0.15 * 0.875  # the bucket holding the blocked pass
    assert after_reset.count == 0 and after_reset.since >= blocked.since


def test_on_a_virtual_clock_there_is_no_lag(base: Base) -> None:
    async def main() -> aiowheel.LoopLag:
        for delay in (1, 2, 3, 3600):
            await asyncio.sleep(delay)
        return aiowheel.loop_lag()

    lag = testing.run(main(), base=base)
    assert lag.count == 4 and lag.max == 0.0


# -- current_deadline / time_left -----------------------------------------------------------------


def whole(seconds: float) -> int:
    """Seconds left, as whole seconds rounded up: on a real clock a little has passed since
    the timeout was entered (up to a second of a stalled machine), on a virtual one nothing."""
    return math.ceil(seconds)


async def deadlines() -> list[Any]:
    loop = asyncio.get_running_loop()
    seen: list[Any] = [aiowheel.current_deadline(), aiowheel.time_left()]
    async with asyncio.timeout(30):
        seen.append(whole(aiowheel.time_left() or -1))
        async with aiowheel.timeout(20):
            seen.append(whole(aiowheel.time_left() or -1))
            async with asyncio.timeout(50):  # a later one does not count: the earliest does
                seen.append(whole(aiowheel.time_left() or -1))

                async def other() -> float | None:
                    return aiowheel.current_deadline()  # another task: not guarded by these

                seen.append(await asyncio.ensure_future(other()))
        seen.append(whole(aiowheel.current_deadline() - loop.time()))  # type: ignore[operator]
    seen.append(aiowheel.current_deadline())
    if sys.version_info >= (3, 12):  # wait_for is asyncio.timeout from 3.12

        async def in_wait_for() -> float | None:
            return aiowheel.time_left()

        seen.append(whole(await asyncio.wait_for(in_wait_for(), 40) or -1))

    async def in_own_wait_for() -> float | None:
        return aiowheel.time_left()

    seen.append(whole(await aiowheel.wait_for(in_own_wait_for(), 45) or -1))
    return seen


def test_current_deadline_sees_the_timeouts_guarding_this_task(base: Base) -> None:
    expected = [None, None, 30, 20, 20, None, 30, None]
    if sys.version_info >= (3, 12):
        expected.append(40)
    expected.append(45)
    assert on_loop_mode(deadlines(), base) == expected
    # On a virtual clock, exactly.
    assert testing.run(deadlines(), base=base) == expected


def test_every_inspection_function_takes_the_loop_it_is_asked_about() -> None:
    # #37: loop=None is the running loop; a loop given is asked about, running or not.
    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        idle = aiowheel.new_event_loop()  # not running: no current task, no deadline
        try:
            async with asyncio.timeout(30):
                return [
                    aiowheel.current_deadline(loop) == aiowheel.current_deadline(),
                    whole(aiowheel.time_left(loop) or -1),
                    aiowheel.timer_of() is aiowheel.timer_of(loop) is not None,
                    aiowheel.config_of() == aiowheel.config_of(loop) != None,  # noqa: E711
                    testing.clock_of() is testing.clock_of(loop) is not None,
                    aiowheel.current_deadline(idle),
                    aiowheel.time_left(idle),
                    aiowheel.timer_of(idle) is not aiowheel.timer_of(loop),
                    len(aiowheel.pending_timers(idle)),
                ]
        finally:
            idle.close()

    assert testing.run(main()) == [True, 30, True, True, True, None, None, True, 0]


def test_current_deadline_on_asyncios_own_loop_and_outside_a_task() -> None:
    assert aiowheel.current_deadline() is None and aiowheel.time_left() is None

    async def main() -> tuple[int, float]:
        async with asyncio.timeout(30):
            left = whole(aiowheel.time_left() or -1)
        async with asyncio.timeout(-1):
            passed = aiowheel.time_left()
            await asyncio.sleep(0)
        return left, passed  # type: ignore[return-value]

    with pytest.raises(TimeoutError):
        asyncio.run(main())

    async def left_only() -> int:
        async with asyncio.timeout(30):
            return whole(aiowheel.time_left() or -1)

    assert asyncio.run(left_only()) == 30


def test_after_a_timeout_expired_inside_its_block_no_time_is_left(base: Base) -> None:
    """#35's unclear case, decided: an outer timeout(1) expired inside an inner timeout(5):
    current_deadline() names the inner one, still pending; time_left() is 0.0, not 4.0 (the
    task is being cancelled). A single expired timeout: no deadline pending, 0.0 left. After
    the block, the budget is the enclosing one again."""

    async def main() -> list[object]:
        loop = asyncio.get_running_loop()
        seen: list[object] = []
        start = loop.time()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1):
                async with asyncio.timeout(5):
                    try:
                        await asyncio.sleep(10)
                    finally:
                        seen.append(round(aiowheel.current_deadline() - start, 6))  # type: ignore[operator]
                        seen.append(aiowheel.time_left())
        with contextlib.suppress(TimeoutError):
            async with aiowheel.timeout(1):
                try:
                    await asyncio.sleep(10)
                finally:
                    seen.append(aiowheel.current_deadline())
                    seen.append(aiowheel.time_left())
        async with asyncio.timeout(30):
            seen.append(whole(aiowheel.time_left() or -1))  # the task is not cancelling now
        return seen

    assert testing.run(main(), base=base) == [5.0, 0.0, None, 0.0, 30]


# -- against a model ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_pending_timers_is_what_a_model_says_is_pending(seed: int) -> None:
    """Random calls, cancels, sleeps and timeouts on a virtual clock; after every step, what
    pending_timers lists (deadline and kind) is exactly what the model holds."""
    rng = random.Random(seed)

    async def main() -> int:
        loop = asyncio.get_running_loop()
        # Keyed by id: handles are asyncio.TimerHandles, equal (and hashed) by deadline and
        # callback as asyncio's are.
        model: dict[int, tuple[Any, float, str]] = {}
        checks = 0
        for _ in range(300):
            op = rng.random()
            now = loop.time()
            if op < 0.35:
                delay = rng.choice([0.003, 0.5, 2.0, 30.0, 3600.0])
                handle = loop.call_later(delay, cb)
                model[id(handle)] = (handle, now + delay, "call")
            elif op < 0.55 and model:
                key = rng.choice(list(model))
                victim = model.pop(key)[0]
                victim.cancel()
                if isinstance(victim, asyncio.Task):
                    await asyncio.sleep(0)
            elif op < 0.7:
                delay = rng.choice([0.5, 7.0, 100.0])
                task = asyncio.ensure_future(asyncio.sleep(delay))
                await asyncio.sleep(0)
                model[id(task)] = (task, now + delay, "sleep")
            else:
                await testing.advance(rng.choice([0.0, 0.001, 0.4, 1.5, 40.0]))
                now = loop.time()
                model = {key: v for key, v in model.items() if v[1] > now}
            listed = sorted((round(t.when, 6), t.kind) for t in aiowheel.pending_timers())
            assert listed == sorted((round(w, 6), k) for _, w, k in model.values()), checks
            checks += 1
        for victim, _, _ in model.values():
            victim.cancel()
        return checks

    assert testing.run(main(), autojump=False) == 300


@pytest.mark.parametrize("factory", [asyncio.new_event_loop, aiowheel.loops.asyncio_loop])
def test_a_timeout_entered_after_its_deadline_leaves_no_time(factory: Any) -> None:
    # Its expiry waits among the ready callbacks (call_soon, as asyncio does), on no heap and
    # no wheel: time_left() is 0.0 there too, so a client adapter sends nothing (issue 50).
    async def main() -> list[float | None]:
        seen: list[float | None] = []
        for timeout in (asyncio.timeout(0), asyncio.timeout(-5), aiowheel.get_timer().timeout(0)):
            with pytest.raises(TimeoutError):
                async with timeout:
                    seen.append(aiowheel.time_left())
                    await asyncio.sleep(1)
        async with asyncio.timeout(30):
            seen.append(whole(aiowheel.time_left() or -1))
        return seen

    loop = factory()
    try:
        assert loop.run_until_complete(main()) == [0.0, 0.0, 0.0, 30]
    finally:
        loop.close()
