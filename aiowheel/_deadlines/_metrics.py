"""The deadlines and purgatories seen through OpenTelemetry: :func:`instrument_deadlines`, whose
user's guide is :mod:`aiowheel.otel`'s docstring (this room hands that face the timers'
:func:`instrument` as well, so that the face has one room).

Why here, in the deadlines' folder, and not beside the timers' instruments in ``_seeing/``:
what it reads is a request's record (:class:`~aiowheel._deadlines._deadline.Request`: its
route, its hop, when it arrived and with what deadline) and a purgatory's stats, and
``_seeing/`` is below both folders. The request path knows nothing of it: it reports through
:mod:`aiowheel._deadlines._seen`'s one attribute, which this module sets to a
:class:`_Recorder` while instrumented (and to None again on :meth:`DeadlineInstrumentation.close`).

What a request costs when instrumented: a dict increment at its end (two for a missed one)
and, for one request in many, a histogram record (:class:`_Recorder` says why); the attributes
are made once per (hop, route, method, outcome, source), when the SDK collects, and reused
(:data:`_SHAPES` of them at most; past that they are made per collection). One loop per
thread is fine (dicts are thread-safe), though two threads adding to one count at once may
lose one, as any unlocked ``+=`` does.

A route is named by its template (``http.route``: FastAPI's matched route, aiohttp's
resource), never by the raw path; a request whose route is unknown (a 404, an ASGI app
without FastAPI's routing) has no ``http.route``. The purgatories' counts are read from their
stats when the SDK collects (observable instruments): nothing per operation.
"""

from __future__ import annotations

import time
from asyncio import CancelledError
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, final

try:
    from opentelemetry import metrics, trace
except ModuleNotFoundError as exc:  # the optional extra: a clear error, naming it
    raise ImportError(
        "aiowheel.otel needs the otel extra (opentelemetry-api): pip install 'aiowheel[otel]'"
    ) from exc

from .._purgatory._purgatory import Purgatory
from .._seeing._otel import Instrumentation, instrument
from ._deadline import Request, current
from ._seen import SEEN, Watcher
from ._settings import positive

# The timers' instruments too (:mod:`aiowheel._seeing._otel`): aiowheel.otel's one room.
__all__ = ["DeadlineInstrumentation", "Instrumentation", "instrument", "instrument_deadlines"]

BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)  # fmt: skip
"""The seconds histograms' bucket boundaries (the SDK's default ones are for milliseconds)."""

_METHODS: Final = frozenset(
    ("GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH")
)
_SHAPES: Final = 4096  # distinct attribute sets kept made; bounded even if a route is not

Attributes = dict[str, str]


def _method(raw: object) -> str:
    """``http.request.method`` as the semantic conventions bound it: a known method, or
    ``_OTHER``."""
    return raw if isinstance(raw, str) and raw in _METHODS else "_OTHER"


def _where(route: object) -> tuple[str, ...]:
    """A request's hop and route as a tuple of bounded values: ``("asgi", method, template)``,
    ``("aiohttp", method, template)`` (template "" when unknown), or ``("grpc", service,
    method)``."""
    match_info = getattr(route, "match_info", None)
    if match_info is not None:  # an aiohttp request (a mapping too: asked first)
        resource = getattr(getattr(match_info, "route", None), "resource", None)
        canonical = getattr(resource, "canonical", None)
        template = canonical if isinstance(canonical, str) else ""
        return ("aiohttp", _method(getattr(route, "method", None)), template)
    if isinstance(route, Mapping):  # an ASGI scope
        matched = getattr(route.get("route"), "path", None)  # FastAPI's matched route
        template = matched if isinstance(matched, str) else ""
        return ("asgi", _method(route.get("method")), template)
    if isinstance(route, str):  # a gRPC method's full name, /package.Service/Method
        service, _, method = route.lstrip("/").partition("/")
        return ("grpc", service, method)
    return ("?", "", "")


def _attributes(where: tuple[str, ...]) -> Attributes:
    """The semantic conventions' attributes of a hop and route (:func:`_where`)."""
    hop, first, second = where
    if hop == "grpc":
        return {"aiowheel.hop": hop, "rpc.system": "grpc", "rpc.service": first,
                "rpc.method": second}  # fmt: skip
    found = {"aiowheel.hop": hop, "http.request.method": first}
    if second:
        found["http.route"] = second
    return found


Key = tuple[str, ...]  # a point's bounded values: (hop, method or service, route or method, ...)


