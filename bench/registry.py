"""What ``python -m bench`` can run: the contenders, the sizes, and the workload registry.

A contender is ``kind/loop``: ``aiowheel`` is aiowheel's API on a Timer, ``loop`` the loop's own
timers, ``loop-mode`` the same code as ``loop`` (``loop.call_later``, ``asyncio.timeout``,
``asyncio.sleep``) on the loop's loop-mode twin (``aiowheel.new_event_loop(base)``); ``floor``
is plain Python with no timer at all. rloop, zuvloop (3.14+) and the loops of 2026 (veloxloop,
zloop, bracio) run where they install: their own timers and as loop-mode bases (aiowheel's API
on them would measure the same wheel again); rsloop runs its own timers only (``PEER_ONLY``).

Each workload is one :class:`Workload` entry of :data:`REGISTRY`: its name, the contenders it
applies to, and how to turn the run's :class:`Sizes` into jobs, one per parameter value (a job
takes a contender and returns ``{metric: value}``). The suite (:mod:`bench.suite`) runs them;
the targets (:mod:`bench.targets`) judge the results.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiowheel.loops import BASES

from . import workloads as w

# The loop-mode bases (aiowheel.loops.BASES, from their records in aiowheel._common._bases), then
# the loops that run as peers only: rsloop's loop class is not an asyncio.AbstractEventLoop, which
# loop mode asks of a base.
LOOPS = tuple(BASES)
PEER_ONLY = ("rsloop",)
PEERS = tuple(f"loop/{loop}" for loop in (*LOOPS, *PEER_ONLY))
LOOP_MODE = tuple(f"loop-mode/{loop}" for loop in LOOPS)
OTHERS = tuple(f"loop/{loop}" for loop in (*LOOPS[2:], *PEER_ONLY))  # beyond asyncio, uvloop
CONTENDERS = (
    "aiowheel/asyncio", "loop/asyncio", "aiowheel/uvloop", "loop/uvloop", "floor",
    *LOOP_MODE, *OTHERS,
)  # fmt: skip
API = ("aiowheel/asyncio", "loop/asyncio", "aiowheel/uvloop", "loop/uvloop")
EVERY_LOOP = (*API, *LOOP_MODE, *OTHERS)

Job = Callable[[str], dict[str, float]]


@dataclass(frozen=True)
class Sizes:
    """How big each workload runs, and how many times (one set per mode)."""

    repeats: int
    churn_pending: tuple[int, ...]
    churn_ops: int
    core_pending: tuple[int, ...]
    core_ops: int
    cm_ops: int
    reschedule_ops: int
    fanout_tasks: int
    fanout_spread: float
    storm_timers: int
    storm_window: float
    light_storm_timers: int
    light_storm_window: float
    heartbeat_peers: int
    heartbeat_interval: float
    heartbeat_seconds: float
    feed_ops: int
    memory_count: int
    idle_timers: int
    idle_seconds: float
    due_timers: int = 50_000


MODES = {
    "full": Sizes(5, (1_000, 100_000, 1_000_000, 10_000_000), 300_000, (1_000, 1_000_000),
                  500_000, 300_000, 500_000, 50_000, 0.3, 200_000, 0.5, 20_000, 2.0, 100_000,
                  1.0, 3.0, 500_000, 100_000, 1_000_000, 2.0),
    "quick": Sizes(3, (1_000, 10_000, 100_000), 50_000, (1_000, 1_000_000), 60_000, 60_000,
                   100_000, 50_000, 0.3, 25_000, 0.0625, 2_500, 0.25, 10_000, 0.25, 0.5,
                   100_000, 5_000, 50_000, 0.2),
    "tiny": Sizes(1, (100,), 2_000, (100,), 2_000, 2_000, 2_000, 200, 0.01, 500, 0.02, 200,
                  0.02, 100, 0.02, 0.05, 2_000, 500, 100, 0.05, 500),
}  # fmt: skip


@dataclass
class Results:
    """raw[workload][param][contender][metric] -> one value per repeat."""

    raw: dict[str, dict[str, dict[str, dict[str, list[float]]]]] = field(default_factory=dict)

    def add(self, workload: str, param: str, contender: str, values: dict[str, float]) -> None:
        """Record one repeat's values."""
        slot = self.raw.setdefault(workload, {}).setdefault(param, {}).setdefault(contender, {})
        for metric, value in values.items():
            slot.setdefault(metric, []).append(value)

    def median(self, workload: str, param: str, contender: str, metric: str) -> float | None:
        """The median of the repeats, or None if not measured."""
        values = self.raw.get(workload, {}).get(param, {}).get(contender, {}).get(metric)
        return statistics.median(values) if values else None


def kind(contender: str) -> str:
    """``aiowheel``, ``loop``, ``loop-mode`` or ``floor``."""
    return contender.split("/")[0]


def _simple(metric: str, factory: Callable[[str], Any]) -> Job:
    """A job running ``factory(kind)`` on a fresh loop of the contender; a dict result is
    already ``{metric: value}``."""

    def job(c: str) -> dict[str, float]:
        value = w.run(c, lambda: factory(kind(c)))
        return value if isinstance(value, dict) else {metric: value}

    return job


