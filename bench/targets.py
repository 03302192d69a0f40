"""The project's targets for ``python -m bench``, as data, and the judging of a run against them.

A target is what aiowheel aims at on the project's CI machine (a shared 2-core VM): churn at
least 3x asyncio's own timers with 1M pending, never an early firing, and so on. They are the
project's yardstick, not a test of the reader's machine: a miss elsewhere (another CPU, a loaded
machine, a slower Python) says how the figures compare there, not that something is broken.
``python -m bench`` prints them with ``--targets``; the JSON always records them.

Each :class:`Target` names a workload, a metric and the contender measured (``ours``), and
either another contender (or parameter) to divide by (``theirs``: a ratio target) or nothing (an
absolute bound). Contender names may hold ``{loop}``: the target is then judged once per loop
of ``loops``. ``param`` is ``"each"`` (every parameter the run measured), ``"largest churn"`` /
``"smallest churn"`` (the churn sizes), or one parameter by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .registry import LOOP_MODE, LOOPS, PEERS, Results

TWO = ("asyncio", "uvloop")


@dataclass(frozen=True)
class Target:
    """One target: ``ours`` against ``theirs`` (or a bound), per loop and parameter."""

    text: str  # may use {loop}, {param}, {size} (the churn size of the parameter), {need}
    workload: str
    metric: str
    ours: str
    need: float
    sense: str = ">="  # ">=", "<=", "==" (absolute), "<= theirs +" (a slack), "info"
    theirs: str | None = None
    theirs_param: str | None = None  # divide by another parameter of the same workload
    param: str = "each"
    loops: tuple[str, ...] = TWO
    shows: str = "{ratio:.2f}x"  # how the measurement reads
    param_index: int | None = None  # only the parameter at this index (the light storm)
    unmeasured: bool = True  # a named parameter the run did not measure reads "not measured"


def fmt(value: float | None) -> str:
    """A figure as the table and the targets print it (2.35M, 48k, 0.125)."""
    if value is None:
        return "-"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e4:
        return f"{value / 1e3:.0f}k"
    if value == int(value):
        return f"{int(value)}"
    return f"{value:.3g}"


TARGETS: tuple[Target, ...] = (
    Target("churn @{size} >= {need:g}x loop.call_later on {loop}", "churn", "ops_per_s",
           "aiowheel/{loop}", 3.0, theirs="loop/{loop}", param="largest churn",
           loops=("asyncio",)),
    Target("churn @{size} >= {need:g}x loop.call_later on {loop}", "churn", "ops_per_s",
           "aiowheel/{loop}", 2.0, theirs="loop/{loop}", param="largest churn",
           loops=("uvloop",)),
    Target("churn @{size} >= 0.85x aiowheel's own @1,000", "churn", "ops_per_s",
           "aiowheel/asyncio", 0.85, theirs="aiowheel/asyncio", theirs_param="pending=1,000",
           param="largest churn", loops=("asyncio",)),
    Target("churn @{size} >= 0.4x the pure-Python floor", "churn", "ops_per_s",
           "aiowheel/asyncio", 0.4, theirs="floor", param="largest churn", loops=("asyncio",)),
    Target("core add+remove @{size} >= 0.6x the floor", "core", "ops_per_s",
           "aiowheel/asyncio", 0.6, theirs="floor", loops=("asyncio",)),
    Target("sleep fan-out wall time <= 0.8x asyncio.sleep's on {loop}", "fanout", "wall_s",
           "aiowheel/{loop}", 0.8, sense="<=", theirs="loop/{loop}"),
    Target("reschedule-later >= 5x asyncio's on {loop}", "reschedule", "ops_per_s",
           "aiowheel/{loop}", 5.0, theirs="loop/{loop}", param="later"),
    Target("bytes per pending call_later <= 0.75x the loop's on {loop}", "memory",
           "call_later_bytes", "aiowheel/{loop}", 0.75, sense="<=", theirs="loop/{loop}",
           param="per timer"),
    Target("fire storm on {loop}: 0 early firings", "storm", "early", "aiowheel/{loop}", 0,
           sense="==", theirs="loop/{loop}", shows="aiowheel {ours:g}, loop's own {theirs_}"),
    Target("fire storm on {loop}: p99 lateness <= tick + 1 ms (2 ms)", "storm", "p99_ms",
           "aiowheel/{loop}", 2.0, sense="<=abs", theirs="loop/{loop}", param_index=1,
           shows="p99 {ours:.2f} ms (loop's own {theirs_} ms)"),
    Target("heartbeats ({param}) on {loop}: p99 lateness <= tick + the loop's own p99",
           "heartbeat", "p99_ms", "aiowheel/{loop}", 1.0, sense="<= theirs +",
           theirs="loop/{loop}",
           shows="p99 {ours:.2f} ms, early {ours_early} (loop's own p99 {theirs_} ms, "
                 "early {theirs_early})"),
    Target("watchdog feed() >= 5x cancel + re-arm of a loop handle on {loop}", "feed",
           "ops_per_s", "aiowheel/{loop}", 5.0, theirs="loop/{loop}",
           param="push a 3 s deadline back"),
    Target("loop mode: loop.call_later churn @{size} >= {need:g}x the base {loop} loop's",
           "churn", "ops_per_s", "loop-mode/{loop}", 3.0, theirs="loop/{loop}",
           param="largest churn", loops=("asyncio",)),
    Target("loop mode: loop.call_later churn @{size} >= {need:g}x the base {loop} loop's",
           "churn", "ops_per_s", "loop-mode/{loop}", 2.0, theirs="loop/{loop}",
           param="largest churn", loops=("uvloop",)),
    Target("loop mode: loop.call_later churn @1,000 >= 0.95x the base {loop} loop's", "churn",
           "ops_per_s", "loop-mode/{loop}", 0.95, theirs="loop/{loop}", param="pending=1,000",
           unmeasured=False),
    Target("loop mode: near timers ({param}) on {loop}", "near", "ops_per_s",
           "loop-mode/{loop}", 0, sense="info", theirs="loop/{loop}", loops=LOOPS,
           shows="{ratio:.2f}x the base loop's"),
    Target("loop mode: asyncio.sleep fan-out wall time <= the base {loop} loop's", "fanout",
           "wall_s", "loop-mode/{loop}", 1.0, sense="<=", theirs="loop/{loop}", loops=LOOPS),
    Target("loop mode: asyncio.timeout(30) >= 1x the base {loop} loop's", "timeout",
           "ops_per_s", "loop-mode/{loop}", 1.0, theirs="loop/{loop}", param="empty body",
           loops=LOOPS),
    Target("loop mode: fire storm ({param}) on {loop}: 0 early firings", "storm", "early",
           "loop-mode/{loop}", 0, sense="==", theirs="loop/{loop}", loops=LOOPS,
           shows="loop mode {ours:g}, base loop {theirs_}"),
    Target("schedule + cancel, nothing pending, on loop mode ({loop}) within 2x of the floor "
           "(the same loop with one native clock read)", "schedule", "ops_per_s",
           "loop-mode/{loop}", 0.5, theirs="floor", loops=("asyncio",)),
    # 160: the handle is an asyncio.TimerHandle since issue 37 (its slots, 152 bytes on 3.11;
    # asyncio's own pending call_later takes 216).
    Target("loop mode ({loop}): bytes per pending call_later <= 160", "memory",
           "call_later_bytes", "loop-mode/{loop}", 160.0, sense="<=abs", param="per timer",
           shows="{ours:.0f} bytes (the base loop's own: {theirs_})", theirs="loop/{loop}"),
    Target("timeout CM >= 3x asyncio.timeout on {loop}", "timeout", "ops_per_s",
           "aiowheel/{loop}", 3.0, theirs="loop/{loop}", param="empty body"),
    Target("idle on {loop}: 0 reaper wake-ups", "idle", "wakeups", "aiowheel/{loop}", 0,
           sense="==", shows="{ours:g}"),
)  # fmt: skip

# Against the fastest peer: the best loop-mode base against the fastest loop's own timers, each
# side the best of the bases measured in this run.
# The goals of the native core (issue #27), on 3.14 with zuvloop and rloop measured.
PEER_TARGETS = (
    ("schedule", "call_later(30) + cancel, nothing pending", "ops_per_s", 2.0),
    ("churn", "pending=1,000", "ops_per_s", 2.0),
    ("churn", "pending=10,000", "ops_per_s", 2.2),
    ("churn", "pending=100,000", "ops_per_s", 3.0),
    ("timeout", "empty body", "ops_per_s", 1.25),
    ("due", None, "ms", 0.4),
    ("fanout", None, "wall_s", 0.9),
)


def _size(param: str) -> int:
    return int(param.split("=")[1].replace(",", ""))


def _params(results: Results, target: Target) -> list[str]:
    measured = list(results.raw.get(target.workload, {}))
    if target.param == "each":
        chosen = measured
    elif target.param == "largest churn":
        churn = list(results.raw.get("churn", {}))
        top = max(churn, key=_size, default=None)
        big = "pending=1,000,000" if "pending=1,000,000" in churn else top
        chosen = [] if big is None else [big]
    elif target.unmeasured or target.param in measured:
        chosen = [target.param]  # judged, as "not measured" if absent
    else:
        chosen = []
    if target.param_index is not None:
        chosen = measured[target.param_index : target.param_index + 1]
    return chosen


def judge(results: Results) -> list[dict[str, Any]]:
    """Every target, met / missed / n/a (None), with the figures behind it."""
    judged: list[dict[str, Any]] = []
    for target in TARGETS:
        for param in _params(results, target):
            for loop in target.loops:
                verdict = _judge_one(results, target, param, loop)
                if verdict is not None:
                    judged.append(verdict)
    return judged + judge_peers(results)


def _judge_one(results: Results, t: Target, param: str, loop: str) -> dict[str, Any] | None:
    size = param[8:] if param.startswith("pending=") else param
    text = t.text.format(loop=loop, param=param, size=size, need=t.need)
    ours = results.median(t.workload, param, t.ours.format(loop=loop), t.metric)
    theirs_name = None if t.theirs is None else t.theirs.format(loop=loop)
    theirs_param = t.theirs_param or param
    theirs = (
        None
        if theirs_name is None
        else results.median(t.workload, theirs_param, theirs_name, t.metric)
    )
    if t.sense in (">=", "<="):  # a ratio of two medians
        if ours is None or theirs is None:
            return {"target": text, "met": None, "measured": "not measured"}
        ratio = ours / theirs
        met = ratio >= t.need if t.sense == ">=" else ratio <= t.need
        return {"target": text, "met": met, "measured": t.shows.format(ratio=ratio)}
    if ours is None or (t.sense in ("<= theirs +", "info") and theirs is None):
        return None  # an absolute figure not measured in this run: nothing to say
    early = {
        side: None if name is None else results.median(t.workload, param, name, "early")
        for side, name in (("ours", t.ours.format(loop=loop)), ("theirs", theirs_name))
    }
    extra = {
        "ours": ours,
        "theirs_": fmt(theirs),
        "ratio": ours / theirs if theirs else 0.0,
        "ours_early": fmt(early["ours"]),
        "theirs_early": fmt(early["theirs"]),
    }
    shows = t.shows.format(**extra)
    if t.sense == "info":
        return {"target": text, "met": None, "measured": shows}
    if t.sense == "==":
        return {"target": text, "met": ours == t.need, "measured": shows}
    if t.sense == "<=abs":
        return {"target": text, "met": ours <= t.need, "measured": shows}
    assert t.sense == "<= theirs +" and theirs is not None
    return {"target": text, "met": ours <= t.need + theirs, "measured": shows}


def _best(results: Results, workload: str, param: str, metric: str, names: tuple[str, ...],
          lower: bool) -> tuple[float, str] | None:  # fmt: skip
    found = [
        (value, name)
        for name in names
        if (value := results.median(workload, param, name, metric)) is not None
    ]
    if not found:
        return None
    return min(found) if lower else max(found)


def judge_peers(results: Results) -> list[dict[str, Any]]:
    """Best loop mode vs the fastest peer loop, per workload (a ratio of two medians)."""
    judged = []
    for workload, wanted, metric, need in PEER_TARGETS:
        for param in results.raw.get(workload, {}):
            if wanted is not None and param != wanted:
                continue
            lower = metric in ("ms", "wall_s")
            ours = _best(results, workload, param, metric, LOOP_MODE, lower)
            theirs = _best(results, workload, param, metric, PEERS, lower)
            text = (
                f"vs the fastest peer: {workload} ({param}) {'<=' if lower else '>='} {need:.2f}x"
            )
            if ours is None or theirs is None:
                judged.append({"target": text, "met": None, "measured": "not measured"})
                continue
            ratio = ours[0] / theirs[0]
            judged.append({
                "target": text, "met": ratio <= need if lower else ratio >= need,
                "measured": f"{ratio:.2f}x ({ours[1]} {fmt(ours[0])} vs "
                            f"{theirs[1]} {fmt(theirs[0])})",
            })  # fmt: skip
    return judged
