"""An empty loop iteration, stock asyncio against loop mode: what loop mode adds to every turn.

``python -m bench.empty_iteration [--rounds N] [--iterations N] [--callgrind]`` runs, on this
interpreter, ``await asyncio.sleep(0)`` ``--iterations`` times (100,000) on asyncio's own loop
and on a loop-mode loop over it, and ``loop.call_later(30, f).cancel()`` with the attribute read
at each call (the way every caller reaches it), alternating the two over ``--rounds`` (7)
fresh processes; it prints each one's median, best and worst per operation and the per-round
ratio's median, best and worst. It says first whether each loop keeps its attributes inline or
in a real dict (from 3.13 CPython keeps an instance's attributes inline only while its class's
shared keys have room: every ``self._...`` read of asyncio's loop is slower through a dict).

Wall-clock ratios of a few percent drown in a shared machine's noise; ``--callgrind`` counts
instructions instead (valgrind's callgrind: deterministic up to a few tenths of a percent),
per operation, as the difference of a run of N and of 3N operations (the start-up cancels out).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import aiowheel

_OPS = ("empty", "churn")


def _loop(kind: str) -> asyncio.AbstractEventLoop:
    return asyncio.new_event_loop() if kind == "stock" else aiowheel.new_event_loop()


def in_a_dict(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether CPython keeps ``loop``'s attributes in a real dict, not inline (seen from the
    collector, which visits the dict or the inline values)."""
    return any(isinstance(r, dict) and "_ready" in r for r in gc.get_referents(loop))


def run(kind: str, op: str, n: int) -> float:
    """Nanoseconds per operation ``op`` ("empty" or "churn"), ``n`` of them, on a new loop of
    ``kind`` ("stock" or "loop-mode")."""
    loop: asyncio.AbstractEventLoop = _loop(kind)

    async def empty() -> None:
        for _ in range(n):
            await asyncio.sleep(0)

    async def churn() -> None:
        lp = loop
        for _ in range(n):
            lp.call_later(30.0, print).cancel()

    try:
        loop.run_until_complete(asyncio.sleep(0))
        start = time.perf_counter()
        loop.run_until_complete(empty() if op == "empty" else churn())
        return (time.perf_counter() - start) / n * 1e9
    finally:
        loop.close()


def _child(kind: str, op: str, n: int, *, callgrind: bool) -> float:
    """One fresh process's figure: nanoseconds per operation, or its instruction count."""
    code = f"import bench.empty_iteration as b; print(b.run({kind!r}, {op!r}, {n}))"
    command = [sys.executable, "-c", code]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if not callgrind:
        return float(
            subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
        )
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if found is None:
        raise RuntimeError(f"callgrind printed no count:\n{done.stderr[-2000:]}")
    return float(found.group(1))


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print it; 0 when it ran."""
    parser = argparse.ArgumentParser(prog="python -m bench.empty_iteration", description=__doc__)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.iterations < 1:
        parser.error("--rounds and --iterations must be at least 1")
    if args.callgrind and shutil.which("valgrind") is None:
        parser.error("--callgrind needs valgrind on the PATH")
    kinds = ("stock", "loop-mode")
    stock, wheel = _loop("stock"), _loop("loop-mode")
    try:
        for kind, loop in zip(kinds, (stock, wheel), strict=True):
            loop.run_until_complete(asyncio.sleep(0))
            where = "a real dict" if in_a_dict(loop) else "inline"
            print(f"{sys.implementation.name} {sys.version.split()[0]} {kind}: attributes {where}")
    finally:
        stock.close()
        wheel.close()
    unit = "instructions" if args.callgrind else "ns"
    n = args.iterations
    for op in _OPS:
        figures: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(1 if args.callgrind else args.rounds):
            for kind in kinds:
                if args.callgrind:
                    a = _child(kind, op, n, callgrind=True)
                    b = _child(kind, op, 3 * n, callgrind=True)
                    figures[kind].append((b - a) / (2 * n))
                else:
                    figures[kind].append(_child(kind, op, n, callgrind=False))
        for kind in kinds:
            seen = figures[kind]
            print(
                f"{op} {kind} median {statistics.median(seen):.1f} {unit} "
                f"(best {min(seen):.1f}, worst {max(seen):.1f})"
            )
        ratios = [w / s for w, s in zip(figures["loop-mode"], figures["stock"], strict=True)]
        print(
            f"{op} loop-mode/stock median {statistics.median(ratios):.3f} "
            f"(best {min(ratios):.3f}, worst {max(ratios):.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
