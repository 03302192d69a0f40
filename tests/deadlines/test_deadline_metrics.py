"""aiowheel.otel.instrument_deadlines (issue 63): the deadlines' metrics and spans, read back
through the OpenTelemetry SDK (its in-memory reader and span exporter), and through its
Prometheus reader scraped over HTTP from a real aiohttp server, as an operator would."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import aiowheel
import aiowheel.aiohttp
import aiowheel.otel
from aiowheel._deadlines._seen import SEEN
from aiowheel.asgi import BudgetExhausted, DeadlineMiddleware, set_deadline
from aiowheel.httpx import DeadlineTransport
from tests.support import ROOT, serve_aiohttp

SLOW = 5.0  # what a slow handler would take: far past every deadline here


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    """Every data point the reader collects now, by instrument name."""
    data = reader.get_metrics_data()
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def one(found: dict[str, list[Any]], name: str, **attributes: object) -> Any:
    """The one point of ``name`` whose attributes include ``attributes``."""
    matching = [
        point
        for point in found.get(name, [])
        if all(point.attributes.get(k.replace("_", ".")) == v for k, v in attributes.items())
    ]
    assert len(matching) == 1, (name, attributes, found.get(name))
    return matching[0]


@pytest.fixture
def reader() -> Iterator[tuple[InMemoryMetricReader, MeterProvider]]:
    found = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[found])
    yield found, provider
    provider.shutdown()
    assert SEEN.watcher is None, "a test left the deadlines instrumented"


def aiohttp_app(timeout: float) -> web.Application:
    """``/users/{id}`` answers at once, ``/slow/{id}`` sleeps past the deadline."""

    async def user(request: web.Request) -> web.Response:
        return web.Response(text=request.match_info["id"])

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(SLOW)
        return web.Response(text="late")

    app = web.Application(
        middlewares=[aiowheel.aiohttp.deadline_middleware(timeout, header="x-request-timeout")]
    )
    app.router.add_get("/users/{id}", user)
    app.router.add_get("/slow/{id}", slow)
    return app


def test_aiohttp_met_and_missed_counted_under_the_route_template(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    memory, provider = reader

    async def main() -> dict[str, list[Any]]:
        instrumented = aiowheel.otel.instrument_deadlines(
            meter_provider=provider, samples_per_second=None
        )
        runner, url = await serve_aiohttp(aiohttp_app(0.2))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                for user in ("ann", "bob", "cy"):
                    assert (await client.get(f"/users/{user}")).status_code == 200
                assert (await client.get("/slow/1")).status_code == 504
                # The caller's budget, shorter than the route's: its deadline is the caller's.
                slow = await client.get("/slow/2", headers={"x-request-timeout": "0.1"})
                assert slow.status_code == 504
                assert (await client.get("/nowhere")).status_code == 404
                # The client gives up before the deadline: the server cancels the handler.
                with pytest.raises(httpx.ReadTimeout):
                    await client.get("/slow/3", timeout=0.05)
                for _ in range(100):  # until the server has seen it (bounded)
                    ended = points(memory).get("aiowheel.deadline.requests", [])
                    if sum(p.value for p in ended) == 7:
                        break
                    await asyncio.sleep(0.02)
        finally:
            await runner.cleanup()
            found = points(memory)  # (closed, it reports nothing)
            instrumented.close()
        return found

    found = asyncio.run(main())
    met = one(found, "aiowheel.deadline.requests", http_route="/users/{id}")
    assert met.value == 3
    assert met.attributes["aiowheel.deadline.outcome"] == "met"
    assert met.attributes["aiowheel.hop"] == "aiohttp"
    assert met.attributes["http.request.method"] == "GET"
    own = one(
        found,
        "aiowheel.deadline.requests",
        http_route="/slow/{id}",
        aiowheel_deadline_source="own",
        aiowheel_deadline_outcome="missed",
    )
    gone = one(
        found, "aiowheel.deadline.requests", http_route="/slow/{id}",
        aiowheel_deadline_outcome="cancelled",
    )  # fmt: skip
    assert gone.value == 1
    caller = one(
        found,
        "aiowheel.deadline.requests",
        http_route="/slow/{id}",
        aiowheel_deadline_source="caller",
    )
    assert own.value == caller.value == 1
    assert (
        own.attributes["aiowheel.deadline.outcome"]
        == "missed"
        == caller.attributes["aiowheel.deadline.outcome"]
    )
    # The 404 has no route: counted (met), without an http.route.
    unrouted = [p for p in found["aiowheel.deadline.requests"] if "http.route" not in p.attributes]
    assert [p.value for p in unrouted] == [1]
    # Never a raw path: no attribute value holds one of the ids sent.
    values = {v for ps in found.values() for p in ps for v in p.attributes.values()}
    assert not values & {"/users/ann", "/users/bob", "/users/cy", "/slow/1", "/slow/2", "/nowhere"}
    budget = one(found, "aiowheel.deadline.budget", http_route="/slow/{id}")
    assert budget.count == 3 and budget.sum == pytest.approx(0.5, abs=0.01)  # 0.2 + 0.1 + 0.2
    assert one(found, "aiowheel.deadline.budget", http_route="/users/{id}").count == 3
    stopped = one(found, "aiowheel.deadline.stopped", http_route="/slow/{id}")
    assert 0.3 - 1e-6 <= stopped.value < 0.3 + 2.0  # each stopped at its deadline, not after 5 s
    assert "aiowheel.deadline.stopped" not in {
        name
        for name, ps in found.items()
        for p in ps
        if p.attributes.get("http.route") == "/users/{id}"
    }


def fastapi_gateway(downstream: httpx.AsyncBaseTransport) -> Any:
    """A FastAPI app under DeadlineMiddleware(timeout=2): ``/items/{item_id}`` calls
    ``downstream`` through DeadlineTransport; ``/starved/{item_id}`` calls it with less budget
    than the client's margin."""
    app = FastAPI()

    async def call(margin: float = 0.005) -> int:
        async with httpx.AsyncClient(
            transport=DeadlineTransport(downstream, margin=margin), base_url="http://downstream"
        ) as client:
            return (await client.get("/")).status_code

    @app.get("/items/{item_id}")
    async def item(item_id: str) -> dict[str, int]:
        return {"downstream": await call()}

    @app.get("/starved/{item_id}")
    async def starved(item_id: str) -> dict[str, int]:
        # Less budget than the client's margin, by a wide margin on either side: refused,
        # however slow the machine (a 4 ms deadline against the 5 ms margin fired first on a
        # loaded one: a 504, not the refusal this route is for).
        set_deadline(1.0)
        try:
            return {"downstream": await call(margin=30.0)}
        except BudgetExhausted:  # (raised through FastAPI, it would be a 500: its error page)
            return {"downstream": 0}

    @app.get("/late/{item_id}")
    async def late(item_id: str) -> dict[str, int]:
        set_deadline(0.1)
        await asyncio.sleep(SLOW)
        return {"downstream": 0}

    return DeadlineMiddleware(app, timeout=2)


