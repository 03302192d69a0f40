"""Validation (``aiowheel._common._validate``) as a user meets it: the README's bad-input table, row
by row. Each bad argument gets a clear exception naming the problem and leaves nothing filed; the
misuse errors of each entry point are in its own room's tests (and compared across the two
builds in ``test_build.py``)."""

from __future__ import annotations

import asyncio
import gc
import math
import threading
import warnings
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import aiowheel
from aiowheel import Timer
from tests.support import FREE_THREADED

pytestmark = pytest.mark.anyio


async def test_bad_input_table() -> None:
    loop = asyncio.get_running_loop()
    timer = Timer()
    # NaN: ValueError, nothing scheduled.
    for call in (
        lambda: timer.call_later(math.nan, print),
        lambda: timer.call_at(math.nan, print),
        lambda: timer.timeout(math.nan),
        lambda: timer.timeout_at(math.nan),
    ):
        with pytest.raises(ValueError, match="NaN"):
            call()
    assert len(timer) == 0
    # inf: pending, never fires, cancellable.
    forever = timer.call_later(math.inf, print)
    assert len(timer) == 1 and forever.cancel() and len(timer) == 0
    # negative delay: fires soon, not synchronously.
    hits: list[int] = []
    timer.call_later(-5, hits.append, 1)
    assert hits == []
    await asyncio.sleep(0.01)
    assert hits == [1]
    # huge (1e300): pending like inf.
    huge = timer.call_later(1e300, print)
    assert len(timer) == 1 and huge.cancel()
    # non-callable: TypeError.
    with pytest.raises(TypeError, match="callable"):
        timer.call_later(1, 42)  # type: ignore[arg-type]
    # coroutine function to schedule_later: runs it; coroutine object: runs it.

    async def job(x: int = 1) -> int:
        return x

    assert await timer.schedule_later(0, job, 5) == 5
    assert await timer.schedule_later(0, job(6)) == 6
    # closed timer: RuntimeError.
    await timer.aclose()
    with pytest.raises(RuntimeError, match="closed"):
        timer.call_later(1, print)
    # another loop: RuntimeError (see test_timer.test_use_from_another_loop_raises).
    # another thread: RuntimeError.
    other = Timer()
    other.call_later(10, print)
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(errors, other.call_later, 1, print))
    thread.start()
    thread.join()
    assert isinstance(errors[0], RuntimeError) and "thread" in str(errors[0])
    assert len(other) == 1  # the refused call from the other thread filed nothing
    assert other.stats().pending == 1
    await other.aclose()
    # After all that misuse the loop still runs timers: one fires on time.
    fired = loop.create_future()
    get_timer_handle = Timer()
    get_timer_handle.call_later(0.01, fired.set_result, "fired")
    assert await asyncio.wait_for(fired, 5) == "fired"
    await get_timer_handle.aclose()


def _capture(errors: list[BaseException], fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except BaseException as exc:
        errors.append(exc)


# -- the edges a new user found (issue: the first five minutes) --------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.call_later(math.nan, print), r"call_later\(\): delay must not be NaN"),
        (lambda t: t.call_at(math.nan, print), r"call_at\(\): deadline must not be NaN"),
        (lambda t: t.timeout(math.nan), r"timeout\(\): delay must not be NaN"),
        (lambda t: t.timeout_at(math.nan), r"timeout_at\(\): deadline must not be NaN"),
        (lambda t: t.schedule_later(math.nan, print), r"schedule_later\(\): delay must not be NaN"),
        (lambda t: aiowheel.call_later(math.nan, print), r"call_later\(\): delay must not be NaN"),
        (lambda t: aiowheel.timeout(math.nan), r"timeout\(\): delay must not be NaN"),
    ],
    ids=[
        "call_later",
        "call_at",
        "timeout",
        "timeout_at",
        "schedule_later",
        "aiowheel.call_later",
        "aiowheel.timeout",
    ],
)
async def test_a_nan_is_refused_by_the_name_the_user_gave_it(
    call: Callable[[Timer], object], message: str
) -> None:
    async with Timer() as timer:
        with pytest.raises(ValueError, match=f"^{message}$"):
            call(timer)
        assert len(timer) == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda t: t.sleep(math.nan), r"sleep\(\): delay must not be NaN"),
        (lambda t: t.sleep_until(math.nan), r"sleep_until\(\): deadline must not be NaN"),
        (
            lambda t: t.wait_for(asyncio.sleep(1), math.nan),
            r"wait_for\(\): timeout must not be NaN",
        ),
        (
            lambda t: aiowheel.wait_for(asyncio.sleep(1), math.nan),
            r"wait_for\(\): timeout must not be NaN",
        ),
    ],
    ids=["sleep", "sleep_until", "wait_for", "aiowheel.wait_for"],
)
async def test_a_nan_given_to_a_coroutine_is_refused_by_its_name_and_leaves_nothing(
    make: Callable[[Timer], Coroutine[Any, Any, object]], message: str
) -> None:
    async with Timer() as timer:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "coroutine ... was never awaited" would be one
            with pytest.raises(ValueError, match=f"^{message}$"):
                await make(timer)
            gc.collect()
        assert len(timer) == 0


