"""Fuzzing time (aiowheel._virtual._fuzz, the fuzzed clock of aiowheel._virtual._virtual,
aiowheel.testing's ``seed=``, the pytest plugin's options): seeded lateness and stalls on the
virtual clock, replay from a seed, the determinism check, and six programs with known timing bugs
that pass on the exact clock and that the fuzzer finds.

The bug shapes are small on purpose: each is the timing assumption of a real bug, with nothing
else. Each must pass on the exact virtual clock (it does, every time: that clock is
deterministic), be found by seeds 0, 1, 2... within ``k_max`` (a fixed, reproducible search),
and fail again, the same way, when its seed is replayed. ``python -m tests.virtual.test_fuzz``
measures how many seeds each needs over 20 independent searches (the table on the docs'
testing-time page).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import statistics
import subprocess
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import pytest

import aiowheel.testing as testing
from aiowheel._virtual._fuzz import Fuzz
from tests.support import ROOT, Base

Program = Callable[[], Coroutine[Any, Any, Any]]


# -- the bug shapes ----------------------------------------------------------------------------


async def keepalive_reuse() -> None:
    """A server closes a connection idle for KEEPALIVE (aiohttp's handler: a ``call_at`` that
    reschedules itself if it finds it fired too soon); the client's pool reuses a connection
    idle for less than that. On time, the client's reuse (due 1 ms before the check) always
    runs first. Late, both are due in one pass: the check runs before the client's task does,
    finds the connection idle, and closes it under the request (aiohttp #9138's race; the
    handler is the one of #10149)."""
    loop = asyncio.get_running_loop()
    keepalive = 1.0
    conn = {"open": True, "busy": False, "last": loop.time()}

    def check_keepalive() -> None:
        close_time = float(conn["last"]) + keepalive
        if loop.time() < close_time or conn["busy"]:
            loop.call_at(close_time, check_keepalive)  # fired too soon: look again then
            return
        conn["open"] = False

    loop.call_at(conn["last"] + keepalive, check_keepalive)
    for _ in range(3):
        await asyncio.sleep(keepalive - 0.001)  # the pool: idle for less than the keep-alive
        assert conn["open"], "the server closed the connection the client was reusing"
        conn["busy"], conn["last"] = True, loop.time()
        await asyncio.sleep(0)  # the request and its response, over the loop
        conn["busy"], conn["last"] = False, loop.time()


async def heartbeat_reconnect() -> None:
    """A heartbeat every 0.5 s (at fixed times, not drifting) on the current connection; a
    reconnect (after the drop and its backoff) that closes the old connection and opens a new
    one, a handshake's round trip apart. On time the reconnect, due 1 ms before the third
    beat, finishes before the beat runs. Late, the beat is due in the same pass and runs
    between close and open."""
    loop = asyncio.get_running_loop()
    state: dict[str, str | None] = {"conn": "first"}

    async def heartbeat() -> None:
        beat = loop.time()
        for _ in range(4):
            beat += 0.5
            await asyncio.sleep(beat - loop.time())
            assert state["conn"] is not None, "a heartbeat on a connection being replaced"

    async def reconnect() -> None:
        await asyncio.sleep(1.499)  # the drop, noticed, and the backoff
        state["conn"] = None  # the old connection closed
        await asyncio.sleep(0)  # the new one's handshake
        state["conn"] = "second"

    await asyncio.gather(heartbeat(), reconnect())


async def timeout_drops_response() -> None:
    """A request under a 1 s timeout whose response arrives at 0.999 s (the transport takes it
    off the socket and hands it to the waiter). On time, the waiter runs before the timeout is
    due. Late, both fire in one pass: the response is taken, the task is cancelled before it
    can run, and the caller sees a TimeoutError for a request that was answered (and retries a
    request the server already executed)."""
    loop = asyncio.get_running_loop()
    received: list[str] = []

    async def request() -> str:
        answer: asyncio.Future[str] = loop.create_future()

        def deliver() -> None:  # the protocol's data_received
            received.append("200 OK")
            answer.set_result("200 OK")

        loop.call_later(0.999, deliver)
        return await answer

    try:
        async with asyncio.timeout(1.0):
            await request()
    except TimeoutError:
        assert not received, "timed out on a request whose response had been received"


async def retry_budget() -> None:
    """Three retries 100 ms apart inside a 305 ms deadline: a budget that holds only if every
    sleep returns on time. Late, the sleeps' lateness adds up past the 5 ms to spare."""
    attempts = 0

    async def connect() -> str:
        nonlocal attempts
        attempts += 1
        if attempts < 4:
            raise ConnectionRefusedError
        return "connected"

    try:
        async with asyncio.timeout(0.305):
            for _ in range(4):
                try:
                    await connect()
                    return
                except ConnectionRefusedError:
                    await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"the retry budget ran out after {attempts} attempts") from None


