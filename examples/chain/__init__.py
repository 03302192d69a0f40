"""Deadlines across services: a gateway, a service and a backend, each its own process.

    client --x-request-timeout--> gateway (FastAPI, uvicorn)
           --x-request-timeout--> service (aiohttp)
           --grpc-timeout-------> backend (grpc.aio)

``python -m examples.chain`` starts the three (``examples/chain/run.py``). Each hop records,
per request id, when its handler started, when its ``finally`` ran and the budget it saw
(``aiowheel.time_left()``), and serves them: ``GET /stats`` on the gateway and the service,
the ``Stats`` method on the backend (also ``GET /backend/stats`` on the service).

Modes (``--mode``, the same for the three processes):

- ``propagated``: aiowheel's deadlines at every hop, the caller's deadline passed on
  (``aiowheel.asgi.DeadlineMiddleware``, ``aiowheel.httpx.DeadlineTransport``,
  ``aiowheel.aiohttp.deadline_middleware``, ``aiowheel.grpc.PropagateDeadline``,
  ``aiowheel.grpc.DeadlineInterceptor``);
- ``stock``: each hop its own fixed timeout (``asyncio.timeout`` around its handler, a fixed
  timeout on its outgoing call), nothing passed on: the way most services do it today;
- ``none``: no deadline machinery at all (the reference a deadline's cost is measured
  against).

This module is what the three share: the modes, their timeouts, the records.
"""

from __future__ import annotations

import asyncio
import collections
import os
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiowheel

MODES = ("propagated", "stock", "none", "layers")
"""``layers``: the adapters' places taken by layers that do nothing (a pure ASGI middleware, an
httpx transport that forwards, an aiohttp middleware, gRPC interceptors that pass the call on):
what the frameworks charge for a layer there at all, the floor under any adapter."""
HEADER = "x-request-timeout"
TIMEOUT = 10.0
"""propagated: each hop's own deadline when its caller sends none (a caller's caps it)."""
STOCK_TIMEOUTS = {"gateway": 10.0, "service": 8.0, "backend": 6.0}
"""stock: each hop's own fixed timeout (its handler's, and its outgoing call's)."""
SERVICE = "chain.Backend"
"""The backend's gRPC service name: ``/chain.Backend/Work``, ``/Stream``, ``/Stats``."""


class Records:
    """Per request: when a hop's handler started and ended (``time.monotonic()``, one clock
    for every process of the machine), the budget it saw, and how it ended."""

    def __init__(self, keep: int = 100_000) -> None:
        self.items: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        """The last ``keep`` records (a long-running example's memory stays bounded)."""

    def start(self, request_id: str, what: str) -> dict[str, Any]:
        """A new record, started now."""
        record: dict[str, Any] = {
            "id": request_id,
            "what": what,
            "started": time.monotonic(),
            "ended": None,
            "budget": None,
            "outcome": "running",
        }
        self.items.append(record)
        return record

    @staticmethod
    def end(record: dict[str, Any], exc: BaseException | None) -> None:
        """Close ``record`` (from a ``finally``): now, and how (``ok``, ``cancelled``,
        or the exception's class name)."""
        record["ended"] = time.monotonic()
        if exc is None:
            record["outcome"] = "ok"
        elif isinstance(exc, asyncio.CancelledError):
            record["outcome"] = "cancelled"
        else:
            record["outcome"] = type(exc).__name__

    def stats(self, ids: set[str] | None = None) -> dict[str, Any]:
        """The records (of ``ids`` only, if given), this process's CPU seconds (all its
        threads: ``time.process_time()``), the monotonic clock now, and the running loop's
        class and whether it is a loop-mode loop (its timers on a wheel)."""
        records = list(self.items) if ids is None else [r for r in self.items if r["id"] in ids]
        loop = asyncio.get_running_loop()
        return {
            "records": records,
            "cpu": time.process_time(),
            "now": time.monotonic(),
            "loop": type(loop).__name__,
            "loop_mode": aiowheel.timer_of(loop) is not None,
        }


def budget_seen(mode: str) -> float | None:
    """The seconds left this hop sees: :func:`aiowheel.time_left` (the propagated deadline,
    or the hop's own ``asyncio.timeout`` in stock mode; None in ``none`` mode). Read in every
    mode, so that what it costs is no part of a mode's cost."""
    return aiowheel.time_left()


METRICS_PORT = "CHAIN_METRICS_PORT"
"""The environment variable naming the port a hop serves its metrics on (none: no metrics)."""


def serve_metrics(hop: str) -> None:
    """With ``CHAIN_METRICS_PORT`` set: this process's deadlines instrumented
    (:func:`aiowheel.otel.instrument_deadlines`) and served as an operator's Prometheus scrapes
    them, the SDK's Prometheus reader on ``http://127.0.0.1:PORT/metrics`` (``service.name``:
    ``hop``). Without it, nothing: the deadlines are not instrumented."""
    port = os.environ.get(METRICS_PORT)
    if not port:
        return
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.resources import Resource
    from prometheus_client import start_http_server

    import aiowheel.otel

    start_http_server(int(port), addr="127.0.0.1")
    provider = MeterProvider(
        resource=Resource({"service.name": hop}), metric_readers=[PrometheusMetricReader()]
    )
    # Not the global provider: FastAPI (0.165) records its own per-request metrics through the
    # SDK once one is set, a cost of its own, which would blur what aiowheel's cost here.
    aiowheel.otel.instrument_deadlines(meter_provider=provider)


def run(main: Callable[[], Coroutine[Any, Any, None]], loop_mode: bool) -> None:
    """Run ``main()`` on a stock asyncio loop, or on aiowheel's loop mode (every timer of the
    process, gRPC's and aiohttp's included, on the wheel)."""
    if loop_mode:
        aiowheel.run(main())
    else:
        asyncio.run(main())


async def until_signalled() -> None:
    """Return on SIGTERM or SIGINT."""
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