@final
class _Recorder(Watcher):
    """The watcher :func:`instrument_deadlines` sets: records what the request path reports.

    The counts are kept here, a dict increment per request, and read by the SDK when it
    collects (observable counters): an SDK counter's ``add`` costs tens of microseconds in
    opentelemetry-sdk 1.45 (each call cleans and hashes its attributes), several times a
    deadline's own bookkeeping. The two histograms are the SDK's own, fed a sample: at most
    ``rate`` requests a second per hop and route (every one below that), so that their cost
    per request falls as the load rises; their ``_count`` is the samples', the requests' is
    ``aiowheel.deadline.requests``."""

    __slots__ = (
        "_budget", "_interval", "_next_sample", "_refused", "_requests", "_sent", "_shapes",
        "_spans", "_stopped",
    )  # fmt: skip

    def __init__(self, meter: metrics.Meter, spans: bool, rate: float | None) -> None:
        self._spans = spans
        self._interval = 0.0 if rate is None else 1.0 / rate
        self._next_sample: dict[Key, float] = {}  # when each key's histogram takes its next sample
        self._shapes: dict[Key, Attributes] = {}
        self._requests: dict[Key, int] = {}  # (*where, outcome, source): requests
        self._stopped: dict[Key, float] = {}  # where: handler-seconds
        self._refused: dict[Key, int] = {}  # (*where, client): calls
        meter.create_observable_counter(
            "aiowheel.deadline.requests", [_delegated(lambda i: i.counts("requests"))],
            unit="{request}",
            description="requests that ended under a deadline, by outcome (met, missed, "
            "cancelled)",
        )  # fmt: skip
        self._budget = meter.create_histogram(
            "aiowheel.deadline.budget", unit="s",
            description="the deadline a request arrived with (the caller's budget or the "
            "route's own, whichever is shorter); sampled",
            explicit_bucket_boundaries_advisory=BUCKETS,
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.deadline.stopped", [_delegated(lambda i: i.counts("stopped"))], unit="s",
            description="handler-seconds of the requests a deadline ended (arrival to end)",
        )  # fmt: skip
        self._sent = meter.create_histogram(
            "aiowheel.deadline.budget_sent", unit="s",
            description="the budget a client adapter sent downstream with a call; sampled",
            explicit_bucket_boundaries_advisory=BUCKETS,
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.deadline.refused", [_delegated(lambda i: i.counts("refused"))],
            unit="{call}",
            description="calls a client adapter did not send: too little budget was left",
        )  # fmt: skip

    # -- the request path ----------------------------------------------------------------------

    def _sampled(self, key: Key) -> bool:
        """Whether this request's value goes to its histogram (:attr:`_interval` apart per
        key; always, with no rate)."""
        interval = self._interval
        if not interval:
            return True
        now = time.monotonic()
        due = self._next_sample
        if now < due.get(key, 0.0):
            return False
        if len(due) < _SHAPES or key in due:
            due[key] = now + interval
        return True

    def ended(self, request: Request, exc: BaseException | None, missed: bool) -> None:
        """Count the request (met, missed or cancelled), sample its budget at arrival, and,
        if a deadline ended it, add its handler-seconds and mark its span (fired, and the
        event at the deadline)."""
        where = _where(request.route)
        source = request.whose()
        if missed:
            outcome = "missed"
        elif isinstance(exc, CancelledError):
            outcome = "cancelled"  # from outside: the client went away, the server stopped
        else:
            outcome = "met"
        key = (*where, outcome, source)
        requests = self._requests
        requests[key] = requests.get(key, 0) + 1
        budget = request.arrived - request.started
        if self._sampled(where):
            self._budget.record(budget, self._shape(where))
        now = 0.0
        if missed:
            now = request.table.loop.time()
            stopped = self._stopped
            stopped[where] = stopped.get(where, 0.0) + max(0.0, now - request.started)
        if missed and self._spans:
            span = trace.get_current_span()
            if span.is_recording():  # open: a deadline's answer comes after this
                span.set_attribute("aiowheel.deadline.fired", True)
                # When the deadline passed, on the wall clock (now, if the budget ran out
                # before it: a BudgetExhausted from below).
                early = max(0.0, now - request.deadline)
                span.add_event(
                    "aiowheel.deadline.fired",
                    {"aiowheel.deadline.source": source},
                    timestamp=time.time_ns() - int(early * 1e9),
                )

    def started(self, request: Request) -> None:
        """The request's span (current in its task, if any) gets its budget at arrival, and
        ``fired`` False until :meth:`ended` says otherwise: set now, because a server's
        instrumentation may end the span with the response, before the request ends here."""
        if self._spans:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute("aiowheel.deadline.budget", request.arrived - request.started)
                span.set_attribute("aiowheel.deadline.fired", False)

    @staticmethod
    def _client(client: str) -> Key:
        """The key of a call by ``client``: the hop and route of the request it is made for
        (empty outside one), and the client."""
        request = current.get()
        return (*(_NOWHERE if request is None else _where(request.route)), client)

    def sent(self, client: str, seconds: float) -> None:
        """Sample the budget sent downstream (and put it on the current span: the client's)."""
        key = self._client(client)
        if self._sampled(key):
            self._sent.record(seconds, self._shape(key))
        if self._spans:
            span = trace.get_current_span()
            if span.is_recording():
                span.set_attribute("aiowheel.deadline.budget_sent", seconds)

    def refused(self, client: str) -> None:
        """Count a call refused for want of budget (an event on the current span)."""
        key = self._client(client)
        refused = self._refused
        refused[key] = refused.get(key, 0) + 1
        if self._spans:
            span = trace.get_current_span()
            if span.is_recording():
                span.add_event("aiowheel.deadline.refused", {"aiowheel.client": client})

    # -- the SDK's collection ------------------------------------------------------------------

    def _shape(self, key: Key) -> Attributes:
        """The attributes of ``key``, made once: the hop's and route's (:func:`_where`'s
        three values; none for a call outside a request), then, by the key's length, the
        client (4), or the outcome and source (5)."""
        found = self._shapes.get(key)
        if found is None:
            found = {} if key[:3] == _NOWHERE else _attributes(key[:3])
            if len(key) == 4:
                found["aiowheel.client"] = key[3]
            elif len(key) == 5:
                found["aiowheel.deadline.outcome"] = key[3]
                found["aiowheel.deadline.source"] = key[4]
            if len(self._shapes) < _SHAPES:
                self._shapes[key] = found
        return found

    def observe(self, which: str) -> list[metrics.Observation]:
        """The counts of ``which`` (``requests``, ``stopped``, ``refused``), as observations."""
        counts: Mapping[Key, float] = getattr(self, f"_{which}")
        found = list(counts.items())  # a copy: the loop's thread may add a key meanwhile
        return [metrics.Observation(value, self._shape(key)) for key, value in found]


