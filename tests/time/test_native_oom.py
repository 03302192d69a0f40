"""Out of memory in the native core (issue 59, defect 8): nothing lost, nothing doubled.

The core keeps one heap item per queued bucket (aiowheel/_time/_native/wheel.c). When that heap
could not grow, a ``call_later`` raised MemoryError with its handle filed all the same (its
bucket unqueued: run late, or never), and a cascade that could not queue a re-filed bucket left
its timers unwoken until a later cascade queued that bucket again (a level's turn late: 260 s
below) while the advance reported a SystemError to the loop. The core now allocates the heap
for every bucket when it is made (the bound and its cost are in wheel.c's header), so filing
and advancing never grow it.

``aiowheel._time._core._fail_allocations(n)`` (a test hook) fails the n-th attempt from now to
allocate (grow) a core's heap. Each test arms it where a growth would have happened before,
checks what must hold whatever the design (a call that raises files nothing; every timer filed
runs exactly once, on time), then that no growth was attempted at all. The hook is disarmed
after each test, whatever it did.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from aiowheel._time import _store

native: Any = _store.native

pytestmark = pytest.mark.skipif(
    native is None, reason="the pure-Python build has no native core (its heap is a list)"
)


@pytest.fixture(autouse=True)
def _disarmed() -> Iterator[None]:
    yield
    native._fail_allocations(0)


def _core_of(loop: asyncio.AbstractEventLoop) -> Any:
    timer: Any = aiowheel.timer_of(loop)
    core = timer._driver._store._core
    assert core is not None and core.fast
    return core


def test_a_call_later_or_call_at_that_needs_the_heap_to_grow_files_nothing_or_everything() -> None:
    """Forty timers, each in a bucket of its own (one tick apart, from 20 ms: the core's, not
    the base heap's), each call made with the next growth of the heap set to fail: one that
    raises has filed nothing (the core's count, its invariants, pending_timers()), and every
    one that returned runs once, no other. With the heap allocated up front, none raises."""
    loop = aiowheel.new_event_loop()
    try:
        core = _core_of(loop)
        ran: list[int] = []
        filed: list[int] = []
        refused: list[int] = []

        async def main() -> None:
            for i in range(40):
                before = (len(core), len(aiowheel.pending_timers()))
                native._fail_allocations(1)
                try:
                    if i % 2:
                        loop.call_later(0.020 + 0.001 * i, ran.append, i)
                    else:
                        loop.call_at(loop.time() + 0.020 + 0.001 * i, ran.append, i)
                except MemoryError:
                    after = (len(core), len(aiowheel.pending_timers()))
                    assert after == before, f"call {i} raised MemoryError but filed its handle"
                    core.check()
                    refused.append(i)
                else:
                    filed.append(i)
                    core.check()
            native._fail_allocations(0)
            # Every timer filed runs (generous: the machine may be loaded), then a while longer
            # for any that should not.
            for _ in range(1000):
                if len(ran) >= len(filed):
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.1)

        loop.run_until_complete(main())
        assert sorted(ran) == filed, "each timer filed runs exactly once, and no refused one"
        assert len(core) == 0
        core.check()
        assert refused == [], "the heap is allocated up front: no call needs it to grow"
    finally:
        loop.close()


def test_a_cascade_that_needs_the_heap_to_grow_runs_every_timer_exactly_once_on_time() -> None:
    """Three hundred timers filed 1,000 s ahead and on, 4.2 s apart (a millisecond tick: a
    few buckets of the wheel's fourth level, and one timer to each bucket of the third, 4.096 s
    wide), then the next growth of the heap set to fail, then time let pass: each cascade
    re-files some sixty of them into buckets of their own below, each queued on the heap, and
    every timer runs exactly once, at its deadline (the clock is virtual: exact), with no error
    reported to the loop. With the heap allocated up front, no growth is attempted."""
    runs: dict[int, list[float]] = {}
    deadlines: dict[int, float] = {}
    errors: list[dict[str, Any]] = []
    spent: list[int] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: errors.append(context))
        core = _core_of(loop)

        def record(i: int) -> None:
            runs.setdefault(i, []).append(loop.time())

        start = loop.time()
        for i in range(300):
            deadlines[i] = start + 1000.0 + i * 4.2
            loop.call_at(deadlines[i], record, i)
        assert core.queued < 16, "the timers lie in a few far buckets"
        native._fail_allocations(1)
        await asyncio.sleep(2400.0)
        spent.append(native._fail_allocations(0))
        core.check()
        assert len(core) == 0

    aiowheel.testing.run(main())
    missing = [i for i in deadlines if i not in runs]
    doubled = [i for i in runs if len(runs[i]) > 1]
    late = [i for i in runs if runs[i][0] - deadlines[i] > 0.002]  # two ticks: exact clock
    assert (missing, doubled, late) == ([], [], []), [runs[i][0] - deadlines[i] for i in late]
    assert errors == []
    assert spent == [1], "the heap is allocated up front: an advance never grows it"


def test_a_core_whose_heap_cannot_be_allocated_is_not_made() -> None:
    """The heap's one allocation is the core's construction: failed, the Core raises
    MemoryError (and the next is made as usual)."""
    native._fail_allocations(1)
    with pytest.raises(MemoryError):
        native.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0)
    assert native._fail_allocations(0) == 0
    core = native.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0)
    handle = core.file(5.0, print, (), None)
    core.check()
    assert handle.cancel() and len(core) == 0


def test_a_filing_whose_wake_up_cannot_be_armed_files_nothing() -> None:
    # Found beside defect 8: a filing that queued an earlier bucket called the driver's arm,
    # and when that raised (here: the loop's own heap refusing the wake-up), the call raised
    # with its handle filed all the same, to run later though its caller had an error.
    class Refused(Exception):
        pass

    refuse = [True]

    def arm() -> None:
        if refuse[0]:
            raise Refused

    core = native.Core(arm, 0.001, 64, 0.0, lambda: 0.0)
    core.set_armed(1 << 40)  # armed far ahead: any filing queues an earlier bucket and re-arms
    ran: list[int] = []
    with pytest.raises(Refused):
        core.file(0.5, ran.append, (1,), None)
    assert len(core) == 0
    core.check()
    refuse[0] = False
    handle = core.file(0.5, ran.append, (2,), None)
    assert len(core) == 1 and handle.pending()
