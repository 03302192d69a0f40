"""Deadlines across services, across real processes: ``examples/chain``'s gateway (FastAPI
under uvicorn), service (aiohttp) and backend (grpc.aio), each started from its own command
line (``examples.chain.run.started``), on a stock asyncio loop and on loop mode.

What is checked, by each hop's own records (when each handler started, when its ``finally``
ran, the budget it saw; read back from the processes, on the one monotonic clock of the
machine):

- the budget shrinks hop by hop: each hop sees less than its caller, never more;
- when the first caller's deadline passes, every handler below it has ended by then, plus a
  generous slack (``SLACK``: a loaded 2-core machine; never a tight timing assert), a gRPC
  stream cancelled mid-stream included;
- a call started with nothing left is never sent (the next hop never sees it);
- stock mode (each hop its own fixed timeout, nothing passed on) lets the last hop run on
  past the deadline: the checks above can fail.

Skipped only where grpcio is not installed and ``AIOWHEEL_REQUIRE_GRPC`` is not set (CI sets
it where grpcio must be: there a missing grpcio fails).
"""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest

if importlib.util.find_spec("grpc") is None:
    if os.environ.get("AIOWHEEL_REQUIRE_GRPC", "") not in ("", "0"):
        raise ImportError(
            "AIOWHEEL_REQUIRE_GRPC is set but grpcio is not installed: pip install -e '.[grpc]'"
        )
    pytest.skip("grpcio is not installed (pip install -e '.[grpc]')", allow_module_level=True)

from examples.chain.run import Chain, started

pytestmark = pytest.mark.once  # servers in subprocesses: CI's first pass

SLACK = 1.0
"""Seconds past a deadline by which every handler below it must have ended (a loaded 2-core
machine: the deadline itself is kept to the tick; this bounds a scheduler's worst)."""

HOPS = ("gateway", "service", "backend")


def get(
    chain: Chain, path: str, deadline: float | None = None, timeout: float = 30
) -> tuple[int, dict[str, Any], float]:
    """GET the gateway's ``path``, with ``deadline`` seconds in x-request-timeout if given:
    the status, the JSON body ({} if none) and the monotonic time the request was sent."""
    conn = http.client.HTTPConnection("127.0.0.1", chain.ports["gateway"], timeout=timeout)
    try:
        headers = {} if deadline is None else {"x-request-timeout": str(deadline)}
        sent = time.monotonic()
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        body = response.read()
        return response.status, json.loads(body) if body else {}, sent
    finally:
        conn.close()


def stats(chain: Chain, request_id: str) -> dict[str, dict[str, Any]]:
    """Each hop's stats, with its records of ``request_id`` only."""
    found = {}
    for hop, path in (
        ("gateway", ("gateway", "/stats")),
        ("service", ("service", "/stats")),
        ("backend", ("service", "/backend/stats")),
    ):
        conn = http.client.HTTPConnection("127.0.0.1", chain.ports[path[0]], timeout=30)
        try:
            conn.request("GET", f"{path[1]}?ids={request_id}")
            response = conn.getresponse()
            assert response.status == 200
            found[hop] = json.loads(response.read())
        finally:
            conn.close()
    return found


def records(chain: Chain, request_id: str) -> dict[str, list[dict[str, Any]]]:
    """Each hop's records of ``request_id``."""
    return {hop: hop_stats["records"] for hop, hop_stats in stats(chain, request_id).items()}


def ended(chain: Chain, request_id: str, within: float) -> dict[str, list[dict[str, Any]]]:
    """The records of ``request_id`` once every one has ended (or ``within`` seconds have
    passed: the records as they are)."""
    stop = time.monotonic() + within
    while True:
        found = records(chain, request_id)
        done = all(r["ended"] is not None for rs in found.values() for r in rs)
        if done or time.monotonic() > stop:
            return found
        time.sleep(0.1)


@pytest.fixture(params=[False, True], ids=["asyncio", "loop-mode"])
def chain(request: pytest.FixtureRequest) -> Iterator[Chain]:
    """The chain in propagated mode, on asyncio or on loop mode."""
    with started("propagated", loop_mode=request.param) as running:
        for hop, hop_stats in stats(running, "").items():
            assert hop_stats["loop_mode"] is request.param, (hop, hop_stats["loop"])
        yield running
    for name, process in running.processes.items():
        output: str = process.output  # type: ignore[attr-defined]
        assert "Traceback" not in output, f"{name}:\n{output}"


