"""Timer: the wheel on a running loop (default asyncio loop and uvloop)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
from typing import Any

import pytest

from aiowheel import Timer
from tests.support import collect_errors

pytestmark = pytest.mark.anyio

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


async def test_call_later_fires_after_its_deadline_never_before() -> None:
    loop = asyncio.get_running_loop()
    async with Timer() as timer:
        seen: list[tuple[float, float]] = []
        # Each callback records its own handle's deadline and the time it ran.
        handles = [
            timer.call_later(d, lambda i: seen.append((handles[i].when(), loop.time())), i)
            for i, d in enumerate((0.03, 0.0, 0.01, 0.05, 0.002))
        ]
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
        assert handle.pending() and isinstance(handle, asyncio.TimerHandle)
        assert repr(handle).startswith(f"<TimerHandle when={when} ")  # asyncio's repr


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
