"""The native core (aiowheel/_time/_core.c) against its reference, the pure-Python code.

- A differential test of the wheels: the same random operations (file, cancel, advance and
  fire, rebase, drain) on the core and on :class:`aiowheel._time._wheel.Wheel` driven as the engine
  drives it; everything observable must agree after every step.
- A differential test of whole programs: the same seeded random program (call_at, call_later,
  cancel, timeouts, heartbeats, sleeps, callbacks that file and cancel) on a loop-mode loop on
  a virtual clock, with the native core and without it: the same firings at the same times,
  the same answers from cancel(), the same counts.
- Memory: a million schedule / cancel cycles and many fire cycles leave tracemalloc's block
  count flat and the refcounts of callbacks, args and contexts where they started; an
  unclosed loop with timers pending is collected.

The compiled build runs these; the pure-Python build has no core to compare (skipped there,
with the reason: that build's suite is the reference's own run).
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import math
import random
import sys
import tracemalloc
import warnings
import weakref
from asyncio import format_helpers
from collections.abc import Callable
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from aiowheel._time import _store
from aiowheel._time._wheel import UNQUEUED, Entry, Wheel
from tests.time.test_driver import _ties

native: Any = _store.native

pytestmark = pytest.mark.skipif(
    native is None, reason="the pure-Python build has no native core (it is the reference)"
)

EPSILON = 1e-6  # aiowheel._time._grid.EPSILON


def _tick_for(when: float) -> int:
    return math.ceil(when - EPSILON)  # tick 1.0, epoch 0.0: aiowheel._time._grid's arithmetic


class _Ref(Entry):
    """The pure wheel's twin of one native handle."""

    __slots__ = ("key", "when")

    def __init__(self, key: int, when: float) -> None:
        super().__init__()
        self.key = key
        self.when = when


def _ref_pass(wheel: Wheel, now_tick: int, now: float) -> list[int]:
    """Engine._advance over the pure wheel: the keys fired, in order."""
    due = wheel.advance(now_tick)
    due.sort(key=lambda entry: entry.when)  # type: ignore[attr-defined]  # stable
    fired = []
    for entry in due:
        assert isinstance(entry, _Ref)
        if entry.when > now:
            tick = _tick_for(entry.when)
            wheel.insert(entry, tick if tick > now_tick else now_tick + 1)
            continue
        fired.append(entry.key)
    return fired


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("slots", [64, 8, 2])
def test_the_native_wheel_does_what_the_pure_wheel_does(seed: int, slots: int) -> None:
    rng = random.Random(seed * 1000 + slots)
    armed: list[int] = []
    core = native.Core(lambda: armed.append(1), 1.0, slots, 0.0, lambda: 0.0)
    core.set_armed(UNQUEUED)  # so that arm() is called exactly when a bucket is queued
    wheel = Wheel(slots)
    handles: dict[int, Any] = {}
    refs: dict[int, _Ref] = {}
    fired_native: list[int] = []
    now = 0.0
    key = 0

    def record(k: int) -> None:
        fired_native.append(k)

    for step in range(1500):
        op = rng.random()
        elapsed = wheel.elapsed
        if op < 0.5:
            # Deadlines at, just past and just before tick boundaries; past; near; far.
            span = rng.choice([1, 3, 64, 700, 5000, 300_000, 1 << 24, 1 << 40])
            base = elapsed + rng.randrange(-3, span)
            when = base + rng.choice([0.0, 1e-9, 0.3, 0.5, 0.999999, -1e-9, 1e-7])
            key += 1
            before = len(armed)
            handles[key] = native.Core.file(core, when, record, (key,), None)
            refs[key] = ref = _Ref(key, when)
            queued = wheel.insert(ref, _tick_for(when))
            assert (len(armed) > before) == (queued != UNQUEUED), (step, when)
        elif op < 0.75 and handles:
            victim = rng.choice(list(handles))
            assert handles[victim].cancel() == wheel.remove(refs[victim])
            assert handles[victim].cancel() is False
            del handles[victim], refs[victim]
        elif op < 0.97:
            now = max(now, elapsed) + rng.choice([0.0, 0.4, 1.0, 1.5, 63.0, 64.0, 4097.5, 1e6])
            now += rng.choice([0.0, 1e-9, -1e-9, 0.999])
            now_tick = math.floor(now + EPSILON)
            if now_tick < elapsed:
                continue
            batch, count, _, _ = core.advance(now_tick, now, 0.0, 0.0)
            expected = _ref_pass(wheel, now_tick, now)
            assert count == len(expected)
            fired_native.clear()
            if batch is not None:
                core.run(batch)
            assert fired_native == expected, (step, now)
            for k in expected:
                assert not handles[k].cancel()  # ran: nothing to cancel
                del handles[k], refs[k]
        else:
            # The clock changed (Engine._use_clock): the epoch moves and everything is re-filed
            # by deadline; the pure side is re-filed the same way.
            core.rebase(0.0)
            entries = wheel.drain()
            entries.sort(key=lambda entry: entry.when)  # type: ignore[attr-defined]
            for entry in entries:
                wheel.insert(entry, _tick_for(entry.when))  # type: ignore[attr-defined]
        assert len(core) == len(wheel)
        assert core.elapsed == wheel.elapsed
        assert core.next_expiration() == wheel.next_expiration(), step
        assert core.removed == wheel.removed
        assert sorted(h._args[0] for h in core.entries()) == sorted(handles)
        if step % 100 == 0:
            core.check()
            wheel.check()
    drained = core.drain()
    assert sorted(h._args[0] for h in drained) == sorted(handles)
    assert len(core) == 0
    core.check()