async def downstream_app(scope: Any, receive: Any, send: Any) -> None:
    """A callee that answers 200 with the deadline header it was sent."""
    told = dict(scope["headers"]).get(b"x-request-timeout", b"")
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": told})


def test_asgi_routes_budget_sent_downstream_and_calls_refused(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    memory, provider = reader
    app = fastapi_gateway(httpx.ASGITransport(downstream_app))

    async def main() -> dict[str, list[Any]]:
        instrumented = aiowheel.otel.instrument_deadlines(
            meter_provider=provider, samples_per_second=None
        )
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://gateway"
            ) as client:
                for item in ("a", "b"):
                    assert (await client.get(f"/items/{item}")).json() == {"downstream": 200}
                assert (await client.get("/starved/c")).json() == {"downstream": 0}
                assert (await client.get("/late/d")).status_code == 504
        finally:
            found = points(memory)  # (closed, it reports nothing)
            instrumented.close()
        return found

    found = asyncio.run(main())
    met = one(found, "aiowheel.deadline.requests", http_route="/items/{item_id}")
    assert met.value == 2 and met.attributes["aiowheel.hop"] == "asgi"
    starved = one(found, "aiowheel.deadline.requests", http_route="/starved/{item_id}")
    assert starved.value == 1 and starved.attributes["aiowheel.deadline.outcome"] == "met"
    missed = one(found, "aiowheel.deadline.requests", http_route="/late/{item_id}")
    assert missed.value == 1 and missed.attributes["aiowheel.deadline.outcome"] == "missed"
    assert one(found, "aiowheel.deadline.budget", http_route="/late/{item_id}").sum == 2.0
    sent = one(found, "aiowheel.deadline.budget_sent", http_route="/items/{item_id}")
    assert sent.attributes["aiowheel.client"] == "httpx" and sent.count == 2
    assert 2 * 1.9 < sent.sum <= 2 * (2 - 0.005)  # what was left, less the margin
    refused = one(found, "aiowheel.deadline.refused", http_route="/starved/{item_id}")
    assert refused.value == 1 and refused.attributes["aiowheel.client"] == "httpx"


