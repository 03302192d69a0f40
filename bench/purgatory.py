"""Purgatory against the stock way: delayed operations on keys, completed by signals or expiring.

``python -m bench.purgatory [--quick] [--rounds N] [--ops N] [--keys N] [--json PATH]``

The workload (issue 41): ``--ops`` (100,000) waiting operations on ``--keys`` (10,000) keys, 10
per key, each a task waiting until its key's counter reaches its target: targets 1..9, and 10
for one operation per key, which is never reached, so that one expires (a 0.2 s timeout; the
others have 30 s). Once every operation waits, nine sweeps each raise every key's counter by
one and signal the key, then let the loop run until nothing moves: each sweep completes one
operation per key, and every other operation of the key is re-checked.

- **stock**: an ``asyncio.Condition`` per key; an operation is
  ``async with cond: await asyncio.wait_for(cond.wait_for(check), timeout)`` and a signal
  ``async with cond: cond.notify_all()``, which wakes every task waiting on the key to
  re-check through the condition's lock. On asyncio's loop and uvloop.
- **purgatory**: ``await purgatory.wait([key], check, timeout)`` and ``purgatory.signal(key)``,
  which calls the checks of the key's operations and wakes only the tasks whose check held.
  On asyncio's loop and uvloop (the deadlines on the loop's default Timer) and in loop mode
  over each (``aiowheel.loop_factory``: on the loop's own wheel).

Figures: the CPU time of a round (``time.process_time``: the idle wait for the deadlines is not
work) over its operations, per wait-and-complete; the checks per signal (purgatory: calls of
``check``; stock: calls of the predicate, each after a wake-up); the memory per waiting
operation (``tracemalloc``: the growth with every operation waiting, its task included, over
their count); and after ``--churn`` (1,000,000) operations have come and gone on one purgatory,
the memory held, against what it held after the first batch (once free lists and tables are
at their size, traced from before that batch). Contenders alternate within each of
``--rounds`` (5) rounds; the table gives medians with the worst and best round. Goals: time
>= 5x faster than stock on the same loop, memory <= 0.5x, a signal touching only its key's
operations, memory back where it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import statistics
import sys
import time
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import aiowheel
import aiowheel.loops

PER_KEY = 10
SHORT = 0.2  # the timeout of the operation of each key that expires
LONG = 30.0
GOAL_TIME = 5.0
GOAL_MEMORY = 0.5

Factory = Callable[[], asyncio.AbstractEventLoop]


def contenders() -> dict[str, tuple[str, Factory]]:
    """Name -> (how: "stock" or "purgatory", a factory of fresh loops)."""
    bases = aiowheel.loops.installed()
    found: dict[str, tuple[str, Factory]] = {}
    loops: dict[str, Factory] = {"asyncio": asyncio.new_event_loop}
    uvloop = bases.get("uvloop")
    if uvloop is not None:
        loops["uvloop"] = uvloop
    for name, factory in loops.items():
        found[f"stock/{name}"] = ("stock", factory)
        found[f"purgatory/{name}"] = ("purgatory", factory)
    found["purgatory/loop-mode/asyncio"] = ("purgatory", aiowheel.loop_factory())
    if uvloop is not None:
        found["purgatory/loop-mode/uvloop"] = ("purgatory", aiowheel.loop_factory(uvloop))
    return found


def stock_of(name: str) -> str:
    """The stock contender a purgatory contender is compared with (same base loop)."""
    return "stock/" + name.rsplit("/", 1)[1]


class Workload:
    """One contender's operations, signals and counts, on one loop."""

    def __init__(self, how: str, keys: int) -> None:
        self.how = how
        self.counters = [0] * keys
        self.checks = 0
        self.completed = 0
        self.expired = 0
        if how == "purgatory":
            self.purgatory = aiowheel.Purgatory()
        else:
            self.conditions = [asyncio.Condition() for _ in range(keys)]

    def check_of(self, key: int, target: int) -> Callable[[], bool]:
        counters = self.counters

        def check() -> bool:  # a predicate, as people write one: False is "not yet"
            self.checks += 1
            return counters[key] >= target

        return check

    async def operation(self, key: int, target: int, timeout: float) -> None:  # noqa: ASYNC109
        check = self.check_of(key, target)
        try:
            if self.how == "purgatory":
                await self.purgatory.wait((key,), check, timeout)
            else:
                condition = self.conditions[key]
                async with condition:
                    await asyncio.wait_for(condition.wait_for(check), timeout)
            self.completed += 1
        except TimeoutError:
            self.expired += 1

    async def signal(self, key: int) -> None:
        if self.how == "purgatory":
            self.purgatory.signal(key)
        else:
            condition = self.conditions[key]
            async with condition:
                condition.notify_all()

    def moved(self) -> int:
        return self.checks + self.completed + self.expired