def test_the_core_files_a_deadline_whole_ticks_ahead_on_that_tick_as_the_grid_does() -> None:
    """The core's rounding up is the grid's, float for float (tests/time/test_driver.py's cases:
    deadlines m < 64 ticks ahead of tick k, filed in level 0, where the bucket's expiration is
    the tick), on a core started at tick k's time."""
    from aiowheel._time._grid import Grid
    from tests.time.test_driver import whole_ticks_ahead

    wrong = []
    for tick, epoch, expected, when in whole_ticks_ahead(49)[:1000]:
        grid = Grid(tick)
        grid.start(epoch)
        core = native.Core(lambda: None, tick, 64, epoch, lambda e=epoch: e)
        core.set_armed(UNQUEUED)
        ahead = expected - 63  # a core whose wheel has reached 63 ticks before the deadline
        if ahead > 0:
            core.advance(ahead, grid.time_of(ahead), 0.0, 0.0)
        handle = core.file(when, print, (), None)
        got = core.next_expiration()
        if got != expected or grid.tick_for(when, 0) != expected:
            wrong.append((tick, epoch, when, got, grid.tick_for(when, 0), expected))
        handle.cancel()
    assert wrong == []


def test_the_core_wakes_an_exact_clock_for_an_earlier_deadline_in_a_queued_bucket() -> None:
    """On an exact (virtual) clock the wake-up is at the earliest deadline of the bucket due:
    the core answers it (earliest) and asks the driver to re-arm for a deadline filed before
    the armed one even into a bucket already queued."""
    arms: list[int] = []
    core = native.Core(lambda: arms.append(1), 0.001, 64, 0.0, lambda: 0.0)
    core.set_armed(UNQUEUED)
    late = core.file(0.0105, print, (), None)
    assert arms == [1] and core.next_expiration() == 11
    assert core.earliest(11) == 0.0105
    assert core.earliest(12) == math.inf
    core.set_armed(11, 0.0105)
    early = core.file(0.0101, print, (), None)  # same bucket, earlier deadline: re-arm
    assert arms == [1, 1] and core.earliest(11) == 0.0101
    core.set_armed(11)  # a real clock: the bucket's tick is the wake-up, no re-arm
    core.file(0.0102, print, (), None).cancel()
    assert arms == [1, 1]
    late.cancel()
    early.cancel()


