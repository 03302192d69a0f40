"""The bench runs end to end on tiny sizes (a smoke test: no timing is asserted)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import suite

pytestmark = pytest.mark.once  # the bench's output, not the interpreter: CI's first pass


def test_tiny_run_writes_every_workload_table_json_and_plot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert suite.main(["--tiny", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "[churn pending=100] rep 1/1 aiowheel/asyncio" in out  # progress is shown
    assert "loop's own" in out  # the table
    document = json.loads((tmp_path / "bench.json").read_text())
    assert set(document["raw"]) == set(suite.WORKLOADS)
    assert document["environment"]["python"]
    assert {t["target"] for t in document["targets"]}
    assert "of the project's targets met on this machine." in out
    # The closing lines say what a target is and where the list lives.
    assert "A target is a figure the project aims at on its own CI machine" in out
    assert "bench/targets.py, printed\nby `python -m bench --list-targets`" in out
    assert "[met]" not in out and "[MISSED]" not in out  # targets only when asked
    assert (tmp_path / "bench.png").stat().st_size > 1000
    storm = document["raw"]["storm"]
    assert len(storm) == 2  # the heavy and the light storm
    for param in storm:
        for contender in ("aiowheel/asyncio", "aiowheel/uvloop"):
            assert storm[param][contender]["early"] == [0.0]  # aiowheel never fires early
    # Loop mode: the loop's own API on the loop-mode twin, with its own rows and goals.
    churn = document["raw"]["churn"]["pending=100"]
    assert {"loop-mode/asyncio", "loop-mode/uvloop"} <= set(churn)
    rows = [r for r in document["medians"] if r["contender"] == "loop mode"]
    assert {r["workload"] for r in rows} >= {"churn", "timeout", "fanout", "storm", "memory"}
    assert any(t["target"].startswith("loop mode:") for t in document["targets"])
    # Every base installed here, as a peer and as a loop-mode base; never early on any.
    installed = [loop for loop in suite.LOOPS if suite._installed(loop)]
    for param in storm:
        for loop in installed:
            assert storm[param][f"loop-mode/{loop}"]["early"] == [0.0]
    for workload in ("schedule", "due"):
        (measured,) = document["raw"][workload].values()
        assert {f"loop/{loop}" for loop in installed} <= set(measured)
        assert {f"loop-mode/{loop}" for loop in installed} <= set(measured)
    peers = [t for t in document["targets"] if t["target"].startswith("vs the fastest peer")]
    assert {t["target"].split(":")[1].split()[0] for t in peers} >= {"schedule", "due", "timeout"}


def test_targets_are_listed_when_asked_with_what_a_miss_means(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite.main(["--tiny", "--workloads", "timeout", "--targets", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "Targets are the project's own aims" in out
    assert "not that anything is broken" in out
    assert "timeout CM >= 3x asyncio.timeout on asyncio:" in out
    assert "[met]" in out or "[MISSED]" in out


def test_selected_workloads_and_contenders_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    suite.main(["--tiny", "--workloads", "timeout", "--contenders", "aiowheel/asyncio",
                "--out", str(tmp_path)])  # fmt: skip
    document = json.loads((tmp_path / "bench.json").read_text())
    assert list(document["raw"]) == ["timeout"]
    assert list(document["raw"]["timeout"]["empty body"]) == ["aiowheel/asyncio"]


@pytest.mark.parametrize(
    ("flag", "value"), [("--workloads", "churn,nope"), ("--contenders", "tokio")]
)
def test_unknown_names_are_refused_with_the_valid_ones_listed(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        suite.main(["--tiny", flag, value])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "unknown" in err
    valid = suite.WORKLOADS if flag == "--workloads" else suite.CONTENDERS
    assert all(name in err for name in valid)


def test_missing_uvloop_skips_its_contenders_out_loud(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(suite, "_installed", lambda loop: loop == "asyncio")
    suite.main(["--tiny", "--workloads", "timeout", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    skipped = "uvloop is not installed here: skipping"
    skipped += " aiowheel/uvloop, loop/uvloop, loop-mode/uvloop"
    assert skipped in out
    assert "rloop is not installed here: skipping loop-mode/rloop, loop/rloop" in out
    document = json.loads((tmp_path / "bench.json").read_text())
    assert set(document["raw"]["timeout"]["empty body"]) == {
        "aiowheel/asyncio",
        "loop/asyncio",
        "loop-mode/asyncio",
    }


def test_the_virtual_time_bench_runs_checks_and_tabulates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import virtual

    out_json = tmp_path / "virtual.json"
    assert virtual.main(["--rounds", "2", "--tasks", "300", "--retries", "40",
                         "--json", str(out_json)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "FAILED" not in out
    document = json.loads(out_json.read_text())
    import aiowheel.loops

    for workload in ("sleepers", "retries"):
        results = document["results"][workload]
        # Every installed base, on a virtual clock, timed in each round.
        assert {f"aiowheel/{name}" for name in aiowheel.loops.installed()} <= set(results)
        for cell in results.values():
            assert isinstance(cell, list) and len(cell) == 2


def test_the_virtual_time_bench_fails_a_wrong_run() -> None:
    from bench import virtual

    woke = [(1.0, 1.0), (2.0, 2.0005)]
    assert virtual.check_sleepers("aiowheel/asyncio", woke, 2) is None
    assert virtual.check_sleepers("aiowheel/asyncio", woke, 3) == "2 of 3 sleepers woke"
    early = [(1.0, 0.9995), (2.0, 2.0)]
    assert virtual.check_sleepers("aiowheel/asyncio", early, 2) == (
        "1 woke early, 0 more than 0.001 s late"
    )
    late = [(1.0, 1.0), (2.0, 2.0005)]
    assert virtual.check_sleepers("looptime/asyncio", late, 2) == (
        "0 woke early, 1 more than 1e-06 s late"
    )
    unordered = [(2.0, 2.0), (1.0, 1.0)]
    assert virtual.check_sleepers("aiowheel/asyncio", unordered, 2) == (
        "sleepers woke out of deadline order"
    )


def test_the_threads_bench_runs_each_loop_in_1_and_2_threads_and_tabulates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import threads

    out_json = tmp_path / "threads.json"
    assert threads.main(["--rounds", "2", "--ops", "3000", "--requests", "1000",
                         "--json", str(out_json)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "2 vs 1" in out
    if threads.FREE_THREADED:
        assert "goal churn loop-mode/asyncio: 2 threads" in out
    else:
        assert "with the GIL, threads take turns" in out
    document = json.loads(out_json.read_text())
    for workload in ("churn", "timeouts"):
        results = document["results"][workload]
        assert {"asyncio", "uvloop", "loop-mode/asyncio", "loop-mode/uvloop"} <= set(results)
        for by_count in results.values():
            assert set(by_count) == {"1", "2"}  # (JSON keys)
            assert all(len(rates) == 2 and min(rates) > 0 for rates in by_count.values())


def test_the_threads_bench_checks_its_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A short timer that never fired, or fired early, fails the run rather than timing it."""
    import asyncio

    from bench import threads

    def lossy() -> asyncio.AbstractEventLoop:
        loop = asyncio.new_event_loop()
        real = loop.call_later

        def call_later(delay: float, callback: Any, *args: Any, **kwargs: Any) -> Any:
            # The bench's short timers are lost (not asyncio.sleep's own, which its drain
            # awaits with the same delay: losing those too would hang the run, not fail it).
            if getattr(callback, "__name__", "") == "short":
                return real(3600, callback, *args, **kwargs)
            return real(delay, callback, *args, **kwargs)

        loop.call_later = call_later  # type: ignore[method-assign]
        return loop

    monkeypatch.setattr(threads, "DRAIN", 0.1)
    with pytest.raises(AssertionError, match=r"^0 of 30 done$"):
        threads.run_threads(lossy, False, threads.churn, 3000, 1)


