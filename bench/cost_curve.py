"""The cost curve with time moving: ``python -m bench.cost_curve`` (issue 64, item 5).

``bench``'s churn workload grows the pending population but keeps time still: nothing comes
due while it is timed. A server holding millions of idle timeouts is the opposite: timers
come due every millisecond while others are filed and cancelled. This bench measures how the
cost of timers grows with the number pending while the loop runs for real.

**Each (contender, N)** runs in a fresh subprocess (its memory figure is its own):

- *filing*: N timers (a no-op callback) are filed with delays spread uniformly from 1 s to a
  day (86,400 s) ahead; the time it takes is ``file_s``, and the process's RSS after it minus
  before, over N, is ``bytes_per_timer`` (RSS, so the list holding the handles, 8 bytes a
  timer, is in it; at 1k the delta is within the allocator's noise).
- *time moving*, for ``--seconds`` of real time after one second of warm-up: a pump, run
  every millisecond (the loop's own ``call_later``), files the *due stream*: timer k has the
  deadline ``start + 1 s + k / --due-rate`` and is filed with ``call_at`` about one second
  ahead, so that once warm ``--due-rate`` timers come due each second if the loop keeps up.
  Each records its lateness (``loop.time()`` at firing minus its deadline; early ones are
  counted). In the same pump, *churn* replaces far timers at ``--churn-rate`` per second:
  ``call_later`` of a new one (1 s to a day ahead) and ``cancel()`` of an old one, so the
  population stays at N. The churn chunks are timed with ``perf_counter``: the churn rate is
  their operations over the time spent in them (a burst timed while N are pending and
  timers fire around it).
- figures: ``churn_per_s``, ``due_per_s`` (stream timers that fired inside the measured
  window, per second of it), lateness p50/p99 (ms), ``early``, ``bytes_per_timer``,
  ``file_s``; and the garbage collector's runs and pauses while time moves (``gc_s``,
  ``gc_max_ms``: the collector is left on, as a server leaves it). The child ends with
  ``os._exit`` (freeing 10M handles is not measured).

**Contenders**: ``loop/asyncio`` and ``loop/uvloop`` (the loops' own timers), ``loop-mode/``
each (``aiowheel.new_event_loop(base)``: every ``call_at`` / ``call_later`` on the wheel), and
``aiowheel/asyncio`` (aiowheel's own API: ``aiowheel.Timer``'s ``call_at`` / ``call_later`` on
an asyncio loop). uvloop's rows are skipped out loud where it is not installed.

**Caps**: a (contender, N) whose memory, extrapolated from its smaller sizes (or from a
guess before any), would pass ``--max-gb``, or whose filing time extrapolated would pass
``--max-seconds``, is skipped with the reason printed; a child whose RSS passes the cap or
that runs past the time cap is killed and its row skipped with the reason.

**The goal** (issue 64): at 10M pending, churn and due rate within 1.3x of their rates at 1k,
p99 lateness within one tick (aiowheel's default, 1 ms) of it. The verdict is printed per
contender. On a 2-core machine with anything else running the wall-clock figures are noisy:
one run each is one sample.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONTENDERS = ("loop/asyncio", "loop/uvloop", "loop-mode/asyncio", "loop-mode/uvloop",
              "aiowheel/asyncio")  # fmt: skip
SIZES = (1_000, 100_000, 1_000_000, 10_000_000)
FAR_MIN, FAR_MAX = 1.0, 86_400.0  # the pending population's delays (s)
LEAD = 1.0  # the due stream is filed this far ahead (s), and warms up this long
PUMP = 0.001  # the pump's period (s)
MOST_PER_PUMP = 20_000  # a loop that falls behind is not buried under one pump's backlog
# Bytes per pending timer guessed before a contender's first size is measured (the README's
# figures plus the handle list, with room): only for the memory cap's first decision.
GUESS_BYTES = {"loop/asyncio": 400, "loop/uvloop": 800, "loop-mode/asyncio": 300,
               "loop-mode/uvloop": 300, "aiowheel/asyncio": 300}  # fmt: skip
GOAL_RATIO = 1.3  # 10M's rates within this factor of 1k's


def _noop() -> None:
    pass


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _rss_of(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def percentile(ordered: list[float], q: float) -> float:
    """The ``q`` quantile of sorted ``ordered`` (NaN when empty)."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


