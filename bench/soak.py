"""Soak: push millions of timers through one Timer and check nothing leaks or lingers.

``python -m bench.soak [--timers N] [--in-flight N] [--seed N] [--loop NAME] [--json]`` drives a
mix of the four fates a timer can have, on one loop, with a bounded number in flight at once:

- fired: ``call_later`` 0-20 ms out, left to fire;
- cancelled: ``call_later`` 1-10 s out, cancelled a moment later (a request's timeout);
- timeout: ``async with timer.timeout(30)`` around an ``await`` (armed and disarmed);
- rescheduled: a watchdog fed (pushed back) a few times, then cancelled.

It reports peak and final RSS, and checks at the end that every fired timer fired exactly
once, no cancelled one fired, the wheel is empty, and the delay queue holds no live bucket.
Exit status 1 if a check fails. ``--loop`` is asyncio or uvloop, or ``loop-mode/asyncio`` or
``loop-mode/uvloop`` for the loop-mode twin of either; ``--json`` prints the report as one JSON
object (the test suite reads it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import random
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any

import aiowheel
import aiowheel.loops


def rss_bytes() -> int:
    """The current resident set size (Linux /proc; ru_maxrss elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()
    except OSError:
        return peak_rss_bytes()


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


@dataclass
class SoakReport:
    timers: int
    seconds: float
    start_rss: int
    peak_rss: int
    final_rss: int
    fired: int
    expected_fired: int
    fired_twice: int
    fired_cancelled: int
    pending_at_end: int
    live_queue_items: int
    queued_buckets: int

    @property
    def ok(self) -> bool:
        return (
            self.fired == self.expected_fired
            and self.fired_twice == 0
            and self.fired_cancelled == 0
            and self.pending_at_end == 0
            and self.live_queue_items == 0
            and self.final_rss <= self.start_rss * 1.10
        )

    def lines(self) -> list[str]:
        mib = 1024 * 1024
        return [
            f"timers pushed through: {self.timers:,} in {self.seconds:.1f} s",
            f"RSS: start {self.start_rss / mib:.1f} MiB, peak {self.peak_rss / mib:.1f} MiB, "
            f"final {self.final_rss / mib:.1f} MiB "
            f"({(self.final_rss / self.start_rss - 1) * 100:+.1f}% vs start; limit +10%)",
            f"fired {self.fired:,} of {self.expected_fired:,} expected; fired twice "
            f"{self.fired_twice}; cancelled but fired {self.fired_cancelled}",
            f"pending at end {self.pending_at_end}; delay queue: {self.live_queue_items} live "
            f"items, {self.queued_buckets} stale",
            "OK" if self.ok else "FAILED",
        ]


async def soak(timers: int, in_flight: int = 20_000, seed: int = 1) -> SoakReport:
    """Push ``timers`` timers through one Timer on the running loop."""
    rng = random.Random(seed)
    timer = aiowheel.Timer()
    async with timer:
        # The soak's own bookkeeping (one byte per timer each) is allocated, and the wheel and
        # the allocator warmed up, before the baseline reading: what grows after it is the
        # timer's.
        counts = bytearray(timers)
        cancelled = bytearray(timers)
        await _push(timer, rng, 50_000, in_flight, bytearray(50_000), bytearray(50_000))
        gc.collect()
        start_rss = rss_bytes()
        started = time.perf_counter()
        expected = await _push(timer, rng, timers, in_flight, counts, cancelled)
        while len(timer):  # noqa: ASYNC110 (no event to wait on: the pending count is polled)
            await asyncio.sleep(0.01)
        # The last due callbacks were dispatched as a batch that runs an iteration later.
        await asyncio.sleep(0.05)
        seconds = time.perf_counter() - started
        wheel = timer._driver._store.wheel
        wheel.next_expiration()  # drops items of emptied buckets, as the reaper would
        report = SoakReport(
            timers=timers,
            seconds=seconds,
            start_rss=start_rss,
            peak_rss=peak_rss_bytes(),
            final_rss=0,
            fired=sum(1 for c in counts if c),
            expected_fired=expected,
            fired_twice=sum(1 for c in counts if c > 1),
            fired_cancelled=sum(1 for c, x in zip(counts, cancelled, strict=True) if c and x),
            pending_at_end=len(timer),
            live_queue_items=wheel.live_queue_items(),
            queued_buckets=len(wheel._heap),
        )
    gc.collect()
    report.final_rss = rss_bytes()
    return report


async def _push(
    timer: aiowheel.Timer,
    rng: random.Random,
    timers: int,
    in_flight: int,
    counts: bytearray,
    cancelled: bytearray,
) -> int:
    """Create ``timers`` timers; returns how many are meant to fire."""

    def fire(i: int) -> None:
        counts[i] += 1

    def expire(i: int) -> None:
        counts[i] += 1  # a watchdog that was meant to be cancelled must never get here

    expected = 0
    to_cancel: list[Any] = []
    i = 0
    while i < timers:
        batch = min(500, timers - i)
        for _ in range(batch):
            fate = rng.random()
            if fate < 0.4:
                timer.call_later(rng.uniform(0, 0.02), fire, i)
                expected += 1
            elif fate < 0.8:
                to_cancel.append(timer.call_later(rng.uniform(1, 10), fire, i))
                cancelled[i] = 1
            elif fate < 0.9:
                async with timer.timeout(30):
                    await asyncio.sleep(0)
            else:
                dog = timer.watchdog(5.0, expire, i)
                for _ in range(3):
                    dog.feed()
                to_cancel.append(dog)
                cancelled[i] = 1
            i += 1
        await asyncio.sleep(0)
        for handle in to_cancel:
            handle.cancel()
        to_cancel.clear()
        while len(timer) > in_flight:  # noqa: ASYNC110 (back-pressure on the pending count)
            await asyncio.sleep(0.002)
    return expected


LOOPS = ("asyncio", "uvloop", "loop-mode/asyncio", "loop-mode/uvloop")


def main(argv: list[str]) -> int:
    """The command line: run one soak, print its report, exit 1 if a check failed."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--timers", type=int, default=5_000_000)
    parser.add_argument("--in-flight", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", choices=LOOPS, default="asyncio")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    mode, _, name = args.loop.rpartition("/")
    base = aiowheel.loops.base_class(name)
    coro = soak(args.timers, in_flight=args.in_flight, seed=args.seed)
    if mode == "loop-mode":
        report = aiowheel.run(coro, base=base)
    else:
        with asyncio.Runner(loop_factory=base) as runner:
            report = runner.run(coro)
    if args.json:
        print(json.dumps({**dataclasses.asdict(report), "ok": report.ok}))
    else:
        for line in report.lines():
            print(line)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
