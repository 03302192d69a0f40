"""Deadlines across services: when the first caller gives up, does the work below it stop?

``python -m bench.chain [--rate 20] [--duration 10] [--work 5] [--deadline 1] [--fast 2000]
[--bursts 10] [--concurrency 10] [--rounds 3] [--loop-mode] [--quick] [--out DIR]`` runs
``examples/chain`` (a FastAPI gateway under uvicorn, an aiohttp service, a grpc.aio backend:
three processes, started from their own command lines) and measures two things.

Overload, stock against propagated (alternating which goes first, round by round): a client
sends ``--rate`` requests a second for ``--duration`` seconds, each with a ``--deadline`` s
deadline (it sends ``x-request-timeout`` and gives up at the deadline, waiting a further
``GRACE`` s for a 504 to count it: an HTTP client's timeout), each calling for a backend
query of ``--work`` s, far past the deadline.

- ``stock``: each hop its own fixed timeout (10, 8, 6 s), nothing passed on, the way most
  services do it today;
- ``propagated``: aiowheel's deadline at every hop, the caller's passed on
  (``DeadlineMiddleware`` / ``DeadlineTransport`` / ``deadline_middleware`` /
  ``PropagateDeadline`` / ``DeadlineInterceptor``).

Figures, from each hop's own records (when each handler started and when its ``finally``
ran, on the machine's one monotonic clock): the handler-seconds done below the gateway (the
service's and the backend's) after the client's deadline, per request (stock: about
2 x (work - deadline); goal 0); the time from the client's deadline until the last handler
of the request, at any hop, had ended (p50, p99; goal p99 <= 20 ms; negative: before the
deadline, the callees' deadlines being the caller's less margins); how many requests the
gateway answered 504 before the client gave up.

CPU per request that meets its deadline, propagated against ``none`` (no deadline machinery
at all: no middleware, plain clients): the two chains run side by side, ``--fast`` requests
(``--concurrency`` at a time, a backend query of 0 s) in ``--bursts`` bursts that alternate
between them; per burst, the CPU time of the three processes (every thread's, from
``/proc/PID/task/*/schedstat``) per request, and the ratio of the two (goal: <= 1.03).

Figures are medians over the rounds, with the min and the max. ``--quick``: one round,
small counts (a smoke test). Only 127.0.0.1 is contacted; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from examples.chain.run import ROOT, Chain, started

HOPS = {"gateway": ("gateway", "/stats"), "service": ("service", "/stats"),
        "backend": ("service", "/backend/stats")}  # fmt: skip
BELOW = ("service", "backend")
GRACE = 0.25
"""The client waits this long past its deadline for the gateway's 504 (counted) before giving
up; the figures are measured from the deadline itself."""


def chain_cpu(chain: Chain) -> Callable[[], dict[str, float]]:
    """A reader of the CPU seconds of each of the chain's three processes, every thread of
    each (``/proc/PID/task/*/schedstat``: ns on a CPU); NaN where /proc has no such files."""
    pids = {name: process.pid for name, process in chain.processes.items()}

    def read() -> dict[str, float]:
        times = {}
        for name, pid in pids.items():
            total = 0
            try:
                for task in Path(f"/proc/{pid}/task").iterdir():
                    with contextlib.suppress(FileNotFoundError):  # a thread that just ended
                        total += int((task / "schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                times[name] = math.nan
            else:
                times[name] = total / 1e9
        return times

    return read


def chain_instructions(
    chain: Chain, out: Path, keep: Path | None = None, label: str = ""
) -> Callable[[], dict[str, float]]:
    """A reader of the instructions each of the chain's three processes has run (started under
    ``valgrind --tool=callgrind``, :data:`CALLGRIND`, writing to ``out``), in millions: each
    read has callgrind dump (which zeroes its counters) and adds up the dumps so far.
    Deterministic where CPU time is not: a shared machine's load does not move it. ``keep``:
    a folder the dumps are moved to (``LABEL.HOP.N``, for ``callgrind_annotate``)."""
    pids = {name: process.pid for name, process in chain.processes.items()}
    totals = dict.fromkeys(pids, 0)
    dumps = itertools.count()

    def read() -> dict[str, float]:
        for name, pid in pids.items():
            before = set(out.glob(f"cg.{pid}.*"))
            subprocess.run(
                ["callgrind_control", "-d", str(pid)], check=True, capture_output=True, timeout=300
            )
            for path in set(out.glob(f"cg.{pid}.*")) - before:
                for line in path.read_text(errors="replace").splitlines():
                    if line.startswith("totals:"):
                        totals[name] += int(line.split()[1])
                if keep is None:
                    path.unlink()
                else:
                    path.rename(keep / f"{label}.{name}.{next(dumps)}")
        return {name: total / 1e6 for name, total in totals.items()}

    return read


CALLGRIND = ("valgrind", "--tool=callgrind", "--callgrind-out-file={out}/cg.%p")
"""``--callgrind``: each process's command line starts with these words."""


async def hop_records(session: aiohttp.ClientSession, chain: Chain) -> dict[str, list[Any]]:
    """Every record of each hop."""
    found = {}
    for hop, (server, path) in HOPS.items():
        async with session.get(f"{chain.url(server)}{path}") as response:
            found[hop] = (await response.json())["records"]
    return found


async def overload(chain: Chain, args: argparse.Namespace) -> dict[str, float]:
    """``--rate`` requests a second for ``--duration`` s, each giving up at ``--deadline``;
    then, once every handler has ended (bounded), the figures of what ran past the deadline."""
    deadlines: dict[str, float] = {}
    statuses: dict[str, int] = {}
    url = f"{chain.url('gateway')}/work?seconds={args.work}"
    headers = {"x-request-timeout": str(args.deadline)}
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(request_id: str) -> None:
            deadlines[request_id] = time.monotonic() + args.deadline
            try:
                async with asyncio.timeout(args.deadline + GRACE):
                    async with session.get(f"{url}&id={request_id}", headers=headers) as r:
                        await r.read()
                        statuses[request_id] = r.status
            except (TimeoutError, aiohttp.ClientError):
                statuses[request_id] = 0  # the client gave up

        count = max(1, round(args.rate * args.duration))
        start = time.monotonic()
        tasks = []
        for index in range(count):
            await asyncio.sleep(max(0.0, start + index / args.rate - time.monotonic()))
            tasks.append(asyncio.create_task(one(f"r{index}")))
        await asyncio.gather(*tasks)
        # Wait until every handler at every hop has ended (stock: the queries run on).
        stop = time.monotonic() + args.work + 30
        while True:
            found = await hop_records(session, chain)
            running = sum(r["ended"] is None for rs in found.values() for r in rs)
            if not running or time.monotonic() > stop:
                break
            await asyncio.sleep(0.2)
    below = dict.fromkeys(deadlines, 0.0)
    last = dict.fromkeys(deadlines, -math.inf)
    for hop, rs in found.items():
        for record in rs:
            deadline = deadlines.get(record["id"])
            if deadline is None or record["ended"] is None:
                continue
            after = record["ended"] - deadline
            last[record["id"]] = max(last[record["id"]], after)
            if hop in BELOW:
                below[record["id"]] += max(0.0, after)
    stopped = sorted(last.values())
    return {
        "below_s_per_request": statistics.fmean(below.values()),
        "stopped_p50_ms": stopped[len(stopped) // 2] * 1e3,
        "stopped_p99_ms": stopped[min(len(stopped) - 1, int(len(stopped) * 0.99))] * 1e3,
        "answered_504": float(sum(status == 504 for status in statuses.values())),
        "requests": float(len(deadlines)),
        "still_running": float(running),
    }


async def cpu_bursts(
    chains: dict[str, Chain],
    args: argparse.Namespace,
    readers: dict[str, Callable[[], dict[str, float]]] | None = None,
) -> dict[str, float]:
    """CPU time of each chain's three processes per fast request, in bursts that alternate
    between the chains; the medians, and the median of the per-burst ratios. ``readers``:
    see :func:`bursts` (then the ``_us`` figures are instructions per request)."""
    per_request, per_hop, not_ok = await bursts(chains, args, readers)
    ratios = [p / n for p, n in zip(per_request["propagated"], per_request["none"], strict=True)]
    layers = [p / n for p, n in zip(per_request["layers"], per_request["none"], strict=True)]
    over = [p / n for p, n in zip(per_request["propagated"], per_request["layers"], strict=True)]
    return {
        "none_cpu_us": statistics.median(per_request["none"]),
        "propagated_cpu_us": statistics.median(per_request["propagated"]),
        "layers_cpu_us": statistics.median(per_request["layers"]),
        "ratio": statistics.median(ratios),
        "layers_ratio": statistics.median(layers),  # the frameworks' layers alone
        "over_layers_ratio": statistics.median(over),  # the adapters' own work
        "not_ok": float(sum(not_ok.values())),
        # Each process's share (us per request, the median burst): where a cost lies.
        **{f"{key}_us".replace(" ", "_"): statistics.median(v) for key, v in per_hop.items()},
    }


async def bursts(
    chains: dict[str, Chain],
    args: argparse.Namespace,
    readers: dict[str, Callable[[], dict[str, float]]] | None = None,
) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, int]]:
    """``--bursts`` bursts of fast requests per chain, alternating between the chains (after
    one burst each to warm up): each burst's CPU us per request, of the three processes and
    of each ("name hop"), and how many answers were not 200. ``readers``: what is counted
    instead of CPU seconds, per chain (:func:`chain_instructions`: millions of
    instructions, so the figures are instructions per request)."""
    cpu = readers or {name: chain_cpu(chain) for name, chain in chains.items()}
    per_request: dict[str, list[float]] = {name: [] for name in chains}
    per_hop: dict[str, list[float]] = {}  # "none gateway": [us per request, per burst], ...
    not_ok = dict.fromkeys(chains, 0)
    per_burst = max(1, args.fast // args.bursts)
    headers = {"x-request-timeout": "30"}
    connector = aiohttp.TCPConnector(limit=args.concurrency * len(chains))
    async with aiohttp.ClientSession(connector=connector) as session:

        async def burst(name: str) -> float:
            left = iter(range(per_burst))
            url = f"{chains[name].url('gateway')}/work?seconds=0"

            async def worker() -> None:
                for _ in left:
                    async with session.get(url, headers=headers) as response:
                        await response.read()
                        not_ok[name] += response.status != 200

            before = cpu[name]()
            await asyncio.gather(*(worker() for _ in range(args.concurrency)))
            after = cpu[name]()
            for hop in after:
                per_hop.setdefault(f"{name} {hop}", []).append(
                    (after[hop] - before[hop]) / per_burst * 1e6
                )
            return (sum(after.values()) - sum(before.values())) / per_burst * 1e6

        names = list(chains)
        for name in names:  # warm up: connections, imports, caches
            await burst(name)
        per_hop.clear()
        for index in range(args.bursts):
            for name in names if index % 2 == 0 else names[::-1]:
                per_request[name].append(await burst(name))
    return per_request, per_hop, not_ok


def run_round(index: int, args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One round: the overload on stock and on propagated (the order alternating), then the
    CPU bursts, propagated against none."""
    figures = {}
    load = os.getloadavg()[0]  # the machine's 1-minute load average: how shared it was
    order = ["stock", "propagated"] if index % 2 == 0 else ["propagated", "stock"]
    for mode in order:
        with started(mode, args.loop_mode, output=subprocess.DEVNULL) as chain:
            figures[mode] = asyncio.run(overload(chain, args))
    with (
        started("none", args.loop_mode, output=subprocess.DEVNULL) as none,
        started("layers", args.loop_mode, output=subprocess.DEVNULL) as layers,
        started("propagated", args.loop_mode, output=subprocess.DEVNULL) as propagated,
    ):
        chains = {"none": none, "layers": layers, "propagated": propagated}
        figures["cpu"] = asyncio.run(cpu_bursts(chains, args))
    figures["cpu"]["load_1m_at_start"] = load
    return figures


def callgrind_round(args: argparse.Namespace) -> dict[str, float]:
    """``--callgrind``: the CPU bursts with each process under callgrind, instructions counted
    instead of CPU time (each process some 50 times slower: use small counts)."""
    with tempfile.TemporaryDirectory(prefix="chain-callgrind-") as scratch:
        out = Path(scratch)
        wrap = tuple(word.format(out=out) for word in CALLGRIND)
        with contextlib.ExitStack() as stack:
            chains = {
                mode: stack.enter_context(started(
                    mode, args.loop_mode, output=subprocess.DEVNULL, ready_within=600.0,
                    wrap=wrap, root=Path(args.base) if args.base else ROOT,
                ))
                for mode in ("none", "layers", "propagated")
            }  # fmt: skip
            keep = Path(args.out) / "callgrind" if args.keep_dumps else None
            if keep is not None:
                keep.mkdir(parents=True, exist_ok=True)
            readers = {
                name: chain_instructions(chain, out, keep, name) for name, chain in chains.items()
            }
            return asyncio.run(cpu_bursts(chains, args, readers))


def spread(values: list[float], digits: int = 1) -> str:
    """Median (min to max)."""
    return (
        f"{statistics.median(values):,.{digits}f} "
        f"({min(values):,.{digits}f} to {max(values):,.{digits}f})"
    )


def table(raw: dict[str, list[dict[str, float]]], args: argparse.Namespace) -> list[str]:
    """The markdown tables: medians over the rounds (min to max)."""

    def col(mode: str, metric: str, digits: int = 1) -> str:
        return spread([r[metric] for r in raw[mode]], digits)

    rows = [
        f"Overload: {args.rate:g} requests/s for {args.duration:g} s, each with a "
        f"{args.deadline:g} s deadline and a {args.work:g} s backend query"
        f"{' (loop mode)' if args.loop_mode else ''}; medians over {args.rounds} rounds "
        "(min to max).",
        "",
        "| figure | stock | propagated | goal |",
        "|---|---|---|---|",
        "| handler-seconds below the gateway after the client's deadline, per request | "
        f"{col('stock', 'below_s_per_request', 3)} | "
        f"{col('propagated', 'below_s_per_request', 3)} | 0 |",
        "| last handler ended, ms after the client's deadline, p50 | "
        f"{col('stock', 'stopped_p50_ms')} | {col('propagated', 'stopped_p50_ms')} | |",
        "| last handler ended, ms after the client's deadline, p99 | "
        f"{col('stock', 'stopped_p99_ms')} | {col('propagated', 'stopped_p99_ms')} | <= 20 |",
        "| answered 504 before the client gave up (of requests) | "
        f"{col('stock', 'answered_504', 0)} | {col('propagated', 'answered_504', 0)} | |",
        "",
        f"CPU per request meeting its deadline ({args.fast} requests, {args.concurrency} at a "
        f"time, {args.bursts} alternating bursts), the three processes' every thread:",
        "",
        "| none, us | layers, us | propagated, us | propagated / none | goal |",
        "|---|---|---|---|---|",
        f"| {col('cpu', 'none_cpu_us')} | {col('cpu', 'layers_cpu_us')} | "
        f"{col('cpu', 'propagated_cpu_us')} | {col('cpu', 'ratio', 3)} | <= 1.03 |",
        "",
        "Layers that do nothing in the adapters' places (the frameworks' charge for a layer), "
        f"against none: {col('cpu', 'layers_ratio', 3)}; propagated against them (the "
        f"adapters' own work): {col('cpu', 'over_layers_ratio', 3)}.",
        "",
        "Each process's share, us per request:",
        "",
        "| process | none | layers | propagated |",
        "|---|---|---|---|",
        *(
            f"| {hop} | {col('cpu', f'none_{hop}_us')} | {col('cpu', f'layers_{hop}_us')} | "
            f"{col('cpu', f'propagated_{hop}_us')} |"
            for hop in ("gateway", "service", "backend")
        ),
    ]
    return rows


def metrics_cost(args: argparse.Namespace) -> dict[str, Any]:
    """``--metrics-cost``: the CPU per fast request of the propagated chain with its deadlines
    instrumented (``on``: :func:`aiowheel.otel.instrument_deadlines` and the SDK's Prometheus
    reader in each process, never scraped during the bursts) against without (``off``), and,
    with ``--base DIR``, against the same chain run from another checkout's code (``base``:
    the code before the instruments, so ``off`` against it is what their one check costs).
    Per round, the chains run side by side and their bursts alternate; the figures are the
    median burst of each round, the per-burst ratios' median, and over the rounds, medians
    and the worst."""
    rounds: list[dict[str, float]] = []
    for index in range(args.rounds):
        with contextlib.ExitStack() as stack:
            chains = {
                "off": stack.enter_context(started("propagated", output=subprocess.DEVNULL)),
                "on": stack.enter_context(
                    started("propagated", output=subprocess.DEVNULL, metrics=True)
                ),
            }
            if args.base:
                chains["base"] = stack.enter_context(
                    started("propagated", output=subprocess.DEVNULL, root=Path(args.base))
                )
            order = list(chains) if index % 2 == 0 else list(chains)[::-1]
            per_request, per_hop, not_ok = asyncio.run(bursts({n: chains[n] for n in order}, args))
        figures = {f"{name}_cpu_us": statistics.median(v) for name, v in per_request.items()}
        figures.update(
            {f"{key}_us".replace(" ", "_"): statistics.median(v) for key, v in per_hop.items()}
        )
        figures["on_over_off"] = statistics.median(
            [a / b for a, b in zip(per_request["on"], per_request["off"], strict=True)]
        )
        if args.base:
            figures["off_over_base"] = statistics.median(
                [a / b for a, b in zip(per_request["off"], per_request["base"], strict=True)]
            )
        figures["not_ok"] = float(sum(not_ok.values()))
        rounds.append(figures)
        shown = ", ".join(f"{k}={v:,.3f}" for k, v in figures.items())
        print(f"round {index + 1}/{args.rounds}: {shown}", flush=True)
    summary = {
        key: {
            "median": statistics.median(r[key] for r in rounds),
            "min": min(r[key] for r in rounds),
            "max": max(r[key] for r in rounds),
        }
        for key in rounds[0]
    }
    return {"rounds": rounds, "summary": summary}


DASHBOARD_PHASES = ((0.0, 0.05), (1 / 3, None), (2 / 3, 0.05))
"""The dashboard run's thirds: the backend's query 50 ms, then ``--work`` s for one request
in three (the backend turns slow), then 50 ms again."""


BUDGETS = (0.25, 0.5, 1.0, 2.0)
"""The dashboard run's budgets, in ``--deadline`` s: four sizes, in turn."""


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One hop's ``/metrics``, over HTTP as Prometheus scrapes it: every sample, by name and
    labels (the OpenTelemetry scope's left out)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(
            (k, v) for k, v in sample.labels.items() if not k.startswith("otel_scope")
        ))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }  # fmt: skip


async def dashboard_load(chain: Chain, args: argparse.Namespace) -> dict[str, Any]:
    """``--rate`` requests a second for ``--duration`` s through the instrumented chain, their
    budgets ``--deadline`` s times each of :data:`BUDGETS` in turn, the backend slow in the
    middle third (:data:`DASHBOARD_PHASES`); every hop's metrics scraped once a second
    meanwhile."""
    url = f"{chain.url('gateway')}/work"
    series: list[dict[str, Any]] = []
    statuses: list[int] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    start = time.monotonic()

    async def scraper() -> None:
        while True:
            at = time.monotonic() - start
            found = {
                hop: await asyncio.to_thread(scrape, port) for hop, port in chain.metrics.items()
            }
            series.append({"t": at, "hops": found})
            await asyncio.sleep(1.0)

    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(index: int, work: float) -> None:
            deadline = args.deadline * BUDGETS[index % len(BUDGETS)]
            headers = {"x-request-timeout": f"{deadline:g}"}
            try:
                async with asyncio.timeout(deadline + GRACE):
                    async with session.get(
                        f"{url}?seconds={work}&id=d{index}", headers=headers
                    ) as r:
                        await r.read()
                        statuses.append(r.status)
            except (TimeoutError, aiohttp.ClientError):
                statuses.append(0)

        watching = asyncio.create_task(scraper())
        count = max(1, round(args.rate * args.duration))
        tasks = []
        for index in range(count):
            at = index / args.rate
            await asyncio.sleep(max(0.0, start + at - time.monotonic()))
            phase = [w for since, w in DASHBOARD_PHASES if at >= since * args.duration][-1]
            work = (args.work if index % 3 == 0 else 0.05) if phase is None else phase
            tasks.append(asyncio.create_task(one(index, work)))
        await asyncio.gather(*tasks)
        await asyncio.sleep(1.5)  # the last scrapes see the last requests
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    final = {hop: scrape(port) for hop, port in chain.metrics.items()}
    return {"series": series, "final": final, "statuses": statuses}


def draw_dashboard(run: dict[str, Any], args: argparse.Namespace, path: Path) -> None:
    """The run as an operator's dashboard shows it, from the scraped metrics alone: the budget
    requests arrive with at each hop (the histogram's cumulative buckets), and requests missed
    and met per second at each hop over time (the counters' rates)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hops = ("gateway", "service", "backend")
    colours = {"gateway": "tab:blue", "service": "tab:orange", "backend": "tab:green"}
    figure, (budgets, misses) = plt.subplots(1, 2, figsize=(12, 6))
    for hop in hops:
        buckets: dict[float, float] = {}
        for (name, labels), value in run["final"][hop].items():
            if name == "aiowheel_deadline_budget_seconds_bucket":
                le = float(dict(labels)["le"])
                buckets[le] = buckets.get(le, 0.0) + value
        edges = sorted(edge for edge in buckets if math.isfinite(edge))
        total = buckets.get(math.inf, 0.0) or 1.0
        sums = [v for (n, _), v in run["final"][hop].items()
                if n == "aiowheel_deadline_budget_seconds_sum"]  # fmt: skip
        mean = sum(sums) / total
        budgets.step(edges, [buckets[e] / total for e in edges], where="post",
                     label=f"{hop} (mean {mean * 1e3:,.1f} ms)", color=colours[hop])  # fmt: skip
    budgets.set_xscale("log")
    budgets.set_xlabel("budget at arrival, s (histogram bucket upper bounds)")
    budgets.set_ylabel("share of requests at or under it")
    budgets.set_title("aiowheel_deadline_budget_seconds, by aiowheel_hop")
    budgets.legend()
    budgets.grid(alpha=0.3)

    def count(sample: dict[Any, float], outcome: str) -> float:
        return sum(
            value
            for (name, labels), value in sample.items()
            if name == "aiowheel_deadline_requests_total"
            and dict(labels).get("aiowheel_deadline_outcome") == outcome
        )

    series = run["series"]
    for hop in hops:
        times, missed, met, cancelled = [], [], [], []
        for before, after in itertools.pairwise(series):
            span = after["t"] - before["t"]
            times.append(after["t"])
            cancelled.append(
                (count(after["hops"][hop], "cancelled") - count(before["hops"][hop], "cancelled"))
                / span
            )
            missed.append(
                (count(after["hops"][hop], "missed") - count(before["hops"][hop], "missed")) / span
            )
            met.append(
                (count(after["hops"][hop], "met") - count(before["hops"][hop], "met")) / span
            )
        misses.plot(times, missed, color=colours[hop], label=f"{hop} missed")
        misses.plot(times, met, color=colours[hop], linestyle=":", label=f"{hop} met")
        misses.plot(times, cancelled, color=colours[hop], linestyle="-.", linewidth=0.8,
                    label=f"{hop} cancelled (its caller gave up first)")  # fmt: skip
    third = args.duration / 3
    misses.axvspan(third, 2 * third, color="grey", alpha=0.12, label="backend slow")
    misses.set_xlabel("seconds into the run")
    misses.set_ylabel("requests / s")
    misses.set_title("rate(aiowheel_deadline_requests_total), by hop and outcome")
    misses.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    misses.grid(alpha=0.3)
    figure.suptitle(
        f"bench.chain --dashboard: {args.rate:g} req/s for {args.duration:g} s, budgets "
        f"{', '.join(f'{args.deadline * b:g}' for b in BUDGETS)} s in turn;\nthe backend's "
        f"query {args.work:g} s for one request in three in the middle third; drawn from each "
        "hop's /metrics, scraped once a second",
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chain", description=__doc__)
    parser.add_argument("--rate", type=float, default=20.0, help="overload requests a second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of overload")
    parser.add_argument("--work", type=float, default=5.0, help="the backend query, s")
    parser.add_argument("--deadline", type=float, default=1.0, help="the client's deadline, s")
    parser.add_argument("--fast", type=int, default=2000, help="fast requests per chain")
    parser.add_argument("--bursts", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loop-mode", action="store_true", help="each process on loop mode")
    parser.add_argument("--quick", action="store_true", help="1 round, small counts")
    parser.add_argument("--out", default="bench/results")
    parser.add_argument(
        "--metrics-cost", action="store_true",
        help="CPU per request with the deadlines instrumented against without, instead",
    )  # fmt: skip
    parser.add_argument(
        "--base",
        help="--metrics-cost: a checkout to compare 'off' against; --callgrind: the checkout "
        "the three processes run from",
    )
    parser.add_argument(
        "--callgrind", action="store_true",
        help="the CPU bursts only, each process under callgrind: instructions per request",
    )  # fmt: skip
    parser.add_argument(
        "--keep-dumps", action="store_true", help="--callgrind: keep the dumps in OUT/callgrind"
    )
    parser.add_argument(
        "--dashboard", action="store_true",
        help="a run through the instrumented chain, drawn from its metrics, instead",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.quick:
        args.rate, args.duration, args.work, args.fast, args.bursts, args.rounds = (
            10.0, 1.0, 2.0, 100, 2, 1
        )  # fmt: skip
    counts = (args.fast, args.bursts, args.concurrency, args.rounds)
    if min(counts) < 1 or min(args.rate, args.duration, args.deadline) <= 0 or args.work < 0:
        parser.error("every count must be >= 1, --rate, --duration and --deadline > 0")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.metrics_cost:
        cost = metrics_cost(args)
        (out / "chain-metrics-cost.json").write_text(json.dumps(cost, indent=2))
        print(json.dumps(cost["summary"], indent=2))
        print(f"wrote {out / 'chain-metrics-cost.json'}")
        return 1 if any(r["not_ok"] for r in cost["rounds"]) else 0
    if args.callgrind:
        counted = callgrind_round(args)
        (out / "chain-callgrind.json").write_text(json.dumps({"args": vars(args), **counted}))
        print(json.dumps(counted, indent=2))
        return 1 if counted["not_ok"] else 0
    if args.dashboard:
        with started("propagated", args.loop_mode, output=subprocess.DEVNULL, metrics=True) as c:
            run = asyncio.run(dashboard_load(c, args))
        (out / "chain-dashboard.json").write_text(json.dumps(
            {"args": vars(args), "statuses": run["statuses"], "points": len(run["series"])}
        ))  # fmt: skip
        draw_dashboard(run, args, out / "chain-dashboard.png")
        print(f"wrote {out / 'chain-dashboard.png'}")
        return 0
    raw: dict[str, list[dict[str, float]]] = {}
    for index in range(args.rounds):
        for name, figures in run_round(index, args).items():
            raw.setdefault(name, []).append(figures)
            shown = ", ".join(f"{k}={v:,.3f}" for k, v in figures.items())
            print(f"round {index + 1}/{args.rounds} {name}: {shown}", flush=True)
    print()
    print("\n".join(table(raw, args)))
    document = {"python": sys.version.split()[0], "args": vars(args), "raw": raw}
    (out / "chain.json").write_text(json.dumps(document, indent=2))
    print(f"\nwrote {out / 'chain.json'}")
    # Checked: every handler ended (the drain is bounded), every fast request answered 200.
    # The timings are measured, not judged (a shared machine).
    failed = [
        f"{name}: {metric}"
        for name, runs in raw.items()
        for metric in ("still_running", "not_ok")
        if any(r.get(metric) for r in runs)
    ]
    if failed:
        print(f"FAILED: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
