"""The driver (``aiowheel._time._driver``) and the rooms it asks (the binding's loop check, the
reaper's wake-up, the store, the grid): the one owner of the wheel. What every timer kind
shares is tested here once: due timers run in deadline order (one deadline's in the order they
were filed), one loop handle wakes the reaper
whatever the pending count, the pending limit, the loop check and its errors, the lazy
push-back, and what closing a loop does to pending timers."""

from __future__ import annotations

import asyncio
import gc
import math
import os
import random
import threading
import warnings
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from aiowheel import PendingLimitError, Timer, TimerClosedError
from tests.support import Base, collect_errors, run_virtual

pytestmark = pytest.mark.anyio

background: list[asyncio.Future[Any]] = []


def _entry_points(timer: Timer) -> list[Any]:
    """Every synchronous API call that files a timer (each would leave one pending)."""
    return [
        lambda: timer.call_later(5, print),
        lambda: timer.call_at(1e9, print),
        lambda: timer.timeout(5),
        lambda: timer.timeout_at(1e9),
        lambda: timer.every(5, print),
        lambda: timer.watchdog(5, print),
    ]


async def test_a_callback_can_cancel_a_sibling_dispatched_in_the_same_pass() -> None:
    async with Timer() as timer:
        fired: list[str] = []
        when = timer.time() + 0.01
        second: list[aiowheel.TimerHandle] = []

        def first() -> None:
            fired.append("first")
            assert second[0].cancel() is True

        timer.call_at(when, first)
        second.append(timer.call_at(when, fired.append, "second"))
        # Filed last at the same deadline: it runs after the other two in the same pass. (A
        # fixed sleep raced the pass on a loaded machine: the reaper's batch is a loop callback
        # queued behind the sleeping task's wake-up when both came due in one iteration.)
        done = asyncio.get_running_loop().create_future()
        timer.call_at(when, done.set_result, None)
        await asyncio.wait_for(done, 10)
        assert fired == ["first"]
        assert second[0].cancelled()


async def test_many_sleepers_wake_in_order() -> None:
    async with Timer() as timer:
        woke: list[float] = []
        late: list[float] = []

        # One base for every deadline, far enough ahead that every sleeper is filed on the wheel
        # before its deadline however long starting 200 tasks takes on a loaded machine (a
        # deadline already past when sleep_until runs only yields once, in task order, as
        # asyncio.sleep(0) does: that is not the wheel's order under test).
        start = timer.time() + 0.3

        async def sleeper(delay: float) -> None:
            if timer.time() >= start + delay:
                late.append(delay)
            await timer.sleep_until(start + delay)
            woke.append(delay)

        delays = [0.001 * ((i * 37) % 50) + 0.001 for i in range(200)]
        await asyncio.gather(*(sleeper(d) for d in delays))
        assert late == [], "starting 200 tasks took over 0.3 s: the test could not file them"
        assert woke == sorted(delays)  # in deadline order, not just all of them
        assert len(timer) == 0


async def test_reaper_cancelled_from_outside_fails_waiters_loudly() -> None:
    timer = Timer()
    sleeper = asyncio.create_task(timer.sleep(10))
    await asyncio.sleep(0)
    reaper = timer._driver._reaper.task
    assert reaper is not None
    reaper.cancel()
    with pytest.raises(TimerClosedError, match="reaper task was cancelled"):
        await sleeper
    with pytest.raises(RuntimeError, match="reaper task was cancelled"):
        timer.call_later(1, print)


def _counting(base: Base) -> type[asyncio.AbstractEventLoop]:
    """``base`` (or asyncio's default loop) keeping every timer handle its heap hands out."""
    cls: Any = base or asyncio.SelectorEventLoop

    class Counting(cls):  # type: ignore[misc,valid-type]
        def __init__(self) -> None:
            super().__init__()
            # By identity: uvloop's call_at calls self.call_later, asyncio's the reverse.
            self.timer_handles: dict[int, Any] = {}

        def call_at(self, when: Any, callback: Any, *args: Any, **kwargs: Any) -> Any:
            handle = super().call_at(when, callback, *args, **kwargs)
            self.timer_handles[id(handle)] = handle
            return handle

        def call_later(self, delay: Any, callback: Any, *args: Any, **kwargs: Any) -> Any:
            handle = super().call_later(delay, callback, *args, **kwargs)
            self.timer_handles[id(handle)] = handle
            return handle

    return Counting