async def test_a_deadline_already_past_does_not_count_as_loop_lateness() -> None:
    async with Timer() as timer:
        ran: list[str] = []
        timer.call_at(-math.inf, ran.append, "-inf")
        timer.call_at(timer.time() - 3600, ran.append, "an hour ago")
        await asyncio.sleep(0.05)
        assert ran == ["-inf", "an hour ago"]
        # Late by how long the loop took to run them once filed, not by how long ago (or
        # forever) their deadlines were: well under a second even on a loaded machine.
        assert 0 <= timer.stats().max_lateness < 1.0
        timer.call_later(0.01, ran.append, "on time")
        await asyncio.sleep(0.05)
        assert timer.stats().max_lateness < 1.0  # and it still measures later timers


def test_the_helpers_from_another_thread_say_what_to_use_instead() -> None:
    errors: list[BaseException] = []
    thread = threading.Thread(target=lambda: _capture(errors, aiowheel.call_later, 1, print))
    thread.start()
    thread.join()
    assert isinstance(errors[0], RuntimeError)
    assert "a running event loop in this thread" in str(errors[0])
    assert "loop.call_soon_threadsafe" in str(errors[0])


@pytest.mark.parametrize("debug", [False, True])
async def test_cancel_from_another_thread_is_refused_in_debug_mode_and_free_threaded(
    debug: bool,
) -> None:
    loop = asyncio.get_running_loop()
    loop.set_debug(debug)
    try:
        async with Timer() as timer:
            handle = timer.call_later(10, print)
            errors: list[BaseException] = []
            results: list[bool] = []
            thread = threading.Thread(
                target=lambda: _capture(errors, lambda: results.append(handle.cancel()))
            )
            thread.start()
            thread.join()
            # Without the GIL every cancel from another thread is checked, in both builds (the
            # wheel would race the loop's thread; the native core asks the engine, #35 E):
            # tests/time/test_threads.py has the stress.
            if debug or FREE_THREADED:  # refused, and nothing changed
                assert isinstance(errors[0], RuntimeError)
                assert "loop.call_soon_threadsafe(handle.cancel)" in str(errors[0])
                assert len(timer) == 1 and not handle.cancelled()
                assert handle.cancel() is True  # from the loop's thread it works
            else:  # like asyncio's handles: not checked (not thread-safe either: documented)
                assert errors == [] and results == [True]
            assert len(timer) == 0
    finally:
        loop.set_debug(False)


def test_a_timer_kept_past_its_loop_says_why_it_is_closed_and_what_to_do() -> None:
    timer = Timer()

    async def use() -> None:
        timer.call_later(10, print)

    asyncio.run(use())  # asyncio.run cancels the reaper as it ends the loop
    with pytest.raises(RuntimeError, match="reaper task was cancelled") as caught:
        asyncio.run(use())
    message = str(caught.value)
    assert "event loop ended" in message and "one per loop" in message