# -- one (contender, N), in its own process ---------------------------------------------------


def make_loop(contender: str) -> asyncio.AbstractEventLoop:
    """A fresh loop for ``contender`` (the aiowheel API's Timer is made inside it)."""
    import aiowheel

    kind, _, base_name = contender.partition("/")
    base: Any = None
    if base_name == "uvloop":
        import uvloop

        base = uvloop.Loop
    if kind == "loop-mode":
        return aiowheel.new_event_loop(base)
    return asyncio.new_event_loop() if base is None else base()


async def measure(contender: str, n: int, seconds: float, due_rate: float,
                  churn_rate: float, seed: int) -> dict[str, Any]:  # fmt: skip
    """File ``n`` far timers, then run the due stream and the churn; the figures."""
    import aiowheel

    loop = asyncio.get_running_loop()
    timer: Any = None
    if contender.startswith("aiowheel/"):
        timer = aiowheel.Timer()
        await timer.__aenter__()
    call_at: Callable[..., Any] = loop.call_at if timer is None else timer.call_at
    call_later: Callable[..., Any] = loop.call_later if timer is None else timer.call_later
    rng = random.Random(seed)
    uniform = rng.uniform

    rss_before = _rss_bytes()
    start = time.perf_counter()
    far = [call_later(uniform(FAR_MIN, FAR_MAX), _noop) for _ in range(n)]
    file_s = time.perf_counter() - start
    rss_after = _rss_bytes()

    lateness: list[float] = []
    fired_at: list[float] = []
    record, stamp, clock = lateness.append, fired_at.append, loop.time

    def fire(deadline: float) -> None:
        now = clock()
        record(now - deadline)
        stamp(now)

    pauses: list[float] = []  # the garbage collector's pauses while time moves (s)
    began_gc = [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            began_gc[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - began_gc[0])

    gc.callbacks.append(on_gc)
    t0 = loop.time()
    window_start, window_end = t0 + LEAD, t0 + LEAD + seconds
    total_due = int(due_rate * seconds)  # the stream's deadlines all lie in the window
    step = 1.0 / due_rate
    state = {"filed": 0, "churned": 0, "churn_s": 0.0, "slot": 0, "pumps": 0}
    done = loop.create_future()

    def pump() -> None:
        now = loop.time()
        state["pumps"] += 1
        # The due stream: every timer whose filing time (deadline - LEAD) has come.
        wanted = min(total_due, int((now - t0) * due_rate) + 1)
        k = state["filed"]
        last = min(wanted, k + MOST_PER_PUMP)
        while k < last:
            deadline = window_start + k * step
            call_at(deadline, fire, deadline)
            k += 1
        state["filed"] = k
        # The churn: replace far timers, one call_later + one cancel each, timed.
        owed = min(int((now - t0) * churn_rate) - state["churned"], MOST_PER_PUMP)
        if owed > 0 and n:
            slot = state["slot"]
            began = time.perf_counter()
            for _ in range(owed):
                new = call_later(uniform(FAR_MIN, FAR_MAX), _noop)
                far[slot].cancel()
                far[slot] = new
                slot += 1
                if slot == n:
                    slot = 0
            state["churn_s"] += time.perf_counter() - began
            state["slot"] = slot
            state["churned"] += owed
        if now >= window_end + LEAD or (k == total_due and len(lateness) >= total_due):
            if not done.done():
                done.set_result(None)
            return
        loop.call_later(PUMP, pump)

    loop.call_soon(pump)
    await done
    gc.callbacks.remove(on_gc)
    ordered = sorted(lateness)
    in_window = sum(window_start <= at <= window_end for at in fired_at)
    figures = {
        "contender": contender, "n": n, "file_s": file_s,
        "bytes_per_timer": (rss_after - rss_before) / n if n else float("nan"),
        "memory": "rss", "rss_mib": rss_after / 2**20,
        "churn_per_s": state["churned"] / state["churn_s"] if state["churn_s"] else 0.0,
        "churned": state["churned"], "churn_s": state["churn_s"],
        "due_per_s": in_window / seconds, "due_fired": len(lateness), "due_filed": state["filed"],
        "p50_ms": percentile(ordered, 0.5) * 1e3, "p99_ms": percentile(ordered, 0.99) * 1e3,
        "max_ms": (ordered[-1] if ordered else float("nan")) * 1e3,
        "early": sum(x < 0 for x in lateness), "pumps": state["pumps"],
        "loop": type(loop).__name__, "gc_runs": len(pauses), "gc_s": sum(pauses),
        "gc_max_ms": max(pauses, default=0.0) * 1e3,
    }  # fmt: skip
    return figures


def child(args: argparse.Namespace) -> int:
    """Run one (contender, N) and print its figures as one JSON line; exit without teardown."""
    loop = make_loop(args.child)
    asyncio.set_event_loop(loop)
    figures = loop.run_until_complete(
        measure(args.child, args.n, args.seconds, args.due_rate, args.churn_rate, args.seed)
    )
    sys.stdout.write(json.dumps(figures) + "\n")
    sys.stdout.flush()
    os._exit(0)  # freeing millions of handles is not the figure; leave it to the kernel


# -- the parent: spawn, cap, tabulate, judge, draw --------------------------------------------


def installed(contender: str) -> bool:
    """Whether ``contender``'s base loop is importable here."""
    if not contender.endswith("/uvloop"):
        return True
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def run_child(
    contender: str, n: int, args: argparse.Namespace
) -> tuple[dict[str, Any] | None, str]:
    """Run one (contender, N) in a fresh process under the caps: (figures, or None and why)."""
    command = [sys.executable, "-m", "bench.cost_curve", "--child", contender, "--n", str(n),
               "--seconds", str(args.seconds), "--due-rate", str(args.due_rate),
               "--churn-rate", str(args.churn_rate), "--seed", str(args.seed)]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
           os.environ.get("PYTHONPATH")]))}  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
    cap = args.max_gb * 2**30
    started = time.monotonic()
    peak = 0
    reason = ""
    while process.poll() is None:
        peak = max(peak, _rss_of(process.pid))
        if peak > cap:
            reason = f"killed: RSS {peak / 2**30:.1f} GiB passed --max-gb {args.max_gb}"
        elif time.monotonic() - started > args.max_seconds:
            reason = f"killed: ran past --max-seconds {args.max_seconds:g}"
        if reason:
            process.kill()
            process.communicate()
            return None, reason
        time.sleep(0.1)
    out, err = process.communicate()
    if process.returncode != 0 or not out.strip():
        return None, f"failed (exit {process.returncode}): {err.strip()[-300:]}"
    figures: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    figures["peak_rss_mib"] = peak / 2**20
    figures["wall_s"] = time.monotonic() - started
    return figures, ""


