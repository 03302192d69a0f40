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

The request deadlines and purgatories, once per process (every adapter, every loop)::

    aiowheel.otel.instrument_deadlines(purgatories={"orders": orders})

Per kind of hop (``aiowheel.hop``: ``asgi``, ``aiohttp``, ``grpc``) and route (``http.route``,
the route's template, never the raw path, and ``http.request.method``; for gRPC
``rpc.service`` and ``rpc.method``):

- ``aiowheel.deadline.requests`` (counter): requests ended, by ``aiowheel.deadline.outcome``
  (``met``; ``missed``: the deadline ended it; ``cancelled``: from outside first, the client
  gone) and ``aiowheel.deadline.source`` (``caller``:
  the budget the caller sent set it; ``own``: the route's own deadline);
- ``aiowheel.deadline.budget`` (histogram, seconds): the deadline a request arrived with
  (a sample: at most ``samples_per_second``, 50, per hop and route; the counts are exact);
- ``aiowheel.deadline.stopped`` (counter, seconds): handler-seconds of the requests a deadline
  ended, from arrival to their end;
- ``aiowheel.deadline.budget_sent`` (histogram, seconds) and ``aiowheel.deadline.refused``
  (counter): the budget a client adapter sent downstream, and the calls it did not send for
  want of budget, by ``aiowheel.client`` (``httpx``, ``aiohttp``, ``grpc``) and the hop and
  route of the request they were made for.

Per purgatory (``aiowheel.purgatory``, its name), read from its stats when the SDK collects:
``aiowheel.purgatory.waiting`` (gauge), ``aiowheel.purgatory.operations`` (counter, by
``aiowheel.purgatory.outcome``: completed, expired, cancelled, failed), and with Redis signals
``aiowheel.purgatory.redis.sent``, ``.received``, ``.errors`` (by ``aiowheel.redis.operation``:
connect, publish) and ``.connected``.

Where a span is current (OpenTelemetry's ASGI, aiohttp or gRPC instrumentation outside the
deadline adapter), the request's span gets ``aiowheel.deadline.budget`` and
``aiowheel.deadline.fired``, and an event ``aiowheel.deadline.fired`` at the deadline; the
span current when a client adapter sends gets ``aiowheel.deadline.budget_sent``. Without
``instrument_deadlines()`` the request path does one check and nothing else.
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
