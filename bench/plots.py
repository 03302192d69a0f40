"""The benchmark's figures: one question each, readable at the width of a page.

- ``bench.png``: how many ``call_later`` + ``cancel`` per second, against the number of timers
  pending (churn), one line per contender: the colour is the event loop, the line style says
  whose timers (loop mode solid, the loop's own dashed, aiowheel's API dotted, no timer at all
  grey).
- ``bench-storms.png``: how late timers run in each fire storm (p50, p99, max), and how many
  ran early, one row of bars per contender.

Axes read as plain numbers (``100k``, ``2M``), legends sit beside the data, not on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .registry import CONTENDERS, Results
from .targets import fmt

COLOURS = {
    "asyncio": "#1f77b4",
    "uvloop": "#d62728",
    "rloop": "#2ca02c",
    "zuvloop": "#9467bd",
    "veloxloop": "#ff7f0e",
    "zloop": "#8c564b",
    "bracio": "#e377c2",
    "rsloop": "#17becf",
}
STYLES = {"loop-mode": "-", "loop": "--", "aiowheel": ":"}
LABELS = {"loop-mode": "loop mode on", "loop": "the loop's own:", "aiowheel": "aiowheel API on"}


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed (pip install -e '.[bench]'): no plot", flush=True)
        return None
    return plt


def _plain(value: float, _position: object = None) -> str:
    return fmt(value)


def churn(results: Results, path: Path) -> bool:
    """``bench.png``: churn throughput against pending timers, one line per contender."""
    plt = _pyplot()
    if plt is None:
        return False
    from matplotlib.ticker import FuncFormatter

    by_pending = results.raw.get("churn", {})
    params = sorted(by_pending, key=lambda p: int(p.split("=")[1].replace(",", "")))
    xs = [int(p.split("=")[1].replace(",", "")) for p in params]
    fig, ax = plt.subplots(figsize=(9, 5))
    for contender in CONTENDERS:
        ys = [results.median("churn", p, contender, "ops_per_s") for p in params]
        if not any(y is not None for y in ys):
            continue
        kind, _, loop = contender.partition("/")
        if contender == "floor":
            style = {"color": "grey", "linestyle": "-.", "label": "no timer (the floor)"}
        else:
            style = {
                "color": COLOURS[loop],
                "linestyle": STYLES[kind],
                "label": f"{LABELS[kind]} {loop}",
            }
        ax.plot(xs, [y or float("nan") for y in ys], marker="o", markersize=4, **style)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.xaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, p: ""))
    ax.set_xlabel("timers pending")
    ax.set_ylabel("call_later + cancel per second")
    ax.set_title("Churn: arm a timer 30 s out and cancel an older one (higher is better)")
    ax.grid(True, which="major", alpha=0.3)
    if params:
        ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=9, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def storms(results: Results, path: Path) -> bool:
    """``bench-storms.png``: lateness in each fire storm, one row of bars per contender."""
    plt = _pyplot()
    if plt is None:
        return False
    params = list(results.raw.get("storm", {}))
    if not params:
        return False
    fig, axes = plt.subplots(len(params), 1, figsize=(9, 2.2 + 3.2 * len(params)), squeeze=False)
    for ax, param in zip(axes[:, 0], params, strict=True):
        names = [c for c in CONTENDERS if c in results.raw["storm"][param]]
        rows = range(len(names))
        height = 0.26
        for i, (metric, shade) in enumerate((("p50_ms", 0.45), ("p99_ms", 0.7), ("max_ms", 1.0))):
            values = [results.median("storm", param, c, metric) or 0 for c in names]
            ax.barh([r + (i - 1) * height for r in rows], values, height, alpha=shade,
                    color="#444444", label=metric.replace("_ms", ""))  # fmt: skip
        labels = [f"{c}  (early: {fmt(results.median('storm', param, c, 'early'))})" for c in names]
        ax.set_yticks(list(rows), labels, fontsize=9)
        ax.invert_yaxis()
        ax.set_xlabel("lateness, ms by loop.time() (lower is better)")
        ax.set_title(f"Fire storm: {param}", loc="left")
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3, fontsize=8, frameon=False)
        ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def draw(results: Results, out: Path) -> list[Path]:
    """Every figure of a run into ``out``; the paths written."""
    written = []
    for name, figure in (("bench.png", churn), ("bench-storms.png", storms)):
        if figure(results, out / name):
            written.append(out / name)
    return written