def _program(seed: int, log: list[tuple[object, ...]]) -> Callable[[], Any]:
    """A random program of timers, the same for the same seed (and the same behaviour)."""

    async def main() -> None:
        rng = random.Random(seed)
        loop = asyncio.get_running_loop()
        timer = aiowheel.get_timer()
        handles: list[Any] = []
        var: contextvars.ContextVar[int] = contextvars.ContextVar("var", default=-1)

        def fire(n: int) -> None:
            log.append(("fire", n, loop.time(), var.get()))
            if rng.random() < 0.2 and handles:
                log.append(("cancel-in-callback", handles[rng.randrange(len(handles))].cancel()))
            if rng.random() < 0.2:
                handles.append(loop.call_later(rng.choice([0, 0.001, 0.5, 2]), fire, n + 1000))

        async def guarded(n: int, budget: float, work: float) -> None:
            try:
                async with asyncio.timeout(budget):
                    await asyncio.sleep(work)
                log.append(("finished", n, loop.time()))
            except TimeoutError:
                log.append(("timed out", n, loop.time()))

        beats: list[float] = []
        heartbeat = timer.every(0.25, lambda: beats.append(loop.time()))
        tasks = []
        for step in range(300):
            op = rng.random()
            if op < 0.35:
                delay = rng.choice([0, 1, 0.001, 0.0105, 0.5, 3, 3600.0, rng.random() * 10])
                if rng.random() < 0.3:
                    var.set(step)
                handles.append(loop.call_later(delay, fire, step))
            elif op < 0.5:
                when = loop.time() + rng.choice([-1.0, 0.0, 0.002, 0.1, 0.999, 7.0])
                handles.append(loop.call_at(when, fire, step))
            elif op < 0.6:
                handles.append(timer.call_later(rng.choice([0.01, 0.2, 5.0]), fire, step))
            elif op < 0.75 and handles:
                handle = handles[rng.randrange(len(handles))]
                log.append(("cancel", handle.cancel(), handle.cancelled()))
            elif op < 0.85:
                tasks.append(asyncio.create_task(guarded(step, rng.random(), rng.random())))
            else:
                await asyncio.sleep(rng.choice([0, 0.001, 0.05, 0.3, 1.0]))
            log.append(("state", step, loop.time(), len(timer), len(aiowheel.pending_timers())))
        await asyncio.sleep(10)
        await asyncio.gather(*tasks)
        heartbeat.cancel()
        log.append(("beats", tuple(beats)))
        stats = timer.stats()
        cancelled = [h.cancelled() for h in handles]
        log.append(("end", len(timer), cancelled, stats.pending, stats.fired, stats.cancelled))

    return main


@pytest.mark.parametrize("seed", range(6))
def test_a_program_runs_the_same_with_and_without_the_native_core(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    with_core: list[tuple[object, ...]] = []
    aiowheel.testing.run(_program(seed, with_core)())
    monkeypatch.setattr(_store, "native", None)
    without: list[tuple[object, ...]] = []
    aiowheel.testing.run(_program(seed, without)())
    assert len(with_core) > 300
    assert with_core == without


def test_timers_of_one_deadline_run_in_the_same_order_with_and_without_the_native_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 48: loop timers, a Timer's and heartbeats sharing deadlines, filed from every
    # distance (tests/time/test_driver.py checks each build's order against the filing order). The
    # compiled build ran heartbeats first in 6 of 60 seeds of the old differential programs.
    kinds = ("loop", "timer", "every")
    with_core = [_ties(seed, kinds) for seed in range(30)]
    monkeypatch.setattr(_store, "native", None)
    without = [_ties(seed, kinds) for seed in range(30)]
    assert sum(map(len, with_core)) > 200
    assert with_core == without


def test_the_handles_are_the_native_ones_and_answer_like_the_pure_ones() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        far = loop.call_later(30, print, "x")
        assert type(far) is native.TimerHandle is aiowheel.TimerHandle
        assert far._callback is print and far._args == ("x",)
        assert isinstance(far, asyncio.TimerHandle)  # issue 37
        # asyncio's repr (its arguments shown only in debug mode from 3.14 on)
        source = format_helpers._format_callback_source(print, ("x",))
        assert repr(far) == f"<TimerHandle when={far.when()} {source}>"
        assert far.cancel() is True and far.cancelled() and not far.pending()
        assert far._callback is None and repr(far) == f"<TimerHandle cancelled when={far.when()}>"
        with pytest.raises(TypeError):
            type(far)()  # made by the core only
        empty = contextvars.Context()  # filed from an empty context: a fresh one each run
        api = empty.run(aiowheel.get_timer().call_later, 30, print)
        assert type(api) is native.TimerHandle
        assert api.get_context() is not api.get_context()
        assert len(api.get_context()) == 0
        api.cancel()

    aiowheel.run(main())


def test_the_handle_is_asyncios_size_and_every_slot_name_of_asyncio_reads_safely() -> None:
    # The wheel's fields are stored over the asyncio slots a handle does not use (what a due
    # timer's run touches stays in the object's first cache lines): the handle is no bigger
    # than asyncio's, and each of asyncio's slot names answers from the native fields (no
    # member descriptor of asyncio's reads them as objects) and refuses a write.
    assert native.TimerHandle.__basicsize__ == asyncio.TimerHandle.__basicsize__
    core = native.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0)
    arg = object()
    handle = core.file(30.0, print, (arg,), None)
    names = {
        name
        for cls in (asyncio.Handle, asyncio.TimerHandle)
        for name in cls.__slots__
        if name != "__weakref__"
    }
    expected = {
        "_args": (arg,),
        "_callback": print,
        "_cancelled": False,
        "_scheduled": True,
        "_when": 30.0,
        "_repr": None,
        "_source_traceback": None,
    }
    assert names == {*expected, "_context", "_loop"}
    for name, value in expected.items():
        assert getattr(handle, name) == value, name
    assert isinstance(handle._context, contextvars.Context)
    with pytest.raises(AttributeError, match="_loop"):
        handle._loop  # noqa: B018  (no loop is kept)
    for name in names:
        with pytest.raises(AttributeError):
            setattr(handle, name, None)
        with pytest.raises(AttributeError):
            delattr(handle, name)
    assert handle._when == 30.0 and handle._scheduled  # unchanged by the refused writes
    ref = weakref.ref(handle)
    assert handle.cancel() and handle._cancelled and not handle._scheduled
    del handle
    assert ref() is None  # freed at once, its weak reference cleared