def _churn(pending: int, ops: int, delay: float = 30.0) -> Job:
    def job(c: str) -> dict[str, float]:
        if c == "floor":
            return {"ops_per_s": w.churn_floor(pending, ops)}
        return {"ops_per_s": w.run(c, lambda: w.churn(kind(c), pending, ops, delay=delay))}

    return job


def _schedule(ops: int) -> Job:
    def job(c: str) -> dict[str, float]:
        if c == "floor":
            return {"ops_per_s": w.schedule_floor(ops)}
        return {"ops_per_s": w.run(c, lambda: w.churn(kind(c), 0, ops))}

    return job


def _core(pending: int, ops: int) -> Job:
    def job(c: str) -> dict[str, float]:
        if c == "floor":
            return {"ops_per_s": w.churn_floor(pending, ops)}
        return {"ops_per_s": w.core(pending, ops)}

    return job


@dataclass(frozen=True)
class Workload:
    """One workload: its contenders, and its jobs for a run's sizes (parameter -> job)."""

    name: str
    contenders: tuple[str, ...]
    jobs: Callable[[Sizes], dict[str, Job]]
    about: str


REGISTRY: tuple[Workload, ...] = (
    Workload("core", ("floor", "aiowheel/asyncio"),
             lambda s: {f"pending={p:,}": _core(p, s.core_ops) for p in s.core_pending},
             "the wheel alone (add + remove), against a dict insert + delete"),
    Workload("schedule", (*EVERY_LOOP, "floor"),
             lambda s: {"call_later(30) + cancel, nothing pending": _schedule(s.churn_ops)},
             "loop.call_later(30, f).cancel() with nothing else pending (zuvloop's headline); "
             "floor: the same loop with one native clock read in place of the timer"),
    Workload("churn", (*CONTENDERS[:5], *LOOP_MODE, *OTHERS),
             lambda s: {f"pending={p:,}": _churn(p, s.churn_ops) for p in s.churn_pending},
             "arm a timer 30 s out and cancel an older one, with N others pending"),
    Workload("near", (*PEERS, *LOOP_MODE),
             lambda s: {f"call_later(0.005), pending={s.churn_pending[0]:,}":
                        _churn(s.churn_pending[0], s.churn_ops, delay=0.005)},
             "churn of 5 ms timers: in loop mode on asyncio's heap, on uvloop's on the wheel"),
    Workload("timeout", EVERY_LOOP,
             lambda s: {"empty body": _simple("ops_per_s", lambda k: w.timeout_cm(k, s.cm_ops))},
             "async with timeout(30): pass"),
    Workload("reschedule", API + LOOP_MODE[:2],
             lambda s: {"later": _simple("ops_per_s",
                                         lambda k: w.reschedule(k, s.reschedule_ops))},
             "push a timeout's deadline later"),
    Workload("fanout", EVERY_LOOP,
             lambda s: {f"{s.fanout_tasks:,} tasks": _simple(
                 "wall_s", lambda k: w.fanout(k, s.fanout_tasks, s.fanout_spread))},
             "N tasks each sleeping a random time: wall time until all are done"),
    Workload("due", EVERY_LOOP,
             lambda s: {f"{s.due_timers:,} due": _simple("ms",
                                                         lambda k: w.due(k, s.due_timers))},
             "N timers already due: the time to run them all"),
    Workload("storm", EVERY_LOOP,
             lambda s: {
                 f"{s.storm_timers:,} in {s.storm_window}s": _simple(
                     "", lambda k: w.storm(k, s.storm_timers, s.storm_window)),
                 f"{s.light_storm_timers:,} in {s.light_storm_window}s": _simple(
                     "", lambda k: w.storm(k, s.light_storm_timers, s.light_storm_window)),
             },
             "many timers due in a short window: lateness, and early firings"),
    Workload("heartbeat", API,
             lambda s: {f"{s.heartbeat_peers:,} x every {s.heartbeat_interval}s": _simple(
                 "", lambda k: w.heartbeat(k, s.heartbeat_peers, s.heartbeat_interval,
                                           s.heartbeat_seconds))},
             "N peers beating at a fixed rate: lateness of each beat"),
    Workload("feed", API + LOOP_MODE[:2],
             lambda s: {"push a 3 s deadline back": _simple("ops_per_s",
                                                            lambda k: w.feed(k, s.feed_ops))},
             "a watchdog fed (its deadline pushed back)"),
    Workload("memory", API + LOOP_MODE[:2],
             lambda s: {"per timer": _simple("", lambda k: w.memory(k, s.memory_count))},
             "bytes per pending timer"),
    Workload("idle", ("aiowheel/asyncio", "aiowheel/uvloop"),
             lambda s: {f"{s.idle_timers:,} x 60s, {s.idle_seconds}s idle": _simple(
                 "wakeups", lambda k: w.idle(s.idle_timers, s.idle_seconds))},
             "far timers pending on an idle loop: reaper wake-ups"),
)  # fmt: skip

WORKLOADS = tuple(workload.name for workload in REGISTRY)
BY_NAME = {workload.name: workload for workload in REGISTRY}