async def refill_by_sleeping() -> None:
    """A rate limiter that promises 10 tokens a second by adding one after each
    ``sleep(0.1)``: it counts sleeps as time. On time, 10 tokens by 1.01 s; late, each sleep
    starts where the last one ended late, and the refills fall behind the promise."""
    tokens = 0

    async def refill() -> None:
        nonlocal tokens
        while True:
            await asyncio.sleep(0.1)
            tokens += 1

    refilling = asyncio.create_task(refill())
    await asyncio.sleep(1.01)
    refilling.cancel()
    assert tokens >= 10, f"10 tokens a second promised, {tokens} granted in the first"


async def lease_through_a_pause() -> None:
    """A worker holds a 1 s lease; every 200 ms it checks the lease, then writes (a 10 ms round
    trip to the store). A pause between the check and the write (a stall: a slow callback, a
    GC pause) lands the write after the lease expired, when another worker may hold it: the
    GC-pause story of distributed locks, which fencing tokens exist for. Only stalls find it."""
    loop = asyncio.get_running_loop()
    lease_until = loop.time() + 1.0
    for _ in range(5):
        await asyncio.sleep(0.2)
        if loop.time() >= lease_until:
            return  # the lease is gone: stop writing
        await asyncio.sleep(0.01)  # the write, on its way to the store
        assert loop.time() < lease_until, "a write landed after the lease expired"


@dataclass(frozen=True)
class Shape:
    """A bug shape, the fuzz settings that find it, and the most seeds the test may need."""

    name: str
    program: Program
    settings: dict[str, float] = field(default_factory=dict)
    k_max: int = 20


SHAPES = [
    Shape("keep-alive reuse", keepalive_reuse),
    Shape("heartbeat / reconnect", heartbeat_reconnect),
    Shape("timeout drops a response", timeout_drops_response),
    Shape("retry budget", retry_budget),
    Shape("refill by sleeping", refill_by_sleeping),
    Shape("lease through a pause", lease_through_a_pause, {"stall_rate": 0.1, "stall": 0.5}, 60),
]


def fails(shape: Shape, seed: int | None) -> AssertionError | None:
    """The assertion ``shape`` fails with under ``seed`` (None: the exact clock)."""
    settings = shape.settings if seed is not None else {}
    try:
        testing.run(shape.program(), seed=seed, **settings)  # type: ignore[arg-type]
    except AssertionError as error:
        return error
    return None


def seeds_to_find(shape: Shape, first: int = 0, limit: int = 1000) -> int | None:
    """How many seeds from ``first`` on until one fails (None: none within ``limit``)."""
    for count in range(1, limit + 1):
        if fails(shape, first + count - 1) is not None:
            return count
    return None


@pytest.mark.parametrize("shape", SHAPES, ids=lambda shape: shape.name)
def test_a_bug_shape_passes_on_the_exact_clock_and_is_found_and_replayed(shape: Shape) -> None:
    assert fails(shape, None) is None
    found = seeds_to_find(shape, limit=shape.k_max)
    assert found is not None, f"{shape.name}: not found within {shape.k_max} seeds"
    seed = found - 1
    first, again = fails(shape, seed), fails(shape, seed)
    assert first is not None and again is not None
    assert str(again) == str(first)  # replayed: the same failure