def test_a_run_frees_each_handle_as_it_goes() -> None:
    # Each handle the batch held last is freed right after its callback (while it is in the
    # cache), not by the batch's dealloc after the whole run.
    core = native.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0)
    refs: list[weakref.ref[Any]] = []
    previous_freed: list[bool] = []

    def callback(i: int) -> None:
        previous_freed.append(i == 0 or refs[i - 1]() is None)

    for i in range(3):
        refs.append(weakref.ref(core.file(0.005, callback, (i,), None)))
    batch, fired, _, _ = core.advance(10, 0.01, 0.0, 0.0)
    assert fired == 3
    core.run(batch)
    assert previous_freed == [True, True, True]
    assert batch == [None, None, None]
    assert all(ref() is None for ref in refs)


def test_a_callback_error_is_reported_by_the_loop_and_the_batch_goes_on() -> None:
    seen: list[dict[str, Any]] = []
    ran: list[int] = []

    def boom() -> None:
        raise ZeroDivisionError("boom")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _, context: seen.append(context))
        loop.call_later(0.05, ran.append, 1)
        handle = loop.call_later(0.05, boom)
        loop.call_later(0.05, ran.append, 2)
        await asyncio.sleep(0.2)
        assert ran == [1, 2]
        [context] = seen
        assert context["message"].startswith("Exception in callback ")
        assert context["message"].endswith(".boom()")
        assert isinstance(context["exception"], ZeroDivisionError)
        assert context["handle"] is handle

    aiowheel.run(main())


def test_keyboard_interrupt_leaves_the_loop_and_the_rest_of_the_batch_runs_next() -> None:
    ran: list[int] = []
    loop = aiowheel.new_event_loop()
    try:

        def interrupt() -> None:
            raise KeyboardInterrupt

        now = loop.time()
        loop.call_at(now + 0.05, ran.append, 1)
        loop.call_at(now + 0.05, interrupt)
        loop.call_at(now + 0.05, ran.append, 2)
        with pytest.raises(KeyboardInterrupt):
            loop.run_forever()
        assert ran == [1]
        loop.call_later(0.02, loop.stop)
        loop.run_forever()
        assert ran == [1, 2]
    finally:
        loop.close()


def test_a_million_schedule_and_cancel_cycles_leave_nothing_behind() -> None:
    core = native.Core(lambda: None, 0.001, 64, 0.0, None)

    def callback() -> None:
        pass

    arg = object()
    context = contextvars.copy_context()
    counts = (sys.getrefcount(callback), sys.getrefcount(arg), sys.getrefcount(context))
    file = core.file
    for _ in range(10_000):  # warm the allocator and the free list
        file(1e6, callback, (arg,), context).cancel()
    gc.collect()
    tracemalloc.start()
    try:
        blocks = tracemalloc.get_traced_memory()[0]
        for i in range(1_000_000):
            handle = file(1e6 + (i & 1023), callback, (arg,), context)
            if i & 7:
                handle.cancel()
            del handle
        core.drain()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - blocks
    finally:
        tracemalloc.stop()
    assert len(core) == 0
    assert grown < 64 * 1024, f"{grown} bytes more after a million cycles"
    assert (sys.getrefcount(callback), sys.getrefcount(arg), sys.getrefcount(context)) == counts