_NOWHERE: Final = ("", "", "")  # a call made outside any request


@final
class DeadlineInstrumentation:
    """What :func:`instrument_deadlines` set up; :meth:`close` stops it (then it may be
    called again)."""

    __slots__ = ("_closed", "_purgatories", "_recorder")

    def __init__(
        self,
        meter: metrics.Meter,
        spans: bool,
        rate: float | None,
        purgatories: dict[str, Purgatory],
    ) -> None:
        self._closed = False
        self._purgatories = purgatories
        self._recorder = _Recorder(meter, spans, rate)
        if purgatories:
            self._observe_purgatories(meter)
        _OPEN[:] = [self]
        SEEN.watcher = self._recorder

    def _observe_purgatories(self, meter: metrics.Meter) -> None:
        meter.create_observable_gauge(
            "aiowheel.purgatory.waiting", [_delegated(DeadlineInstrumentation.waiting)],
            unit="{operation}",
            description="operations waiting in the purgatory now",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.purgatory.operations", [_delegated(DeadlineInstrumentation.operations)],
            unit="{operation}",
            description="operations ended, by outcome (completed, expired, cancelled, failed)",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.purgatory.redis.sent", [_delegated(lambda i: i.redis("sent"))], unit="{key}",
            description="keys signalled here and queued for Redis",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.purgatory.redis.received", [_delegated(lambda i: i.redis("received"))],
            unit="{message}",
            description="messages of other processes received through Redis and applied",
        )  # fmt: skip
        meter.create_observable_counter(
            "aiowheel.purgatory.redis.errors", [_delegated(DeadlineInstrumentation.redis_errors)],
            unit="{error}",
            description="failures talking to Redis, by operation (connect, publish)",
        )  # fmt: skip
        meter.create_observable_gauge(
            "aiowheel.purgatory.redis.connected", [_delegated(lambda i: i.redis("connected"))],
            unit="1",
            description="1 while a subscriber is subscribed to Redis, else 0",
        )  # fmt: skip

    # -- read when the SDK collects, through _delegated ----------------------------------------

    def counts(self, which: str) -> list[metrics.Observation]:
        """The request path's counts of ``which`` (``requests``, ``stopped``, ``refused``)."""
        return self._recorder.observe(which)

    def waiting(self) -> list[metrics.Observation]:
        """Each purgatory's operations waiting now."""
        return [
            metrics.Observation(purgatory.stats().live, {"aiowheel.purgatory": name})
            for name, purgatory in self._purgatories.items()
        ]

    def operations(self) -> list[metrics.Observation]:
        """Each purgatory's operations ended, by outcome."""
        found = []
        for name, purgatory in self._purgatories.items():
            stats = purgatory.stats()
            for outcome in ("completed", "expired", "cancelled", "failed"):
                found.append(
                    metrics.Observation(
                        getattr(stats, outcome),
                        {"aiowheel.purgatory": name, "aiowheel.purgatory.outcome": outcome},
                    )
                )
        return found

    def _signals_stats(self) -> Iterable[tuple[str, Any]]:
        """Each purgatory with Redis signals, and its signals' stats (read by name, so that a
        field the signals no longer keep is left out, not an error)."""
        for name, purgatory in self._purgatories.items():
            signals = getattr(purgatory, "_signals", None)
            stats = getattr(signals, "stats", None)
            if callable(stats):
                yield name, stats()

    def redis(self, field: str) -> list[metrics.Observation]:
        """Each purgatory's Redis signals' ``field`` (``sent``, ``received``, ``connected``)."""
        return [
            metrics.Observation(int(getattr(stats, field)), {"aiowheel.purgatory": name})
            for name, stats in self._signals_stats()
            if hasattr(stats, field)
        ]

    def redis_errors(self) -> list[metrics.Observation]:
        """Each purgatory's failures talking to Redis, by operation."""
        found = []
        for name, stats in self._signals_stats():
            for operation in ("connect", "publish"):
                count = getattr(stats, f"{operation}_errors", None)
                if count is not None:
                    attributes = {"aiowheel.purgatory": name, "aiowheel.redis.operation": operation}
                    found.append(metrics.Observation(count, attributes))
        return found

    def close(self) -> None:
        """Stop: the request path reports nothing more (its one check finds no watcher), the
        instruments report nothing (until the next :func:`instrument_deadlines`)."""
        if self._closed:
            return
        self._closed = True
        if _OPEN and _OPEN[0] is self:
            _OPEN.clear()
        if SEEN.watcher is self._recorder:
            SEEN.watcher = None