# -- the schedules: late, never early, in order; stalls; advance exact -------------------------


def test_jumps_land_late_by_at_most_the_jitter_in_deadline_order(base: Base) -> None:
    async def main() -> list[tuple[float, float, int]]:
        loop = asyncio.get_running_loop()
        ran: list[tuple[float, float, int]] = []
        for number, delay in enumerate((0.05, 0.0505, 0.051, 0.2, 0.2, 0.35, 1.0)):
            when = loop.time() + delay
            loop.call_at(when, lambda w=when, n=number: ran.append((w, loop.time(), n)))
        await asyncio.sleep(1.1)
        return ran

    exact = testing.run(main(), base=base)
    for seed in range(5):
        ran = testing.run(main(), base=base, seed=seed, jitter=0.004)
        assert [number for _, _, number in ran] == list(range(7))  # deadline order, ties filed
        assert all(deadline <= at <= deadline + 0.001 + 0.004 for deadline, at, _ in ran)
        assert ran != exact
        assert ran == testing.run(main(), base=base, seed=seed, jitter=0.004)  # replayed


def test_call_soon_order_is_never_touched() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        order: list[int] = []

        def burst(start: int) -> None:
            for number in range(start, start + 5):
                loop.call_soon(order.append, number)

        loop.call_later(0.010, burst, 0)
        loop.call_later(0.011, burst, 5)
        await asyncio.sleep(1)
        return order

    for seed in range(10):
        assert testing.run(main(), seed=seed, stall_rate=0.5) == list(range(10))


def test_a_stall_runs_the_woken_tasks_late_and_the_next_timers_after_them() -> None:
    async def main() -> list[tuple[str, float]]:
        loop = asyncio.get_running_loop()
        seen: list[tuple[str, float]] = []

        async def sleeper() -> None:
            await asyncio.sleep(0.1)
            seen.append(("woken", loop.time()))

        loop.call_later(0.15, lambda: seen.append(("next timer", loop.time())))
        await sleeper()
        await asyncio.sleep(1)
        return seen

    stalled_between = []
    for seed in range(8):
        seen = dict(testing.run(main(), seed=seed, jitter=0.0, stall_rate=1.0, stall=0.5))
        assert seen["woken"] >= 0.1 and seen["next timer"] >= 0.15  # never early
        assert seen["woken"] > 0.1  # a stall after every pass: late
        ran = testing.run(main(), seed=seed, jitter=0.0, stall_rate=1.0, stall=0.5)
        if ran[0][0] == "woken" and seen["woken"] >= 0.15:
            # Stalled past the next timer's deadline after the pass that woke the task: the
            # task, queued first, ran first (as on a real loop), the timer in the next pass.
            stalled_between.append(seed)
    assert stalled_between


def test_advance_stays_exact_under_fuzz() -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        for delay in (0.2, 0.45, 0.9):
            loop.call_later(delay, lambda: None)
        readings = []
        for _ in range(3):
            await testing.advance(0.5)
            readings.append(loop.time())
        return readings

    for seed in range(5):
        readings = testing.run(main(), autojump=False, seed=seed, stall_rate=1.0, stall=10.0)
        assert readings == [0.5, 1.0, 1.5]


# -- replay and the determinism check ----------------------------------------------------------


async def _three_sleepers() -> None:
    async def sleeper(delay: float) -> None:
        for _ in range(3):
            await asyncio.sleep(delay)

    await asyncio.gather(sleeper(0.1), sleeper(0.15), sleeper(0.3))


def test_the_determinism_check_passes_a_deterministic_program_and_names_its_timers() -> None:
    trace = testing.check_determinism(_three_sleepers, seed=4, stall_rate=0.3)
    assert len([event for event in trace if event[1].startswith("sleep ")]) == 9
    assert all("test_fuzz.py" in origin for _, origin in trace if origin.startswith("sleep"))
    assert [when for when, _ in trace] == sorted(when for when, _ in trace)


