"""The workloads of ``python -m bench``, one coroutine (or function) per contender kind.

Every workload runs on a fresh event loop, so no contender inherits another's heap, tasks or
garbage. ``kind`` is ``"aiowheel"`` (a fresh :class:`aiowheel.Timer` on the loop) or
``"loop"`` (the event loop's own timers: ``loop.call_later``, ``asyncio.timeout``,
``asyncio.sleep``) or ``"loop-mode"`` (the same calls as ``"loop"``, on the loop's loop-mode
twin, ``aiowheel.new_event_loop(base)``); ``floor`` is plain Python with no timer at all.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

import aiowheel
import aiowheel.loops
from aiowheel._time._wheel import Entry, Wheel

# A server's loop runs between requests: the churn workloads yield to it every this many ops.
OPS_PER_ITERATION = 1000


def _noop() -> None:
    pass


class _Obj:
    __slots__ = ("a", "b", "c")


def run(contender: str, factory: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """Run ``factory()`` to completion on a new loop for ``contender`` ("kind/loop")."""
    kind, _, loop_name = contender.partition("/")
    gc.collect()
    if loop_name == "rsloop":  # a peer only: not a base aiowheel.loops knows
        import rsloop

        with asyncio.Runner(loop_factory=rsloop.new_event_loop) as runner:
            return runner.run(factory())
    base = aiowheel.loops.base_class(loop_name)
    if kind == "loop-mode":
        return aiowheel.run(factory(), base=base)
    with asyncio.Runner(loop_factory=base) as runner:
        return runner.run(factory())


async def _timer_for(kind: str) -> aiowheel.Timer | None:
    if kind == "aiowheel":
        timer = aiowheel.Timer()
        await timer.__aenter__()
        return timer
    return None


# -- 1. churn: arm a timer 30 s out, cancel an older one --------------------------------------


async def churn(kind: str, pending: int, ops: int, delay: float = 30.0) -> float:
    """Operations (one call_later + one cancel) per second with ``pending`` timers pending."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    call_later = timer.call_later if timer is not None else loop.call_later
    ring = deque(call_later(delay, _noop) for _ in range(pending))
    gc.collect()  # pay the set-up's collection debt now, not inside the measurement
    rounds = max(1, ops // OPS_PER_ITERATION)
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(OPS_PER_ITERATION):
            ring.append(call_later(delay, _noop))
            ring.popleft().cancel()
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - start
    # No clean-up: closing the loop drops the loop's handles, and the timer's with it.
    return rounds * OPS_PER_ITERATION / elapsed


def churn_floor(pending: int, ops: int) -> float:
    """The same shape with no timer: allocate an object, insert it in a dict, delete another."""
    d: dict[_Obj, None] = {}
    ring: deque[_Obj] = deque()
    for _ in range(pending):
        o = _Obj()
        d[o] = None
        ring.append(o)
    rounds = max(1, ops // OPS_PER_ITERATION)
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(OPS_PER_ITERATION):
            o = _Obj()
            d[o] = None
            ring.append(o)
            del d[ring.popleft()]
    return rounds * OPS_PER_ITERATION / (time.perf_counter() - start)


def schedule_floor(ops: int) -> float:
    """The machine's floor for ``call_later`` + ``cancel``: the churn loop of :func:`churn` with
    the timer replaced by one native clock read (``time.monotonic``: an empty C call, a
    ``clock_gettime`` and a float), the least a ``call_later`` can do."""
    clock = time.monotonic
    ring: deque[float] = deque([0.0])
    rounds = max(1, ops // OPS_PER_ITERATION)
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(OPS_PER_ITERATION):
            ring.append(clock())
            ring.popleft()
    return rounds * OPS_PER_ITERATION / (time.perf_counter() - start)


# -- 0. the sans-IO core alone ------------------------------------------------------------------


def core(pending: int, ops: int) -> float:
    """Wheel add + remove (of the oldest entry) per second, ``pending`` entries pending."""
    wheel = Wheel()
    ring: deque[Entry] = deque()
    for i in range(pending):
        e = Entry()
        wheel.add(e, 30_000 + i % 1000)
        ring.append(e)
    add, remove = wheel.add, wheel.remove
    rounds = max(1, ops // OPS_PER_ITERATION)
    start = time.perf_counter()
    for now in range(1, rounds + 1):  # one tick passes per thousand operations
        for _ in range(OPS_PER_ITERATION):
            e = Entry()
            add(e, now + 30_000)
            ring.append(e)
            remove(ring.popleft())
        wheel.advance(now)
    return rounds * OPS_PER_ITERATION / (time.perf_counter() - start)


# -- 2. and 3. the timeout context manager --------------------------------------------------------


async def timeout_cm(kind: str, ops: int) -> float:
    """``async with timeout(30): pass`` per second."""
    timer = await _timer_for(kind)
    timeout = timer.timeout if timer is not None else asyncio.timeout
    rounds = max(1, ops // OPS_PER_ITERATION)
    start = time.perf_counter()
    for _ in range(rounds):
        for _ in range(OPS_PER_ITERATION):
            async with timeout(30):
                pass
        await asyncio.sleep(0)
    elapsed = time.perf_counter() - start
    if timer is not None:
        await timer.aclose()
    return rounds * OPS_PER_ITERATION / elapsed


async def reschedule(kind: str, ops: int) -> float:
    """``cm.reschedule(loop.time() + 30)`` of an active timeout, per second."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    timeout = timer.timeout if timer is not None else asyncio.timeout
    rounds = max(1, ops // OPS_PER_ITERATION)
    async with timeout(30) as cm:
        start = time.perf_counter()
        for _ in range(rounds):
            for _ in range(OPS_PER_ITERATION):
                cm.reschedule(loop.time() + 30)
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - start
    if timer is not None:
        await timer.aclose()
    return rounds * OPS_PER_ITERATION / elapsed


# -- 4. sleep fan-out ------------------------------------------------------------------------------


async def fanout(kind: str, tasks: int, spread: float) -> float:
    """Wall time for ``tasks`` tasks sleeping random 0..spread seconds to all finish."""
    timer = await _timer_for(kind)
    sleep = timer.sleep if timer is not None else asyncio.sleep
    rng = random.Random(42)
    delays = [rng.uniform(0, spread) for _ in range(tasks)]
    start = time.perf_counter()
    await asyncio.gather(*(sleep(d) for d in delays))
    elapsed = time.perf_counter() - start
    if timer is not None:
        await timer.aclose()
    return elapsed


# -- N timers already due ---------------------------------------------------------------------


async def due(kind: str, timers: int) -> float:
    """Milliseconds to run ``timers`` timers that are all due when the loop next looks.

    They are filed 50 ms ahead (so loop mode puts them on its wheel), spread over 1 ms; the
    loop is then blocked past their deadlines, and the clock runs from the end of that block
    until the last one has run.

    After the block the loop's clock is read once (``loop.time()``), for every contender. On
    uvloop that refreshes libuv's cached time, as any timer started or any ``loop.time()`` in
    a real program does: without it libuv computes its next poll timeout from the time of the
    last refresh before the block, so the first timer waits (deadline - that refresh) more,
    uvloop's own as much as loop mode's, and the figure measured the block's length, which is
    longer the faster a contender files (docs/performance.md, "The due batch on uvloop")."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    call_at = timer.call_at if timer is not None else loop.call_at
    done = loop.create_future()
    remaining = [timers]

    def fire() -> None:
        remaining[0] -= 1
        if not remaining[0]:
            done.set_result(None)

    deadline = loop.time() + 0.05
    for i in range(timers):
        call_at(deadline + (i % 1000) * 1e-6, fire)
    gc.collect()
    # The loop blocked on purpose: every timer comes due while it cannot run them.
    time.sleep(max(0.0, deadline + 0.002 - loop.time()))  # noqa: ASYNC251
    start = time.perf_counter()
    loop.time()  # the loop knows the time again (libuv's cached clock: see the docstring)
    await done
    elapsed = time.perf_counter() - start
    if timer is not None:
        await timer.aclose()
    return elapsed * 1e3


# -- 5. fire storm ---------------------------------------------------------------------------------


async def storm(kind: str, timers: int, window: float) -> dict[str, float]:
    """``timers`` timers due within ``window`` s: lateness by loop.time(), and early firings."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    call_at = timer.call_at if timer is not None else loop.call_at
    clock = loop.time
    rng = random.Random(7)
    fired = [0.0] * timers
    whens = [0.0] * timers
    done = loop.create_future()
    remaining = [timers]

    def fire(i: int) -> None:
        fired[i] = clock()
        remaining[0] -= 1
        if not remaining[0]:
            done.set_result(None)

    base = loop.time() + 0.1 + timers * 3e-6  # past the time it takes to arm them all
    for i in range(timers):
        when = base + rng.uniform(0, window)
        whens[i] = when
        call_at(when, fire, i)
    await done
    if timer is not None:
        await timer.aclose()
    lateness = sorted(f - w for f, w in zip(fired, whens, strict=True))
    return {
        "p50_ms": lateness[len(lateness) // 2] * 1e3,
        "p99_ms": lateness[int(len(lateness) * 0.99)] * 1e3,
        "max_ms": lateness[-1] * 1e3,
        "early": float(sum(1 for x in lateness if x < 0)),
    }


# -- heartbeats --------------------------------------------------------------------------------


async def heartbeat(kind: str, peers: int, interval: float, seconds: float) -> dict[str, float]:
    """``peers`` heartbeats every ``interval`` s, phases spread over one interval, for
    ``seconds``: lateness of each beat by loop.time(), in steady state (each heartbeat's first
    beat, which can be late while the others are still being set up, is not counted). The
    loop's own version re-arms each beat with ``loop.call_at(start + k * interval)`` (fixed
    rate, like ``every``)."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    clock = loop.time
    rng = random.Random(11)
    lateness: list[float] = []
    record = lateness.append
    # Past the time it takes to set them all up (every() does more per call than call_at).
    base = loop.time() + 0.1 + peers * 1e-5
    handles: list[Any] = []
    if timer is not None:
        for _ in range(peers):
            start = base + rng.uniform(0, interval)
            cell: list[Any] = []

            def beat(cell: list[Any] = cell, start: float = start) -> None:
                k = cell[0].count - 1
                if k:
                    record(clock() - (start + k * interval))

            cell.append(timer.every(interval, beat, start=start))
            handles.append(cell[0])
    else:

        def loop_beat(start: float, k: int, slot: int) -> None:
            now = clock()
            if k:
                record(now - (start + k * interval))
            handles[slot] = loop.call_at(start + (k + 1) * interval, loop_beat, start, k + 1, slot)

        for slot in range(peers):
            start = base + rng.uniform(0, interval)
            handles.append(loop.call_at(start, loop_beat, start, 0, slot))
    gc.collect()  # pay the set-up's collection debt before the first beat, not during them
    await asyncio.sleep(base - loop.time() + seconds)
    for handle in handles:
        handle.cancel()
    if timer is not None:
        await timer.aclose()
    lateness.sort()
    return {
        "beats": float(len(lateness)),
        "p50_ms": lateness[len(lateness) // 2] * 1e3,
        "p99_ms": lateness[int(len(lateness) * 0.99)] * 1e3,
        "early": float(sum(1 for x in lateness if x < 0)),
    }


async def feed(kind: str, ops: int) -> float:
    """Push a 3 s peer deadline back, per second: ``Watchdog.feed()`` against the loop's way,
    ``handle.cancel()`` + ``loop.call_later(3, ...)``."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    rounds = max(1, ops // OPS_PER_ITERATION)
    if timer is not None:
        dog = timer.watchdog(3.0, _noop)
        start = time.perf_counter()
        for _ in range(rounds):
            for _ in range(OPS_PER_ITERATION):
                dog.feed()
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - start
        dog.cancel()
        await timer.aclose()
    else:
        handle = loop.call_later(3.0, _noop)
        start = time.perf_counter()
        for _ in range(rounds):
            for _ in range(OPS_PER_ITERATION):
                handle.cancel()
                handle = loop.call_later(3.0, _noop)
            await asyncio.sleep(0)
        elapsed = time.perf_counter() - start
        handle.cancel()
    return rounds * OPS_PER_ITERATION / elapsed


# -- 6. memory per pending timer ------------------------------------------------------------------


async def memory(kind: str, count: int) -> dict[str, float]:
    """Bytes per pending call_later(30) and per entered timeout(30) (tracemalloc)."""
    loop = asyncio.get_running_loop()
    timer = await _timer_for(kind)
    call_later = timer.call_later if timer is not None else loop.call_later
    timeout = timer.timeout if timer is not None else asyncio.timeout
    handles: list[Any] = [None] * count
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        handles[i] = call_later(30.0, _noop)
    per_call_later = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()
    for h in handles:
        h.cancel()
    handles = []
    cms: list[Any] = [None] * count
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(count):
        cm = timeout(30)
        await cm.__aenter__()
        cms[i] = cm
    per_timeout = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()
    for cm in reversed(cms):
        await cm.__aexit__(None, None, None)
    if timer is not None:
        await timer.aclose()
    return {"call_later_bytes": per_call_later, "timeout_bytes": per_timeout}


# -- 7. idle --------------------------------------------------------------------------------


async def idle(timers: int, seconds: float) -> float:
    """Reaper wake-ups while ``timers`` timers 60 s out sit through ``seconds`` of idle loop."""
    timer = aiowheel.Timer()
    async with timer:
        for _ in range(timers):
            timer.call_later(60.0, _noop)
        before = timer.stats().wakeups
        await asyncio.sleep(seconds)
        return float(timer.stats().wakeups - before)
