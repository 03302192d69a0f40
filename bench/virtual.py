"""Virtual time: wall time per virtual event, aiowheel.testing beside looptime.

``python -m bench.virtual [--rounds N] [--tasks N] [--retries N] [--json PATH]`` runs two
programs on a virtual clock and times them in wall time:

- **sleepers**: ``--tasks`` tasks (10,000), each sleeping a random 0-24 h of virtual time
  (seeded, the same draws for every contender), gathered;
- **retries**: one task retrying ``--retries`` times (1,000) with exponential back-off
  (0.1 s doubling, capped at 60 s, with seeded jitter), as a client does against a server that
  keeps failing.

One *virtual event* is one wake-up (a sleeper woken, a back-off slept); the figure is wall
microseconds per event. The contenders are aiowheel's virtual loop on every installed base
(``aiowheel.testing.virtual_loop_factory``) and looptime (``looptime.new_event_loop()``, the
asyncio selector loop it patches; it runs on no other loop). They alternate within each of
``--rounds`` rounds on fresh loops, so a noisy neighbour hurts them alike; the table gives
each one's median, worst and best, and each median's ratio to looptime's.

Each run is checked, not only timed: every sleeper must wake at its own deadline by the
virtual clock (to the contender's resolution: aiowheel's 1 ms tick, looptime's 1 us), in
deadline order, and the retries must end at the sum of their back-offs. A contender that gets
a run wrong is reported as failing, not timed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiowheel.loops
import aiowheel.testing

DAY = 24 * 3600.0


def sleeper_delays(tasks: int, seed: int = 1) -> list[float]:
    """Each sleeper's virtual sleep, seconds (0-24 h)."""
    rng = random.Random(seed)
    return [rng.uniform(0, DAY) for _ in range(tasks)]


def backoffs(retries: int, seed: int = 2) -> list[float]:
    """Each retry's back-off: 0.1 s doubling to a 60 s cap, times a jitter of 0.5-1."""
    rng = random.Random(seed)
    return [min(0.1 * 2**i, 60.0) * rng.uniform(0.5, 1.0) for i in range(retries)]


async def sleepers(delays: list[float]) -> list[tuple[float, float]]:
    """Sleep each delay in its own task; (deadline, loop time woken) per task, in waking
    order."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    woke: list[tuple[float, float]] = []

    async def sleeper(delay: float) -> None:
        await asyncio.sleep(delay)
        woke.append((start + delay, loop.time()))

    await asyncio.gather(*(sleeper(d) for d in delays))
    return woke


async def retries(waits: list[float]) -> float:
    """Retry with back-off: each attempt fails, then the task sleeps its back-off; the
    virtual time the whole retry loop took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    for wait in waits:
        await asyncio.sleep(wait)
    return loop.time() - start


def contenders() -> dict[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Name -> a factory of fresh virtual-clock loops."""
    found: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {}
    for name, base in aiowheel.loops.installed().items():
        found[f"aiowheel/{name}"] = aiowheel.testing.virtual_loop_factory(base)
    try:
        import looptime
    except ImportError:
        pass
    else:
        found["looptime/asyncio"] = looptime.new_event_loop
    return found


def _run(factory: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, Any]) -> Any:
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)


def check_sleepers(name: str, woke: list[tuple[float, float]], tasks: int) -> str | None:
    """Why a sleepers run is wrong, or None."""
    resolution = 1e-3 if name.startswith("aiowheel") else 1e-6
    if len(woke) != tasks:
        return f"{len(woke)} of {tasks} sleepers woke"
    early = sum(1 for deadline, at in woke if at < deadline - 1e-9)
    late = sum(1 for deadline, at in woke if at > deadline + resolution + 1e-9)
    if early or late:
        return f"{early} woke early, {late} more than {resolution} s late"
    times = [at for _, at in woke]
    if times != sorted(times):
        return "sleepers woke out of deadline order"
    return None


def measure(rounds: int, tasks: int, retry_count: int) -> dict[str, dict[str, list[float] | str]]:
    """{workload: {contender: [microseconds per event per round] or why it failed}}."""
    delays = sleeper_delays(tasks)
    waits = backoffs(retry_count)
    total_wait = sum(waits)
    factories = contenders()
    results: dict[str, dict[str, list[float] | str]] = {"sleepers": {}, "retries": {}}
    for round_no in range(rounds):
        names = list(factories)
        if round_no % 2:
            names.reverse()  # alternate who goes first
        for name in names:
            factory = factories[name]
            for workload in ("sleepers", "retries"):
                cell = results[workload].setdefault(name, [])
                if isinstance(cell, str):
                    continue  # failed once: not timed again
                wall = time.perf_counter()
                if workload == "sleepers":
                    woke = _run(factory, sleepers(delays))
                    elapsed = time.perf_counter() - wall
                    problem = check_sleepers(name, woke, tasks)
                    events = tasks
                else:
                    took = _run(factory, retries(waits))
                    elapsed = time.perf_counter() - wall
                    slack = retry_count * (1e-3 if name.startswith("aiowheel") else 1e-6)
                    ok = total_wait - 1e-6 <= took <= total_wait + slack
                    problem = None if ok else f"took {took:.6f} s of {total_wait:.6f}"
                    events = retry_count
                if problem is not None:
                    results[workload][name] = problem
                else:
                    cell.append(elapsed / events * 1e6)
    return results


def table(results: dict[str, dict[str, list[float] | str]]) -> str:
    """The results as a text table: median, worst, best (us per event) and the ratio of
    looptime's median to each (above 1: faster than looptime)."""
    lines = []
    for workload, by_name in results.items():
        lines.append(f"{workload}: wall microseconds per virtual event (median, worst-best)")
        reference = by_name.get("looptime/asyncio")
        ref = statistics.median(reference) if isinstance(reference, list) else None
        for name, cell in by_name.items():
            if isinstance(cell, str):
                lines.append(f"  {name:20} FAILED: {cell}")
                continue
            median = statistics.median(cell)
            ratio = f"  {ref / median:5.2f}x looptime's speed" if ref else ""
            lines.append(f"  {name:20} {median:8.2f}  ({max(cell):.2f}-{min(cell):.2f}){ratio}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Run, print the table, optionally write JSON; 1 if a contender got a run wrong."""
    summary = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.virtual", description=summary)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--retries", type=int, default=1_000)
    parser.add_argument("--json", help="write the raw figures to this file")
    args = parser.parse_args(argv)
    results = measure(args.rounds, args.tasks, args.retries)
    print(f"Python {sys.version.split()[0]}, {args.rounds} rounds, {args.tasks} sleepers, "
          f"{args.retries} retries")  # fmt: skip
    print(table(results))
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"python": sys.version.split()[0], "args": vars(args), "results": results},
                      out, indent=1)  # fmt: skip
    failed = any(isinstance(cell, str) for by in results.values() for cell in by.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