@pytest.mark.parametrize("mode", ["base", "loop-mode"])
def test_at_most_one_loop_timer_handle_whatever_the_pending_count(base: Base, mode: str) -> None:
    async def main() -> int:
        loop: Any = asyncio.get_running_loop()
        live = lambda: sum(not h.cancelled() for h in loop.timer_handles.values())  # noqa: E731
        async with Timer() as timer:
            await asyncio.sleep(0)
            before = live()
            handles = [timer.call_later(0.001 * (i % 500) + 0.01, print) for i in range(5000)]
            added = live() - before
            for handle in handles:
                handle.cancel()
            assert len(timer) == 0
            return added

    counting = _counting(base)
    if mode == "loop-mode":
        added = aiowheel.run(main(), base=counting)
    else:
        with asyncio.Runner(loop_factory=counting) as runner:
            added = runner.run(main())
    # Exactly one more live handle on the loop's heap, whatever the base: the wheel's wake-up.
    assert added == 1


async def test_the_reaper_does_not_wake_while_nothing_is_due() -> None:
    async with Timer() as timer:
        for _ in range(2000):
            timer.call_later(60, lambda: None)
        await asyncio.sleep(0.3)
        assert timer.stats().wakeups == 0


async def test_an_earlier_bucket_wakes_the_reaper_early() -> None:
    async with Timer() as timer:
        fired: list[str] = []
        timer.call_later(60, fired.append, "late")
        timer.call_later(0.01, fired.append, "early")
        await asyncio.sleep(0.05)
        assert fired == ["early"]


async def test_max_pending_refuses_and_changes_nothing() -> None:
    async with Timer(max_pending=2) as timer:
        timer.call_later(10, print)
        timer.call_later(10, print)
        before = timer.stats()
        with pytest.raises(PendingLimitError, match="max_pending=2"):
            timer.call_later(10, print)
        with pytest.raises(PendingLimitError):
            await timer.sleep(10)
        coro = asyncio.sleep(0)
        with pytest.raises(PendingLimitError):
            timer.schedule_later(10, coro)
        coro.close()
        assert timer.stats() == before


async def test_use_from_another_thread_raises() -> None:
    async with Timer() as timer:
        errors: list[BaseException] = []

        def other() -> None:
            try:
                timer.call_later(1, print)
            except RuntimeError as exc:
                errors.append(exc)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
        assert len(errors) == 1
        assert "thread" in str(errors[0])
        assert len(timer) == 0


async def test_a_foreign_unfile_is_refused_even_for_an_entry_already_out() -> None:
    """The order of the foreign-cancel check (3.14t CI, the pure build): another thread's
    ``cancel()`` read its handle pending, the loop's pass took the entry out to run it, and
    the driver, finding it out, answered "not filed" unchecked, so the cancel went on and
    marked a running handle cancelled. The driver checks the thread first: refused (debug
    mode here, as asyncio checks threads with the GIL), whatever the entry's state."""
    from aiowheel._time._entry import Sleeper

    loop = asyncio.get_running_loop()
    loop.set_debug(True)
    try:
        async with Timer() as timer:
            out = Sleeper(loop.time(), loop.create_future(), None)  # in no store: the pass's
            errors: list[BaseException] = []
            answers: list[bool] = []

            def other() -> None:
                try:
                    answers.append(timer._driver._unfile(out))
                except RuntimeError as exc:
                    errors.append(exc)

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
            assert answers == [], "another thread's unfile was answered, not refused"
            assert len(errors) == 1 and "thread" in str(errors[0]), errors
            assert timer._driver._unfile(out) is False  # the loop's own thread: just "not in"
    finally:
        loop.set_debug(False)


def test_every_entry_point_outside_a_loop_raises_runtime_error() -> None:
    timer = Timer()
    calls = [*_entry_points(timer), lambda: timer.schedule_at(1e9, print)]
    for call in calls:  # schedule_at once failed an internal assert here instead
        with pytest.raises(RuntimeError, match="no event loop is running in this thread"):
            call()
    assert len(timer) == 0


def test_misuse_gets_the_same_error_whichever_way_the_loop_is_checked() -> None:
    # On 3.11 the hot path asks an asyncio loop for its thread instead of asking asyncio for
    # the running loop (a getpid() there): a stopped loop, and a loop now run by another
    # thread, must still be refused with asyncio's answer, by every entry point.
    timer = Timer()
    loop = asyncio.new_event_loop()

    async def bind() -> None:
        timer.call_later(10, print)

    try:
        loop.run_until_complete(bind())
        for call in _entry_points(timer):  # the loop's own thread, between two runs
            with pytest.raises(RuntimeError, match="no event loop is running in this thread"):
                call()
        thread = threading.Thread(target=loop.run_forever)
        thread.start()
        try:
            while not loop.is_running():
                threading.Event().wait(0.001)
            for call in _entry_points(timer):  # the loop now runs in another thread
                with pytest.raises(RuntimeError, match="thread"):
                    call()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
        assert len(timer) == 1
        loop.run_until_complete(bind())  # and back in this thread, it works again
        assert len(timer) == 2
    finally:
        loop.run_until_complete(timer.aclose())
        loop.close()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
