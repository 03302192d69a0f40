"""Time you control: asyncio code that waits, tested in milliseconds, on every base loop.

A *virtual loop* is a loop-mode loop (:mod:`aiowheel._loop`) whose ``loop.time()`` is a
virtual clock: it starts at ``start`` and moves only when the loop is idle (autojump) or a
test calls :func:`advance`. Every timer of the loop, at any delay (``call_at`` /
``call_later``, ``asyncio.sleep``, ``asyncio.timeout``, ``wait_for``, libraries' timers), is on
its wheel, so the next deadline is the wheel's next bucket and nothing has to be patched:
``time.monotonic``, ``time.time`` and other loops are untouched. How idleness is read, and why
it is exact, is in :mod:`aiowheel._virtual`.

>>> async def main():
...     loop = asyncio.get_running_loop()
...     await asyncio.sleep(3600)           # returns at once, in wall time
...     return loop.time()
>>> aiowheel.testing.run(main())
3600.0

``autojump=True``: when the loop is idle (no ready callback, nothing in a zero-timeout poll of
its I/O, no ``run_in_executor`` / ``asyncio.to_thread`` work still running), the clock jumps to
the next deadline. ``autojump=<seconds>``: only after that much real idle time (for a peer in
another process). ``autojump=False``: only :func:`advance` moves it.

Why a module of its own, in pure Python. This is what tests import; none of it is on a hot path
(the clock's wake-up is filed once per bucket, as the base heap's would be), and the real-time
loop pays nothing for it: a real loop-mode loop is built exactly as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._loop import LoopFactory
from ._loop import virtual_loop_factory as _virtual_loop_factory
from ._virtual import VirtualClock, VirtualTime

__all__ = [
    "VirtualClock",
    "VirtualTime",
    "advance",
    "clock_of",
    "run",
    "virtual_loop_factory",
]

_T = TypeVar("_T")

_DEFAULT_TICK = 0.001


def virtual_loop_factory(
    base: type[asyncio.AbstractEventLoop] | None = None,
    *,
    autojump: bool | float = True,
    start: float = 0.0,
    tick: float = _DEFAULT_TICK,
) -> LoopFactory:
    """A zero-argument, picklable factory of loop-mode loops on a virtual clock.

    For ``asyncio.run(main(), loop_factory=...)`` (3.12+), ``asyncio.Runner``, anyio's
    ``loop_factory`` backend option and pytest-asyncio's loop factories. ``base`` is the loop
    class (asyncio's default; ``uvloop.Loop``, ``rloop.EventLoop``...). ``loop.time()`` starts
    at ``start``; a timer due at ``D`` runs with ``loop.time()`` equal to ``D`` rounded up to
    ``tick``; timers due in the same tick run in the order they were filed.

    >>> asyncio.run(main(), loop_factory=aiowheel.testing.virtual_loop_factory())
    """
    return _virtual_loop_factory(base, tick, autojump, start)


def clock_of(loop: asyncio.AbstractEventLoop) -> VirtualClock | None:
    """The virtual clock of ``loop``; None if ``loop`` is not on one.

    >>> aiowheel.testing.clock_of(asyncio.get_running_loop()).now
    """
    clock: VirtualClock | None = getattr(loop, "_aiowheel_clock", None)
    return clock if isinstance(clock, VirtualClock) else None


async def advance(seconds: float) -> None:
    """Move the running loop's virtual clock ``seconds`` forward and return when it is there.

    Each timer due on the way runs at its own deadline, in deadline order, and the tasks it
    wakes run before the clock moves past that deadline. ValueError for a negative or NaN
    ``seconds``; RuntimeError if the running loop is not on a virtual clock.

    >>> await aiowheel.testing.advance(30)   # every timer due in the next 30 s has run
    """
    clock = clock_of(asyncio.get_running_loop())
    if clock is None:
        raise RuntimeError(
            "advance() needs a loop on a virtual clock (aiowheel.testing.virtual_loop_factory, "
            "aiowheel.testing.run, or pytest --aiowheel-clock=virtual); the running loop is "
            "on real time"
        )
    await clock.advance(seconds)


def run(
    main: Coroutine[Any, Any, _T],
    *,
    base: type[asyncio.AbstractEventLoop] | None = None,
    autojump: bool | float = True,
    start: float = 0.0,
    debug: bool | None = None,
) -> _T:
    """Run ``main`` like :func:`aiowheel.run`, on a loop with a virtual clock.

    >>> aiowheel.testing.run(main())                 # sleeps and timeouts take no wall time
    """
    try:
        if asyncio._get_running_loop() is not None:
            raise RuntimeError("aiowheel.testing.run() cannot be called from a running event loop")
        factory = virtual_loop_factory(base, autojump=autojump, start=start)
    except BaseException:
        if asyncio.iscoroutine(main):
            main.close()  # refused: it will never run, so no "never awaited" warning either
        raise
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)
