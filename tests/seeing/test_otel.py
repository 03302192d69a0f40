"""aiowheel.otel: the instruments read back through the OpenTelemetry SDK's in-memory reader."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import aiowheel
import aiowheel.otel
from tests.support import Base


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def cb() -> None:
    pass


def test_pending_fired_cancelled_and_lag_read_back(base: Base) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])

    async def main() -> dict[str, list[Any]]:
        loop = asyncio.get_running_loop()
        instruments = aiowheel.otel.instrument(meter_provider=provider, attributes={"app": "t"})
        for _ in range(5):
            loop.call_later(60, cb)
        loop.call_later(60, cb).cancel()
        done = asyncio.Event()
        for _ in range(3):
            loop.call_later(0.02, cb)
        loop.call_later(0.021, done.set)
        time.sleep(0.1)  # noqa: ASYNC251  # the loop blocked: its next pass runs late
        await asyncio.wait_for(done.wait(), 10)
        seen = points(reader)
        instruments.close()
        return seen

    seen = aiowheel.run(main(), base=base)
    (pending,) = seen["aiowheel.timers.pending"]
    assert pending.value == 5 and pending.attributes["app"] == "t"
    (fired,) = seen["aiowheel.timers.fired"]
    assert fired.value >= 4
    (cancelled,) = seen["aiowheel.timers.cancelled"]
    assert cancelled.value == 2  # ours, and wait_for's timeout, cancelled when done
    (lag,) = seen["aiowheel.loop.lag"]
    assert lag.count >= 1 and lag.max >= 0.07  # the blocked pass, recorded once


def test_bad_attributes_are_refused() -> None:
    async def main() -> None:
        with pytest.raises(
            TypeError, match=r"^instrument\(\): attributes must be a mapping or None, got list$"
        ):
            aiowheel.otel.instrument(attributes=["app"])  # type: ignore[arg-type]

    aiowheel.run(main())
