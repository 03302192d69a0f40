"""OpenTelemetry metrics of a loop's timers: pending, fired, cancelled, and the loop's lag.

Optional: ``pip install 'aiowheel[otel]'`` brings ``opentelemetry-api``; nothing of it is
imported unless this module is. With an SDK and an exporter configured (Prometheus, OTLP...),
one call per loop::

    aiowheel.otel.instrument()            # inside the running loop, after the SDK is set up

The instruments, attributed by ``loop`` (the loop's id, so several loops of a process stay
apart) and whatever ``attributes`` add:

- ``aiowheel.timers.pending`` (observable gauge): timers pending on the loop's wheels now;
- ``aiowheel.timers.fired`` and ``aiowheel.timers.cancelled`` (observable counters): since the
  loop's wheels began;
- ``aiowheel.loop.lag`` (histogram, seconds): how late each wheel pass that fired timers ran
  (one sample per pass; :func:`aiowheel.loop_lag` weighs them by timers fired).

The counts are read when the SDK collects (O(1) per wheel); the histogram records once per
pass. For Prometheus, the SDK's ``PrometheusMetricReader`` exposes them as
``aiowheel_timers_pending``, ``aiowheel_timers_fired_total``, ``aiowheel_timers_cancelled_total``
and ``aiowheel_loop_lag_seconds_bucket`` (see the "Seeing your timers" page).
"""

from ._deadlines._metrics import (
    DeadlineInstrumentation,
    Instrumentation,
    instrument,
    instrument_deadlines,
)

__all__ = [
    "DeadlineInstrumentation",
    "Instrumentation",
    "instrument",
    "instrument_deadlines",
]