@pytest.mark.bases("asyncio", "uvloop")
def test_a_forked_child_is_refused_as_asyncio_refuses_it(base: Base) -> None:
    # asyncio forgets the running loop in a forked child (3.11: its pid check; 3.12+: a fork
    # hook); so must the timer's hot path, whatever check it makes: asyncio's loops' thread id
    # on 3.11, the native lookup's cached process id on uvloop's.
    timer = Timer()
    results: list[int] = []

    async def main() -> None:
        timer.call_later(10, print)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded ... fork()"
            pid = os.fork()
        if pid == 0:  # the child: exit at once, whatever happens, with the verdict
            code = 3
            try:
                for call in _entry_points(timer):
                    try:
                        call()
                    except RuntimeError:
                        continue
                    code = 1
                    break
                else:
                    code = 0 if asyncio._get_running_loop() is None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)  # noqa: ASYNC222 (the child exits at once)
        results.append(os.waitstatus_to_exitcode(status))
        await timer.aclose()

    with asyncio.Runner(loop_factory=base) as runner:
        runner.run(main())
    assert results == [0], "the child filed a timer (1), or asyncio saw a loop running (2)"


def test_use_from_another_loop_raises() -> None:
    timer = Timer()

    async def bind() -> None:
        timer.call_later(10, print)

    async def other() -> None:
        with pytest.raises(RuntimeError, match="different event loop"):
            timer.call_later(1, print)

    loop1 = asyncio.new_event_loop()
    loop2 = asyncio.new_event_loop()
    try:
        loop1.run_until_complete(bind())
        loop2.run_until_complete(other())
    finally:
        loop1.run_until_complete(timer.aclose())
        loop1.close()
        loop2.close()


def test_loop_closed_with_timers_pending_is_silent() -> None:
    loop = asyncio.new_event_loop()
    timer = Timer()

    async def main() -> None:
        timer.call_later(100, print)
        background.append(asyncio.ensure_future(timer.sleep(100)))
        await asyncio.sleep(0.01)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        errors = collect_errors(loop)
        loop.run_until_complete(main())
        loop.close()
        del loop
        gc.collect()
    assert [e for e in errors if "destroyed" in e.get("message", "")] == []
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_asyncio_run_exit_with_timers_pending_is_silent() -> None:
    timer = Timer()
    errors: list[list[dict[str, Any]]] = []

    async def main() -> None:
        errors.append(collect_errors(asyncio.get_running_loop()))
        timer.call_later(100, print)
        background.append(asyncio.ensure_future(timer.sleep(100)))
        await asyncio.sleep(0)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(main())
        gc.collect()
    assert timer.closed()
    assert errors == [[]]
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []


async def test_stats_report_lateness_and_wakeups() -> None:
    async with Timer() as timer:
        timer.call_later(0.01, lambda: None)
        await asyncio.sleep(0.05)
        stats = timer.stats()
        assert stats.fired == 1
        assert stats.wakeups >= 1
        assert 0 <= stats.max_lateness < 1.0  # generous: a loaded 2-core machine
        assert stats.pending == 0


async def test_idle_timeout_pushed_back_on_every_read_never_fires() -> None:
    loop = asyncio.get_running_loop()
    timer = aiowheel.get_timer()
    # 1.5 s of reads against a 1 s idle timeout: it fires unless each read pushes it back, and
    # a read 0.9 s late (a loaded machine, AddressSanitizer) is what it would take to fire.
    async with timer.timeout(1.0) as cm:
        for _ in range(15):
            await asyncio.sleep(0.1)
            cm.reschedule(loop.time() + 1.0)
        heap_before = list(timer._driver._store.wheel._heap)
        for _ in range(10_000):
            cm.reschedule(loop.time() + 1.0)
        assert timer._driver._store.wheel._heap == heap_before  # later is O(1): no heap work
    assert not cm.expired()
    with pytest.raises(TimeoutError):
        async with timer.timeout(0.05) as cm:
            await asyncio.sleep(1)


