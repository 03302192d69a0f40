"""The default timer (``aiowheel._loopmode._default``): ``get_timer()`` gives one Timer per loop,
used by the module-level helpers, closed with its loop and never keeping a finished loop alive."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest

import aiowheel
from aiowheel import Timer

pytestmark = pytest.mark.anyio


async def test_get_timer_is_one_per_loop_and_used_by_the_helpers() -> None:
    timer = aiowheel.get_timer()
    assert aiowheel.get_timer() is timer
    handle = aiowheel.call_later(10, print)
    assert len(timer) >= 1
    handle.cancel()
    when = timer.time() + 10
    assert aiowheel.call_at(when, print).when() == when
    assert await aiowheel.sleep(0.001, 3) == 3
    assert await aiowheel.sleep_until(timer.time() + 0.001, 4) == 4


def test_get_timer_outside_a_loop_raises() -> None:
    with pytest.raises(RuntimeError, match="running event loop"):
        aiowheel.get_timer()


def test_each_loop_gets_its_own_default_timer_closed_at_exit() -> None:
    timers: list[Timer] = []

    async def main() -> None:
        timers.append(aiowheel.get_timer())
        aiowheel.call_later(100, print)
        async with aiowheel.timeout(10):
            await aiowheel.sleep(0.001)

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        asyncio.run(main())
        asyncio.run(main())
        gc.collect()
    assert timers[0] is not timers[1]
    assert all(t.closed() for t in timers)


def test_a_finished_loop_and_its_default_timer_are_not_kept_alive() -> None:
    import weakref

    # Timer objects are counted with gc, not weakly referenced: a compiled (mypyc) class
    # takes no weak references.
    def live_timers() -> list[int]:
        return [id(o) for o in gc.get_objects() if type(o) is aiowheel.Timer]

    loops: list[weakref.ref[Any]] = []
    timer_ids: list[int] = []

    async def main() -> None:
        loops.append(weakref.ref(asyncio.get_running_loop()))
        timer_ids.append(id(aiowheel.get_timer()))
        await aiowheel.sleep(0.001)

    asyncio.run(main())
    assert timer_ids[0] in live_timers()  # (the check can see a live timer)
    asyncio.run(main())  # the default timer cache now points at the second loop's timer
    gc.collect()
    assert loops[0]() is None  # the first loop is gone
    # and its timer. (If the second timer has the first one's address, the first was freed
    # before the second was made: two live objects never share one; the default timer cache
    # keeps the second alive, so a reused address must not read as a leak.)
    assert timer_ids[0] == timer_ids[1] or timer_ids[0] not in live_timers()