_OPEN: Final[list[DeadlineInstrumentation]] = []  # the one open now, if any


def _delegated(
    read: Callable[[DeadlineInstrumentation], list[metrics.Observation]],
) -> metrics.CallbackT:
    """An observable instrument's callback reading the instrumentation open when the SDK
    collects (nothing while none is). Not the one that made the instrument: asked for an
    instrument of a name it has made, an SDK meter hands back the first, with its first
    callbacks, so an instrumentation closed and made again on one provider reports through
    the callbacks of the first."""

    def observe(_options: metrics.CallbackOptions) -> Iterable[metrics.Observation]:
        return read(_OPEN[0]) if _OPEN else []

    return observe


def instrument_deadlines(
    *,
    purgatories: Mapping[str, Purgatory] | None = None,
    meter_provider: Any = None,
    spans: bool = True,
    samples_per_second: float | None = 50.0,
) -> DeadlineInstrumentation:
    """Report the request deadlines of every adapter in the process (ASGI, aiohttp, gRPC;
    the httpx, aiohttp and gRPC clients) and the ``purgatories`` (``{name: purgatory}``)
    through OpenTelemetry: the meter ``aiowheel`` of ``meter_provider`` (default: the global
    one); with ``spans`` (the default), the current span of a request or call gets its
    attributes too. The histograms take at most ``samples_per_second`` samples a second per
    hop and route (every request below that rate; None: every request); the counts are
    exact. Once per process: RuntimeError while an earlier one is open.

    >>> aiowheel.otel.instrument_deadlines(purgatories={"orders": orders})
    """
    where = "instrument_deadlines()"
    if not isinstance(spans, bool):
        raise TypeError(f"{where}: spans must be a bool, got {type(spans).__name__}")
    if meter_provider is not None and not callable(getattr(meter_provider, "get_meter", None)):
        raise TypeError(
            f"{where}: meter_provider must be an OpenTelemetry MeterProvider or None, "
            f"got {type(meter_provider).__name__}"
        )
    rate = (
        None
        if samples_per_second is None
        else positive(where.removesuffix("()"), "samples_per_second", samples_per_second)
    )
    checked: dict[str, Purgatory] = {}
    if purgatories is not None:
        if not isinstance(purgatories, Mapping):
            raise TypeError(
                f"{where}: purgatories must be a mapping of names to aiowheel.Purgatory, "
                f"got {type(purgatories).__name__}"
            )
        for name, purgatory in purgatories.items():
            if not isinstance(name, str) or not name:
                raise TypeError(
                    f"{where}: purgatories' names must be non-empty strings, got {name!r}"
                )
            if not isinstance(purgatory, Purgatory):
                raise TypeError(
                    f"{where}: purgatories[{name!r}] must be an aiowheel.Purgatory, "
                    f"got {type(purgatory).__name__}"
                )
            checked[name] = purgatory
    if SEEN.watcher is not None:
        raise RuntimeError(
            f"{where}: the deadlines are instrumented already; close() the first "
            "DeadlineInstrumentation to instrument them again"
        )
    meter = metrics.get_meter("aiowheel", meter_provider=meter_provider)
    return DeadlineInstrumentation(meter, spans, rate, checked)
