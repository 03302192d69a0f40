"""Validation (``aiowheel._validate``) as a user meets it: the README's bad-input table, row by
row. Each bad argument gets a clear exception naming the problem and leaves nothing filed; the
misuse errors of each entry point are in its own room's tests (and compared across the two
builds in ``test_build.py``)."""

from __future__ import annotations

import asyncio
import math
import threading
from typing import Any

import pytest

from aiowheel import Timer

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
