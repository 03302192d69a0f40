"""timeout / timeout_at / wait_for and the default timer, on both loops, beside asyncio's own."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import math
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest

import aiowheel

pytestmark = pytest.mark.anyio

# Each semantic test runs against asyncio.timeout too, so a difference shows as a failure of
# one flavour only.
FLAVOURS: dict[str, Callable[[float | None], Any]] = {
    "asyncio": asyncio.timeout,
    "aiowheel": aiowheel.timeout,
}


@pytest.fixture(params=list(FLAVOURS))
def timeout(request: pytest.FixtureRequest) -> Callable[[float | None], Any]:
    return FLAVOURS[request.param]


async def test_expiry_raises_timeout_error_from_cancelled_error(timeout: Any) -> None:
    with pytest.raises(TimeoutError) as info:
        async with timeout(0.01) as cm:
            await asyncio.sleep(10)
    assert cm.expired()
    assert isinstance(info.value.__cause__, asyncio.CancelledError)
    assert "expired" in repr(cm)


async def test_never_expires_early() -> None:
    loop = asyncio.get_running_loop()
    for _ in range(20):
        start = loop.time()
        with pytest.raises(TimeoutError):
            async with aiowheel.timeout(0.005):
                await asyncio.sleep(10)
        assert loop.time() >= start + 0.005


async def test_zero_timeout_fires_before_the_first_await_resumes(timeout: Any) -> None:
    with pytest.raises(TimeoutError):
        async with timeout(0):
            await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with timeout(-1):
            await asyncio.sleep(0)


async def test_block_that_finishes_in_time_is_left_alone(timeout: Any) -> None:
    async with timeout(10) as cm:
        await asyncio.sleep(0)
    assert not cm.expired()
    assert repr(cm) == "<Timeout [finished]>"
    assert len(aiowheel.get_timer()) == 0


async def test_none_disables(timeout: Any) -> None:
    async with timeout(None) as cm:
        await asyncio.sleep(0.01)
    assert cm.when() is None
    assert not cm.expired()


async def test_nested_expiring_together_only_the_outermost_raises(timeout: Any) -> None:
    loop = asyncio.get_running_loop()
    inner_saw: list[type[BaseException]] = []
    # Far enough ahead that loop mode files both on its wheel (nearer than its 10 ms threshold,
    # they would stay on the base loop's heap, and on uvloop's behave as uvloop's below).
    deadline = loop.time() + 0.05
    timeout_at = aiowheel.timeout_at if timeout is aiowheel.timeout else asyncio.timeout_at
    with pytest.raises(TimeoutError):
        async with timeout_at(deadline) as outer:
            try:
                async with timeout_at(deadline) as inner:
                    await asyncio.sleep(10)
            except BaseException as exc:
                inner_saw.append(type(exc))
                raise
    if timeout is asyncio.timeout and type(loop).__module__.startswith("uvloop"):
        # The reference on uvloop: it turns each absolute deadline into a relative delay in
        # whole milliseconds when the handle is made, so the two may fire in different loop
        # iterations, and then the inner one raises first. (aiowheel files both in one bucket
        # and fires them in one pass: for it the strict assertion below always holds.)
        assert inner_saw in ([asyncio.CancelledError], [TimeoutError])
        assert inner.expired()
        return
    assert inner_saw == [asyncio.CancelledError]
    assert outer.expired() and inner.expired()


async def test_outside_cancel_is_never_swallowed(timeout: Any) -> None:
    async def victim() -> None:
        async with timeout(0.01):
            await asyncio.sleep(10)

    task = asyncio.create_task(victim())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()


async def test_outside_cancel_racing_the_expiry_wins(timeout: Any) -> None:
    # The timeout and an outside cancel land in the same iteration: CancelledError, not
    # TimeoutError, leaves the block, because uncancel() shows a second request.
    async def victim() -> None:
        async with timeout(0):
            asyncio.current_task().cancel()  # type: ignore[union-attr]
            await asyncio.sleep(1)

    task = asyncio.create_task(victim())
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_reschedule_later_and_earlier(timeout: Any) -> None:
    loop = asyncio.get_running_loop()
    with pytest.raises(TimeoutError):
        async with timeout(0.01) as cm:
            cm.reschedule(loop.time() + 10)
            cm.reschedule(loop.time() + 0.02)
            await asyncio.sleep(1)
    async with timeout(0.01) as cm:
        cm.reschedule(None)
        await asyncio.sleep(0.03)
    assert not cm.expired()


async def test_misuse_raises_asyncios_errors_word_for_word(timeout: Any) -> None:
    cm = timeout(10)
    with pytest.raises(RuntimeError, match="^Timeout has not been entered$"):
        cm.reschedule(None)
    async with cm:
        pass
    with pytest.raises(RuntimeError, match="^Timeout has already been entered$"):
        async with cm:
            pass
    with pytest.raises(RuntimeError, match="^Cannot change state of finished Timeout$"):
        cm.reschedule(None)
    with pytest.raises(TimeoutError):
        async with timeout(0) as cm:
            await asyncio.sleep(1)
    with pytest.raises(RuntimeError, match="^Cannot change state of expired Timeout$"):
        cm.reschedule(None)


async def test_repr_matches_asyncio() -> None:
    loop = asyncio.get_running_loop()
    when = loop.time() + 10
    async with aiowheel.timeout_at(when) as ours, asyncio.timeout_at(when) as theirs:
        assert repr(ours) == repr(theirs) == f"<Timeout [active] when={round(when, 3)}>"
    assert repr(ours) == repr(theirs) == "<Timeout [finished]>"
    assert repr(aiowheel.timeout(1)) == repr(asyncio.timeout(1)) == "<Timeout [created]>"


async def test_entering_outside_a_task_raises() -> None:
    cm = aiowheel.timeout(1)
    coro = cm.__aenter__()
    with pytest.raises(RuntimeError, match="^Timeout should be used inside a task$"):
        # Drive the coroutine from a plain callback: no current task.
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def step() -> None:
            try:
                coro.send(None)
            except BaseException as exc:
                done.set_exception(exc)

        asyncio.get_running_loop().call_soon(step)
        await done


async def test_nan_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="NaN"):
        aiowheel.timeout(math.nan)
    with pytest.raises(ValueError, match="NaN"):
        aiowheel.timeout_at(math.nan)
    async with aiowheel.timeout(10) as cm:
        with pytest.raises(ValueError, match="NaN"):
            cm.reschedule(math.nan)
        assert cm.when() is not None and not math.isnan(cm.when())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="real number"):
        aiowheel.timeout("10")  # type: ignore[arg-type]


@pytest.mark.skipif(sys.version_info < (3, 13), reason="3.13 behaviour; 3.11/3.12 tested below")
async def test_313_threads_timeout_error_into_a_foreign_exception(timeout: Any) -> None:
    with pytest.raises(ZeroDivisionError) as info:
        async with timeout(0.01):
            try:
                await asyncio.sleep(1)
            finally:
                1 / 0  # noqa: B018
    assert isinstance(info.value.__context__, TimeoutError)


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="3.11/3.12 behaviour")
async def test_pre_313_leaves_a_foreign_exception_alone(timeout: Any) -> None:
    with pytest.raises(ZeroDivisionError) as info:
        async with timeout(0.01):
            try:
                await asyncio.sleep(1)
            finally:
                1 / 0  # noqa: B018
    assert isinstance(info.value.__context__, asyncio.CancelledError)


# -- wait_for (3.12+ semantics on every version) -------------------------------------------


async def test_wait_for_returns_the_result() -> None:
    assert await aiowheel.wait_for(asyncio.sleep(0.001, "ok"), 1) == "ok"
    assert await aiowheel.wait_for(asyncio.sleep(0.001, "ok"), None) == "ok"


async def test_wait_for_times_out_and_cancels() -> None:
    cancelled: list[bool] = []

    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    with pytest.raises(TimeoutError):
        await aiowheel.wait_for(slow(), 0.01)
    assert cancelled == [True]


async def test_wait_for_runs_a_coroutine_in_the_callers_task() -> None:
    outer = asyncio.current_task()

    async def which() -> object:
        return asyncio.current_task()

    assert await aiowheel.wait_for(which(), 1) is outer


async def test_wait_for_zero_does_not_start_a_coroutine() -> None:
    started: list[bool] = []

    async def job() -> None:
        started.append(True)

    with pytest.raises(TimeoutError):
        await aiowheel.wait_for(job(), 0)
    assert started == []


async def test_wait_for_zero_returns_a_done_future() -> None:
    fut = asyncio.get_running_loop().create_future()
    fut.set_result(5)
    assert await aiowheel.wait_for(fut, 0) == 5
    assert await aiowheel.wait_for(fut, -1) == 5


async def test_wait_for_zero_waits_for_cancellation_and_may_get_a_result() -> None:
    async def stubborn() -> str:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return "kept"
        return "never"

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    assert await aiowheel.wait_for(task, 0) == "kept"


async def test_wait_for_a_future_that_suppresses_cancellation_returns_its_value() -> None:
    async def return_42() -> int:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            return 42
        return 0

    assert await aiowheel.wait_for(return_42(), 0.01) == 42


# -- the default timer -----------------------------------------------------------------------


# -- interop -----------------------------------------------------------------------------------


async def test_inside_a_task_group_the_timeout_cancels_only_its_block() -> None:
    results: list[str] = []

    async def slow() -> None:
        with pytest.raises(TimeoutError):
            async with aiowheel.timeout(0.01):
                await asyncio.sleep(10)
        results.append("slow timed out")

    async def fast() -> None:
        await asyncio.sleep(0.03)
        results.append("fast done")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(slow())
        tg.create_task(fast())
    assert sorted(results) == ["fast done", "slow timed out"]


async def test_timeout_around_a_task_group() -> None:
    with pytest.raises(TimeoutError):
        async with aiowheel.timeout(0.01), asyncio.TaskGroup() as tg:
            tg.create_task(asyncio.sleep(10))
            tg.create_task(asyncio.sleep(10))


async def test_inside_anyio_fail_after_the_tighter_deadline_raises() -> None:
    # aiowheel's is tighter: our TimeoutError, anyio's scope stays quiet.
    with anyio.fail_after(10):
        with pytest.raises(TimeoutError):
            async with aiowheel.timeout(0.01):
                await anyio.sleep(10)
    # anyio's is tighter: anyio raises, ours does not claim it.
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.01):
            async with aiowheel.timeout(10) as cm:
                await anyio.sleep(10)
    assert not cm.expired()


async def test_around_anyio_move_on_after() -> None:
    async with aiowheel.timeout(10) as cm:
        with anyio.move_on_after(0.01) as scope:
            await anyio.sleep(10)
        assert scope.cancelled_caught
    assert not cm.expired()
    with pytest.raises(TimeoutError):
        async with aiowheel.timeout(0.01):
            with anyio.move_on_after(10) as scope:
                await anyio.sleep(10)
    assert not scope.cancelled_caught


async def test_anyio_cancel_scope_cancel_is_not_turned_into_timeout() -> None:
    with anyio.CancelScope() as scope:
        async with aiowheel.timeout(10) as cm:
            scope.cancel()
            await anyio.sleep(10)
    assert scope.cancelled_caught
    assert not cm.expired()


async def test_in_an_anyio_task_group() -> None:
    results: list[str] = []

    async def worker(delay: float) -> None:
        try:
            async with aiowheel.timeout(0.02):
                await anyio.sleep(delay)
            results.append("ok")
        except TimeoutError:
            results.append("timeout")

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker, 0.001)
        tg.start_soon(worker, 10)
    assert sorted(results) == ["ok", "timeout"]


async def test_reschedule_and_feed_from_another_thread_raise_and_change_nothing() -> None:
    import threading

    async with aiowheel.Timer() as timer:
        dog = timer.watchdog(5, print)
        async with timer.timeout(10) as cm:
            deadline, dog_deadline = cm.when(), dog.when()
            errors: list[BaseException] = []

            def other() -> None:
                for push in (lambda: cm.reschedule(timer.time() + 20), dog.feed):
                    try:
                        push()
                    except RuntimeError as exc:
                        errors.append(exc)

            thread = threading.Thread(target=other)
            thread.start()
            thread.join()
            assert [type(e) for e in errors] == [RuntimeError, RuntimeError]
            assert all("thread" in str(e) for e in errors), errors
            assert (cm.when(), dog.when()) == (deadline, dog_deadline)
        dog.cancel()


async def test_leaving_returns_a_finished_awaitable_that_every_await_reads_as_none() -> None:
    # __aexit__ disarms when called and returns an awaitable already finished (both builds):
    # async with and AsyncExitStack await it at once; awaiting it again is harmless.
    cm = aiowheel.timeout(10)
    await cm.__aenter__()
    assert "active" in repr(cm)
    leaving = cm.__aexit__(None, None, None)
    assert "finished" in repr(cm)
    assert inspect.isawaitable(leaving)
    assert await leaving is None
    assert await leaving is None
    async with contextlib.AsyncExitStack() as stack:
        inner = await stack.enter_async_context(aiowheel.timeout(10))
        assert "active" in repr(inner)
    assert "finished" in repr(inner)