def test_the_determinism_check_reports_where_two_runs_part() -> None:
    runs = iter([0.1, 0.2])

    async def main() -> None:
        await asyncio.sleep(0.05)
        await asyncio.sleep(next(runs))  # something outside the loop decides: not the seed

    with pytest.raises(testing.NondeterminismError) as caught:
        testing.check_determinism(main, seed=0)
    message = str(caught.value)
    assert "seed 0: not deterministic: the runs part at event 1" in message
    assert "first run:" in message and "second run:" in message
    assert "random" in message and "threads" in message  # why it may be


def test_first_divergence_shows_context_and_a_run_that_ended() -> None:
    a = [(0.1, "sleep a"), (0.2, "sleep b")]
    assert testing.first_divergence(a, list(a)) is None
    message = testing.first_divergence(a, a[:1], context=1)
    assert message is not None
    assert "> [1] t=0.200000 sleep b" in message and "(the run ended here)" in message


# -- the API: factories, bad input, seeds() ----------------------------------------------------


def test_a_fuzzed_factory_pickles_and_says_its_seed() -> None:
    factory = testing.virtual_loop_factory(seed=3, stall_rate=0.25)
    assert isinstance(factory, testing.FuzzedLoopFactory)
    assert factory.fuzz == Fuzz(3, 0.003, 0.25, 0.1)
    assert pickle.loads(pickle.dumps(factory)) == factory
    assert factory != testing.virtual_loop_factory(seed=4, stall_rate=0.25)
    assert "seed=3, jitter=0.003, stall_rate=0.25" in repr(factory)
    loop = factory()
    try:
        clock = testing.clock_of(loop)
        assert clock is not None and clock.fuzzed == factory.fuzz
    finally:
        loop.close()
    assert type(testing.virtual_loop_factory()) is not testing.FuzzedLoopFactory


