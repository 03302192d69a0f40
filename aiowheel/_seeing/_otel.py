"""The OpenTelemetry instruments of :mod:`aiowheel.otel` (whose docstring is the user's guide):
observable gauges and counters read from a loop's views, registered once per meter.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import metrics

from .._time._view import View, views_of
from ._census import loop_of

__all__ = ["Instrumentation", "instrument"]


class Instrumentation:
    """What :func:`instrument` set up for one loop; :meth:`close` stops it."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        meter: metrics.Meter,
        attributes: Mapping[str, str | int | float | bool],
    ) -> None:
        self._loop = weakref.ref(loop)
        self._attributes = {"loop": id(loop), **attributes}
        self._closed = False
        meter.create_observable_gauge(
            "aiowheel.timers.pending", [self._pending], unit="{timer}",
            description="timers pending on the loop's wheels",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.timers.fired", [self._fired], unit="{timer}",
            description="timers fired by the loop's wheels",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.timers.cancelled", [self._cancelled], unit="{timer}",
            description="timers cancelled on the loop's wheels",
        )  # fmt: skip
        self._lag = meter.create_histogram(
            "aiowheel.loop.lag", unit="s",
            description="how late each wheel pass that fired timers ran",
        )  # fmt: skip
        self._listened: list[View] = []
        self._listen()

    def _views(self) -> list[View]:
        loop = self._loop()
        if loop is None or self._closed:
            return []
        views = views_of(loop)
        if any(not view.listened() for view in views):
            self._listen()  # a Timer bound since
        return views

    def _listen(self) -> None:
        loop = self._loop()
        if loop is None:
            return
        for view in views_of(loop):
            if not view.listened():
                view.listen(self._record)
                self._listened.append(view)

    def _record(self, late: float, count: int) -> None:
        self._lag.record(late, self._attributes)

    def _observe(self, index: int) -> Iterable[metrics.Observation]:
        views = self._views()
        if not views and self._loop() is None:
            return []
        total = sum(view.counters()[index] for view in views)
        return [metrics.Observation(total, self._attributes)]

    def _pending(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return self._observe(0)

    def _fired(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return self._observe(1)

    def _cancelled(self, _options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return self._observe(2)

    def close(self) -> None:
        """Stop recording: the histogram is no longer fed, the gauges report nothing."""
        self._closed = True
        for view in self._listened:
            if view.listener() == self._record:
                view.listen(None)
        self._listened.clear()


def instrument(
    loop: asyncio.AbstractEventLoop | None = None,
    *,
    meter_provider: Any = None,
    attributes: Mapping[str, str | int | float | bool] | None = None,
) -> Instrumentation:
    """Report ``loop``'s timers (default: the running loop) through OpenTelemetry: the meter
    ``aiowheel`` of ``meter_provider`` (default: the global one).

    >>> aiowheel.otel.instrument(attributes={"service": "api"})
    """
    loop = loop_of(loop, "instrument()")
    if attributes is not None and not isinstance(attributes, Mapping):
        raise TypeError(
            f"instrument(): attributes must be a mapping or None, got {type(attributes).__name__}"
        )
    meter = metrics.get_meter("aiowheel", meter_provider=meter_provider)
    return Instrumentation(loop, meter, dict(attributes or {}))