def test_the_request_s_span_carries_its_budget_and_the_deadline_s_firing() -> None:
    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("test")
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    app = fastapi_gateway(httpx.ASGITransport(downstream_app))

    async def traced(scope: Any, receive: Any, send: Any) -> None:
        # What OpenTelemetry's ASGI middleware does around the app: a server span, current.
        with tracer.start_as_current_span(f"GET {scope['path']}", kind=trace.SpanKind.SERVER):
            await app(scope, receive, send)

    async def slow_app(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(SLOW)

    slow = DeadlineMiddleware(slow_app, timeout=0.1)

    async def traced_slow(scope: Any, receive: Any, send: Any) -> None:
        with tracer.start_as_current_span("GET /slow", kind=trace.SpanKind.SERVER):
            await slow(scope, receive, send)

    async def main() -> None:
        instrumented = aiowheel.otel.instrument_deadlines(meter_provider=provider)
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(traced), base_url="http://gateway"
            ) as client:
                assert (await client.get("/items/a")).status_code == 200
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(traced_slow), base_url="http://gateway"
            ) as client:
                assert (await client.get("/slow")).status_code == 504
        finally:
            instrumented.close()

    asyncio.run(main())
    provider.shutdown()
    spans = {span.name: span for span in exporter.get_finished_spans()}
    met = spans["GET /items/a"]
    assert met.attributes is not None
    assert met.attributes["aiowheel.deadline.budget"] == pytest.approx(2.0)
    assert met.attributes["aiowheel.deadline.fired"] is False
    assert 1.9 < met.attributes["aiowheel.deadline.budget_sent"] <= 1.995  # the client's call
    assert not met.events
    missed = spans["GET /slow"]
    assert missed.attributes is not None
    assert missed.attributes["aiowheel.deadline.budget"] == pytest.approx(0.1)
    assert missed.attributes["aiowheel.deadline.fired"] is True
    (event,) = missed.events
    assert event.name == "aiowheel.deadline.fired"
    assert missed.start_time is not None and missed.end_time is not None
    # At the deadline: 0.1 s after the span began (the loop's timer, never early), before it ended.
    assert 0.1 - 0.005 <= (event.timestamp - missed.start_time) / 1e9 <= missed.end_time / 1e9
    assert event.timestamp <= missed.end_time


