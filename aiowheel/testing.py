"""Time you control: asyncio code that waits, tested in milliseconds, on every base loop.

A *virtual loop* is a loop-mode loop (:mod:`aiowheel._loopmode._loop`) whose ``loop.time()`` is a
virtual clock: it starts at ``start`` and moves only when the loop is idle (autojump) or a
test calls :func:`advance`. Every timer of the loop, at any delay (``call_at`` /
``call_later``, ``asyncio.sleep``, ``asyncio.timeout``, ``wait_for``, libraries' timers), is on
its wheel, so the next deadline is the wheel's next bucket and nothing has to be patched:
``time.monotonic``, ``time.time`` and other loops are untouched. How idleness is read, and why
it is exact, is in :mod:`aiowheel._virtual._virtual`.

>>> async def main():
...     loop = asyncio.get_running_loop()
...     await asyncio.sleep(3600)           # returns at once, in wall time
...     return loop.time()
>>> aiowheel.testing.run(main())
3600.0

``autojump=True``: when the loop is idle (no ready callback, nothing in a zero-timeout poll of
its I/O, no work handed to a thread still running: ``run_in_executor``, ``asyncio.to_thread``,
``anyio.to_thread.run_sync``), the clock jumps to the next deadline. ``autojump=<seconds>``:
only after that much real idle time (for a peer in another process). ``autojump=False``: only
:func:`advance` moves it.

Fuzzing time. The exact clock runs every timer on time: one schedule out of the many a real
loop makes. ``seed=`` (with ``jitter=``, ``stall_rate=``, ``stall=``) picks another, seeded:
timers late (never early, always in deadline order, coalesced into batches), the loop stalled
after a pass of timers; ``call_soon`` order is never touched, and ``advance()`` stays exact.
The same seed replays the same schedule; :func:`check_determinism` runs a program twice with
one seed and compares what ran when; :func:`seeds` is a Hypothesis strategy for seeds. The
pytest plugin runs whole suites so (``--aiowheel-seed``, ``--aiowheel-fuzz``). How the
schedules are made is in :mod:`aiowheel._virtual._virtual`; the bug shapes it finds are on the docs'
testing-time page.

Why a module of its own, in pure Python. This is what tests import; none of it is on a hot path
(the clock's wake-up is filed once per bucket, as the base heap's would be), and the real-time
loop pays nothing for it: a real loop-mode loop is built exactly as before.
"""

from ._loopmode._testing import (
    Fuzz,
    FuzzedLoopFactory,
    NondeterminismError,
    VirtualClock,
    VirtualTime,
    advance,
    check_determinism,
    clock_of,
    first_divergence,
    run,
    seeds,
    virtual_loop_factory,
)

__all__ = [
    "Fuzz",
    "FuzzedLoopFactory",
    "NondeterminismError",
    "VirtualClock",
    "VirtualTime",
    "advance",
    "check_determinism",
    "clock_of",
    "first_divergence",
    "run",
    "seeds",
    "virtual_loop_factory",
]