async def settle(work: Workload) -> None:
    """Let the loop run until nothing moves for three iterations."""
    still = 0
    seen = -1
    while still < 3:
        await asyncio.sleep(0)
        now = work.moved()
        still = still + 1 if now == seen else 0
        seen = now


def spawn(work: Workload, keys: int) -> list[asyncio.Task[None]]:
    tasks = []
    for key in range(keys):
        for target in range(1, PER_KEY + 1):
            timeout = SHORT if target == PER_KEY else LONG
            tasks.append(asyncio.ensure_future(work.operation(key, target, timeout)))
    return tasks


async def timed_round(how: str, keys: int) -> dict[str, float]:
    """One round: CPU seconds per operation, and checks per signal."""
    gc.collect()
    work = Workload(how, keys)
    started = time.process_time()
    tasks = spawn(work, keys)
    await settle(work)
    checks_before = work.checks
    signals = 0
    for sweep in range(1, PER_KEY):
        for key in range(keys):
            work.counters[key] = sweep
            await work.signal(key)
            signals += 1
        await settle(work)
    checks = work.checks - checks_before
    await asyncio.gather(*tasks)
    spent = time.process_time() - started
    ops = keys * PER_KEY
    assert work.completed == keys * (PER_KEY - 1), (how, work.completed)
    assert work.expired == keys, (how, work.expired)
    return {"cpu_us": spent / ops * 1e6, "checks_per_signal": checks / signals}


async def bytes_per_task(
    start: Callable[[], list[asyncio.Task[Any]]], settle: Callable[[], Awaitable[object]]
) -> float:
    """Traced bytes (tracemalloc) held per task while the tasks ``start()`` made wait, once
    ``settle()`` returns; the tasks are cancelled after. Also bench.redis_signals's measure."""
    await asyncio.sleep(0)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tasks = start()
        await settle()
        during = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return (during - before) / len(tasks)


async def memory_round(how: str, keys: int) -> float:
    """Bytes per waiting operation (tracemalloc), its task and coroutine included."""
    work = Workload(how, keys)
    return await bytes_per_task(lambda: spawn(work, keys), lambda: settle(work))


async def churn(total: int, keys: int) -> dict[str, float]:
    """``total`` operations come and go on one purgatory (completed by signals, some expire);
    the memory it holds after, against before."""
    purgatory = aiowheel.Purgatory()
    counters = [0] * keys

    def check_of(key: int, target: int) -> Callable[[], bool]:
        return lambda: counters[key] >= target

    async def operation(key: int, target: int) -> None:
        with contextlib.suppress(TimeoutError):
            await purgatory.wait((key,), check_of(key, target), 0.02 if target == 2 else LONG)

    async def batch() -> None:
        tasks = [
            asyncio.ensure_future(operation(key, target))
            for key in range(keys)
            for target in (1, 2)
        ]
        await asyncio.sleep(0)
        for key in range(keys):
            counters[key] += 1
            purgatory.signal(key)
        await asyncio.gather(*tasks)
        for key in range(keys):
            counters[key] = 0

    await batch()  # warm: free lists
    gc.collect()
    tracemalloc.start()
    try:
        await batch()  # the tables at their peaks
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        done = 2 * keys
        while done < total:
            await batch()
            done += 2 * keys
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    stats = purgatory.stats()
    assert stats.live == 0 and stats.keys == 0, stats
    return {"ops": done, "before": before, "after": after, "held": after - before, "peak": peak}