def test_the_budget_shrinks_hop_by_hop(chain: Chain) -> None:
    status, body, _ = get(chain, "/work?id=fast&seconds=0.05", deadline=3)
    assert status == 200, body
    gateway = body["budget"]
    service = body["service"]["budget"]
    backend = body["service"]["backend"]["budget"]
    assert 0 < backend < service < gateway <= 3, body
    # The hops' records say the same.
    found = records(chain, "fast")
    seen = [found[hop][0]["budget"] for hop in HOPS]
    assert seen == [gateway, service, backend]
    assert all(found[hop][0]["outcome"] == "ok" for hop in HOPS), found


def test_everything_below_stops_when_the_first_caller_gives_up(chain: Chain) -> None:
    status, body, sent = get(chain, "/work?id=slow&seconds=5", deadline=1)
    assert status == 504, body
    deadline = sent + 1
    found = ended(chain, "slow", within=10)
    for hop in HOPS:
        (record,) = found[hop]
        assert record["ended"] is not None, (hop, found)
        assert record["ended"] <= deadline + SLACK, (hop, record["ended"] - deadline, found)
        assert record["outcome"] != "ok", (hop, found)
        assert record["budget"] is not None and record["budget"] <= 1, (hop, found)
    budgets = [found[hop][0]["budget"] for hop in HOPS]
    assert budgets == sorted(budgets, reverse=True), budgets  # never larger than the caller's
    assert found["backend"][0]["outcome"] == "cancelled", found  # its finally ran


def test_a_grpc_stream_is_cancelled_mid_stream(chain: Chain) -> None:
    status, body, sent = get(chain, "/stream?id=stream&count=100&interval=0.05", deadline=1)
    assert status == 504, body
    deadline = sent + 1
    found = ended(chain, "stream", within=10)
    (record,) = found["backend"]
    assert record["what"] == "Stream"
    assert record["ended"] is not None and record["ended"] <= deadline + SLACK, found
    assert 0 < record["sent"] < 100, record  # it was streaming, and stopped
    assert record["outcome"] == "cancelled", record


def test_a_call_with_nothing_left_is_never_sent(chain: Chain) -> None:
    # The service blocks past its deadline (CPU work: no await for the deadline to act at),
    # then calls the backend with nothing left: the call is refused, never sent.
    status, body, _ = get(chain, "/work?id=grpc-late&seconds=0&burn=0.6", deadline=0.3)
    assert status == 504, body
    # The gateway the same way, calling the service over httpx.
    status, body, _ = get(chain, "/work?id=http-late&seconds=0&gateway_burn=0.6", deadline=0.3)
    assert status == 504, body
    time.sleep(0.5)  # anything sent would have arrived
    # Refused (BudgetExhausted), or cancelled first by the deadline that fires as soon as the
    # loop runs again: either way, never sent.
    late = ended(chain, "grpc-late", within=5)
    assert late["backend"] == [], late
    (service,) = late["service"]
    assert service["outcome"] != "ok" and service["budget"] == 0.0, service
    late = ended(chain, "http-late", within=5)
    assert late["service"] == [] and late["backend"] == [], late
    (gateway,) = late["gateway"]
    assert gateway["outcome"] != "ok" and gateway["budget"] == 0.0, gateway


@pytest.mark.parametrize("loop_mode", [False, True], ids=["asyncio", "loop-mode"])
def test_stock_the_last_hop_runs_on_past_the_deadline(loop_mode: bool) -> None:
    # Each hop its own fixed timeout (10, 8, 6 s), nothing passed on: the client gives up
    # at 1 s, and the backend's query runs its full 3 s anyway.
    with started("stock", loop_mode=loop_mode) as chain:
        for hop, hop_stats in stats(chain, "").items():
            assert hop_stats["loop_mode"] is loop_mode, (hop, hop_stats["loop"])
        with pytest.raises(TimeoutError):
            get(chain, "/work?id=stock&seconds=3", deadline=1, timeout=1)
        deadline = time.monotonic()
        found = ended(chain, "stock", within=15)
    (backend,) = found["backend"]
    assert backend["outcome"] == "ok", backend
    assert backend["ended"] > deadline + SLACK, backend["ended"] - deadline
    budgets = [found[hop][0]["budget"] for hop in HOPS]
    assert budgets[1] > 1 and budgets[2] > 1, budgets  # each hop's own, not what was left
