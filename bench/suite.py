"""The head-to-head suite behind ``python -m bench``: run, tabulate, save, plot.

What runs is :mod:`bench.registry` (the contenders, the sizes, one entry per workload); how a
run compares with the project's targets is :mod:`bench.targets` (shown with ``--targets``).
This module is the command: it parses the options, runs every workload's jobs with the
contenders alternating in each repeat, prints the table, and writes ``bench.json`` and the
figures of :mod:`bench.plots` (``bench.png``, ``bench-storms.png``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import plots
from .registry import (
    BY_NAME,
    CONTENDERS,
    LOOPS,
    MODES,
    PEER_ONLY,
    WORKLOADS,
    Results,
    Sizes,
)
from .targets import PEER_TARGETS, TARGETS, fmt, judge

TARGETS_NOTE = (
    "Targets are the project's own aims, measured on its CI machine (a shared 2-core VM); a\n"
    "miss on another machine says how the figures compare there, not that anything is broken."
)
WHAT_A_TARGET_IS = (
    "A target is a figure the project aims at on its own CI machine (a shared 2-core VM), such\n"
    "as churn at 3x asyncio's own timers or 0 early firings: a miss on another machine says how\n"
    "the figures compare there, not that anything is broken. The list: bench/targets.py, printed\n"
    "by `python -m bench --list-targets`; `--targets` judges this run against each."
)


def _installed(loop: str) -> bool:
    if loop == "asyncio":
        return True
    try:
        __import__(loop)
    except ImportError:
        return False
    return True


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller sizes, 3 repeats (~2 min)")
    mode.add_argument("--tiny", action="store_true", help="smoke-test sizes (seconds)")
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help=f"comma-separated, from: {', '.join(WORKLOADS)}",
    )
    parser.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"comma-separated, from: {', '.join(CONTENDERS)}",
    )
    parser.add_argument(
        "--out",
        default="bench/results",
        help="directory for bench.json, bench.png (churn) and bench-storms.png",
    )
    parser.add_argument("--repeats", type=int, default=None, help="override the repeat count")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="after the table, how the run compares with the project's targets (met / MISSED)",
    )
    parser.add_argument(
        "--list-targets",
        action="store_true",
        help="print every target the run is judged against (bench/targets.py), run nothing",
    )
    parser.add_argument(
        "--churn-pending",
        default=None,
        help="comma-separated pending counts for churn, overriding the mode's (e.g. 1000,1000000)",
    )
    parser.add_argument(
        "--replot",
        metavar="JSON",
        default=None,
        help="only redraw the figures of an earlier run's bench.json into --out",
    )
    args = parser.parse_args(argv)  # fmt: skip
    for name, valid in (("workloads", WORKLOADS), ("contenders", CONTENDERS)):
        chosen = [x.strip() for x in getattr(args, name).split(",") if x.strip()]
        unknown = [x for x in chosen if x not in valid]
        if unknown or not chosen:
            parser.error(
                f"unknown {name[:-1]} {', '.join(map(repr, unknown)) or '(none given)'}; "
                f"valid {name}: {', '.join(valid)}"
            )
        setattr(args, name, chosen)
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.churn_pending is not None:
        try:
            pending = tuple(int(x) for x in args.churn_pending.split(","))
        except ValueError:
            pending = ()
        if not pending or min(pending) < 1:
            parser.error(f"--churn-pending takes positive integers, got {args.churn_pending!r}")
        args.churn_pending = pending
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.list_targets:
        print(list_targets())
        return 0
    if args.replot:
        document = json.loads(Path(args.replot).read_text())
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        return 0 if plots.draw(Results(raw=document["raw"]), out) else 1
    mode = "tiny" if args.tiny else "quick" if args.quick else "full"
    sizes = MODES[mode]
    if args.repeats:
        sizes = Sizes(args.repeats, *list(vars(sizes).values())[1:])
    if args.churn_pending:
        sizes = Sizes(sizes.repeats, args.churn_pending, *list(vars(sizes).values())[2:])
    contenders = list(args.contenders)
    for loop in (*LOOPS, *PEER_ONLY):
        if not _installed(loop):
            skipped = [c for c in contenders if c.endswith(f"/{loop}")]
            if skipped:
                print(f"{loop} is not installed here: skipping {', '.join(skipped)}", flush=True)
            contenders = [c for c in contenders if c not in skipped]
    if mode == "full" and 10_000_000 in sizes.churn_pending and not _memory_allows(10_000_000):
        print("not enough memory for churn at 10M pending: skipping that size", flush=True)
        sizes = Sizes(sizes.repeats, sizes.churn_pending[:-1], *list(vars(sizes).values())[2:])

    started = time.perf_counter()
    results = Results()
    env = environment()
    build = "compiled" if env["compiled"] else "pure-Python"
    loops = ", ".join(f"{loop} {env[loop]}" for loop in (*LOOPS[1:], *PEER_ONLY) if env[loop])
    print(f"aiowheel {env['aiowheel']} ({build} build), {env['implementation']} "
          f"{env['python']} ({sys.executable}), {loops}", flush=True)  # fmt: skip
    print(f"aiowheel bench ({mode}): {sizes.repeats} repeats, contenders alternate in each",
          flush=True)  # fmt: skip
    for workload in args.workloads:
        workload_started = time.perf_counter()
        entry = BY_NAME[workload]
        for param, jobs in entry.jobs(sizes).items():
            for rep in range(sizes.repeats):
                for contender in entry.contenders:
                    if contender not in contenders:
                        continue
                    values = jobs(contender)
                    results.add(workload, param, contender, values)
                    shown = ", ".join(f"{k}={fmt(v)}" for k, v in values.items())
                    print(f"  [{workload} {param}] rep {rep + 1}/{sizes.repeats} "
                          f"{contender:<17} {shown}", flush=True)  # fmt: skip
        print(f"  ({workload}: {time.perf_counter() - workload_started:.1f} s)", flush=True)
    elapsed = time.perf_counter() - started

    rows = table(results)
    targets = judge(results)
    print()
    print(render(rows))
    if args.targets:
        print()
        print(TARGETS_NOTE)
        for target in targets:
            met = target["met"]
            print(f"  [{'met' if met else 'MISSED' if met is False else 'n/a'}] "
                  f"{target['target']}: {target['measured']}")  # fmt: skip
    else:
        met = sum(target["met"] is True for target in targets)
        print(f"\n{met} of {sum(t['met'] is not None for t in targets)} of the project's "
              "targets met on this machine.")  # fmt: skip
        print(WHAT_A_TARGET_IS)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "mode": mode,
        "seconds": round(elapsed, 1),
        "environment": environment(),
        "sizes": vars(sizes),
        "medians": rows,
        "targets": targets,
        "raw": results.raw,
    }
    (out / "bench.json").write_text(json.dumps(document, indent=2))
    print(f"\nwrote {out / 'bench.json'}", end="")
    for figure in plots.draw(results, out):
        print(f" and {figure}", end="")
    print(f" ({elapsed:.0f} s)")
    return 0


def list_targets() -> str:
    """Every target as a run is judged against it: one line per loop (and named parameter)."""
    lines = [TARGETS_NOTE, "", "Ratios of two medians of one run, or bounds (bench/targets.py):"]
    # The largest churn size judged: 1M in a full run (bench.targets._params), the largest
    # pending count with --quick.
    quick = max(MODES["quick"].churn_pending)
    largest_churn = f"1,000,000 pending ({quick:,} with --quick)"
    for target in TARGETS:
        param, size = target.param, largest_churn
        if target.param == "each":
            param, size = "each size measured", "each size measured"
        note = " (information: not counted)" if target.sense == "info" else ""
        for loop in target.loops:
            text = target.text.format(loop=loop, param=param, size=size, need=target.need)
            lines.append(f"  {text}{note}")
    for workload, wanted, metric, need in PEER_TARGETS:
        lower = metric in ("ms", "wall_s")
        lines.append(
            f"  vs the fastest peer: {workload} ({wanted or 'each size measured'}) "
            f"{'<=' if lower else '>='} {need:.2f}x"
        )
    lines += ["", "Peers: the best loop-mode base against the fastest loop's own timers."]
    return "\n".join(lines)


def _memory_allows(pending: int) -> bool:
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return False
    return available > pending * 1500  # uvloop's handles are ~520 B; leave ample margin


# -- reporting -------------------------------------------------------------------------------


def table(results: Results) -> list[dict[str, Any]]:
    """One row per (workload, parameter, metric, loop): aiowheel, baseline, ratio, floor."""
    rows: list[dict[str, Any]] = []
    for workload, params in results.raw.items():
        for param, by_contender in params.items():
            metrics = sorted({m for values in by_contender.values() for m in values})
            for metric in metrics:
                for contender, kind in (("API", "aiowheel"), ("loop mode", "loop-mode")):
                    for loop in (*LOOPS, *PEER_ONLY):  # a peer only: its own timers' row
                        ours = results.median(workload, param, f"{kind}/{loop}", metric)
                        base = results.median(workload, param, f"loop/{loop}", metric)
                        floor = results.median(workload, param, "floor", metric)
                        if ours is None and (base is None or contender == "loop mode"):
                            continue
                        rows.append({
                            "workload": workload, "param": param, "metric": metric,
                            "loop": loop, "contender": contender, "aiowheel": ours,
                            "baseline": base, "floor": floor,
                            "ratio": _ratio(metric, ours, base),
                            "vs_floor": None if ours is None or not floor else ours / floor,
                        })  # fmt: skip
    return rows


def _ratio(metric: str, ours: float | None, base: float | None) -> float | None:
    """aiowheel / baseline, for the metric's own sense (bytes: ours/theirs; speed: ours/theirs;
    time: theirs/ours is not used, to keep one convention: the raw quotient ours/baseline)."""
    if ours is None or base is None or base == 0:
        return None
    return ours / base


def render(rows: list[dict[str, Any]]) -> str:
    header = ("workload", "parameter", "metric", "loop", "aiowheel as", "aiowheel",
              "loop's own", "ratio", "floor", "vs floor")  # fmt: skip
    lines = [header]
    for r in rows:
        lines.append((
            r["workload"], r["param"], r["metric"], r["loop"], r["contender"], fmt(r["aiowheel"]),
            fmt(r["baseline"]), "" if r["ratio"] is None else f"{r['ratio']:.2f}x",
            fmt(r["floor"]), "" if r["vs_floor"] is None else f"{r['vs_floor']:.2f}x",
        ))  # fmt: skip
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(str(cell).ljust(widths[j]) for j, cell in enumerate(line)))
        if i == 0:
            out.append("  ".join("-" * width for width in widths))
    return "\n".join(out)


def environment() -> dict[str, Any]:
    import aiowheel

    env: dict[str, Any] = {
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
        "processor": platform.processor() or _cpu_model(),
        "cpus": os.cpu_count(),
        "system": f"{platform.system()} {platform.release()}",
        "aiowheel": aiowheel.__version__,
        "compiled": aiowheel.COMPILED,
        "build": "compiled (mypyc)" if aiowheel.COMPILED else "pure-Python",
    }
    for loop in (*LOOPS[1:], *PEER_ONLY):
        try:
            env[loop] = importlib.metadata.version(loop)
        except importlib.metadata.PackageNotFoundError:
            env[loop] = None
    return env


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"