async def test_many_timers_on_one_loop_warn_once() -> None:
    from aiowheel._time._binding import TOO_MANY_TIMERS

    timers = [Timer() for _ in range(TOO_MANY_TIMERS + 5)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for t in timers:
            t.call_later(10, print)
    messages = [str(w.message) for w in caught if "get_timer" in str(w.message)]
    assert len(messages) == 1
    for t in timers:
        await t.aclose()


def test_a_wheel_timer_is_late_by_at_most_one_tick_where_the_loop_adds_nothing() -> None:
    # On a clock the test controls the loop adds no latency of its own (it wakes exactly at
    # its heap's next deadline): what is left is the wheel's, and it is at most one tick,
    # never early. The loop's own timers, beside them, are exactly on time.
    tick = 0.001

    async def main() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        rng = random.Random(5)
        ours: list[float] = []
        theirs: list[float] = []
        async with Timer(tick=tick) as timer:
            for _ in range(500):
                when = loop.time() + rng.uniform(0.0005, 0.05)
                timer.call_at(when, lambda w=when: ours.append(loop.time() - w))
                loop.call_at(when, lambda w=when: theirs.append(loop.time() - w))
                await asyncio.sleep(rng.uniform(0, 0.01))
            await asyncio.sleep(0.1)
        return ours, theirs

    ours, theirs = run_virtual(main())
    assert len(ours) == len(theirs) == 500
    assert min(ours) >= 0 and max(ours) <= tick + 1e-9, (min(ours), max(ours))
    assert max(ours) > tick / 2  # the rounding up to the tick is there to see
    assert all(abs(late) < 1e-9 for late in theirs)


# -- the tick grid (aiowheel._time._grid)
# -------------------------------------------------------------


def test_the_grid_rounds_a_deadline_up_and_a_reading_down() -> None:
    from aiowheel._time._grid import Grid
    from aiowheel._time._wheel import NEVER

    grid = Grid(0.001)
    grid.start(100.0)
    assert grid.tick_for(100.007, 0) == 7  # a tick's own time is that tick, not the next
    assert grid.tick_for(100.0071, 0) == 8  # anything past it: the next (never early)
    assert grid.tick_for(math.inf, 5) == NEVER
    assert grid.tick_for(-math.inf, 5) == 5  # already due: the tick processed
    with pytest.raises(ValueError, match="NaN"):
        grid.tick_for(math.nan, 0)
    assert grid.reached(100.0069999999, NEVER) == 7  # within the epsilon of tick 7
    assert grid.reached(100.0068, NEVER) == 6
    assert grid.time_of(7) == pytest.approx(100.007)


# Tick-aligned clocks of every size a grid starts at (a fresh process's monotonic time, days
# of uptime, a virtual clock at 1.7e9), and ticks above the float spacing there.
_EPOCHS = (0.0, 0.1, 123.456, 86400.0 * 3 + 0.123, 1e6 + 1 / 3, 1.7e9, 2e9 + 0.5)
_TICKS = (1e-3, 1e-4, 5e-3, 2e-3, 0.05, 0.1, 1 / 3, 1.0)


def whole_ticks_ahead(seed: int) -> list[tuple[float, float, int, float]]:
    """(tick, epoch, k + m, when): deadlines ``m`` ticks (written as a float, and as decimal
    digits) ahead of tick ``k``'s time; a tick at least 64 float spacings of the clock."""
    rng = random.Random(seed)
    cases = []
    while len(cases) < 3000:
        tick = rng.choice(_TICKS)
        epoch = rng.choice(_EPOCHS)
        if tick < 64 * math.ulp(epoch + 1e6 * tick):
            continue
        k = rng.randrange(0, 10 ** rng.randrange(1, 7))
        m = rng.randrange(1, 62)
        now = epoch + k * tick
        delay = m * tick if rng.random() < 0.5 else float(f"{m * tick:.9g}")
        cases.append((tick, epoch, k + m, now + delay))
    return cases


def test_a_deadline_whole_ticks_ahead_of_a_tick_is_filed_on_that_tick() -> None:
    """0.1 / 0.001 is 100.00000000000001, and far from zero the clock's own float spacing is
    more than the grid's epsilon: such deadlines were filed a tick late (a needless tick on the
    real clock). Both builds' grid (and the native core, tests/time/test_native.py) file them on
    their tick."""
    from aiowheel._time._grid import Grid

    wrong = []
    for tick, epoch, expected, when in whole_ticks_ahead(48):
        grid = Grid(tick)
        grid.start(epoch)
        got = grid.tick_for(when, 0)
        if got != expected:
            wrong.append((tick, epoch, when, got, expected))
    assert wrong == []


@pytest.mark.parametrize("tick", _TICKS)
@pytest.mark.parametrize("epoch", _EPOCHS)
def test_rounding_either_side_of_a_tick_is_never_early(tick: float, epoch: float) -> None:
    """Adversarial floats at a boundary: one below it and the boundary itself are its tick;
    one above it may share that tick (the driver then finds it not due and files it again from
    its exact deadline); a deadline clearly past it is the next tick, never the one before."""
    from aiowheel._time._grid import Grid

    grid = Grid(tick)
    grid.start(epoch)
    for k in (1, 7, 100, 4096, 10**6 + 3):
        boundary = grid.time_of(k)
        assert grid.tick_for(math.nextafter(boundary, -math.inf), 0) == k
        assert grid.tick_for(boundary, 0) == k
        assert grid.tick_for(math.nextafter(boundary, math.inf), 0) in (k, k + 1)
        past = boundary + max(tick / 100, 16 * math.ulp(boundary))
        if past < grid.time_of(k + 1):
            assert grid.tick_for(past, 0) == k + 1
            assert grid.time_of(k + 1) >= past  # its bucket comes due no earlier than it
        before = boundary - max(tick / 100, 16 * math.ulp(boundary))
        if before > grid.time_of(k - 1):
            assert grid.tick_for(before, 0) == k


def test_the_grid_counts_the_wake_up_tick_reached_far_from_the_epoch() -> None:
    # A virtual clock started at 1e9: the division reads 0.448 s past the epoch as just below
    # tick 448, which the wake-up was filed for; the wake-up's own time decides.
    from aiowheel._time._grid import Grid

    grid = Grid(0.001)
    grid.start(1e9)
    now = grid.time_of(448)
    assert grid.reached(now, 448) == 448
    grid.rebase(2e9, 448)  # a new clock: the ticks processed stay processed
    assert grid.time_of(448) == 2e9
    assert grid.reached(2e9, 1 << 62) == 447  # the division alone falls short, as above
    assert grid.reached(2e9, 448) == 448


def test_the_grid_counts_lateness_from_the_pass_floor() -> None:
    from aiowheel._time._grid import Grid

    grid = Grid(0.001)
    grid.start(10.0)
    grid.passed(5)  # a pass processed up to tick 5: the floor is 10.005
    assert grid.late(10.010, 10.008, 0.0) == pytest.approx(0.002)  # filed ahead: from its deadline
    assert grid.late(10.010, 9.0, 0.0) == pytest.approx(0.005)  # filed already past: from the floor
    assert grid.late(10.010, 10.008, 0.5) == 0.5  # the max so far stays
    assert grid.lag(10.010, 7) == pytest.approx(0.003)


# -- tie order -----------------------------------------------------------------------------------


def _ties(seed: int, kinds: tuple[str, ...]) -> list[tuple[float, int]]:
    """Timers of a few shared deadlines, filed over time from every distance (a far one sits
    on a coarse level and cascades; a near one goes straight to the finest), each of a random
    ``kind``: loop mode's call_at, a Timer's call_at, a heartbeat's first beat. What ran, as
    (deadline, filing index), in running order."""

    async def main() -> list[tuple[float, int]]:
        loop = asyncio.get_running_loop()
        timer = aiowheel.get_timer()
        rng = random.Random(seed)
        log: list[tuple[float, int]] = []
        start = loop.time()
        deadlines = [start + rng.choice([0.5, 1.0, 2.0, 3.3, 64.0, 300.0]) for _ in range(4)]
        n = 0
        for _ in range(40):
            when = rng.choice(deadlines)
            if when > loop.time():
                kind = rng.choice(kinds)
                key = (when, n)
                if kind == "loop":
                    loop.call_at(when, log.append, key)
                elif kind == "timer":
                    timer.call_at(when, log.append, key)
                else:
                    beat: list[Any] = []

                    def once(key: tuple[float, int] = key, beat: list[Any] = beat) -> None:
                        log.append(key)
                        beat[0].cancel()

                    beat.append(timer.every(1e6, once, start=when))
                n += 1
            await asyncio.sleep(rng.choice([0, 0.1, 0.45, 1.0, 30.0]))
        await asyncio.sleep(400)
        assert len(log) == n
        return log

    return aiowheel.testing.run(main())


@pytest.mark.parametrize("kinds", [("loop",), ("loop", "timer", "every")], ids=["calls", "mixed"])
def test_timers_of_one_deadline_run_in_the_order_they_were_filed(kinds: tuple[str, ...]) -> None:
    # Before 0.5 a timer filed far ahead cascaded into its last bucket behind one of the same
    # deadline filed later, nearer (33 of these 60 seeds out of order, in both builds), and in
    # the compiled build a heartbeat ran before a call_at of its deadline whatever the order.
    ran = 0
    for seed in range(60):
        log = _ties(seed, kinds)
        assert log == sorted(log), seed
        ran += len(log)
    assert ran > 400
