"""Every coroutine of aiowheel that awaits something, kept out of the compiled build.

Why a module of its own. A coroutine compiled by mypyc hands an exception (a cancellation, a
timeout) to the object it awaits with the three-argument ``throw(type, value, traceback)``,
which Python 3.12 deprecates: every cancelled ``await timer.sleep()`` would emit a
DeprecationWarning, and under ``-W error`` raise one instead of CancelledError. So the rule of
the compiled build is that its own ``async def`` functions never suspend; each public coroutine
is a thin plain-Python one here, which does the synchronous work through compiled methods of
the driver (validation, filing, the reaper's advance and dispatch) and awaits in between. The
semantics stay those of a coroutine: nothing happens until it is first awaited.

It sits low in the house: it imports nothing of aiowheel's at run time but the errors and the
validators, and speaks to the driver only through the callables it is handed, so the driver,
the entries and the Timer all call down into it and nothing here calls back up.

:data:`DONE` is here too: what ``Timeout.__aexit__`` returns. That method does its work when
called and returns an awaitable already finished, instead of being an ``async def``: a mypyc
coroutine object per ``async with`` was a tenth of a ``timeout()`` block (the performance
page has the figures). The one difference from ``async def`` shows only to code that calls
``__aexit__`` without awaiting it, which ``async with`` and ``AsyncExitStack`` never do.
``__aenter__`` stays an ``async def``: it must arm only when awaited (asyncio's "Timeout
should be used inside a task" is raised there), and every cheaper form tried either armed at
the call or cost the same (a plain-Python coroutine calling back in).

This module is pure Python in both builds (it is not in ``_build.COMPILED_MODULES``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .._common import _build
from .._common._errors import chained
from .._common._validate import seconds as _seconds

if TYPE_CHECKING:
    from types import TracebackType

    from .._common._validate import Seconds
    from ._entry import Owner, Sleeper

__all__ = [
    "DONE",
    "aclose",
    "call",
    "exit",
    "next_tick",
    "reap",
    "sleep",
    "wait_for",
]

_T = TypeVar("_T")


class _Done:
    """An awaitable already finished: ``await DONE`` is None at once (the pure build's)."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return
        yield  # a generator that returns at once

    def __repr__(self) -> str:
        return "aiowheel.DONE"


def _finished() -> Awaitable[None]:
    # The compiled build's is the native core's (aiowheel/_time/_core.c): awaiting it allocates
    # nothing and makes no StopIteration; the pure build's is the class above.
    if not _build.sources_preferred("aiowheel"):
        try:
            from ._core import DONE  # type: ignore[attr-defined,unused-ignore]
        except ImportError:  # pragma: no cover - built with the compiled modules
            pass
        else:
            return DONE  # type: ignore[no-any-return,unused-ignore]
    return _Done()


#: What ``Timeout.__aexit__`` returns once it has done its work (see the module docstring).
DONE: Awaitable[None] = _finished()


async def sleep(
    file: Callable[[Seconds, _T], Sleeper | None],
    unfile: Callable[[Sleeper], object],
    seconds: Seconds,
    result: _T,
) -> _T:
    """The body of :meth:`Timer.sleep` and :meth:`Timer.sleep_until`: ``file(seconds,
    result)`` checks the loop and ``seconds`` and files the sleeper (the driver's synchronous
    half, handed down by the Timer), ``unfile`` takes it out. One coroutine per sleep."""
    entry = file(seconds, result)
    if entry is None:  # the deadline has passed: just yield once, as asyncio.sleep(0) does
        await asyncio.sleep(0)
        return result
    try:
        return await entry._future  # type: ignore[no-any-return]
    finally:
        unfile(entry)  # cancelled: the timer leaves the wheel at once


async def aclose(close: Callable[[], tuple[_T, asyncio.Task[None] | None]]) -> _T:
    """The body of :meth:`Timer.aclose`: close, then wait for the reaper task to finish
    (``close`` returns what aclose returns, with the task to wait for)."""
    unfired, reaper = close()
    if reaper is not None:
        await asyncio.wait([reaper])
    return unfired


async def exit(close: Callable[[], tuple[object, asyncio.Task[None] | None]]) -> None:
    """The body of ``Timer.__aexit__`` (which must not return aclose()'s list: a true value
    would swallow the block's exception)."""
    await aclose(close)


async def reap(waiter: Callable[[], Awaitable[None]], reap_due: Callable[[], None]) -> None:
    """The reaper task: sleep until the earliest bucket is due (``waiter()``), let the driver
    process it (``reap_due()``), forever. The reaper's room (aiowheel/_time/_reaper.py) owns the
    task's whole life."""
    while True:
        await waiter()
        reap_due()


class _AsyncContextManager(Protocol):
    """What ``async with`` needs: a Timeout (whose ``__aexit__`` is a plain method returning an
    awaitable, which contextlib's ABC, typed as ``async def``, does not admit)."""

    def __aenter__(self) -> Awaitable[object]: ...

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> Awaitable[bool | None]: ...


async def wait_for(
    aw: Awaitable[_T],
    timeout: Seconds | None,  # noqa: ASYNC109
    make_timeout: Callable[[float | None], _AsyncContextManager],
) -> _T:
    """``asyncio.wait_for`` with 3.12+ semantics, on ``make_timeout``'s timeouts (a Timer's
    ``timeout``).

    A coroutine runs in the caller's task (no extra task); ``timeout <= 0`` cancels at once
    and raises TimeoutError unless the awaitable is already done; None waits forever. A
    refused ``timeout`` closes a coroutine it was given (it will never run).
    """
    try:
        if timeout is None or isinstance(timeout, float):
            limit = timeout
        else:
            limit = _seconds("wait_for(): timeout", timeout)
        if limit is not None and limit != limit:
            raise ValueError("wait_for(): timeout must not be NaN")
        guard = None if limit is not None and limit <= 0 else make_timeout(limit)
    except BaseException:
        if asyncio.iscoroutine(aw):
            aw.close()
        raise
    if guard is None:
        assert limit is not None
        fut = asyncio.ensure_future(aw)
        if fut.done():
            return fut.result()
        await _cancel_and_wait(fut)
        try:
            return fut.result()
        except asyncio.CancelledError as exc:
            raise chained(TimeoutError(), exc) from exc
    async with guard:
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


async def next_tick(owner: Owner, deadline: float, advance: Callable[[float], None]) -> float:
    """The body of ``Interval.__anext__``: sleep until ``deadline``, then ``advance`` the
    schedule from the loop's clock."""
    await sleep(owner._sleeper_at, owner._unfile, deadline, None)
    advance(owner._loop_time())
    return deadline


async def call(function: Callable[..., Any], args: tuple[object, ...]) -> Any:
    """Call ``function(*args)`` as a task's coroutine, awaiting what it returns if awaitable
    (``schedule_at`` with a function)."""
    result = function(*args)
    if isinstance(result, Awaitable):
        result = await result
    return result