def test_purgatory_counts_are_read_from_its_stats(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    memory, provider = reader
    purgatory = aiowheel.Purgatory()

    async def main() -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        instrumented = aiowheel.otel.instrument_deadlines(
            purgatories={"orders": purgatory}, meter_provider=provider
        )
        try:
            ready: dict[str, int] = {}
            waits = [asyncio.ensure_future(purgatory.wait([k], lambda k=k: ready.get(k), 30))
                     for k in ("a", "b", "c")]  # fmt: skip
            with pytest.raises(TimeoutError):
                await purgatory.wait(["late"], lambda: None, 0.01)
            ready["a"] = 1
            purgatory.signal("a")
            waits[1].cancel()
            await asyncio.sleep(0)
            during = points(memory)
            waits[2].cancel()
            await asyncio.gather(*waits, return_exceptions=True)
            return during, points(memory)
        finally:
            instrumented.close()

    during, after = asyncio.run(main())
    assert one(during, "aiowheel.purgatory.waiting", aiowheel_purgatory="orders").value == 1
    outcomes = {
        p.attributes["aiowheel.purgatory.outcome"]: p.value
        for p in during["aiowheel.purgatory.operations"]
    }
    assert outcomes == {"completed": 1, "expired": 1, "cancelled": 1, "failed": 0}
    assert one(after, "aiowheel.purgatory.waiting", aiowheel_purgatory="orders").value == 0
    # No Redis signals on this purgatory: none of their instruments report it.
    assert not after.get("aiowheel.purgatory.redis.sent")


def test_twice_is_refused_and_bad_input_changes_nothing(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    _, provider = reader
    with pytest.raises(
        TypeError,
        match=r"^instrument_deadlines\(\): purgatories\['x'\] must be an aiowheel\.Purgatory, "
        r"got dict$",
    ):
        aiowheel.otel.instrument_deadlines(purgatories={"x": {}}, meter_provider=provider)  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"names must be non-empty strings, got ''$"):
        aiowheel.otel.instrument_deadlines(purgatories={"": aiowheel.Purgatory()})
    with pytest.raises(
        TypeError, match=r"^instrument_deadlines\(\): spans must be a bool, got int$"
    ):
        aiowheel.otel.instrument_deadlines(spans=1)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"^instrument_deadlines\(\): samples_per_second must be .*, got 0$"
    ):
        aiowheel.otel.instrument_deadlines(samples_per_second=0)
    with pytest.raises(
        TypeError,
        match=r"^instrument_deadlines\(\): meter_provider must be an OpenTelemetry "
        r"MeterProvider or None, got str$",
    ):
        aiowheel.otel.instrument_deadlines(meter_provider="prometheus")
    assert SEEN.watcher is None  # nothing was set up
    first = aiowheel.otel.instrument_deadlines(meter_provider=provider)
    try:
        with pytest.raises(RuntimeError, match=r"instrumented already; close\(\) the first"):
            aiowheel.otel.instrument_deadlines(meter_provider=provider)
        assert SEEN.watcher is not None
    finally:
        first.close()
    assert SEEN.watcher is None
    first.close()  # twice: nothing more
    again = aiowheel.otel.instrument_deadlines(meter_provider=provider)
    again.close()