def run_on(factory: Factory, coro: Callable[[], Awaitable[Any]]) -> Any:
    loop = factory()
    try:
        return loop.run_until_complete(coro())
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} ({max(values):.2f} / {min(values):.2f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.purgatory", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a smoke run on tiny sizes")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--ops", type=int, default=None, help="waiting operations (100,000)")
    parser.add_argument("--churn", type=int, default=None, help="operations come and gone")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument(
        "--collector-off",
        action="store_true",
        help="time the rounds with the cyclic garbage collector off (gc.disable()): what the "
        "collector's passes over every waiting task's objects cost each contender",
    )
    args = parser.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 5)
    ops = args.ops or (2_000 if args.quick else 100_000)
    total = args.churn or (20_000 if args.quick else 1_000_000)
    keys = max(1, ops // PER_KEY)
    found = contenders()
    timing: dict[str, list[dict[str, float]]] = {name: [] for name in found}
    print(
        f"bench.purgatory: {keys * PER_KEY:,} operations on {keys:,} keys, {rounds} rounds, "
        f"Python {sys.version.split()[0]}, aiowheel "
        f"{'compiled' if aiowheel.COMPILED else 'pure-Python'}"
        f"{', the collector off while timing' if args.collector_off else ''}",
        flush=True,
    )
    for _ in range(rounds):
        for name, (how, factory) in found.items():
            if args.collector_off:
                gc.disable()
            try:
                timing[name].append(run_on(factory, lambda how=how: timed_round(how, keys)))
            finally:
                gc.enable()
    memory = {
        name: run_on(factory, lambda how=how: memory_round(how, max(1, keys // 5)))
        for name, (how, factory) in found.items()
    }
    churned = {
        name: run_on(factory, lambda: churn(total, keys))
        for name, (how, factory) in found.items()
        if name in ("purgatory/asyncio", "purgatory/uvloop", "purgatory/loop-mode/asyncio")
    }
    print(f"{'contender':30} {'CPU us/op: median (worst / best)':34} {'vs stock':>9} "
          f"{'checks/signal':>13} {'bytes/op':>9} {'vs stock':>9}")  # fmt: skip
    results: dict[str, Any] = {}
    speedups: dict[str, float] = {}
    memory_ratios: dict[str, float] = {}
    for name in found:
        cpu = [r["cpu_us"] for r in timing[name]]
        checks = statistics.median(r["checks_per_signal"] for r in timing[name])
        ratio = mem_ratio = ""
        if name.startswith("purgatory/"):
            stock = stock_of(name)
            per_round = [
                s["cpu_us"] / r["cpu_us"] for s, r in zip(timing[stock], timing[name], strict=True)
            ]
            speedups[name] = statistics.median(per_round)
            memory_ratios[name] = memory[name] / memory[stock]
            ratio = f"{speedups[name]:.1f}x"
            mem_ratio = f"{memory_ratios[name]:.2f}x"
        print(f"{name:30} {_spread(cpu):34} {ratio:>9} {checks:13.2f} "
              f"{memory[name]:9.0f} {mem_ratio:>9}")  # fmt: skip
        results[name] = {
            "cpu_us": cpu,
            "checks_per_signal": checks,
            "bytes_per_op": memory[name],
            "speedup": speedups.get(name),
            "memory_ratio": memory_ratios.get(name),
        }
    for name, figures in churned.items():
        print(
            f"{name}: {figures['ops']:,} operations came and went; memory held "
            f"{figures['held']:+,} bytes ({figures['before']:,} before, {figures['after']:,} "
            f"after, peak {figures['peak']:,})"
        )
    held = max(abs(figures["held"]) for figures in churned.values())
    goals = [
        ("time per wait-and-complete >= 5x faster", min(speedups.values()) >= GOAL_TIME),
        ("memory per waiting op <= 0.5x", max(memory_ratios.values()) <= GOAL_MEMORY),
        ("a signal checks only its key's operations (<= 10 per signal)",
         all(results[n]["checks_per_signal"] <= PER_KEY for n in speedups)),
        ("memory back where it started (< 64 KiB held)", held < 65_536),
    ]  # fmt: skip
    for goal, met in goals:
        print(f"  {'met   ' if met else 'MISSED'} {goal}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"rounds": rounds, "ops": keys * PER_KEY, "keys": keys,
                       "results": results, "churn": churned,
                       "goals": {goal: met for goal, met in goals}}, out, indent=1)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
