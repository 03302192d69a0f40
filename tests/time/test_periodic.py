"""every / interval / watchdog: drift, missed-tick policies, overlap, errors, cancellation."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, cast

import pytest

from aiowheel import Timer
from tests.support import VirtualClockLoop, run_virtual


def loop_of() -> VirtualClockLoop:
    return cast(VirtualClockLoop, asyncio.get_running_loop())


# -- on a clock the test controls -------------------------------------------------------------


def test_ten_thousand_ticks_do_not_drift() -> None:
    async def main() -> None:
        loop = loop_of()
        async with Timer() as timer:
            start = loop.time() + 0.01
            seen: list[float] = []
            beat = timer.every(0.01, lambda: seen.append(loop.time()), start=start)
            while len(seen) < 10_000:
                await asyncio.sleep(1)
            beat.cancel()
            for k, at in enumerate(seen):
                deadline = start + k * 0.01
                assert at >= deadline, f"run {k} early"
                assert at <= deadline + timer.tick + 1e-6, f"run {k} late by {at - deadline}"
            assert beat.next_deadline() is None
            assert len(timer) == 0

    run_virtual(main())


def _blocked_schedule(missed: str) -> tuple[list[float], float]:
    """Runs of every(1.0) on a virtual clock where the loop blocks for 3.5 s after run 2."""

    async def main() -> tuple[list[float], float]:
        loop = loop_of()
        async with Timer() as timer:
            start = loop.time() + 1
            seen: list[float] = []

            def tick() -> None:
                seen.append(round(loop.time() - start, 6))
                if len(seen) == 2:
                    loop.advance(3.5)  # the loop is blocked past 3 deadlines

            beat = timer.every(1.0, tick, missed=missed, start=start)
            await asyncio.sleep(9.2)  # until 8.2 s after the first run
            beat.cancel()
            return seen, beat.skipped

    return cast(tuple[list[float], float], run_virtual(main()))


def test_missed_burst_runs_every_missed_tick_back_to_back() -> None:
    seen, skipped = _blocked_schedule("burst")
    # Runs at 0 and 1; the loop wakes at 4.5; ticks 2, 3, 4 run at once; then on schedule.
    assert seen[:2] == [0, 1]
    assert all(4.5 <= t < 4.6 for t in seen[2:5])
    assert [round(t) for t in seen[5:]] == [5, 6, 7, 8]
    assert skipped == 0


def test_missed_delay_restarts_from_now() -> None:
    seen, _ = _blocked_schedule("delay")
    assert seen[:2] == [0, 1]
    late = seen[2]
    assert 4.5 <= late < 4.6
    assert [round(t - late, 3) for t in seen[3:]] == [1, 2, 3]


def test_missed_skip_runs_once_and_realigns() -> None:
    seen, skipped = _blocked_schedule("skip")
    assert seen[:2] == [0, 1]
    assert 4.5 <= seen[2] < 4.6
    assert [round(t, 3) for t in seen[3:]] == [5, 6, 7, 8]
    assert skipped == 2  # ticks 3 and 4 (due at 3 and 4) were skipped


def test_async_run_still_going_skips_the_next_tick() -> None:
    async def main() -> None:
        loop = loop_of()
        async with Timer() as timer:
            runs: list[float] = []

            async def slow() -> None:
                runs.append(loop.time())
                await asyncio.sleep(2.5)  # overlaps the next two ticks

            beat = timer.every(1.0, slow, start=loop.time() + 1)
            await asyncio.sleep(6.5)
            beat.cancel()
            starts = [round(t - runs[0], 3) for t in runs]
            assert starts == [0, 3]  # ticks at 1 and 2 were skipped: run 0 was still going
            assert beat.skipped == 4  # ticks 1, 2 (run 0 going) and 4, 5 (run 3 going)
            assert beat.count == 2

    run_virtual(main())


def test_interval_yields_scheduled_times_without_drift() -> None:
    async def main() -> None:
        loop = loop_of()
        async with Timer() as timer:
            start = loop.time() + 0.5
            ticks: list[float] = []
            async for deadline in timer.interval(0.5, start=start):
                assert loop.time() >= deadline
                ticks.append(deadline)
                if len(ticks) == 1000:
                    break
            assert ticks == [start + k * 0.5 for k in range(1000)]
            assert len(timer) == 0

    run_virtual(main())


def test_watchdog_fires_once_when_not_fed() -> None:
    async def main() -> None:
        loop = loop_of()
        async with Timer() as timer:
            fired: list[float] = []
            dog = timer.watchdog(3.0, lambda: fired.append(loop.time()))
            start = loop.time()
            for _ in range(10):
                await asyncio.sleep(1.0)
                assert dog.feed() is True
            assert fired == []
            fed_at = loop.time()
            await asyncio.sleep(10)
            assert len(fired) == 1
            assert fed_at + 3.0 <= fired[0] <= fed_at + 3.0 + timer.tick + 1e-6
            assert dog.expired()
            assert dog.feed() is False
            assert fired[0] > start + 3.0
            assert len(timer) == 0

    run_virtual(main())


# -- on the real loops --------------------------------------------------------------------------


@pytest.mark.anyio
async def test_every_runs_at_fixed_rate_on_the_real_loop() -> None:
    loop = asyncio.get_running_loop()
    async with Timer() as timer:
        start = loop.time() + 0.005
        seen: list[float] = []
        beat = timer.every(0.005, lambda: seen.append(loop.time()), start=start)
        while len(seen) < 20:
            await asyncio.sleep(0.01)
        beat.cancel()
        # Run k is due at start + k * 0.005 at the earliest: a skipped tick only makes the
        # later runs later, so the bound holds for every run, skips or not.
        for k, at in enumerate(seen[:20]):
            assert at >= start + k * 0.005, (k, at - (start + k * 0.005))  # never early
        assert beat.count >= 20


@pytest.mark.anyio
async def test_raising_callback_is_reported_and_the_schedule_goes_on() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _l, ctx: errors.append(ctx))
    async with Timer() as timer:
        calls: list[int] = []

        def flaky() -> None:
            calls.append(1)
            raise RuntimeError("flaky")

        async def flaky_async() -> None:
            raise KeyError("async flaky")

        beat = timer.every(0.002, flaky, start=timer.time())
        beat2 = timer.every(0.002, flaky_async, start=timer.time())
        while len(calls) < 3 or beat2.count < 3:
            await asyncio.sleep(0.005)
        beat.cancel()
        beat2.cancel()
        assert any(isinstance(e["exception"], RuntimeError) for e in errors)
        assert any(isinstance(e["exception"], KeyError) for e in errors)


@pytest.mark.anyio
async def test_cancel_stops_runs_and_cancels_the_running_one() -> None:
    async with Timer() as timer:
        state: list[str] = []
        started = asyncio.Event()

        async def job() -> None:
            state.append("run")
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                state.append("cancelled")
                raise

        beat = timer.every(0.001, job, start=timer.time())
        await started.wait()
        assert beat.cancel() is True
        assert beat.cancel() is False
        await asyncio.sleep(0.02)
        assert state == ["run", "cancelled"]
        assert len(timer) == 0
        assert beat.cancelled()


@pytest.mark.anyio
async def test_breaking_out_of_interval_or_cancelling_leaves_nothing_pending() -> None:
    async with Timer() as timer:
        async for _ in timer.interval(0.001):
            break
        assert len(timer) == 0

        async def consume() -> None:
            async for _ in timer.interval(10):
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.01)
        assert len(timer) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(timer) == 0


@pytest.mark.anyio
async def test_watchdog_cancel_and_async_on_expire() -> None:
    async with Timer() as timer:
        fired: list[str] = []
        dog = timer.watchdog(0.005, fired.append, "sync")
        assert dog.cancel() is True
        assert dog.cancel() is False

        async def dead(who: str) -> None:
            fired.append(who)

        timer.watchdog(0.005, dead, "async")
        await asyncio.sleep(0.05)
        assert fired == ["async"]
        assert len(timer) == 0


@pytest.mark.anyio
@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf])
async def test_bad_intervals_are_value_errors(bad: float) -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="interval"):
            timer.every(bad, print)
        with pytest.raises(ValueError, match="period"):
            timer.interval(bad)
        with pytest.raises(ValueError, match="timeout"):
            timer.watchdog(bad, print)
        assert len(timer) == 0


@pytest.mark.anyio
async def test_a_period_below_the_clocks_float_spacing_is_refused() -> None:
    # 5e-324 used to run once, then the timer failed in the reaper (OverflowError, reported,
    # the heartbeat gone); far from zero a period below the spacing beat on the same deadline.
    async with Timer() as timer:
        now = asyncio.get_running_loop().time()
        for period, start in [(5e-324, None), (math.ulp(now) / 4, None), (1e-9, 1e9)]:
            with pytest.raises(ValueError, match="below the float spacing.*could not advance"):
                timer.every(period, print, start=start)
            with pytest.raises(ValueError, match="period .* below the float spacing"):
                timer.interval(period, start=start)
        assert len(timer) == 0
        beat = timer.every(1e-6, print, start=1.0)  # above the spacing at 1.0: taken
        beat.cancel()


@pytest.mark.anyio
async def test_unknown_policy_lists_the_valid_ones_and_non_callables_are_type_errors() -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="'burst', 'delay', 'skip'"):
            timer.every(1, print, missed="catch-up")
        with pytest.raises(ValueError, match="'burst', 'delay', 'skip'"):
            timer.interval(1, missed="nope")
        with pytest.raises(TypeError, match="callable"):
            timer.every(1, "print")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="callable"):
            timer.watchdog(1, None)  # type: ignore[arg-type]
        assert len(timer) == 0


@pytest.mark.anyio
async def test_watchdog_cancelled_after_it_came_due_but_before_it_ran_never_runs() -> None:
    async with Timer() as timer:
        fired: list[str] = []
        dog = timer.watchdog(0.006, fired.append, "dead")
        results: list[bool] = []
        # Due a few ticks before the watchdog; the loop is then blocked past both deadlines,
        # so one reaper pass dispatches both, in deadline order, in one batch.
        timer.call_at(dog.when() - 0.003, lambda: results.append(dog.cancel()))  # type: ignore[operator]
        time.sleep(0.02)  # noqa: ASYNC251 (blocks the loop on purpose)
        await asyncio.sleep(0.02)
        assert results == [True]
        assert fired == []
        assert dog.cancel() is False
        assert not dog.expired()


@pytest.mark.anyio
async def test_async_callback_called_with_wrong_arguments_is_reported_and_the_timer_lives() -> None:
    loop = asyncio.get_running_loop()
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _l, ctx: errors.append(ctx))
    async with Timer() as timer:

        async def takes_nothing() -> None:
            pass

        beat = timer.every(0.002, takes_nothing, "unexpected", start=timer.time())
        dog = timer.watchdog(0.002, takes_nothing, "unexpected")
        fired: list[int] = []
        timer.call_later(0.02, fired.append, 1)
        await asyncio.sleep(0.05)
        assert fired == [1]  # the reaper survived
        assert beat.count >= 2  # the schedule went on, each run reported
        assert dog.expired()
        assert sum(isinstance(e.get("exception"), TypeError) for e in errors) >= 3
        beat.cancel()