@pytest.mark.parametrize(
    ("options", "error", "words"),
    [
        ({"seed": 1, "jitter": -0.1}, ValueError, "jitter must be a finite number >= 0"),
        ({"seed": 1, "jitter": float("nan")}, ValueError, "jitter must be a finite number"),
        ({"seed": 1, "jitter": "3ms"}, TypeError, "jitter must be a number, got str"),
        ({"seed": 1, "stall": float("inf")}, ValueError, "stall must be a finite number"),
        ({"seed": 1, "stall_rate": 1.5}, ValueError, "stall_rate must be at most 1.0"),
        ({"seed": 1, "stall_rate": -1}, ValueError, "stall_rate must be a finite number >= 0"),
        ({"seed": -1}, ValueError, "seed must be an int >= 0"),
        ({"seed": 1.5}, TypeError, "seed must be an int >= 0, got float"),
        ({"jitter": 0.01}, TypeError, "jitter fuzz the clock: give a seed as well"),
    ],
)
def test_bad_fuzz_settings_are_refused_by_name(
    options: dict[str, Any], error: type[Exception], words: str
) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(")):
        testing.virtual_loop_factory(**options)


def test_seeds_is_a_hypothesis_strategy_that_finds_and_shrinks() -> None:
    hypothesis = pytest.importorskip("hypothesis")
    found: list[int] = []

    @hypothesis.settings(max_examples=30, database=None, derandomize=True)
    @hypothesis.given(seed=testing.seeds())
    def check(seed: int) -> None:
        if fails(SHAPES[2], seed) is not None:
            found.append(seed)
            raise AssertionError(seed)

    with pytest.raises(AssertionError):
        check()
    assert found and found[-1] == min(found)  # the last one tried: the shrunk example


# -- the measurement behind the docs' table -----------------------------------------------------


def measure(runs: int = 20, limit: int = 1000) -> list[tuple[str, str, int, int, int]]:
    """Per shape: (name, settings, median seeds to find, fewest, most) over ``runs`` searches,
    search ``r`` starting at seed ``r * 100_000`` (disjoint ranges)."""
    table = []
    for shape in SHAPES:
        counts = [seeds_to_find(shape, run * 100_000, limit) or limit for run in range(runs)]
        settings = ", ".join(f"{k}={v}" for k, v in shape.settings.items()) or "jitter only"
        table.append(
            (shape.name, settings, int(statistics.median(counts)), min(counts), max(counts))
        )
    return table


# -- the pytest plugin: --aiowheel-fuzz, --aiowheel-seed, the marker, the determinism check ----

SUITE = """
import asyncio, random
import pytest


@pytest.mark.asyncio
async def test_sleeps():
    await asyncio.sleep(10)


@pytest.mark.asyncio
async def test_timeout_drops_a_response():
    loop = asyncio.get_running_loop()
    received, answer = [], loop.create_future()
    loop.call_later(0.999, lambda: (received.append(1), answer.set_result(1)))
    try:
        async with asyncio.timeout(1.0):
            await answer
    except TimeoutError:
        assert not received, "timed out on an answered request"


@pytest.mark.aiowheel_fuzz(3, jitter=0.0)
@pytest.mark.asyncio
async def test_marked_without_jitter():
    loop = asyncio.get_running_loop()
    await asyncio.sleep(0.25)
    assert loop.time() == 0.25


@pytest.mark.asyncio
async def test_unseeded_random():
    await asyncio.sleep(random.random())
"""


def _pytest(tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nasyncio_default_fixture_loop_scope = function\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "aiowheel.pytest", "-p", "no:cacheprovider",
         "-q", *args],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


@pytest.mark.once
def test_fuzz_k_finds_the_bug_prints_its_seed_and_the_seed_replays_it(tmp_path: Any) -> None:
    found = _pytest(tmp_path, "--aiowheel-fuzz", "4", "-k", "not random")
    assert found.returncode == 1, found.stdout + found.stderr
    assert "2 passed" in found.stdout and "1 failed" in found.stdout
    replay = "pytest -p aiowheel.pytest 'test_suite.py::test_timeout_drops_a_response' "
    line = next(line for line in found.stdout.splitlines() if line.startswith("aiowheel: seed"))
    assert replay + "--aiowheel-seed " in line
    assert "aiowheel fuzzing" in found.stdout  # the failure's own section says it too
    seed = line.rsplit(" ", 1)[1]
    again = _pytest(tmp_path, "--aiowheel-seed", seed, "--aiowheel-check-determinism")
    assert again.returncode == 1, again.stdout + again.stderr
    assert "FAILED test_suite.py::test_timeout_drops_a_response - AssertionError" in again.stdout
    # The determinism check: the unseeded random is caught, with both runs' context.
    assert "FAILED test_suite.py::test_unseeded_random - aiowheel --aiowheel-check-det" in (
        again.stdout
    )
    assert "the runs part at event 0" in again.stdout and "second run:" in again.stdout
    assert "2 failed, 2 passed" in again.stdout


@pytest.mark.once
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--aiowheel-seed", "3", "--aiowheel-clock", "real"),
         "--aiowheel-seed fuzzes the virtual clock, and --aiowheel-clock real asks for the real"),
        (("--aiowheel-seed", "3", "--aiowheel-jitter", "nan"),
         "--aiowheel-jitter must be a finite number >= 0, got nan"),
        (("--aiowheel-fuzz", "2", "--aiowheel-stall-rate", "-0.5"),
         "--aiowheel-stall-rate must be a finite number >= 0, got -0.5"),
        (("--aiowheel-seed", "x"), "--aiowheel-seed must be an int >= 0, got 'x'"),
    ],
)  # fmt: skip
def test_bad_fuzz_options_are_usage_errors_naming_the_option(
    tmp_path: Any, args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "test_suite.py").write_text("")
    options = ("-o", "asyncio_default_fixture_loop_scope=function", "-p", "no:cacheprovider")
    code = pytest.main(["-p", "aiowheel.pytest", *options, *args, str(tmp_path)])
    assert code == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: aiowheel.pytest: {message}" in capsys.readouterr().err


if __name__ == "__main__":  # python -m tests.virtual.test_fuzz
    print("| bug shape | fuzz settings | seeds to find it (median of 20) | fewest | most |")
    print("|---|---|---|---|---|")
    for name, settings, median, fewest, most in measure():
        print(f"| {name} | {settings} | {median} | {fewest} | {most} |")
    sys.exit(0)