def test_the_floor_bench_compiles_its_stub_and_times_every_loop(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench.floor builds its C stub here and times it beside each loop and loop mode."""
    from bench import floor

    assert floor.main(["--rounds", "1", "--ops", "2000"]) == 0
    out = capsys.readouterr().out
    import aiowheel.loops

    timed = {line.split()[0] for line in out.splitlines()[1:]}
    assert {"clock", "stub"} <= timed
    for name in aiowheel.loops.installed():
        assert {f"loop/{name}", f"loop-mode/{name}"} <= timed
    # Every figure is a number of nanoseconds: "name median M (best B, worst W)".
    for line in out.splitlines()[1:]:
        median = float(line.split()[2])
        assert median > 0


def test_the_empty_iteration_bench_times_both_loops_and_says_where_their_attributes_are(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """bench.empty_iteration times stock asyncio and loop mode alternately, and a loop-mode
    loop keeps its attributes where the stock loop does (inline, from 3.13: not a dict)."""
    from bench import empty_iteration

    assert empty_iteration.main(["--rounds", "2", "--iterations", "300"]) == 0
    lines = capsys.readouterr().out.splitlines()
    where = {line.split()[2].rstrip(":"): line.split(" attributes ")[1] for line in lines[:2]}
    assert where["loop-mode"] == where["stock"], where
    for op in ("empty", "churn"):
        ratio = next(line for line in lines if line.startswith(f"{op} loop-mode/stock"))
        assert float(ratio.split()[3]) > 0
    with pytest.raises(SystemExit):
        empty_iteration.main(["--rounds", "0"])


def test_the_floor_stub_takes_call_laters_arguments_and_cancels(tmp_path: Path) -> None:
    from bench import floor

    stub = floor.build_stub(tmp_path)
    handles = [stub.call_later(30.0, print) for _ in range(3)]
    assert [handle.cancel() for handle in handles] == [True, True, True]


def test_the_threads_bench_runs_a_disturbed_round_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --quiet, a round during which other processes used a CPU is measured again."""
    from bench import threads

    busy = iter([0.0, 2.0, 2.0, 2.0])  # round 1: 2 CPU-s busy, not ours; its rerun: none
    monkeypatch.setattr(threads, "wait_until_idle", lambda limit=600.0: True)
    monkeypatch.setattr(threads, "_busy_seconds", lambda: next(busy))
    monkeypatch.setattr(threads, "_own_seconds", lambda: 0.0)
    sizes = {"churn": 1000, "timeouts": 100}
    results, tried = threads.measure(1, [1], sizes, only=["asyncio"], quiet=True)
    assert tried == 2
    assert [len(results[w]["asyncio"][1]) for w in ("churn", "timeouts")] == [1, 1]


@pytest.mark.once
def test_the_hub_bench_runs_its_three_phases_checked_on_stock_and_loop_mode(
    tmp_path: Path,
) -> None:
    """``python -m bench.hub --quick``: 100 websockets, idle, chatty and a mass expiry, on
    asyncio and on loop mode over it; every run checked (no timing asserted)."""
    import subprocess
    import sys

    out = tmp_path / "hub.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.hub", "--quick", "--json", str(out)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.rstrip().endswith("OK")
    document = json.loads(out.read_text())
    assert set(document["medians"]) == {"asyncio", "loop-mode/asyncio"}
    assert document["failures"] == []
    for name, (run,) in document["runs"].items():
        figures = run["figures"]
        assert figures["beats"] > 0  # heartbeats fired in the idle phase
        assert figures["chatty_msgs_per_s"] > 0 and figures["live_msgs"] > 0
        if name.startswith("loop-mode/"):  # never early (the bench fails a run otherwise)
            assert figures["early_beats"] == figures["early_expiries"] == 0
        # Half of the 100 connections went silent and were all closed by their idle timeout.
        assert run["server"]["expiry"]["expiries"]["n"] == 50


def test_list_targets_prints_every_target_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench.targets import PEER_TARGETS, TARGETS

    assert suite.main(["--list-targets", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Targets are the project's own aims" in out
    lines = [line for line in out.splitlines() if line.startswith("  ")]
    expected = sum(len(target.loops) for target in TARGETS) + len(PEER_TARGETS)
    assert len(lines) == expected
    assert "  fire storm on uvloop: 0 early firings" in lines
    assert (
        "  churn @1,000,000 pending (100,000 with --quick) >= 3x loop.call_later on asyncio"
        in lines
    )
    assert not any("{" in line for line in lines)  # every placeholder filled
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_a_peer_only_loop_has_its_own_row_in_the_table() -> None:
    # rsloop runs its own timers only (no loop mode over it): its figures must reach the
    # table and bench.json's medians, beside the bases' own rows (they once did not).
    results = suite.Results()
    results.add("schedule", "p", "loop/rsloop", {"ops_per_s": 2.0})
    results.add("schedule", "p", "loop/rsloop", {"ops_per_s": 4.0})
    results.add("schedule", "p", "loop-mode/asyncio", {"ops_per_s": 9.0})
    rows = suite.table(results)
    (peer,) = [r for r in rows if r["loop"] == "rsloop"]
    assert peer["contender"] == "API" and peer["aiowheel"] is None and peer["baseline"] == 3.0


def test_the_cancels_check_finds_every_cancel_held_on_the_bases_installed_here(
    tmp_path: Path,
) -> None:
    # python -m bench.cancels: a cancelled handle must never reach the exception handler, on
    # the base's own loop, loop mode with and without near timers on its heap, and the
    # aiowheel.loops factory (bracio 0.0.1 breaks it on its own heap; it is not installed here).
    from bench import cancels

    out = tmp_path / "cancels.json"
    assert cancels.main(["--cancels", "1000", "--json", str(out)]) == 0
    found = json.loads(out.read_text())["reports"]
    assert "asyncio" in found
    for name, loops in found.items():
        assert len(loops) == 4, name
        for label, counts in loops.items():
            assert counts == {"timers": 0, "call_soon": 0}, (name, label, counts)


def test_the_redis_signals_bench_loses_nothing_and_tabulates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 51's workload on small sizes, against a real redis-server it starts itself:
    # every operation of every worker woken once by its signal from this process.
    from bench import redis_signals
    from tests.support import need_redis

    need_redis()
    out_file = tmp_path / "redis.json"
    argv = ["--quick", "--ops", "400", "--keys", "40", "--burst", "5000", "--json", str(out_file)]
    assert redis_signals.main(argv) == 0
    out = capsys.readouterr().out
    assert "latency send() -> completion in another process" in out
    result = json.loads(out_file.read_text())
    assert result["woken"] == 2 * 400 and result["lost"] == 0 and result["twice"] == 0
    assert result["expired"] == 0 and result["errors"] == []
    assert result["publish"]["dropped"] == 0 and result["publish"]["burst_per_s"] > 0
    assert 0 < result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert 0.9 <= result["bytes_per_op"]["ratio"] <= 1.1  # signals cost nothing per wait


def test_the_outage_bench_loses_nothing_through_the_stream(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Issue 62's row: Redis SIGKILLed and restarted while a publisher sends; the stream loses
    # nothing and applies nothing twice in any phase (pub/sub is measured, not held to it).
    from bench import signals_outage
    from tests.support import need_redis

    need_redis()
    out_file = tmp_path / "outage.json"
    assert signals_outage.main(["--quick", "--json", str(out_file)]) == 0
    assert "stream during" in capsys.readouterr().out
    result = json.loads(out_file.read_text())
    assert set(result) == {"pubsub", "stream"}
    for phase in ("before", "during", "after"):
        figures = result["stream"][phase]
        assert figures["signals"] > 0 and figures["lost"] == 0 and figures["twice"] == 0, result


def test_the_chain_bench_runs_stock_and_propagated_and_tabulates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Three real processes per chain (examples/chain): needs grpcio, as tests/integration/
    # test_chain.py does (skipped without it unless AIOWHEEL_REQUIRE_GRPC is set).
    import importlib.util
    import os

    if importlib.util.find_spec("grpc") is None:
        assert os.environ.get("AIOWHEEL_REQUIRE_GRPC", "") in ("", "0"), "grpcio is missing"
        pytest.skip("grpcio is not installed (pip install -e '.[grpc]')")
    from bench import chain

    assert chain.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "round 1/1 stock:" in out and "round 1/1 propagated:" in out  # progress is shown
    assert "| figure | stock | propagated | goal |" in out  # the tables
    assert "| none, us | layers, us | propagated, us | propagated / none | goal |" in out
    raw = json.loads((tmp_path / "chain.json").read_text())["raw"]
    assert set(raw) == {"stock", "propagated", "cpu"}
    for mode in ("stock", "propagated"):
        (figures,) = raw[mode]
        assert figures["requests"] == 10 and figures["still_running"] == 0, figures
    (cpu,) = raw["cpu"]
    assert cpu["not_ok"] == 0 and cpu["none_cpu_us"] > 0 and cpu["propagated_cpu_us"] > 0
    assert cpu["layers_cpu_us"] > 0 and cpu["layers_ratio"] > 0 and cpu["over_layers_ratio"] > 0
    # No timing is asserted but the one a loaded machine cannot blur: stock's queries run their
    # full 2 s, past the 1 s deadline at two hops (about 2 handler-seconds a request).
    stock, propagated = raw["stock"][0], raw["propagated"][0]
    assert stock["below_s_per_request"] > 0.5 > propagated["below_s_per_request"], raw


def test_the_database_bench_stops_every_query_it_should_and_tabulates(tmp_path: Path) -> None:
    # A real PostgreSQL (tests/postgres.py): skipped without one unless AIOWHEEL_REQUIRE_POSTGRES.
    from bench import database
    from tests.postgres import need_postgres

    need_postgres()
    database.main(["--requests", "3", "--work", "2", "--deadline", "0.2", "--out", str(tmp_path)])
    rows = json.loads((tmp_path / "database.json").read_text())
    assert len(rows) == 2 * len(database.STYLES)
    assert "| style | loop | slow burst |" in (tmp_path / "database.md").read_text()
    for row in rows:
        assert row["slow"] == [504] * 3 and row["quick"] == [200] * 3, row
        assert row["leaked"] == 0, row
        # Not timing, but the 2 s of work that never ran: stopped queries end long before it
        # (a loaded machine's bound), and the sync styles without the adapter run it all.
        if row["style"] == "the same without stop_at_deadline":
            assert row["ran_on"] > 1.0, row
        else:
            assert row["ran_on"] < 1.0, row


def test_the_chain_bench_weighs_and_draws_the_deadlines_metrics(tmp_path: Path) -> None:
    # Issue 63: the chain's deadlines instrumented (each process's /metrics, scraped over
    # HTTP), their CPU per request against the same chain without, and the run drawn.
    import importlib.util
    import os

    if importlib.util.find_spec("grpc") is None:
        assert os.environ.get("AIOWHEEL_REQUIRE_GRPC", "") in ("", "0"), "grpcio is missing"
        pytest.skip("grpcio is not installed (pip install -e '.[grpc]')")
    from bench import chain

    out = str(tmp_path)
    assert chain.main(["--metrics-cost", "--quick", "--out", out]) == 0
    cost = json.loads((tmp_path / "chain-metrics-cost.json").read_text())
    (figures,) = cost["rounds"]
    assert figures["off_cpu_us"] > 0 and figures["on_cpu_us"] > 0 and figures["not_ok"] == 0
    assert cost["summary"]["on_over_off"]["median"] > 0  # measured, not judged: a shared machine
    argv = ["--dashboard", "--duration", "3", "--rate", "12", "--work", "1.5", "--out", out]
    assert chain.main(argv) == 0
    run = json.loads((tmp_path / "chain-dashboard.json").read_text())
    assert 200 in run["statuses"] and 504 in run["statuses"], run["statuses"]
    assert run["points"] >= 2  # the hops were scraped while the load ran
    assert (tmp_path / "chain-dashboard.png").stat().st_size > 10_000


def test_the_deadline_metrics_bench_measures_off_on_and_every_request(tmp_path: Path) -> None:
    from bench import deadline_metrics

    argv = ["--requests", "300", "--rounds", "1", "--out", str(tmp_path)]
    assert deadline_metrics.main(argv) == 0
    document = json.loads((tmp_path / "deadline-metrics.json").read_text())
    summary = document["summary"]
    assert set(summary) == {"off", "on", "on_every_request", "client_sent_on"}
    assert all(figures["median"] > 0 for figures in summary.values())
    from aiowheel._deadlines._seen import SEEN

    assert SEEN.watcher is None  # every instrumentation it made was closed


def test_the_cost_curve_bench_fires_the_due_stream_on_every_contender_and_draws(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import cost_curve

    out_json, out_png = tmp_path / "curve.json", tmp_path / "curve.png"
    assert cost_curve.main(["--sizes", "1000,5000", "--seconds", "0.5", "--due-rate", "2000",
                            "--churn-rate", "2000", "--json", str(out_json),
                            "--plot", str(out_png)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    document = json.loads(out_json.read_text())
    expected = [c for c in cost_curve.CONTENDERS if cost_curve.installed(c)]
    assert "loop-mode/asyncio" in expected and "aiowheel/asyncio" in expected
    rows = {(r["contender"], r["n"]): r for r in document["rows"]}
    assert set(rows) == {(c, n) for c in expected for n in (1000, 5000)}, document["skipped"]
    for (contender, _), row in rows.items():
        assert row["due_filed"] == 1000  # 2000/s over 0.5 s
        assert row["due_fired"] == 1000, contender  # every due timer fired
        assert row["due_per_s"] > 1000  # most of them inside the window
        assert row["churned"] > 0 and row["churn_per_s"] > 0
        assert row["file_s"] > 0 and row["p99_ms"] >= row["p50_ms"] >= 0
        if not contender.endswith("uvloop") or contender.startswith("loop-mode"):
            assert row["early"] == 0, contender  # uvloop's own rounds to the millisecond
    assert {v["contender"] for v in document["verdicts"]} == set(expected)
    assert "| contender | churn small/large |" in out and "| loop-mode/asyncio | 1k |" in out
    assert document["environment"]["python"] and document["tick_ms"] == 1.0
    assert out_png.stat().st_size > 1000
    # A run's JSON is tabulated, judged and drawn again without running anything.
    assert (
        cost_curve.main(["--from-json", str(out_json), "--plot", str(tmp_path / "again.png")]) == 0
    )
    assert "| loop-mode/asyncio | 5k |" in capsys.readouterr().out
    assert (tmp_path / "again.png").stat().st_size > 1000


def test_the_cost_curve_bench_skips_what_would_pass_its_memory_cap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench import cost_curve

    # 10M timers at 300 bytes or more each would pass a cap of 1 GiB: skipped, never started.
    argv = ["--sizes", "10000000", "--contenders", "loop-mode/asyncio", "--max-gb", "1"]
    assert cost_curve.main(argv) == 0
    out = capsys.readouterr().out
    assert "loop-mode/asyncio at 10M: skipped:" in out and "> --max-gb 1" in out


def test_the_chain_bench_s_instruction_reader_counts_what_a_process_runs(tmp_path: Path) -> None:
    # bench.chain --callgrind: each process under callgrind, its instructions read by a dump per
    # read (callgrind zeroes its counters at each). One small real process stands for a chain:
    # a read before and after it works, and the counts add up; the dumps are kept when asked.
    import shutil
    import subprocess
    import sys
    import time

    from bench.chain import CALLGRIND, chain_instructions
    from examples.chain.run import Chain

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        pytest.skip("valgrind is not installed (apt install valgrind)")
    out, keep = tmp_path / "out", tmp_path / "keep"
    out.mkdir()
    keep.mkdir()
    work = tmp_path / "go"
    program = (
        "import os, time\n"
        f"while not os.path.exists({str(work)!r}): time.sleep(0.01)\n"
        "sum(range(3_000_000))\n"
        "time.sleep(300)\n"
    )
    wrap = [word.format(out=out) for word in CALLGRIND]
    process = subprocess.Popen([*wrap, sys.executable, "-c", program], stderr=subprocess.DEVNULL)
    try:
        chain = Chain({}, {"worker": process})  # type: ignore[dict-item]
        read = chain_instructions(chain, out, keep, "one")
        time.sleep(3)  # started under valgrind, waiting
        idle = read()["worker"]
        work.touch()
        for _ in range(600):  # bounded: the sum takes seconds under valgrind
            time.sleep(0.1)
            if read()["worker"] - idle > 30:  # millions of instructions: the sum has run
                break
        counted = read()["worker"] - idle
        assert counted > 30, counted
        assert not list(out.glob("cg.*.*"))  # each dump read, and moved out
        assert len(list(keep.glob("one.worker.*"))) >= 3
    finally:
        process.kill()
        process.wait()