def precheck(contender: str, n: int, done: list[dict[str, Any]], args: argparse.Namespace) -> str:
    """Why (contender, N) would pass a cap, extrapolated from its smaller sizes; '' if not."""
    mine = [r for r in done if r["contender"] == contender and r["n"] >= 100_000]
    per_timer = max([r["bytes_per_timer"] for r in mine], default=GUESS_BYTES[contender])
    need = per_timer * 1.2 * n
    if need > args.max_gb * 2**30:
        return (f"skipped: {per_timer:.0f} B a timer x {n:,} x 1.2 = {need / 2**30:.1f} GiB"
                f" > --max-gb {args.max_gb}")  # fmt: skip
    if mine:
        largest = max(mine, key=lambda r: r["n"])
        guess = largest["file_s"] * n / largest["n"] * 1.5 + args.seconds + 2 * LEAD + 5
        if guess > args.max_seconds:
            return f"skipped: about {guess:.0f} s extrapolated > --max-seconds {args.max_seconds:g}"
    return ""


def fmt_n(n: float) -> str:
    """1000 -> 1k, 10000000 -> 10M."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:g}{unit}"
    return f"{n:g}"


def _rate(x: float) -> str:
    return fmt_n(round(x, -2) if x >= 1e4 else round(x))


def tables(rows: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> str:
    """Two markdown tables of five columns (rates; lateness and memory) and the skips."""
    out = ["| contender | N | churn/s | due/s | file N (s) |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['contender']} | {fmt_n(r['n'])} | {_rate(r['churn_per_s'])} "
                   f"| {_rate(r['due_per_s'])} | {r['file_s']:.2f} |")  # fmt: skip
    out += ["", "| contender | N | p50 / p99 ms | early | B/timer (RSS) |", "|---|---|---|---|---|"]
    for r in rows:
        memory = "-" if r["n"] < 100_000 else f"{r['bytes_per_timer']:.0f}"
        out.append(f"| {r['contender']} | {fmt_n(r['n'])} | {r['p50_ms']:.2f} / {r['p99_ms']:.2f} "
                   f"| {r['early']} | {memory} |")  # fmt: skip
    for s in skipped:
        out.append(f"\n{s['contender']} at {fmt_n(s['n'])}: {s['reason']}")
    return "\n".join(out)


def verdicts(rows: list[dict[str, Any]], tick_ms: float) -> list[dict[str, Any]]:
    """Per contender: the smallest and largest size's churn and due ratios, p99 difference."""
    judged = []
    for contender in dict.fromkeys(r["contender"] for r in rows):
        mine = sorted((r for r in rows if r["contender"] == contender), key=lambda r: r["n"])
        small, large = mine[0], mine[-1]
        churn = (
            small["churn_per_s"] / large["churn_per_s"] if large["churn_per_s"] else float("inf")
        )
        due = small["due_per_s"] / large["due_per_s"] if large["due_per_s"] else float("inf")
        p99 = large["p99_ms"] - small["p99_ms"]
        met = churn <= GOAL_RATIO and due <= GOAL_RATIO and p99 <= tick_ms
        goal_sizes = small["n"] == 1_000 and large["n"] == 10_000_000
        judged.append({"contender": contender, "small": small["n"], "large": large["n"],
                       "churn_ratio": churn, "due_ratio": due, "p99_diff_ms": p99,
                       "met": met, "goal_sizes": goal_sizes})  # fmt: skip
    return judged


