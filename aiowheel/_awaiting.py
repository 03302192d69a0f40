"""Every coroutine of aiowheel that awaits something, kept out of the compiled build.

Why a module of its own. A coroutine compiled by mypyc hands an exception (a cancellation, a
timeout) to the object it awaits with the three-argument ``throw(type, value, traceback)``,
which Python 3.12 deprecates: every cancelled ``await timer.sleep()`` would emit a
DeprecationWarning, and under ``-W error`` raise one instead of CancelledError. So the rule of
the compiled build is that its own ``async def`` functions never suspend; each public coroutine
is a thin plain-Python one here, which does the synchronous work through compiled methods of
the Timer (validation, filing, the reaper's advance and dispatch) and awaits in between. The
semantics stay those of a coroutine: nothing happens until it is first awaited.

This module is pure Python in both builds (it is not in ``_build.COMPILED_MODULES``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from ._errors import chained

if TYPE_CHECKING:
    from ._engine import Engine
    from ._handles import TimerHandle
    from ._periodic import Interval
    from ._timer import Timer
    from ._validate import Seconds

__all__ = ["aclose", "call", "exit", "next_tick", "reap", "sleep", "wait_for"]

_T = TypeVar("_T")


async def sleep(timer: Timer, seconds: Seconds, result: _T, *, until: bool) -> _T:
    """The body of :meth:`Timer.sleep` (``seconds`` is a delay) and :meth:`Timer.sleep_until`
    (``until``: ``seconds`` is a deadline). One coroutine per sleep."""
    entry = timer._sleeper_at(seconds, result) if until else timer._sleeper_after(seconds, result)
    if entry is None:  # the deadline has passed: just yield once, as asyncio.sleep(0) does
        await asyncio.sleep(0)
        return result
    try:
        return await entry._future  # type: ignore[no-any-return]
    finally:
        if entry._prev is not None:  # cancelled: the timer leaves the wheel at once
            timer._wheel.remove(entry)


async def aclose(timer: Timer) -> list[TimerHandle]:
    """The body of :meth:`Timer.aclose`: close, then wait for the reaper task to finish."""
    reaper = timer._reaper
    unfired = timer.close()
    if reaper is not None and reaper is not asyncio.current_task():
        await asyncio.wait([reaper])
    return unfired


async def exit(timer: Timer) -> None:
    """The body of ``Timer.__aexit__`` (which must not return aclose()'s list: a true value
    would swallow the block's exception)."""
    await aclose(timer)


async def reap(timer: Engine) -> None:
    """The reaper task: sleep until the earliest bucket is due, let the timer process it."""
    while True:
        await timer._reaper_waiter()
        timer._reap_due()


async def wait_for(timer: Timer, aw: Awaitable[_T], timeout: Seconds | None) -> _T:  # noqa: ASYNC109
    """``asyncio.wait_for`` with 3.12+ semantics, on ``timer``'s timeouts.

    A coroutine runs in the caller's task (no extra task); ``timeout <= 0`` cancels at once
    and raises TimeoutError unless the awaitable is already done; None waits forever.
    """
    limit = timer._wait_for_timeout(timeout)
    if limit is not None and limit <= 0:
        fut = asyncio.ensure_future(aw)
        if fut.done():
            return fut.result()
        await _cancel_and_wait(fut)
        try:
            return fut.result()
        except asyncio.CancelledError as exc:
            raise chained(TimeoutError(), exc) from exc
    async with timer.timeout(limit):
        return await aw


async def _cancel_and_wait(fut: asyncio.Future[_T]) -> None:
    """Cancel ``fut`` and wait until it is done, without being cancelled by it."""
    loop = asyncio.get_running_loop()
    waiter: asyncio.Future[None] = loop.create_future()

    def release(_: object) -> None:
        if not waiter.done():
            waiter.set_result(None)

    fut.add_done_callback(release)
    try:
        fut.cancel()
        await waiter
    finally:
        fut.remove_done_callback(release)


async def next_tick(interval: Interval) -> float:
    """The body of ``Interval.__anext__``."""
    schedule = interval._schedule
    deadline = schedule.deadline()
    await sleep(interval._timer, deadline, None, until=True)
    schedule.advance(interval._timer.time())
    return deadline


async def call(function: Callable[..., Any], args: tuple[object, ...]) -> Any:
    """Call ``function(*args)`` as a task's coroutine, awaiting what it returns if awaitable
    (``schedule_at`` with a function)."""
    result = function(*args)
    if isinstance(result, Awaitable):
        result = await result
    return result