def test_fire_cycles_leave_nothing_behind() -> None:
    clock = [0.0]
    core = native.Core(lambda: None, 0.001, 64, 0.0, lambda: clock[0])
    calls = [0]

    def callback(value: object) -> None:
        calls[0] += 1

    arg = object()
    counts = (sys.getrefcount(callback), sys.getrefcount(arg))

    async def cycles(n: int) -> None:
        for _ in range(n):
            for k in range(50):
                core.file(clock[0] + 0.001 * (k % 5 + 1), callback, (arg,), None)
            clock[0] += 0.006
            now_tick = math.floor(clock[0] * 1000 + EPSILON)
            batch, fired, _, _ = core.advance(now_tick, clock[0], 0.0, 0.0)
            assert fired == 50
            core.run(batch)
            del batch

    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(cycles(200))
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            loop.run_until_complete(cycles(4000))
            gc.collect()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    finally:
        loop.close()
    assert calls[0] == 4200 * 50
    assert grown < 64 * 1024, f"{grown} bytes more after 200k fired handles"
    assert (sys.getrefcount(callback), sys.getrefcount(arg)) == counts


def test_an_unclosed_loop_with_timers_pending_is_collected() -> None:
    # The pending handles are untracked by the collector: the core reports what they hold.
    loops = []
    for _ in range(20):
        loop = aiowheel.new_event_loop()
        loop.call_later(30, loop.stop)  # a cycle: the loop -> its core -> the handle -> loop
        loop.call_at(loop.time() + 60, print, loop, context=contextvars.copy_context())
        loops.append(weakref.ref(loop))
        del loop
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()
        gc.collect()
    assert [ref for ref in loops if ref() is not None] == []


def test_timers_filed_from_an_empty_context_hold_no_context_and_leave_its_count_flat() -> None:
    # From an empty current context no copy is made and no shared context is referenced (a
    # refcount every thread would write on a free-threaded build, issue 37): the handle gets a
    # fresh context per run (what a copy would have been).
    from aiowheel._time._handles import EMPTY_CONTEXT

    core = native.Core(lambda: None, 0.001, 64, 0.0, None)
    var: contextvars.ContextVar[int] = contextvars.ContextVar("var")

    def cycles(n: int) -> list[Any]:
        handles = [core.file(1e6, print, (), None) for _ in range(n)]
        for handle in handles:
            handle.cancel()
        return handles

    contextvars.Context().run(cycles, 1000)  # warm up
    before = sys.getrefcount(EMPTY_CONTEXT)
    kept = contextvars.Context().run(cycles, 100_000)
    assert sys.getrefcount(EMPTY_CONTEXT) == before  # no handle holds it
    assert len(kept[0].get_context()) == 0 and kept[0].get_context() is not kept[0].get_context()
    del kept
    assert sys.getrefcount(EMPTY_CONTEXT) == before

    # A variable set in the current context: that handle gets a copy holding it.
    def filed_with_a_variable() -> Any:
        var.set(7)
        return core.file(1e6, print, (), None)

    handle = contextvars.Context().run(filed_with_a_variable)
    assert handle.get_context()[var] == 7
    assert handle.cancel()