def verdict_table(judged: list[dict[str, Any]]) -> str:
    """The goal's verdicts as a five-column markdown table."""
    out = ["| contender | churn small/large | due small/large | p99 diff (ms) | goal |",
           "|---|---|---|---|---|"]  # fmt: skip
    for v in judged:
        sizes = f"{fmt_n(v['small'])}/{fmt_n(v['large'])}"
        word = "met" if v["met"] else "missed"
        if not v["goal_sizes"]:
            word += f" ({sizes} only)"
        out.append(f"| {v['contender']} | {v['churn_ratio']:.2f}x | {v['due_ratio']:.2f}x "
                   f"| {v['p99_diff_ms']:+.2f} | {word} |")  # fmt: skip
    return "\n".join(out)


def _minor(value: float, _position: object = None) -> str:
    """Label the minor ticks 2 and 5 of each decade (a rate axis spans less than one)."""
    lead = f"{value:.0e}"[0]
    return fmt_n(value) if lead in "25" else ""


def plot(rows: list[dict[str, Any]], path: Path, tick_ms: float) -> bool:
    """Churn, due rate and p99 lateness against N (log x), one line per contender."""
    from matplotlib.ticker import FuncFormatter

    from .plots import COLOURS, LABELS, STYLES, _pyplot

    plt = _pyplot()
    if plt is None:
        return False
    panels = (("churn_per_s", "call_later + cancel per second", "Churn (higher is better)"),
              ("due_per_s", "timers fired per second", "Due rate (higher is better)"),
              ("p99_ms", "p99 lateness, ms", "p99 lateness (lower is better)"))  # fmt: skip
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.6))
    for ax, (metric, ylabel, title) in zip(axes, panels, strict=True):
        for contender in dict.fromkeys(r["contender"] for r in rows):
            mine = sorted((r for r in rows if r["contender"] == contender), key=lambda r: r["n"])
            kind, _, loop = contender.partition("/")
            kind = "aiowheel" if kind == "aiowheel" else kind
            ax.plot([r["n"] for r in mine], [r[metric] for r in mine], marker="o", markersize=4,
                    color=COLOURS[loop], linestyle=STYLES[kind],
                    label=f"{LABELS[kind]} {loop}")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, p: fmt_n(v)))
        if metric == "p99_ms":
            ax.axhline(tick_ms, color="grey", linewidth=0.8, linestyle=":")
            ax.annotate("one tick", (rows[0]["n"], tick_ms), fontsize=8, color="grey",
                        xytext=(2, 3), textcoords="offset points")  # fmt: skip
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, p: f"{v:g}"))
        else:
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, p: fmt_n(v)))
            ax.yaxis.set_minor_formatter(FuncFormatter(_minor))
        ax.set_xlabel("timers pending")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8,
               frameon=False)  # fmt: skip
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    """Run every (contender, N) in its own process, print the tables and verdicts."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.cost_curve",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)),
                        help="pending populations N, comma-separated")  # fmt: skip
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window (s)")
    parser.add_argument("--due-rate", type=float, default=100_000.0, help="due timers per s")
    parser.add_argument("--churn-rate", type=float, default=20_000.0,
                        help="call_later + cancel per s in the pump's gaps")  # fmt: skip
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--max-gb", type=float, default=8.0, help="memory cap per child (GiB)")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="time cap per child")
    parser.add_argument("--seed", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--plot", type=Path, help="draw the figures here (matplotlib)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--from-json", type=Path,
                        help="tabulate, judge and draw a run's JSON again")  # fmt: skip
    args = parser.parse_args(argv)
    if args.child:
        return child(args)
    if args.from_json:
        document = json.loads(args.from_json.read_text())
        print(tables(document["rows"], document["skipped"]) + "\n")
        print(verdict_table(verdicts(document["rows"], document["tick_ms"])))
        if args.plot and plot(document["rows"], args.plot, document["tick_ms"]):
            print(f"drew {args.plot}")
        return 0

    from aiowheel._common import _validate

    from .suite import environment

    tick_ms = _validate.DEFAULT_TICK * 1e3
    sizes = sorted(int(s) for s in args.sizes.split(","))
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = [c for c in contenders if c not in CONTENDERS]
    if unknown:
        parser.error(f"unknown contenders {unknown}; valid: {', '.join(CONTENDERS)}")
    env = environment()  # the commit measured: read before the run, not after
    try:
        env["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                       capture_output=True, text=True).stdout.strip()  # fmt: skip
    except OSError:
        env["commit"] = None
    rows: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []
    for contender in contenders:
        if not installed(contender):
            print(f"{contender}: uvloop is not installed: skipped", flush=True)
            skipped += [{"contender": contender, "n": n, "reason": "uvloop not installed"}
                        for n in sizes]  # fmt: skip
            continue
        for n in sizes:
            reason = precheck(contender, n, rows, args)
            figures = None
            if not reason:
                print(f"[{contender} N={fmt_n(n)}] ...", end=" ", flush=True)
                figures, reason = run_child(contender, n, args)
            if figures is None:
                print(f"[{contender} N={fmt_n(n)}] {reason}", flush=True)
                skipped.append({"contender": contender, "n": n, "reason": reason})
                continue
            print(f"filed in {figures['file_s']:.2f} s, churn {_rate(figures['churn_per_s'])}/s,"
                  f" due {_rate(figures['due_per_s'])}/s, p99 {figures['p99_ms']:.2f} ms,"
                  f" early {figures['early']}", flush=True)  # fmt: skip
            rows.append(figures)
    print()
    print(tables(rows, skipped))
    judged = verdicts(rows, tick_ms)
    print(f"\nThe goal: at 10M, churn and due rate within {GOAL_RATIO}x of 1k's, p99 within"
          f" one tick ({tick_ms:g} ms) of 1k's. Ratios are small/large (above 1: slower at"
          " large).\n")  # fmt: skip
    print(verdict_table(judged))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "environment": env, "args": {k: (str(v) if isinstance(v, Path) else v)
                                         for k, v in vars(args).items()},
            "tick_ms": tick_ms, "rows": rows, "skipped": skipped, "verdicts": judged,
        }, indent=1) + "\n")  # fmt: skip
        print(f"\nwrote {args.json}")
    if args.plot and rows:
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        if plot(rows, args.plot, tick_ms):
            print(f"drew {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
