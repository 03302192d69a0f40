"""Timer: the wheel on a running loop (default asyncio loop and uvloop)."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import inspect
import math
import os
import threading
import warnings
from typing import Any

import pytest

import aiowheel
from aiowheel import PendingLimitError, Timer, TimerClosedError

pytestmark = pytest.mark.anyio

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


background: list[asyncio.Future[Any]] = []


def collect_errors(loop: asyncio.AbstractEventLoop) -> list[dict[str, Any]]:
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    return errors


async def test_call_later_fires_after_its_deadline_never_before() -> None:
    loop = asyncio.get_running_loop()
    async with Timer() as timer:
        seen: list[tuple[float, float]] = []
        handles = [
            timer.call_later(d, lambda h_when: seen.append((h_when, loop.time())), None)
            for d in (0.03, 0.0, 0.01, 0.05, 0.002)
        ]
        # Record each handle's own deadline in the callback.
        for handle in handles:
            handle._args = (handle.when(),)
        await asyncio.sleep(0.2)
        assert len(seen) == 5
        for when, fired_at in seen:
            assert fired_at >= when
        assert [w for w, _ in seen] == sorted(w for w, _ in seen)  # deadline order
        assert len(timer) == 0
        assert timer.stats().fired == 5


async def test_call_at_keeps_the_exact_deadline() -> None:
    async with Timer() as timer:
        when = timer.time() + 0.0123456789
        handle = timer.call_at(when, lambda: None)
        assert handle.when() == when
        assert not handle.cancelled()
        assert "pending" in repr(handle)


async def test_past_deadline_fires_soon_but_never_synchronously() -> None:
    async with Timer() as timer:
        fired: list[str] = []
        timer.call_at(timer.time() - 10, fired.append, "past")
        timer.call_later(-1, fired.append, "negative")
        assert fired == []
        for _ in range(10):
            await asyncio.sleep(0)
            if len(fired) == 2:
                break
        assert fired == ["past", "negative"]


async def test_cancel_returns_true_once_and_frees_the_entry() -> None:
    async with Timer() as timer:
        fired: list[int] = []
        handle = timer.call_later(0.01, fired.append, 1)
        assert len(timer) == 1
        assert handle.cancel() is True
        assert len(timer) == 0
        assert handle.cancel() is False
        assert handle.cancelled()
        await asyncio.sleep(0.05)
        assert fired == []
        assert timer.stats().cancelled == 1


async def test_cancel_after_it_ran_returns_false() -> None:
    async with Timer() as timer:
        handle = timer.call_later(0, lambda: None)
        await asyncio.sleep(0.02)
        assert handle.cancel() is False
        assert not handle.cancelled()


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
        await asyncio.sleep(0.05)
        assert fired == ["first"]
        assert second[0].cancelled()


async def test_callback_runs_in_the_captured_context_and_cannot_leak_into_another() -> None:
    async with Timer() as timer:
        seen: list[str] = []
        token = request_id.set("req-1")
        timer.call_later(0.001, lambda: seen.append(request_id.get()))
        request_id.reset(token)
        timer.call_later(0.001, lambda: seen.append(request_id.get()))

        def setter() -> None:
            request_id.set("leaked")

        timer.call_later(0.001, setter)
        timer.call_later(0.002, lambda: seen.append(request_id.get()))
        await asyncio.sleep(0.03)
        assert seen == ["req-1", "-", "-"]
        assert request_id.get() == "-"


async def test_explicit_context_is_used_as_is() -> None:
    async with Timer() as timer:
        ctx = contextvars.copy_context()
        timer.call_later(0.001, request_id.set, "inside", context=ctx)
        await asyncio.sleep(0.02)
        assert ctx[request_id] == "inside"
        assert request_id.get() == "-"


async def test_callback_runs_outside_any_task_like_a_loop_callback() -> None:
    async with Timer() as timer:
        tasks: list[object] = []
        timer.call_later(0, lambda: tasks.append(asyncio.current_task()))
        await asyncio.sleep(0.02)
        assert tasks == [None]


async def test_raising_callback_is_reported_and_the_reaper_goes_on() -> None:
    loop = asyncio.get_running_loop()
    errors = collect_errors(loop)
    async with Timer() as timer:

        def boom() -> None:
            raise ZeroDivisionError("boom")

        fired: list[int] = []
        handle = timer.call_later(0.001, boom)
        timer.call_later(0.01, fired.append, 1)
        await asyncio.sleep(0.05)
        assert fired == [1]
        assert len(errors) == 1
        assert isinstance(errors[0]["exception"], ZeroDivisionError)
        assert "boom" in errors[0]["message"]
        assert errors[0]["handle"] is handle


async def test_sleep_returns_result_after_the_delay() -> None:
    async with Timer() as timer:
        start = timer.time()
        assert await timer.sleep(0.02, "done") == "done"
        assert timer.time() >= start + 0.02
        deadline = timer.time() + 0.01
        assert await timer.sleep_until(deadline) is None
        assert timer.time() >= deadline
        assert len(timer) == 0


async def test_sleep_zero_or_past_yields_once_without_the_wheel() -> None:
    async with Timer() as timer:
        assert await timer.sleep(0, 7) == 7
        assert await timer.sleep(-5) is None
        assert await timer.sleep_until(timer.time() - 1, "x") == "x"
        assert timer.stats().fired == 0


async def test_cancelled_sleeper_leaves_the_wheel_at_once() -> None:
    async with Timer() as timer:
        task = asyncio.create_task(timer.sleep(30))
        await asyncio.sleep(0)
        assert len(timer) == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(timer) == 0
        assert timer.stats().cancelled == 1


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


async def test_schedule_runs_a_coroutine_as_a_task_at_the_deadline() -> None:
    async with Timer() as timer:
        started: list[float] = []

        async def job(x: int) -> int:
            started.append(timer.time())
            assert asyncio.current_task() is not None
            return x * 2

        deadline = timer.time() + 0.02
        fut = timer.schedule_at(deadline, job(21))
        assert await fut == 42
        assert started[0] >= deadline
        assert await timer.schedule_later(0.001, job, 5) == 10


async def test_schedule_a_sync_function_and_propagate_errors() -> None:
    async with Timer() as timer:
        assert await timer.schedule_later(0.001, lambda a, b: a + b, 1, 2) == 3

        async def fails() -> None:
            raise KeyError("nope")

        with pytest.raises(KeyError):
            await timer.schedule_later(0.001, fails)


async def test_cancelling_a_scheduled_future_before_the_deadline_closes_the_coroutine() -> None:
    async with Timer() as timer:
        ran: list[int] = []

        async def job() -> None:
            ran.append(1)

        coro = job()
        fut = timer.schedule_later(0.01, coro)
        assert len(timer) == 1
        fut.cancel()
        await asyncio.sleep(0)
        assert len(timer) == 0
        assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED
        await asyncio.sleep(0.03)
        assert ran == []


async def test_cancelling_a_scheduled_future_after_dispatch_cancels_the_task() -> None:
    async with Timer() as timer:
        state: list[str] = []
        started = asyncio.Event()

        async def job() -> None:
            state.append("started")
            started.set()
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                state.append("cancelled")
                raise

        fut = timer.schedule_later(0.001, job)
        await started.wait()
        fut.cancel()
        await asyncio.sleep(0.01)
        assert state == ["started", "cancelled"]


async def test_close_returns_unfired_handles_and_cancels_waiters() -> None:
    timer = Timer()
    fired: list[int] = []
    h1 = timer.call_later(10, fired.append, 1)
    h2 = timer.call_later(math.inf, fired.append, 2)
    timer.call_later(0, fired.append, 3)
    sleeper = asyncio.create_task(timer.sleep(10))
    fut = timer.schedule_later(10, asyncio.sleep, 0)
    await asyncio.sleep(0.02)
    assert fired == [3]
    unfired = await timer.aclose()
    assert set(unfired) == {h1, h2}
    assert all(h.cancelled() for h in unfired)
    with pytest.raises(asyncio.CancelledError):
        await sleeper
    assert fut.cancelled()
    assert len(timer) == 0
    assert timer.closed()
    with pytest.raises(RuntimeError, match="closed"):
        timer.call_later(1, print)
    with pytest.raises(RuntimeError, match="closed"):
        await timer.sleep(1)
    assert timer.close() == []


async def test_reaper_cancelled_from_outside_fails_waiters_loudly() -> None:
    timer = Timer()
    sleeper = asyncio.create_task(timer.sleep(10))
    await asyncio.sleep(0)
    assert timer._reaper is not None
    timer._reaper.cancel()
    with pytest.raises(TimerClosedError, match="reaper task was cancelled"):
        await sleeper
    with pytest.raises(RuntimeError, match="reaper task was cancelled"):
        timer.call_later(1, print)


async def test_at_most_one_loop_timer_handle_whatever_the_pending_count() -> None:
    loop = asyncio.get_running_loop()
    scheduled = getattr(loop, "_scheduled", None)
    if scheduled is None:
        pytest.skip(f"{type(loop).__name__} does not show its timer heap (asyncio's does)")
    async with Timer() as timer:
        before = sum(not h.cancelled() for h in scheduled)
        handles = [timer.call_later(0.001 * (i % 500) + 0.01, lambda: None) for i in range(5000)]
        # Exactly one more live handle on the loop's heap: the wheel's one wake-up.
        assert sum(not h.cancelled() for h in scheduled) == before + 1
        for h in handles:
            h.cancel()
        assert len(timer) == 0


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


@pytest.mark.parametrize("bad", [math.nan, float("nan")])
async def test_nan_is_a_value_error_and_changes_nothing(bad: float) -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match="NaN"):
            timer.call_at(bad, print)
        with pytest.raises(ValueError, match="NaN"):
            timer.call_later(bad, print)
        with pytest.raises(ValueError, match="NaN"):
            await timer.sleep_until(bad)
        with pytest.raises(ValueError, match="NaN"):
            await timer.sleep(bad)
        assert len(timer) == 0


async def test_inf_never_fires_but_is_pending_and_cancellable() -> None:
    async with Timer() as timer:
        handle = timer.call_later(math.inf, print)
        timer.call_at(1e300, print)
        assert len(timer) == 2
        assert handle.cancel()
        assert len(timer) == 1


async def test_non_callable_and_non_number_arguments_are_type_errors() -> None:
    async with Timer() as timer:
        with pytest.raises(TypeError, match="callable"):
            timer.call_later(1, "print")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="real number"):
            timer.call_later("1", print)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="real number"):
            timer.call_at(None, print)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="coroutine or a callable"):
            timer.schedule_later(1, 42)  # type: ignore[arg-type]
        coro = asyncio.sleep(0)
        with pytest.raises(TypeError, match="no args"):
            timer.schedule_later(1, coro, 1)
        coro.close()
        assert len(timer) == 0


async def test_coroutine_function_is_refused_by_call_later_in_debug_mode() -> None:
    loop = asyncio.get_running_loop()
    debug = loop.get_debug()
    loop.set_debug(True)
    try:
        async with Timer() as timer:

            async def job() -> None:
                pass

            with pytest.raises(TypeError, match="schedule_at"):
                timer.call_later(1, job)
    finally:
        loop.set_debug(debug)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tick": 0}, "tick"),
        ({"tick": -0.001}, "tick"),
        ({"tick": math.nan}, "tick"),
        ({"tick": math.inf}, "tick"),
        ({"slots": 48}, "slots"),
        ({"slots": 1}, "slots"),
        ({"max_pending": 0}, "max_pending"),
    ],
)
def test_bad_constructor_arguments(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Timer(**kwargs)


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
def test_a_forked_child_is_refused_as_asyncio_refuses_it() -> None:
    # asyncio forgets the running loop in a forked child (3.11: its pid check; 3.12+: a fork
    # hook); so must the timer's hot path, whatever check it makes.
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

    asyncio.run(main())
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
