"""A differential harness of the ways programs drive a loop (issue 59).

Random programs of ``call_at`` / ``call_later`` / ``cancel`` / ``_run()`` / ``when()``, reads
of ``loop._scheduled`` (``len``, iteration, ``[0]``, slices, ``in``, ``copy()``) and the changes
to it that asyncio survives (``clear()``, cancelling each handle of a slice), run on stock
asyncio and on loop mode (``max_batch`` off and on), driven three ways: by hand (``_run_once``
in steps, then Home Assistant's drain ``while loop._ready or loop._scheduled``), by
``run_until_complete`` and by ``run_forever`` + ``stop``. Loop mode must give asyncio's
outcome: the same callbacks run the same number of times, never early, in an order asyncio
allows (deadline order, up to the wheel's tick), the same timers seen by every read, nothing
left pending that asyncio ran, and no hang (every run is bounded).

Time is the test's: each loop's ``time`` is a fake clock (loop mode follows a replaced
``time``, as asyncio does), and its selector never blocks: a ``select(timeout)`` moves the
clock on by the timeout instead, up to the step's end. The same program then meets the same
times on both loops, and a run is exact and fast, however loaded the machine is.

Virtual time is run by its own test below: the program by ``run_until_complete`` on
:func:`aiowheel.testing.virtual_loop_factory`, against the same program on the fake clock.

Counter-examples the harness found are kept as plain tests in ``test_driving.py``.
"""

from __future__ import annotations

import asyncio
import copy
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiowheel
from aiowheel.testing import virtual_loop_factory

TICK = 0.001  # loop mode's default
START = 1000.0
LONG = 200.0  # past every deadline a program can file
BOUND = 50_000  # loop iterations: past it, a run is a hang

DELAYS = [-1.0, 0.0, 0.0004, 0.002, 0.009, 0.0101, 0.02, 0.25, 1.0, 3.7, 40.0, 150.0]
STEPS = [0.0, 0.0003, 0.001, 0.004, 0.05, 0.5, 2.0, 45.0]
READS = ["iter", "len", "first", "slice", "in", "copy", "copy.copy", "reversed"]

op = st.one_of(
    st.tuples(st.sampled_from(["later", "at"]), st.sampled_from(DELAYS)),
    st.tuples(st.sampled_from(["cancel", "run", "when"]), st.integers(0, 40)),
    st.tuples(st.just("read"), st.sampled_from(READS)),
)
drop = st.tuples(st.sampled_from(["clear", "cancel-slice"]), st.just(0))
step = st.tuples(st.lists(op, max_size=6), st.sampled_from(STEPS))
program_of = st.lists(step, min_size=1, max_size=8)
program_with_drops = st.lists(
    st.tuples(st.lists(st.one_of(op, drop), max_size=6), st.sampled_from(STEPS)),
    min_size=1,
    max_size=8,
)


class Failed(Exception):
    """A timer's callback failed (every fifth: ``Program.callback``)."""


# A base of loop mode's with a ``_run_once`` of its own (a framework's loop), in a module of its
# own: the code of the module that defines a base's _run_once sees the heap, not the readers'
# list (aiowheel._loopmode._scheduled), and this module's reads are a reader's.
_framework: dict[str, Any] = {"asyncio": asyncio, "__name__": "framework_loop_differential"}
exec(
    "class SubclassLoop(asyncio.SelectorEventLoop):\n"
    "    def _run_once(self):\n"
    "        super()._run_once()\n",
    _framework,
)
SubclassLoop: Any = _framework["SubclassLoop"]


class FakeClock:
    """The loop's ``time``; moved only by the rigged selector, up to ``limit``."""

    def __init__(self) -> None:
        self.now = START
        self.limit = math.inf
        self.selects = 0

    def __call__(self) -> float:
        return self.now


def rig(loop: Any) -> FakeClock:
    clock = FakeClock()
    loop.time = clock
    real_select = loop._selector.select

    def select(timeout: float | None = None) -> Any:
        clock.selects += 1
        assert clock.selects < BOUND, "hang: the loop never ran out of work"
        events = real_select(0)
        wait = clock.limit - clock.now if timeout is None else min(timeout, clock.limit - clock.now)
        if 0 < wait < math.inf:
            clock.now += wait
        return events

    loop._selector.select = select
    return clock


@dataclass
class Run:
    """What one program did on one loop."""

    runs: list[tuple[int, float, bool]] = field(default_factory=list)  # (id, time, by _run())
    deadlines: dict[int, float] = field(default_factory=dict)
    filed_at: dict[int, float] = field(default_factory=dict)
    reads: list[object] = field(default_factory=list)
    left: list[int] = field(default_factory=list)
    errors: list[int] = field(default_factory=list)  # the ids whose error the handler got


