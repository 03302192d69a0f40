"""Purgatory: wait / signal / watch, exactly one outcome per operation whatever the race,
memory bounded by live operations, errors, threads, introspection and bad input.

The property test runs on a virtual clock (loop mode, :mod:`aiowheel.testing`), on asyncio's
loop and uvloop; the ``anyio`` tests run on the suite's loop matrix (asyncio, uvloop and the
loop-mode twin of each) with waits of a few milliseconds at most.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import math
import sys
import threading
import tracemalloc
import warnings
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aiowheel
import aiowheel.testing
from aiowheel import DelayedOperation, Purgatory, PurgatoryStats
from tests.support import BASES, collect_errors

anyio = pytest.mark.anyio


async def _settle() -> None:
    """Let every ready callback and task step run (a few loop iterations)."""
    for _ in range(5):
        await asyncio.sleep(0)


def _outcome(future: asyncio.Future[Any]) -> str:
    if not future.done():
        return "pending"
    if future.cancelled():
        return "cancelled"
    exc = future.exception()
    if exc is None:
        return "completed"
    return "expired" if isinstance(exc, TimeoutError) else "failed"


# -- the exactly-once rule, against a model ----------------------------------------------------

KEYS = ("a", "b", "c")

_action = st.one_of(
    st.tuples(
        st.just("wait"),
        st.sets(st.sampled_from(KEYS), min_size=1, max_size=2),
        st.sampled_from([None, 0.0, 1.0, 2.0, 3.5]),
        st.booleans(),  # a DelayedOperation instead of an awaited wait
    ),
    st.tuples(st.just("arm"), st.integers(0, 15), st.sampled_from(["value", "raise"])),
    st.tuples(st.just("signal"), st.sampled_from(KEYS)),
    st.tuples(st.just("advance"), st.sampled_from([0.5, 1.0, 2.0])),
    st.tuples(st.just("cancel"), st.integers(0, 15)),
    st.tuples(st.just("force"), st.integers(0, 15)),
)


class _Op(DelayedOperation):
    def __init__(self, armed: dict[int, str], index: int, seen: list[str]) -> None:
        super().__init__()
        self.armed, self.index, self.seen = armed, index, seen

    def try_complete(self) -> bool:
        how = self.armed.get(self.index)
        if how == "raise":
            raise LookupError(self.index)
        return how == "value"

    def on_complete(self) -> None:
        self.seen.append("completed")

    def on_expiration(self) -> None:
        self.seen.append("expired")

    def on_cancel(self) -> None:
        self.seen.append("cancelled")


@settings(max_examples=60, deadline=None)
@given(
    actions=st.lists(_action, max_size=30),
    base=st.sampled_from(["asyncio", "uvloop"]),
)
def test_every_operation_ends_exactly_once_as_a_model_says(
    actions: list[tuple[Any, ...]], base: str
) -> None:
    # Random interleavings of waits (awaited, or DelayedOperations), conditions made true
    # (or raising), signals, the clock moving past deadlines, cancellation and force-complete.
    # The model decides each operation's one outcome; the purgatory must agree, every hook
    # must run once, and nothing may stay watched that the model says has ended.
    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors = collect_errors(loop)
        purgatory = Purgatory()
        armed: dict[int, str] = {}
        ops: list[Any] = []  # a future (wait) or an _Op
        tasks: dict[int, asyncio.Task[Any]] = {}
        hooks: list[list[str]] = []
        model: list[dict[str, Any]] = []  # keys, deadline, outcome

        def check_of(index: int) -> Callable[[], object]:
            def check() -> object:
                how = armed.get(index)
                if how == "raise":
                    raise LookupError(index)
                return index if how == "value" else None

            return check

        def model_try(index: int) -> None:
            how = armed.get(index)
            if how is not None:
                model[index]["outcome"] = "completed" if how == "value" else "failed"

        for action in actions:
            kind = action[0]
            if kind == "wait":
                _, keys, timeout, delayed = action
                index = len(ops)
                deadline = math.inf if timeout is None else loop.time() + timeout
                model.append({"keys": set(keys), "deadline": deadline, "outcome": "pending"})
                seen: list[str] = []
                hooks.append(seen)
                if delayed:
                    op = _Op(armed, index, seen)
                    purgatory.watch(op, sorted(keys), timeout)
                    ops.append(op)
                else:
                    future = purgatory.wait(sorted(keys), check_of(index), timeout)
                    ops.append(future)
                    tasks[index] = asyncio.ensure_future(_await(future))
                model_try(index)
                if model[index]["outcome"] == "pending" and timeout == 0.0:
                    model[index]["outcome"] = "expired"
            elif kind == "arm":
                _, index, how = action
                if index < len(ops):
                    armed.setdefault(index, how)  # a condition, once true, stays so
            elif kind == "signal":
                key = action[1]
                expected = 0
                for index, entry in enumerate(model):
                    if entry["outcome"] == "pending" and key in entry["keys"]:
                        model_try(index)
                        expected += entry["outcome"] == "completed"
                assert purgatory.signal(key) == expected
            elif kind == "advance":
                await aiowheel.testing.advance(action[1])
                for entry in model:
                    if entry["outcome"] == "pending" and entry["deadline"] <= loop.time():
                        entry["outcome"] = "expired"
            elif kind in ("cancel", "force"):
                index = action[1]
                if index >= len(ops):
                    continue
                op = ops[index]
                pending = model[index]["outcome"] == "pending"
                if kind == "cancel":
                    if isinstance(op, DelayedOperation):
                        assert op.cancel() is pending
                    else:
                        tasks[index].cancel()  # the task's cancel reaches the operation
                    if pending:
                        model[index]["outcome"] = "cancelled"
                elif isinstance(op, DelayedOperation):
                    assert op.force_complete() is pending
                    if pending:
                        model[index]["outcome"] = "completed"
            await _settle()
            live = [entry for entry in model if entry["outcome"] == "pending"]
            assert len(purgatory) == len(live)
            for key in KEYS:
                assert purgatory.watched(key) == sum(key in entry["keys"] for entry in live)

        await _settle()
        got = [op.outcome if isinstance(op, DelayedOperation) else _outcome(op) for op in ops]
        assert got == [entry["outcome"] for entry in model]
        for index, op in enumerate(ops):
            if isinstance(op, DelayedOperation):  # exactly one hook, and the right one
                outcome = got[index]
                assert hooks[index] == ([] if outcome in ("failed", "pending") else [outcome])
        stats = purgatory.stats()
        for outcome in ("completed", "expired", "cancelled", "failed"):
            assert getattr(stats, outcome) == got.count(outcome), outcome
        assert stats.live == got.count("pending")
        failed_delayed = sum(
            1 for op, g in zip(ops, got, strict=True)
            if g == "failed" and isinstance(op, DelayedOperation)
        )  # fmt: skip
        assert len(errors) == failed_delayed  # a failed DelayedOperation is reported once
        pending_ops = [t for t in aiowheel.pending_timers() if t.kind == "purgatory"]
        assert len(pending_ops) == sum(
            1 for entry in model
            if entry["outcome"] == "pending" and entry["deadline"] != math.inf
        )  # fmt: skip
        for task in tasks.values():
            task.cancel()
        for op in ops:
            if isinstance(op, DelayedOperation):
                op.cancel()
        await _settle()
        assert purgatory.stats().live == 0 and purgatory.stats().keys == 0

    aiowheel.testing.run(main(), base=BASES[base], autojump=False)


async def _await(future: asyncio.Future[Any]) -> Any:
    return await future


# -- waiting and signalling, on every loop ------------------------------------------------------


@anyio
async def test_a_signal_completes_the_wait_whose_condition_holds() -> None:
    purgatory = Purgatory()
    box: dict[str, int] = {}
    waiter = asyncio.ensure_future(purgatory.wait(["k"], lambda: box.get("k"), 5))
    await _settle()
    assert purgatory.signal("k") == 0 and not waiter.done()
    box["k"] = 7
    assert purgatory.signal("k") == 1
    assert await waiter == 7
    assert purgatory.stats() == PurgatoryStats(0, 0, 1, 0, 0, 0)
    assert [t for t in aiowheel.pending_timers() if t.kind == "purgatory"] == []


@anyio
async def test_a_condition_that_holds_at_once_returns_without_watching() -> None:
    purgatory = Purgatory()
    assert await purgatory.wait(["k"], lambda: 0, 5) == 0  # 0 is a value, not None
    assert purgatory.stats() == PurgatoryStats(0, 0, 1, 0, 0, 0)


@anyio
async def test_past_the_timeout_the_wait_raises_timeout_error() -> None:
    purgatory = Purgatory()
    with pytest.raises(TimeoutError):
        await purgatory.wait(["k"], lambda: None, 0.005)
    with pytest.raises(TimeoutError):
        await purgatory.wait(["k"], lambda: None, 0)  # checks once
    assert purgatory.stats() == PurgatoryStats(0, 0, 0, 2, 0, 0)


@anyio
async def test_a_cancelled_waiting_task_leaves_its_keys_and_the_wheel_at_once() -> None:
    purgatory = Purgatory()
    task = asyncio.ensure_future(_await(purgatory.wait(["a", "b"], lambda: None, 60)))
    await _settle()
    assert purgatory.stats().keys == 2
    assert [t.kind for t in aiowheel.pending_timers()].count("purgatory") == 1
    task.cancel()
    assert purgatory.stats() == PurgatoryStats(0, 0, 0, 0, 1, 0)  # before the task runs
    assert [t.kind for t in aiowheel.pending_timers()].count("purgatory") == 0
    with pytest.raises(asyncio.CancelledError):
        await task


@anyio
async def test_a_signal_checks_only_the_operations_of_its_key() -> None:
    purgatory = Purgatory()
    calls: dict[str, int] = {"a": 0, "b": 0}

    def counting(key: str) -> Callable[[], None]:
        def check() -> None:
            calls[key] += 1

        return check

    futures = [purgatory.wait([key], counting(key), 5) for key in ("a", "b") for _ in range(3)]
    calls.update(a=0, b=0)
    assert purgatory.signal("a") == 0
    assert purgatory.signal("unwatched") == 0
    assert calls == {"a": 3, "b": 0}
    for future in futures:
        future.cancel()


@anyio
async def test_a_wait_on_several_keys_is_checked_by_each_and_completes_once() -> None:
    purgatory = Purgatory()
    box: dict[str, str] = {}
    future = purgatory.wait(["a", "b", "a"], lambda: box.get("x"), 5)  # "a" once
    assert future.keys == ("a", "b")  # type: ignore[attr-defined]
    box["x"] = "done"
    assert purgatory.signal("b") == 1
    assert purgatory.signal("a") == 0
    assert await future == "done"
    assert purgatory.stats().keys == 0


@anyio
async def test_no_timeout_files_no_timer() -> None:
    purgatory = Purgatory()
    future = purgatory.wait(["k"], lambda: None, None)
    assert [t.kind for t in aiowheel.pending_timers()].count("purgatory") == 0
    assert len(purgatory) == 1
    future.cancel()
    assert len(purgatory) == 0


# -- a check that raises --------------------------------------------------------------------------


@anyio
async def test_a_check_that_raises_fails_the_wait_and_leaves_its_keys() -> None:
    purgatory = Purgatory()
    state = {"broken": False}

    def check() -> None:
        if state["broken"]:
            raise KeyError("gone")

    future = purgatory.wait(["a", "b"], check, 5)
    state["broken"] = True
    assert purgatory.signal("a") == 0
    with pytest.raises(KeyError, match="gone"):
        await future
    assert purgatory.stats() == PurgatoryStats(0, 0, 0, 0, 0, 1)
    assert purgatory.watched("b") == 0
    # raising at the first check: the same, through the future
    with pytest.raises(KeyError):
        await purgatory.wait(["a"], check, 5)
    assert purgatory.stats().failed == 2 and len(purgatory) == 0


@anyio
async def test_a_raising_check_does_not_stop_the_signal_reaching_the_others() -> None:
    purgatory = Purgatory()
    ready = {"go": False}

    def bad() -> None:
        if ready["go"]:
            raise ValueError("bad")

    first = purgatory.wait(["k"], bad, 5)
    second = purgatory.wait(["k"], lambda: ready["go"] or None, 5)
    ready["go"] = True
    assert purgatory.signal("k") == 1
    assert await second is True
    with pytest.raises(ValueError):
        await first


@anyio
async def test_a_delayed_operation_that_raises_is_reported_and_leaves_its_keys() -> None:
    errors = collect_errors(asyncio.get_running_loop())
    purgatory = Purgatory()
    armed: dict[int, str] = {}
    op = _Op(armed, 0, [])
    assert purgatory.watch(op, ["k"], 5) is False
    armed[0] = "raise"
    assert purgatory.signal("k") == 0
    assert op.outcome == "failed" and op.seen == [] and purgatory.watched("k") == 0
    assert [type(e["exception"]) for e in errors] == [LookupError]
    assert "_Op.try_complete()" in errors[0]["message"]


# -- the callback form ----------------------------------------------------------------------------


@anyio
async def test_a_delayed_operation_runs_exactly_one_hook() -> None:
    purgatory = Purgatory()
    armed: dict[int, str] = {}
    done_now = _Op({0: "value"}, 0, [])
    assert purgatory.watch(done_now, ["k"], 5) is True and done_now.seen == ["completed"]

    completed = _Op(armed, 1, [])
    assert purgatory.watch(completed, ["k"], 5) is False
    armed[1] = "value"
    assert purgatory.signal("k") == 1
    assert completed.force_complete() is False and completed.cancel() is False

    expired = _Op(armed, 2, [])
    purgatory.watch(expired, ["k"], 0.002)
    while not expired.done():
        await asyncio.sleep(0.001)
    assert expired.force_complete() is False

    forced = _Op(armed, 3, [])
    purgatory.watch(forced, ["k"], 5)
    assert forced.force_complete() is True and forced.cancel() is False

    cancelled = _Op(armed, 4, [])
    purgatory.watch(cancelled, ["k"], 5)
    assert cancelled.cancel() is True

    assert [op.seen for op in (completed, expired, forced, cancelled)] == [
        ["completed"], ["expired"], ["completed"], ["cancelled"]
    ]  # fmt: skip
    assert purgatory.stats() == PurgatoryStats(0, 0, 3, 1, 1, 0)


@anyio
async def test_a_delayed_operation_is_watched_once() -> None:
    purgatory = Purgatory()
    op = _Op({}, 0, [])
    with pytest.raises(RuntimeError, match="not watched yet"):
        op.cancel()
    purgatory.watch(op, ["k"], 5)
    with pytest.raises(RuntimeError, match="watched already"):
        purgatory.watch(op, ["k"], 5)
    op.cancel()
    with pytest.raises(TypeError, match="operation must be a DelayedOperation, got function"):
        purgatory.watch(lambda: None, ["k"], 5)  # type: ignore[arg-type]


@anyio
async def test_an_error_in_a_hook_goes_to_the_loop_and_the_signal_goes_on() -> None:
    errors = collect_errors(asyncio.get_running_loop())
    purgatory = Purgatory()

    class Loud(DelayedOperation):
        ready = False

        def try_complete(self) -> bool:
            return self.ready

        def on_complete(self) -> None:
            raise RuntimeError("hook")

    first, second = Loud(), Loud()
    purgatory.watch(first, ["k"], 5)
    purgatory.watch(second, ["k"], 5)
    first.ready = second.ready = True
    assert purgatory.signal("k") == 2
    assert len(errors) == 2
    assert all(e["message"].endswith("<locals>.Loud.on_complete()") for e in errors)


# -- memory ---------------------------------------------------------------------------------------


def test_memory_is_bounded_by_live_operations_not_by_history() -> None:
    # Many operations come and go on shared keys while one stays: the watchers hold the one,
    # and memory after the churn is where it was after the first rounds (one loop: memory,
    # not the loop, is under test).
    aiowheel.testing.run(_churn())


async def _churn() -> None:
    purgatory = Purgatory()
    box: dict[str, int] = {}
    keeper = purgatory.wait(["shared-0"], lambda: None, 60)

    def one_round(n: int) -> None:
        futures = [
            purgatory.wait([f"shared-{i % 10}", f"own-{i}"], lambda: box.get("go"), 60)
            for i in range(n)
        ]
        box["go"] = 1
        for key in range(10):
            purgatory.signal(f"shared-{key}")
        del box["go"]
        assert all(f.done() for f in futures)

    one_round(1000)
    gc.collect()
    tracemalloc.start()
    try:
        for _ in range(2):
            one_round(1000)
        gc.collect()
        warm = tracemalloc.get_traced_memory()[0]  # free lists full, tables at their peak
        for _ in range(6):
            one_round(1000)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert warm < 64_000, warm
    assert after - warm < 8_000, (warm, after)
    stats = purgatory.stats()
    assert (stats.live, stats.keys, stats.completed) == (1, 1, 9_000)
    assert purgatory.watched("shared-0") == 1
    assert sys.getsizeof(purgatory._watchers) < 4096  # shrank with the keys (1,010 at the peak)
    keeper.cancel()
    assert purgatory.stats().keys == 0


# -- threads -------------------------------------------------------------------------------------


@anyio
async def test_signals_from_other_threads_go_through_call_soon_threadsafe() -> None:
    loop = asyncio.get_running_loop()
    purgatory = Purgatory()
    box: dict[str, int] = {}
    lock = threading.Lock()

    def check(key: str) -> Callable[[], int | None]:
        return lambda: box.get(key)

    futures = {f"k{i}": purgatory.wait([f"k{i}"], check(f"k{i}"), 5) for i in range(20)}

    def publisher(keys: list[str]) -> None:
        for key in keys:
            with lock:
                box[key] = 1
            loop.call_soon_threadsafe(purgatory.signal, key)

    threads = [
        threading.Thread(target=publisher, args=([f"k{i}" for i in range(j, 20, 2)],))
        for j in range(2)
    ]
    for thread in threads:
        thread.start()
    results = await asyncio.wait_for(asyncio.gather(*futures.values()), 5)
    for thread in threads:
        thread.join()
    assert results == [1] * 20
    assert purgatory.stats().completed == 20 and len(purgatory) == 0


@anyio
async def test_a_signal_from_another_thread_is_refused() -> None:
    purgatory = Purgatory()
    future = purgatory.wait(["k"], lambda: None, 5)
    caught: list[BaseException] = []

    def other() -> None:
        try:
            purgatory.signal("k")
        except RuntimeError as exc:
            caught.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert "call_soon_threadsafe" in str(caught[0])
    assert len(purgatory) == 1
    future.cancel()


# -- the loop it belongs to, and what it shows ------------------------------------------------


def test_a_module_level_purgatory_serves_consecutive_loops(base: Any) -> None:
    purgatory = Purgatory()  # as the docs' first example makes it: before any loop
    box: dict[str, str] = {}

    async def use(value: str) -> str:
        waiting = asyncio.create_task(purgatory.wait(["k"], lambda: box.pop("k", None), 1))
        await asyncio.sleep(0)
        box["k"] = value
        purgatory.signal("k")
        return await waiting

    def plain() -> asyncio.AbstractEventLoop:
        return asyncio.new_event_loop() if base is None else base()  # type: ignore[no-any-return]

    def twin() -> asyncio.AbstractEventLoop:
        return aiowheel.new_event_loop(base)

    # Three runs one after another, on the base and its loop-mode twin: each loop is closed
    # when the next binds the purgatory.
    for factory in (plain, twin):
        for n in range(3):
            with asyncio.Runner(loop_factory=factory) as runner:
                assert runner.run(use(str(n))) == str(n)
    assert aiowheel.run(use("aiowheel.run")) == "aiowheel.run"
    # A wait made with no loop running starts in the loop that first steps it.
    assert asyncio.run(purgatory.wait(["k"], lambda: "run", 1)) == "run"
    with asyncio.Runner(loop_factory=plain) as runner:
        assert runner.run(purgatory.wait(["k"], lambda: "runner", 1)) == "runner"
    for factory in (plain, twin):
        loop = factory()
        try:
            made = purgatory.wait(["k"], lambda: "ruc", 1)
            assert not asyncio.isfuture(made)  # not a future yet: asyncio wraps it in a task
            assert loop.run_until_complete(made) == "ruc"
            assert asyncio.isfuture(made) and made.get_loop() is loop
        finally:
            loop.close()
    assert purgatory.stats() == PurgatoryStats(0, 0, 11, 0, 0, 0)
    with pytest.raises(
        TypeError, match=r"^Purgatory\(\): timer must be an aiowheel.Timer or None, got str"
    ):
        Purgatory("timer")  # type: ignore[arg-type]


SHARED = Purgatory()  # module level, as the docs make it: each test below runs on its own loop


@anyio
async def test_a_module_level_purgatory_serves_one_test() -> None:
    task = asyncio.create_task(SHARED.wait(["first"], lambda: "one" if SHARED else None, 5))
    await asyncio.sleep(0)
    assert SHARED.signal("first") == 1  # len(SHARED) is 1 while it waits: the check holds
    assert await task == "one"


@anyio
async def test_a_module_level_purgatory_serves_the_next_test_too() -> None:
    assert SHARED.watched("first") == 0
    assert await SHARED.wait(["second"], lambda: "two", 5) == "two"
    with pytest.raises(TimeoutError, match=r"for keys \['second'\]"):
        await SHARED.wait(["second"], lambda: None, 0.001)


def test_operations_left_on_a_closed_loop_end_as_cancelled_when_the_purgatory_moves() -> None:
    purgatory = Purgatory()
    cancelled: list[str] = []

    class Left(DelayedOperation):
        def on_cancel(self) -> None:
            cancelled.append("left")

    async def leave() -> None:
        purgatory.wait(["a"], lambda: None, 30)  # never awaited: left pending
        purgatory.watch(Left(), ["a", "b"], None)

    loop = asyncio.new_event_loop()
    loop.run_until_complete(leave())
    assert len(purgatory) == 2

    async def other() -> None:
        with pytest.raises(RuntimeError, match="belongs to another event loop, where 2 "):
            purgatory.wait(["a"], lambda: 1, 1)

    # The first loop is still open, with live operations: the purgatory stays on it.
    asyncio.run(other())
    assert len(purgatory) == 2 and cancelled == []
    loop.close()

    async def next_loop() -> int:
        assert purgatory.signal("b") == 0  # its check still says no
        return await purgatory.wait(["a"], lambda: 3, 1)  # moves it: the closed loop's end

    assert asyncio.run(next_loop()) == 3
    assert cancelled == ["left"]
    assert purgatory.stats() == PurgatoryStats(0, 0, 1, 0, 2, 0)


def test_a_purgatory_given_a_timer_stays_on_the_timer_s_loop() -> None:
    async def first() -> Purgatory:
        purgatory = Purgatory(aiowheel.get_timer())
        assert await purgatory.wait(["k"], lambda: 1, 1) == 1
        return purgatory

    purgatory = asyncio.run(first())

    async def second() -> None:
        with pytest.raises(RuntimeError, match="the loop of the timer it was given"):
            purgatory.wait(["k"], lambda: 1, 1)

    asyncio.run(second())


def test_the_loop_s_current_thread_may_signal() -> None:
    """A loop run first in one thread and then in another: the second thread signals."""
    loop = asyncio.new_event_loop()
    purgatory = Purgatory()
    box: dict[str, int] = {}
    outcome: list[object] = []

    release = threading.Event()

    def run(coro: Any, stay: bool) -> None:
        outcome.append(loop.run_until_complete(coro))
        if stay:  # alive, so that the next thread cannot reuse its ident
            release.wait(10)

    def in_thread(coro: Any, stay: bool = False) -> threading.Thread:
        thread = threading.Thread(target=run, args=(coro, stay))
        thread.start()
        return thread

    async def first() -> None:
        assert await purgatory.wait(["k"], lambda: 1, 1) == 1

    async def second() -> int:
        waiting = asyncio.ensure_future(purgatory.wait(["k"], lambda: box.get("k"), 5))
        await asyncio.sleep(0)
        box["k"] = 2
        assert purgatory.signal("k") == 1  # from the thread running the loop now
        return await waiting

    try:
        a = in_thread(first(), stay=True)
        while not outcome and a.is_alive():
            a.join(0.01)
        b = in_thread(second())
        b.join(10)
        assert not b.is_alive()
        release.set()
        a.join(10)
        assert a.ident != b.ident
    finally:
        release.set()
        loop.close()
    assert outcome == [None, 2]


@anyio
async def test_on_a_timer_of_its_own() -> None:
    async with aiowheel.Timer() as timer:
        purgatory = Purgatory(timer)
        future = purgatory.wait(["k"], lambda: None, 30)
        assert len(timer) == 1
        future.cancel()
        assert len(timer) == 0


@anyio
async def test_operations_are_a_kind_of_their_own_in_pending_timers_and_the_census() -> None:
    purgatory = Purgatory()

    async def poll_handler() -> None:
        await purgatory.wait(["topic-1", "topic-2"], lambda: None, 30)

    class Produce(DelayedOperation):
        pass

    task = asyncio.ensure_future(poll_handler())
    await _settle()
    op = Produce()
    purgatory.watch(op, ["partition-0"], 30)
    found = sorted(
        (t for t in aiowheel.pending_timers() if t.kind == "purgatory"), key=lambda t: t.origin
    )
    assert [(t.origin, t.task) for t in found] == [
        ("test_operations_are_a_kind_of_their_own_in_pending_timers_and_the_census.<locals>."
         "Produce", None),
        ("test_operations_are_a_kind_of_their_own_in_pending_timers_and_the_census.<locals>."
         "poll_handler", task),
    ]  # fmt: skip
    assert [t.callback.keys for t in found] == [  # type: ignore[union-attr]
        ("partition-0",), ("topic-1", "topic-2")
    ]  # fmt: skip
    census = dict(aiowheel.timer_census(top=None))
    assert sum(n for name, n in census.items() if name.startswith("purgatory ")) == 2
    assert any(name.endswith("poll_handler") for name in census)
    task.cancel()
    op.cancel()
    await _settle()


# -- bad input ------------------------------------------------------------------------------------

_BAD: list[tuple[tuple[Any, Any, Any], type[Exception], str]] = [
    ((["k"], lambda: 1, -1), ValueError, "timeout must be a non-negative number, got -1"),
    ((["k"], lambda: 1, math.nan), ValueError, "timeout must be a non-negative number, got nan"),
    ((["k"], lambda: 1, "5"), TypeError, "timeout must be a non-negative number of seconds or "
     "None, got str"),
    ((["k"], lambda: 1, True), TypeError, "timeout must be a non-negative number of seconds or "
     "None, got bool"),
    (([["k"]], lambda: 1, 1), TypeError, "keys must be hashable, got list"),
    ((["k", {}], lambda: 1, 1), TypeError, "keys must be hashable, got dict"),
    (("k", lambda: 1, 1), TypeError, "keys must be a collection of keys, got str"),
    ((5, lambda: 1, 1), TypeError, "keys must be a collection of keys, got int"),
    (([], lambda: 1, 1), ValueError, "keys must not be empty"),
    ((["k"], "check", 1), TypeError, "check must be callable, got str"),
]  # fmt: skip


@pytest.mark.parametrize(("args", "error", "message"), _BAD, ids=[m for _, _, m in _BAD])
def test_bad_input_is_refused_with_the_argument_named_and_nothing_watched(
    args: tuple[Any, Any, Any], error: type[Exception], message: str
) -> None:
    async def main() -> None:
        purgatory = Purgatory()
        purgatory.wait(["other"], lambda: None, None)
        before = purgatory.stats()
        with pytest.raises(error) as caught:
            purgatory.wait(*args)
        assert str(caught.value).startswith("Purgatory.wait(): ")
        assert message in str(caught.value)
        assert purgatory.stats() == before
        assert [t for t in aiowheel.pending_timers() if t.kind == "purgatory"] == []
        if callable(args[1]):  # the same from watch(), which takes no check
            op = DelayedOperation()
            with pytest.raises(error) as caught:
                purgatory.watch(op, args[0], args[2])
            assert str(caught.value).startswith("Purgatory.watch(): ")
            assert message in str(caught.value)
            assert purgatory.stats() == before and op.outcome == "new"

    aiowheel.testing.run(main())


def test_a_signal_of_an_unhashable_key_names_it() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        with pytest.raises(
            TypeError, match=r"Purgatory.signal\(\): key must be hashable, got list"
        ):
            purgatory.signal(["k"])
        with pytest.raises(TypeError, match=r"Purgatory.watched\(\): key must be hashable"):
            purgatory.watched({})

    aiowheel.testing.run(main())


# -- a wait is a future to asyncio (its own, one object: see aiowheel._purgatory._wait.Wait)
# --------------


@anyio
async def test_a_wait_is_a_future_to_asyncio_gather_wait_for_and_shield() -> None:
    purgatory = Purgatory()
    box: dict[str, int] = {}
    op = purgatory.wait(["k"], lambda: box.get("k"), 5)
    assert asyncio.isfuture(op) and not op.done() and not op.cancelled()
    assert op.get_loop() is asyncio.get_running_loop()
    with pytest.raises(asyncio.InvalidStateError):
        op.result()
    with pytest.raises(asyncio.InvalidStateError):
        op.exception()
    seen: list[object] = []
    op.add_done_callback(seen.append)
    op.add_done_callback(seen.append)
    op.add_done_callback(print)
    assert op.remove_done_callback(print) == 1 and op.remove_done_callback(print) == 0
    gathered = asyncio.gather(op, purgatory.wait(["j"], lambda: box.get("j"), 5))
    shielded = asyncio.shield(op)
    box["k"], box["j"] = 1, 2
    assert purgatory.signal("k") == 1 and purgatory.signal("j") == 1
    assert await gathered == [1, 2]
    assert await shielded == 1 and await op == 1
    assert op.done() and op.result() == 1 and op.exception() is None
    assert seen == [op, op]  # each registration once, as loop callbacks
    assert purgatory.stats() == PurgatoryStats(0, 0, 2, 0, 0, 0)

    # wait_for cancels the wait at its own timeout: the operation leaves its key at once.
    op = purgatory.wait(["k2"], lambda: None, 60)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(op, 0.001)
    assert op.cancelled() and purgatory.watched("k2") == 0
    with pytest.raises(asyncio.CancelledError):
        op.result()
    assert purgatory.stats().cancelled == 1

    # gather with an expiring wait: the TimeoutError reaches it; a failed check's error too.
    def broken() -> None:
        raise KeyError("gone")

    results = await asyncio.gather(
        purgatory.wait(["x"], lambda: None, 0.001),
        purgatory.wait(["y"], broken, 5),
        return_exceptions=True,
    )
    assert [type(r) for r in results] == [TimeoutError, KeyError]
    assert purgatory.stats() == PurgatoryStats(0, 0, 2, 1, 1, 1)


@anyio
async def test_a_cancelled_wait_carries_its_message_and_a_done_wait_does_not_cancel() -> None:
    purgatory = Purgatory()
    op = purgatory.wait(["k"], lambda: None, None)
    assert op.cancel("bye") and not op.cancel("again")
    with pytest.raises(asyncio.CancelledError, match="bye"):
        await op
    done = purgatory.wait(["k"], lambda: 7, None)  # held at once
    assert not done.cancel() and await done == 7
    late: list[object] = []
    done.add_done_callback(late.append)  # on a done wait: scheduled at once
    await asyncio.sleep(0)
    assert late == [done]


# -- a wait is accepted wherever a coroutine is ------------------------------------------------


@anyio
async def test_a_wait_is_accepted_wherever_a_coroutine_is() -> None:
    purgatory = Purgatory()
    box: dict[str, int] = {}

    def check(key: str) -> Callable[[], int | None]:
        return lambda: box.get(key)

    task = asyncio.create_task(purgatory.wait(["a"], check("a"), 5))
    async with asyncio.TaskGroup() as group:  # type: ignore[attr-defined,unused-ignore]
        grouped = group.create_task(purgatory.wait(["b"], check("b"), 5))
        await asyncio.sleep(0)
        box["a"], box["b"] = 1, 2
        assert purgatory.signal("a") == 1 and purgatory.signal("b") == 1
    assert await task == 1 and grouped.result() == 2
    loop = asyncio.get_running_loop()
    assert await loop.create_task(purgatory.wait(["c"], lambda: 3, 5)) == 3  # held at once
    assert await asyncio.ensure_future(purgatory.wait(["c"], lambda: 4, 5)) == 4
    # Cancelling the task cancels the wait: it leaves its key at once.
    task = asyncio.create_task(purgatory.wait(["d"], check("d"), 5))
    await asyncio.sleep(0)
    assert purgatory.watched("d") == 1
    assert "coro=<Purgatory.wait()>" in repr(task)  # named as a coroutine is
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert purgatory.watched("d") == 0
    # Cancelled before its first step: never watched.
    task = asyncio.create_task(purgatory.wait(["e"], check("e"), 5))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert purgatory.watched("e") == 0 and len(purgatory) == 0
    # asyncio.wait refuses a wait as it refuses any coroutine; a task of it is accepted.
    with pytest.raises(TypeError, match="coroutines is forbidden"):
        await asyncio.wait([purgatory.wait(["f"], lambda: 5, 5)])
    done, _ = await asyncio.wait([asyncio.create_task(purgatory.wait(["f"], lambda: 6, 5))])
    assert [t.result() for t in done] == [6]
    assert purgatory.stats() == PurgatoryStats(0, 0, 6, 0, 2, 0)


@pytest.mark.anyio
async def test_anyio_start_soon_takes_the_wait_itself() -> None:
    import anyio as anyio_module
    import anyio.lowlevel

    purgatory = Purgatory()
    box: dict[str, int] = {}
    async with anyio_module.create_task_group() as group:
        group.start_soon(purgatory.wait, ["k"], lambda: box.get("k"), 5)
        await anyio_module.lowlevel.checkpoint()
        assert purgatory.watched("k") == 1
        box["k"] = 1
        assert purgatory.signal("k") == 1
    async with anyio_module.create_task_group() as group:
        group.start_soon(purgatory.wait, ["j"], lambda: None, 5)
        await anyio_module.lowlevel.checkpoint()
        group.cancel_scope.cancel()  # an anyio cancel scope cancels the wait
    assert purgatory.watched("j") == 0
    assert purgatory.stats() == PurgatoryStats(0, 0, 1, 0, 1, 0)


def test_a_wait_not_awaited_closes_as_a_coroutine_does() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        op = purgatory.wait(["k"], lambda: None, 30)
        op.close()  # what a coroutine's owner does to give it up
        assert op.cancelled() and len(purgatory) == 0
        op = purgatory.wait(["k"], lambda: None, 30)
        with pytest.raises(KeyError, match="thrown"):
            op.throw(KeyError("thrown"))
        assert op.cancelled() and len(purgatory) == 0
        assert purgatory.stats().cancelled == 2

    aiowheel.testing.run(main())


# -- checks as people write them -----------------------------------------------------------------


@given(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=3),
        st.lists(st.integers(), max_size=2),
        st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
        st.tuples(),
    ),
    st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_a_check_completes_the_wait_with_any_value_but_none_and_false(
    value: object, at_once: bool
) -> None:
    """None and False are "not yet"; every other value is the result (0, "" and [] too)."""

    async def main() -> None:
        purgatory = Purgatory()
        answer: list[object] = [None] if not at_once else [value]
        op = purgatory.wait(["k"], lambda: answer[0], 1)
        if not at_once:
            answer[0] = value
            purgatory.signal("k")
        if value is None or value is False:
            with pytest.raises(TimeoutError):
                await op
            assert purgatory.stats().expired == 1
        else:
            assert await op is value
            assert purgatory.stats().completed == 1

    aiowheel.testing.run(main())


@given(st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.text(max_size=2),
                 st.lists(st.integers(), max_size=1)))  # fmt: skip
@settings(max_examples=40, deadline=None)
def test_try_complete_is_read_by_its_truth_in_both_builds(value: object) -> None:
    class Answer(DelayedOperation):
        def try_complete(self) -> Any:
            return answer[0]

    async def main() -> None:
        errors = collect_errors(asyncio.get_running_loop())
        purgatory = Purgatory()
        op = Answer()
        assert purgatory.watch(op, ["k"], 1) is False
        answer[0] = value
        purgatory.signal("k")
        assert op.outcome == ("completed" if value else "pending")
        op.cancel()
        assert errors == []

    answer: list[object] = [None]
    aiowheel.testing.run(main())


def test_a_check_raising_stop_iteration_fails_the_wait_with_a_runtime_error() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        with pytest.raises(RuntimeError, match="check raised StopIteration") as caught:
            await purgatory.wait(["k"], lambda: next(iter(())), 1)
        assert isinstance(caught.value.__cause__, StopIteration)
        raising = [False]

        def later() -> None:
            if raising[0]:
                next(iter(()))

        op = purgatory.wait(["k"], later, 1)
        raising[0] = True
        purgatory.signal("k")
        with pytest.raises(RuntimeError, match="check raised StopIteration"):
            await asyncio.create_task(op)  # through a task's coroutine too
        assert purgatory.stats().failed == 2 and len(purgatory) == 0

    aiowheel.testing.run(main())


def test_an_async_check_is_refused_before_anything_is_watched() -> None:
    async def main() -> None:
        purgatory = Purgatory()

        async def check() -> int:
            return 1

        with pytest.raises(TypeError, match=r"^Purgatory\.wait\(\): check must answer at once"):
            purgatory.wait(["k"], check, 1)
        assert purgatory.stats() == PurgatoryStats(0, 0, 0, 0, 0, 0)
        # One that turns to an awaitable later fails its wait at that signal.
        answer: list[Any] = [None]
        op = purgatory.wait(["k"], lambda: answer[0], 1)
        answer[0] = check()
        purgatory.signal("k")
        with pytest.raises(TypeError, match="check must answer at once"):
            await op

        class Async(DelayedOperation):
            async def try_complete(self) -> bool:  # type: ignore[override]
                return True

        op2 = Async()
        with pytest.raises(
            TypeError, match=r"^Purgatory\.watch\(\): operation.try_complete must answer"
        ):
            purgatory.watch(op2, ["k"], 1)
        assert op2.outcome == "new" and len(purgatory) == 0

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "coroutine was never awaited"
        aiowheel.testing.run(main())
        gc.collect()


def test_a_timeout_names_its_keys_and_timeout() -> None:
    async def main() -> None:
        purgatory = Purgatory()
        with pytest.raises(TimeoutError) as caught:
            await purgatory.wait(["orders", 7], lambda: None, 0.25)
        assert str(caught.value) == (
            "Purgatory.wait(): no result within 0.25 s for keys ['orders', 7]"
        )
        with pytest.raises(TimeoutError, match="within 0 s"):
            await purgatory.wait(["k"], lambda: None, 0)

    aiowheel.testing.run(main())


# -- operations are themselves -------------------------------------------------------------------


def test_operations_are_watched_by_identity_whatever_their_eq_and_hash() -> None:
    expired: list[object] = []

    @dataclasses.dataclass(unsafe_hash=True)
    class Equal(DelayedOperation):
        n: int

        def __post_init__(self) -> None:
            super().__init__()

        def on_expiration(self) -> None:
            expired.append(self)

    @dataclasses.dataclass
    class Unhashable(DelayedOperation):
        n: int

        def __post_init__(self) -> None:
            super().__init__()

    async def main() -> None:
        errors = collect_errors(asyncio.get_running_loop())
        purgatory = Purgatory()
        first, second = Equal(1), Equal(1)
        purgatory.watch(first, ["k"], 0.5)
        purgatory.watch(second, ["k"], 0.5)
        assert purgatory.watched("k") == 2 and len(purgatory) == 2
        third = Unhashable(1)
        purgatory.watch(third, ["k"], None)
        assert purgatory.watched("k") == 3
        await asyncio.sleep(1)
        assert [op is first or op is second for op in expired] == [True, True]
        assert expired[0] is not expired[1]
        assert third.cancel() and len(purgatory) == 0
        assert purgatory.stats() == PurgatoryStats(0, 0, 0, 2, 1, 0)
        assert errors == []

    aiowheel.testing.run(main())


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ([([1],)], "keys must be hashable, got tuple ([1],)"),
        (iter([[1]]), "keys must be hashable, got list [1]"),
        ((k for k in ("a", {})), "keys must be hashable, got dict {}"),
    ],
    ids=["a tuple holding a list", "a one-shot iterator", "a generator"],
)
def test_keys_that_are_not_hashable_are_named_whatever_holds_them(keys: Any, message: str) -> None:
    async def main() -> None:
        purgatory = Purgatory()
        with pytest.raises(TypeError) as caught:
            purgatory.wait(keys, lambda: None, 1)
        assert str(caught.value) == f"Purgatory.wait(): {message}"
        assert len(purgatory) == 0

    aiowheel.testing.run(main())