def test_each_run_from_an_empty_context_starts_empty_whatever_the_last_one_did() -> None:
    # A handle filed from an empty context runs in an empty one; the core keeps that context
    # for the next such run when it comes back empty and unreferenced. Whatever a run does (sets
    # a variable, takes a copy, runs another handle inside itself), no other run sees it.
    core = native.Core(lambda: None, 0.001, 64, 0.0, None)
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[tuple[str, str]] = []
    copies: list[contextvars.Context] = []

    def sets(name: str) -> None:
        seen.append((name, var.get()))
        var.set(name)

    def copies_then_sets(name: str) -> None:
        copies.append(contextvars.copy_context())
        sets(name)

    def resets(name: str) -> None:
        token = var.set(name)
        var.reset(token)  # empty again: the context may be kept
        seen.append((name, var.get()))

    nested = contextvars.Context().run(core.file, 1e6, sets, ("nested",), None)

    def runs_a_handle_inside(name: str) -> None:
        var.set(name)
        nested._run()  # a pending handle's run, now, inside this one
        seen.append((name, var.get()))

    order = [
        (sets, "a"), (sets, "b"), (resets, "c"), (sets, "d"), (copies_then_sets, "e"),
        (sets, "f"), (runs_a_handle_inside, "g"), (sets, "h"), (resets, "i"), (sets, "j"),
    ]  # fmt: skip
    for i, (callback, name) in enumerate(order):
        contextvars.Context().run(core.file, 0.001 * (i + 1), callback, (name,), None)
    batch, fired, _, _ = core.advance(20, 0.02, 0.0, 0.0)
    assert fired == len(order)
    core.run(batch)
    assert seen == [
        ("a", "unset"), ("b", "unset"), ("c", "unset"), ("d", "unset"), ("e", "unset"),
        ("f", "unset"), ("nested", "unset"), ("g", "g"), ("h", "unset"), ("i", "unset"),
        ("j", "unset"),
    ]  # fmt: skip
    assert len(copies) == 1 and len(copies[0]) == 0  # the copy was taken before "e" set it
    assert var.get() == "unset"  # and none of it reached the caller's context
    assert nested.cancel()


@pytest.mark.parametrize("pattern", ["interleaved", "descending", "random", "sorted"])
def test_a_due_batch_is_in_deadline_order_and_equal_deadlines_in_filing_order(
    pattern: str,
) -> None:
    # The batch is sorted by a natural merge sort (runs found, then merged): every shape of
    # input, against Python's own stable sort of the same (deadline, filing index) pairs.
    clock = [0.0]
    core = native.Core(lambda: None, 0.001, 64, 0.0, lambda: clock[0])
    rng = random.Random(pattern)
    n = 5000
    offsets = {
        "interleaved": [i % 97 for i in range(n)],
        "descending": [n - i for i in range(n)],
        "random": [rng.randrange(300) for _ in range(n)],
        "sorted": [i // 3 for i in range(n)],
    }[pattern]
    filed = [(0.0105 + offset * 1e-7, i) for i, offset in enumerate(offsets)]
    for when, i in filed:
        core.file(when, print, (i,), None)
    clock[0] = 0.02
    batch, fired, _, _ = core.advance(20, 0.02, 0.0, 0.0)
    assert fired == n
    assert [(h.when(), h._args[0]) for h in batch] == sorted(filed, key=lambda pair: pair[0])
    for handle in batch:
        handle.cancel()


def test_each_module_object_keeps_its_own_types_and_state() -> None:
    # Module state, not process-wide globals: a second module object made from the same
    # extension has its own handle and Core types, and its Cores file handles of its own type
    # (also when the handle comes from the free list a handle of the first module went to).
    import importlib.util

    spec = importlib.util.find_spec("aiowheel._time._core")
    assert spec is not None and spec.loader is not None
    fresh: Any = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    assert fresh is not native
    assert fresh.TimerHandle is not native.TimerHandle
    assert fresh.Core is not native.Core
    assert issubclass(fresh.TimerHandle, asyncio.TimerHandle)
    native.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0).file(1.0, print, (), None).cancel()
    core = fresh.Core(lambda: None, 0.001, 64, 0.0, lambda: 0.0)
    ran: list[int] = []
    handle = core.file(0.005, ran.append, (1,), None)
    assert type(handle) is fresh.TimerHandle
    assert "TimerHandle" in repr(handle)
    batch, fired, _, _ = core.advance(10, 0.01, 0.0, 0.0)
    assert fired == 1 and batch[0] is handle
    core.run(batch)
    assert ran == [1]
    # setup() was given to the first module object only: a failing callback of the fresh one
    # says so instead of reaching for a helper it does not have.
    failing = core.file(0.015, lambda: 1 / 0, (), None)
    batch, fired, _, _ = core.advance(20, 0.02, 0.0, 0.0)
    assert fired == 1 and batch[0] is failing
    with pytest.raises(RuntimeError, match=r"setup\(\) was not called"):
        core.run(batch)