class Program:
    """One random program, carried out on one loop."""

    def __init__(self, loop: Any, clock: Any, steps: list[Any], time: Any = None) -> None:
        self.loop = loop
        self.clock = clock
        self.time = time or clock
        self.steps = steps
        self.handles: list[Any] = []
        self.asked: list[float] = []
        self.cancelled: set[int] = set()
        self.direct = False
        self.out = Run()
        loop.set_exception_handler(self.handler)

    def handler(self, _loop: Any, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        assert isinstance(exc, Failed), context  # nothing but the program's own errors
        self.out.errors.append(exc.args[0])

    def callback(self, ident: int) -> None:
        self.out.runs.append((ident, self.time(), self.direct))
        if ident % 5 == 4:  # every fifth timer fails: the loop's handler, the rest runs on
            raise Failed(ident)

    def ids(self, handles: Any) -> list[int]:
        index = {id(h): i for i, h in enumerate(self.handles)}
        found = [index.get(id(h)) for h in handles]
        return sorted(i for i in found if i is not None and i not in self.cancelled)

    def read(self, kind: str) -> object:
        scheduled = self.loop._scheduled
        if kind == "iter":
            return self.ids(scheduled)
        if kind == "len":  # asyncio's heap keeps cancelled handles: count the live ones
            return len([h for h in scheduled if not h.cancelled()])
        if kind == "first":  # asyncio's [0] may be a cancelled handle the wheel let go of
            live = [h.when() for h in scheduled if not h.cancelled()]
            if not live:
                return "none live"
            first = scheduled[0]
            return isinstance(first, asyncio.TimerHandle) and first.when() <= min(live)
        if kind == "slice":
            return self.ids(scheduled[:])
        if kind == "in":
            return [i for i in self.ids(self.handles) if self.handles[i] in scheduled]
        if kind == "copy":
            return self.ids(scheduled.copy())
        if kind == "copy.copy":
            return self.ids(copy.copy(scheduled))
        return self.ids(reversed(scheduled))

    def do(self, ops: list[Any]) -> None:
        loop = self.loop
        for kind, arg in ops:
            if kind in ("later", "at"):
                ident = len(self.handles)
                now = self.time()
                if kind == "later":
                    handle = loop.call_later(arg, self.callback, ident)
                else:
                    handle = loop.call_at(now + arg, self.callback, ident)
                self.handles.append(handle)
                self.asked.append(now + arg)
                self.out.deadlines[ident] = handle.when()
                self.out.filed_at[ident] = now
            elif kind in ("cancel", "run", "when"):
                if not self.handles:
                    continue
                ident = arg % len(self.handles)
                handle = self.handles[ident]
                if kind == "cancel":
                    handle.cancel()
                    self.cancelled.add(ident)
                elif kind == "when":
                    # exactly the deadline asked for (now + delay, by the loop's clock)
                    self.out.reads.append(("when", ident, handle.when() == self.asked[ident]))
                elif ident not in self.cancelled:  # Home Assistant's _run() of a live handle
                    self.direct = True
                    try:
                        handle._run()
                    finally:
                        self.direct = False
            elif kind == "read":
                self.out.reads.append((arg, self.read(arg)))
            elif kind == "clear":
                loop._scheduled.clear()
                self.cancelled.update(range(len(self.handles)))
            else:  # cancel each handle of a slice
                for handle in loop._scheduled[:]:
                    handle.cancel()
                self.cancelled.update(range(len(self.handles)))

    def finish(self) -> Run:
        self.out.left = self.ids(self.loop._scheduled)
        return self.out

    # -- the three ways of driving ------------------------------------------------------------

    def by_hand(self) -> Run:
        loop, clock = self.loop, self.clock
        for ops, dt in self.steps:
            self.do(ops)
            clock.limit = clock.now + dt
            while clock.now < clock.limit:
                loop._run_once()
            while loop._ready:
                loop._run_once()
        clock.limit = math.inf
        runs = 0
        while loop._ready or loop._scheduled:  # Home Assistant's drain
            assert loop._ready or list.__len__(loop._scheduled), "wedged: nothing to wake it"
            loop._run_once()
            runs += 1
            assert runs < BOUND, "hang: the drain never ended"
        return self.finish()

    async def _steps(self) -> None:
        for ops, dt in self.steps:
            self.do(ops)
            await asyncio.sleep(dt)
        await asyncio.sleep(LONG)

    def until_complete(self) -> Run:
        self.loop.run_until_complete(self._steps())
        return self.finish()

    def forever(self) -> Run:
        loop = self.loop
        steps = list(self.steps)

        def next_step() -> None:
            if not steps:
                loop.call_later(LONG, loop.stop)
                return
            ops, dt = steps.pop(0)
            self.do(ops)
            loop.call_later(dt, next_step)

        loop.call_soon(next_step)
        loop.run_forever()
        return self.finish()


def run_on(make: Any, steps: list[Any], driving: str) -> Run:
    loop = make()
    try:
        clock = rig(loop)
        return getattr(Program(loop, clock, steps), driving)()
    finally:
        loop.close()


def loop_mode(max_batch: int | None, base: Any = asyncio.SelectorEventLoop) -> Any:
    return lambda: aiowheel.new_event_loop(base, max_batch=max_batch)


BASES = pytest.mark.parametrize(
    "base", [asyncio.SelectorEventLoop, SubclassLoop], ids=["asyncio", "subclass"]
)


def check_allowed(run: Run, tolerance: float) -> None:
    """Never early; in deadline order up to ``tolerance`` for timers pending together."""
    timed = [(ident, at) for ident, at, direct in run.runs if not direct]
    for ident, at in timed:
        assert at >= run.deadlines[ident], f"timer {ident} ran early: {at} < deadline"
    for position, (a, _) in enumerate(timed):
        for b, b_at in timed[:position]:  # b ran before a
            if run.deadlines[a] + tolerance < run.deadlines[b] and run.filed_at[a] < b_at:
                pytest.fail(
                    f"timer {a} (deadline {run.deadlines[a]}) ran after {b} "
                    f"(deadline {run.deadlines[b]})"
                )


def compare(stock: Run, wheel: Run, exact_reads: bool) -> None:
    assert Counter(i for i, _, _ in wheel.runs) == Counter(i for i, _, _ in stock.runs)
    assert Counter(wheel.errors) == Counter(stock.errors)
    check_allowed(stock, 0.0)
    check_allowed(wheel, 2 * TICK)
    assert wheel.left == stock.left
    if exact_reads:
        assert wheel.reads == stock.reads
    else:  # a coroutine's own sleeps run in another order: what each read saw, not when
        assert [r for r in wheel.reads if r[0] == "when"] == [
            r for r in stock.reads if r[0] == "when"
        ]


FAST = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


@BASES
@pytest.mark.parametrize("max_batch", [None, 2], ids=["unbounded", "max_batch=2"])
@settings(FAST, max_examples=150)
@given(steps=program_with_drops)
def test_by_hand_as_on_asyncio(base: Any, max_batch: int | None, steps: list[Any]) -> None:
    stock = run_on(asyncio.SelectorEventLoop, steps, "by_hand")
    wheel = run_on(loop_mode(max_batch, base), steps, "by_hand")
    compare(stock, wheel, exact_reads=True)


@BASES
@pytest.mark.parametrize("driving", ["until_complete", "forever"])
@pytest.mark.parametrize("max_batch", [None, 2], ids=["unbounded", "max_batch=2"])
@FAST
@given(steps=program_of)
def test_run_by_the_loop_as_on_asyncio(
    base: Any, driving: str, max_batch: int | None, steps: Any
) -> None:
    stock = run_on(asyncio.SelectorEventLoop, steps, driving)
    wheel = run_on(loop_mode(max_batch, base), steps, driving)
    compare(stock, wheel, exact_reads=max_batch is None)


@pytest.mark.parametrize("max_batch", [None, 2], ids=["unbounded", "max_batch=2"])
@settings(FAST, max_examples=30)
@given(steps=program_of)
def test_on_a_virtual_clock_as_on_asyncio(max_batch: int | None, steps: Any) -> None:
    stock = run_on(asyncio.SelectorEventLoop, steps, "until_complete")
    loop: Any = virtual_loop_factory(asyncio.SelectorEventLoop, start=START, max_batch=max_batch)()
    try:
        virtual = Program(loop, None, steps, time=loop.time).until_complete()
    finally:
        loop.close()
    compare(stock, virtual, exact_reads=False)
    # The virtual clock is exact: each timer runs at its own deadline (one filed already past
    # at once, the clock standing still), not at its tick.
    for ident, at, direct in virtual.runs:
        if not direct:
            assert at == max(virtual.deadlines[ident], virtual.filed_at[ident])