def test_made_again_on_the_same_provider_it_reports(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    # The SDK hands back the instruments it made first, with their first callbacks: what they
    # read is whichever instrumentation is open when it collects.
    memory, provider = reader
    purgatory = aiowheel.Purgatory()

    async def requests(count: int) -> None:
        runner, url = await serve_aiohttp(aiohttp_app(0.2))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                for user in range(count):
                    assert (await client.get(f"/users/{user}")).status_code == 200
        finally:
            await runner.cleanup()

    first = aiowheel.otel.instrument_deadlines(
        meter_provider=provider, purgatories={"p": purgatory}
    )
    asyncio.run(requests(2))
    assert one(points(memory), "aiowheel.deadline.requests", http_route="/users/{id}").value == 2
    first.close()
    asyncio.run(requests(1))
    closed = points(memory)
    assert not closed.get("aiowheel.deadline.requests") and not closed.get(
        "aiowheel.purgatory.waiting"
    )
    second = aiowheel.otel.instrument_deadlines(
        meter_provider=provider, purgatories={"q": purgatory}
    )
    try:
        asyncio.run(requests(3))
        found = points(memory)
    finally:
        second.close()
    # A new instrumentation counts from zero (the first's counts went with it).
    assert one(found, "aiowheel.deadline.requests", http_route="/users/{id}").value == 3
    assert one(found, "aiowheel.purgatory.waiting", aiowheel_purgatory="q").value == 0
    assert not [p for p in found["aiowheel.purgatory.waiting"] if p.attributes.get(
        "aiowheel.purgatory") == "p"]  # fmt: skip


def test_without_the_otel_extra_the_error_names_it() -> None:
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "try:\n    import aiowheel.otel\n"
        "except ImportError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert "pip install 'aiowheel[otel]'" in done.stdout, done


def test_off_the_request_path_reports_nothing(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    memory, provider = reader
    instrumented = aiowheel.otel.instrument_deadlines(meter_provider=provider)
    instrumented.close()

    async def main() -> None:
        runner, url = await serve_aiohttp(aiohttp_app(0.2))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                assert (await client.get("/users/x")).status_code == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert not points(memory).get("aiowheel.deadline.requests")


def test_served_metrics_scraped_over_http_count_met_and_missed() -> None:
    # The operator's view: the SDK's Prometheus reader, the app's /metrics scraped over HTTP.
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    purgatory = aiowheel.Purgatory()

    async def main() -> str:
        instrumented = aiowheel.otel.instrument_deadlines(
            purgatories={"orders": purgatory}, meter_provider=provider, samples_per_second=None
        )
        app = aiohttp_app(0.2)

        async def scrape(request: web.Request) -> web.Response:
            return web.Response(body=generate_latest(registry), content_type="text/plain")

        app.router.add_get("/metrics", scrape)
        runner, url = await serve_aiohttp(app)
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                for user in range(4):
                    assert (await client.get(f"/users/{user}")).status_code == 200
                missed = await asyncio.gather(*(client.get(f"/slow/{i}") for i in range(3)))
                assert [r.status_code for r in missed] == [504] * 3
                with pytest.raises(TimeoutError):
                    await purgatory.wait(["k"], lambda: None, 0.01)
                return (await client.get("/metrics")).text
        finally:
            await runner.cleanup()
            instrumented.close()

    text = asyncio.run(main())
    provider.shutdown()
    samples = {
        (s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "otel_scope_name"
                              and not k.startswith("otel_scope")))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }  # fmt: skip

    def sample(name: str, **labels: str) -> float:
        found = [
            v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items()
        ]
        assert len(found) == 1, (name, labels, [k for k in samples if k[0] == name])
        return found[0]

    assert sample("aiowheel_deadline_requests_total", http_route="/users/{id}",
                  aiowheel_deadline_outcome="met") == 4  # fmt: skip
    assert sample("aiowheel_deadline_requests_total", http_route="/slow/{id}",
                  aiowheel_deadline_outcome="missed") == 3  # fmt: skip
    assert sample("aiowheel_deadline_budget_seconds_count", http_route="/slow/{id}") == 3
    assert (
        sample("aiowheel_deadline_budget_seconds_bucket", http_route="/slow/{id}", le="0.25") == 3
    )
    assert sample("aiowheel_deadline_budget_seconds_bucket", http_route="/slow/{id}", le="0.1") == 0
    assert (
        0.6 - 1e-6 <= sample("aiowheel_deadline_stopped_seconds_total", http_route="/slow/{id}") < 3
    )
    assert sample("aiowheel_purgatory_operations_total", aiowheel_purgatory="orders",
                  aiowheel_purgatory_outcome="expired") == 1  # fmt: skip
    assert sample("aiowheel_purgatory_waiting", aiowheel_purgatory="orders") == 0
    assert "/users/0" not in text and "/slow/1" not in text  # never a raw path


def test_redis_signals_sent_received_and_outages_are_read_from_their_stats(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    # A real redis-server (tests/support.py): two purgatories talking through it, and a third
    # whose Redis is down (nothing listens on port 1).
    from aiowheel.redis import RedisSignals
    from tests.support import RedisServer, need_redis

    memory, provider = reader
    server = RedisServer(need_redis())
    server.start()
    try:

        async def main() -> dict[str, list[Any]]:
            a = aiowheel.Purgatory(signals=RedisSignals(server.url, channel="t63"))
            b = aiowheel.Purgatory(signals=RedisSignals(server.url, channel="t63"))
            down = aiowheel.Purgatory(signals=RedisSignals("redis://127.0.0.1:1/0", channel="t63"))
            instrumented = aiowheel.otel.instrument_deadlines(
                purgatories={"a": a, "b": b, "down": down}, meter_provider=provider
            )
            signals: list[Any] = [getattr(p, "_signals") for p in (a, b, down)]  # noqa: B009
            try:
                await asyncio.wait_for(signals[0].start(), 10)
                await asyncio.wait_for(signals[1].start(), 10)
                seen: dict[str, str] = {}
                waiting = a.wait(["k"], lambda: seen.get("k"), 10)
                seen["k"] = "v"  # the state the key names, shared in this one process
                b.signal("k")  # through Redis to a, which re-checks and completes
                assert await waiting == "v"
                with pytest.raises(TimeoutError):
                    await down.wait(["x"], lambda: None, 0.3)  # its subscriber fails meanwhile
                deadline = asyncio.get_running_loop().time() + 10
                while not signals[2].stats().connect_errors:
                    assert asyncio.get_running_loop().time() < deadline
                    await asyncio.sleep(0.05)
                return points(memory)
            finally:
                instrumented.close()
                for each in signals:
                    await each.aclose()

        found = asyncio.run(main())
    finally:
        server.kill()
    assert one(found, "aiowheel.purgatory.redis.sent", aiowheel_purgatory="b").value >= 1
    assert one(found, "aiowheel.purgatory.redis.received", aiowheel_purgatory="a").value >= 1
    assert one(found, "aiowheel.purgatory.redis.connected", aiowheel_purgatory="a").value == 1
    assert one(found, "aiowheel.purgatory.redis.connected", aiowheel_purgatory="down").value == 0
    outage = one(
        found, "aiowheel.purgatory.redis.errors", aiowheel_purgatory="down",
        aiowheel_redis_operation="connect",
    )  # fmt: skip
    assert outage.value >= 1
    completed = one(
        found, "aiowheel.purgatory.operations", aiowheel_purgatory="a",
        aiowheel_purgatory_outcome="completed",
    )  # fmt: skip
    assert completed.value == 1


def test_the_histograms_take_a_bounded_sample_and_the_counts_every_request(
    reader: tuple[InMemoryMetricReader, MeterProvider],
) -> None:
    memory, provider = reader

    async def main() -> dict[str, list[Any]]:
        instrumented = aiowheel.otel.instrument_deadlines(
            meter_provider=provider, samples_per_second=2
        )
        runner, url = await serve_aiohttp(aiohttp_app(0.2))
        try:
            async with httpx.AsyncClient(base_url=url, timeout=10) as client:
                loop = asyncio.get_running_loop()
                start = loop.time()
                for user in range(30):
                    assert (await client.get(f"/users/{user}")).status_code == 200
                took = loop.time() - start
        finally:
            await runner.cleanup()
            found = points(memory)
            instrumented.close()
        found["took"] = [took]
        return found

    found = asyncio.run(main())
    assert one(found, "aiowheel.deadline.requests", http_route="/users/{id}").value == 30
    budget = one(found, "aiowheel.deadline.budget", http_route="/users/{id}")
    # One sample each half second (the first at once): bounded by the time the 30 took.
    assert 1 <= budget.count <= 1 + found["took"][0] * 2 + 1 < 30
    assert budget.sum == pytest.approx(0.2 * budget.count)


def test_opentelemetry_s_own_asgi_and_httpx_instrumentation_carry_the_deadline() -> None:
    # The spans OpenTelemetry's instrumentations make (opentelemetry-instrumentation-asgi
    # outside DeadlineMiddleware, -httpx on the client whose transport is DeadlineTransport):
    # the server span gets the budget and whether the deadline fired, the client span the
    # budget it sent.
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    api = FastAPI()

    @api.get("/items/{item_id}")
    async def item(item_id: str) -> dict[str, int]:
        async with httpx.AsyncClient(
            transport=DeadlineTransport(httpx.ASGITransport(downstream_app)),
            base_url="http://downstream",
        ) as client:
            HTTPXClientInstrumentor.instrument_client(client, tracer_provider=tracer_provider)
            return {"downstream": (await client.get("/")).status_code}

    @api.get("/late")
    async def slow() -> dict[str, int]:
        set_deadline(0.1)
        await asyncio.sleep(SLOW)
        return {}

    app = OpenTelemetryMiddleware(
        DeadlineMiddleware(api, timeout=2),
        tracer_provider=tracer_provider,
        exclude_spans=["receive", "send"],
    )

    async def main() -> None:
        instrumented = aiowheel.otel.instrument_deadlines(meter_provider=provider)
        try:
            async with httpx.AsyncClient(
                transport=httpx.ASGITransport(app), base_url="http://gateway"
            ) as client:
                assert (await client.get("/items/a")).json() == {"downstream": 200}
                assert (await client.get("/late")).status_code == 504
        finally:
            instrumented.close()

    asyncio.run(main())
    provider.shutdown()
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind == trace.SpanKind.SERVER]
    (client,) = [s for s in spans if s.kind == trace.SpanKind.CLIENT]
    assert len(servers) == 2, [(s.name, s.attributes) for s in spans]
    met, late = sorted(servers, key=lambda s: s.start_time or 0)
    assert met.attributes is not None and late.attributes is not None
    assert met.attributes["aiowheel.deadline.budget"] == pytest.approx(2.0)
    assert met.attributes["aiowheel.deadline.fired"] is False
    assert client.attributes is not None and client.parent is not None
    assert client.parent.span_id == met.context.span_id  # the call made for that request
    assert 1.9 < client.attributes["aiowheel.deadline.budget_sent"] <= 1.995
    assert "aiowheel.deadline.budget_sent" not in met.attributes  # on the client's span
    assert late.attributes["aiowheel.deadline.fired"] is True
    assert [event.name for event in late.events] == ["aiowheel.deadline.fired"]
