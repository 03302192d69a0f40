"""What instrumenting the deadlines costs a request, in process: ``python -m bench.deadline_metrics
[--requests 20000] [--rounds 7] [--out DIR]``.

The chain bench (``python -m bench.chain --metrics-cost``) measures the whole chain's CPU per
request with :func:`aiowheel.otel.instrument_deadlines` on and off, but on a shared machine its
rounds spread by several percent, more than the cost it looks for. This measures the cost
itself: ``DeadlineMiddleware`` over an ASGI app that answers at once (a matched route, as
FastAPI leaves it in the scope; an inbound budget header), its CPU time (``process_time``) per
request, off, on (the default: histograms sampled at 50 a second per route), and on with every
request recorded (``samples_per_second=None``), alternating round by round; and a client
adapter's report of the budget it sent. Figures: medians over the rounds (min, max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import timeit
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import aiowheel.otel
from aiowheel._deadlines._seen import sent
from aiowheel.asgi import DeadlineMiddleware


class _Route:
    path = "/items/{item_id}"  # FastAPI's matched route, as it leaves it in the scope


async def _app(scope: Any, receive: Any, send: Any) -> None:
    scope["route"] = _Route
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


async def _receive() -> dict[str, Any]:
    return {"type": "http.request"}


async def _send(message: Any) -> None:
    pass


def per_request(requests: int) -> float:
    """CPU us per request of the middleware over :func:`_app`, in a fresh loop."""
    middleware = DeadlineMiddleware(_app, timeout=5, header="x-request-timeout")

    async def main() -> float:
        start = time.process_time()
        for i in range(requests):
            scope = {"type": "http", "method": "GET", "path": f"/items/{i}",
                     "headers": [(b"x-request-timeout", b"2.5")]}  # fmt: skip
            await middleware(scope, _receive, _send)
        return (time.process_time() - start) / requests * 1e6

    return asyncio.run(main())


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.deadline_metrics", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args(argv)
    if min(args.requests, args.rounds) < 1:
        parser.error("--requests and --rounds must be >= 1")
    # A reader, never collected here: an SDK without one would skip the recording's work.
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    modes: dict[str, float | bool | None] = {"off": False, "on": 50.0, "on_every_request": None}
    raw: dict[str, list[float]] = {mode: [] for mode in modes}
    per_request(max(1, args.requests // 10))  # warm up
    for index in range(args.rounds):
        order = list(modes) if index % 2 == 0 else list(modes)[::-1]
        for mode in order:
            rate = modes[mode]
            instrumented = None
            if rate is not False:
                assert not isinstance(rate, bool)
                instrumented = aiowheel.otel.instrument_deadlines(
                    meter_provider=provider, samples_per_second=rate
                )
            try:
                raw[mode].append(per_request(args.requests))
            finally:
                if instrumented is not None:
                    instrumented.close()
    instrumented = aiowheel.otel.instrument_deadlines(meter_provider=provider)
    try:
        calls = 100_000
        raw["client_sent_on"] = [
            timeit.timeit(lambda: sent("httpx", 1.0), number=calls) / calls * 1e6
            for _ in range(args.rounds)
        ]
    finally:
        instrumented.close()
    summary = {
        mode: {"median": statistics.median(v), "min": min(v), "max": max(v)}
        for mode, v in raw.items()
    }
    for mode, figures in summary.items():
        print(f"{mode}: {figures['median']:.2f} us ({figures['min']:.2f} to {figures['max']:.2f})")
    added = summary["on"]["median"] - summary["off"]["median"]
    print(f"on adds {added:.2f} us per request at a server hop")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    document = {"python": sys.version.split()[0], "compiled": aiowheel.COMPILED,
                "args": vars(args), "raw": raw, "summary": summary}  # fmt: skip
    (out / "deadline-metrics.json").write_text(json.dumps(document, indent=2))
    print(f"wrote {out / 'deadline-metrics.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
