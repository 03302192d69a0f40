"""The two builds: which one runs, the switch between them, and that bad input reads the same.

CI sets ``AIOWHEEL_EXPECT_COMPILED`` (1 or 0) so that a silent fallback to pure Python on a
machine that can compile fails the run instead of passing slowly.
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import sys

import pytest

import aiowheel
from aiowheel._common._build import COMPILED_MODULES
from tests.support import ROOT, json_from_build

# Each entry is evaluated in a fresh interpreter under both builds; the outcome (exception type
# and message, or the repr of the result) must be identical.
BAD_INPUT_PROBES = [
    "Timer(tick='1')",
    "Timer(tick=0)",
    "Timer(tick=True)",
    "Timer(slots=64.0)",
    "Timer(slots='64')",
    "Timer(slots=3)",
    "Timer(max_pending=0)",
    "Timer(max_pending=1.5)",
    "Timer(max_pending='x')",
    "Timer(max_batch=0)",
    "Timer(max_batch=1.5)",
    "Wheel(slots=64.0)",
    "Wheel(start=1.5)",
    "Wheel().add(Entry(), 1.0)",
    "Wheel().add(Entry(), '1')",
    "Wheel().advance(None)",
    "Wheel().advance(-1)",
    "run(lambda t: t.call_later('5', print))",
    "run(lambda t: t.call_later(None, print))",
    "run(lambda t: t.call_later(nan, print))",
    "run(lambda t: t.call_at('5', print))",
    "run(lambda t: t.call_at(b'5', print))",
    "run(lambda t: t.call_at(nan, print))",
    "run(lambda t: t.call_later(1, 'not callable'))",
    "run(lambda t: t.call_later(10**400, print).when())",
    "run(lambda t: t.call_later(Fraction(1, 2), print).when() > 0)",
    "run(lambda t: t.call_later(Decimal(1), print))",
    "run(lambda t: t.timeout('5'))",
    "run(lambda t: t.timeout(nan))",
    "run(lambda t: t.timeout_at([]))",
    "run(lambda t: t.timeout_at(nan))",
    "run(lambda t: t.schedule_at('x', print))",
    "run(lambda t: t.every('1', print))",
    "run(lambda t: t.every(0, print))",
    "run(lambda t: t.every(1, print, missed=3))",
    "run(lambda t: t.every(1, print, missed='often'))",
    "run(lambda t: t.every(1, print, start='now'))",
    "run(lambda t: t.every(1, print, start=nan))",
    "run(lambda t: t.interval(-1))",
    "run(lambda t: t.watchdog(True, print))",
    "run(lambda t: t.watchdog(1, 5))",
    "arun(lambda t: t.sleep('1'))",
    "arun(lambda t: t.sleep(nan))",
    "arun(lambda t: t.sleep_until(object()))",
    "arun(lambda t: t.wait_for(asyncio.sleep(0), '1'))",
    "arun(reschedule_to('later'))",
    "arun(reschedule_to(nan))",
    # loop mode's call_at / call_later (aiowheel._loopmode._loopcalls), in front of the engine
    "lrun(lambda l: l.call_later('5', print))",
    "lrun(lambda l: l.call_later(None, print))",
    "lrun(lambda l: l.call_later(nan, print))",
    "lrun(lambda l: l.call_at('5', print))",
    "lrun(lambda l: l.call_at(b'5', print))",
    "lrun(lambda l: l.call_at(nan, print))",
    "lrun(lambda l: l.call_at(None, print))",
    "lrun(lambda l: type(l.call_later(1, 'not callable')).__name__)",
    "lrun(lambda l: type(l.call_later(10**400, print)).__name__)",
    "lrun(lambda l: type(l.call_later(30, print)).__name__)",
    "lrun(lambda l: type(l.call_later(0.001, print)).__name__)",
    "lclosed(lambda l: l.call_later(30, print))",
    "lclosed(lambda l: l.call_at(l.time() + 30, print))",
]

_PROBE_SCRIPT = r"""
import asyncio, json, sys
from decimal import Decimal
from fractions import Fraction
from math import nan
from aiowheel import COMPILED, Timer, new_event_loop
from aiowheel._time._wheel import Entry, Wheel

def run(use):
    async def main():
        async with Timer() as t:
            return use(t)
    return asyncio.run(main())

def arun(use):
    async def main():
        async with Timer() as t:
            return await use(t)
    return asyncio.run(main())

def lrun(use):
    loop = new_event_loop()
    async def main():
        return use(loop)
    try:
        return loop.run_until_complete(main())
    finally:
        loop.close()

def lclosed(use):
    loop = new_event_loop()
    loop.close()
    return use(loop)

def reschedule_to(when):
    async def use(t):
        async with t.timeout(10) as cm:
            cm.reschedule(when)
    return use

out = []
for probe in json.loads(sys.argv[1]):
    try:
        out.append(["ok", repr(eval(probe))])
    except Exception as exc:
        out.append([type(exc).__name__, str(exc)])
print(json.dumps({"compiled": COMPILED, "outcomes": out}))
"""


def _probe(no_extensions: bool) -> dict[str, object]:
    result: dict[str, object] = json_from_build(
        no_extensions, _PROBE_SCRIPT, json.dumps(BAD_INPUT_PROBES)
    )
    return result


def test_the_expected_build_is_running() -> None:
    expected = os.environ.get("AIOWHEEL_EXPECT_COMPILED")
    if os.environ.get("AIOWHEEL_NO_EXTENSIONS", "") not in ("", "0"):
        assert aiowheel.COMPILED is False
    elif expected is not None:
        assert aiowheel.COMPILED is (expected == "1")
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for name in COMPILED_MODULES:
        origin = sys.modules[f"aiowheel.{name}"].__spec__.origin  # type: ignore[union-attr]
        assert origin is not None
        assert origin.endswith(suffixes) is aiowheel.COMPILED, origin
    if not aiowheel.COMPILED:  # the switch reaches every folder: no extension at any depth
        extensions = [
            name
            for name, module in sys.modules.items()
            if name.startswith("aiowheel.")
            and str(getattr(module.__spec__, "origin", "")).endswith(suffixes)
        ]
        assert extensions == []


def test_the_switch_loads_every_module_from_source() -> None:
    outcome = _probe(no_extensions=True)
    assert outcome["compiled"] is False


def test_bad_input_reads_the_same_in_both_builds() -> None:
    compiled = _probe(no_extensions=False)
    if not compiled["compiled"]:
        assert os.environ.get("AIOWHEEL_EXPECT_COMPILED") != "1"
        pytest.skip("no compiled build is installed here")
    pure = _probe(no_extensions=True)
    assert pure["compiled"] is False
    for probe, got, want in zip(
        BAD_INPUT_PROBES,
        compiled["outcomes"],
        pure["outcomes"],
        strict=True,  # type: ignore[call-overload]
    ):
        assert got == want, f"{probe}: compiled {got} vs pure Python {want}"
    # No mypyc wording leaked anywhere, and the probes really probe bad input.
    messages = " ".join(message for _, message in pure["outcomes"])  # type: ignore[union-attr]
    assert "object expected" not in messages
    accepted = {
        probe
        for probe, (kind, _) in zip(BAD_INPUT_PROBES, pure["outcomes"], strict=True)  # type: ignore[call-overload]
        if kind == "ok"
    }
    # The ok ones, by name: the huge int and the Fraction (on a Timer and, as a float no earlier
    # than it, on a loop-mode loop's wheel); loop mode's non-callable (accepted, as asyncio's
    # call_later accepts it), and a wheel and a near handle as controls. Any other probe must
    # raise.
    assert accepted == {
        "run(lambda t: t.call_later(10**400, print).when())",
        "lrun(lambda l: type(l.call_later(10**400, print)).__name__)",
        "run(lambda t: t.call_later(Fraction(1, 2), print).when() > 0)",
        "lrun(lambda l: type(l.call_later(1, 'not callable')).__name__)",
        "lrun(lambda l: type(l.call_later(30, print)).__name__)",
        "lrun(lambda l: type(l.call_later(0.001, print)).__name__)",
    }, pure["outcomes"]


# The same seeded random operations on a loop-mode loop with a virtual clock, in both builds:
# scheduling through the loop (wheel and near deadlines, ints, past ones) and the API,
# cancelling, the loop blocked for a while, sleeps. The log of what ran, when, in what order,
# must be the same; and in each build nothing ran early, twice, or after being cancelled.
_RANDOM_SCRIPT = r"""
import asyncio, json, random, sys
sys.path.insert(0, sys.argv[2])
import aiowheel
from aiowheel import timer_of
from tests.support import VirtualClockLoop

def main(seed):
    rng = random.Random(seed)
    loop = aiowheel.new_event_loop(VirtualClockLoop)
    timer = timer_of(loop)
    log, handles, cancelled, done = [], {}, set(), set()

    def fired(key):
        done.add(key)
        log.append(["ran", key, round(loop.time(), 9), loop.time() >= handles[key].when()])

    async def ops():
        for key in range(3000):
            op = rng.random()
            delay = rng.choice([rng.uniform(0, 0.02), rng.uniform(0, 3), rng.randint(0, 2),
                                -1.0, 1e-4, 200.0])
            if op < 0.35:
                handles[key] = loop.call_later(delay, fired, key)
            elif op < 0.55:
                handles[key] = loop.call_at(loop.time() + delay, fired, key)
            elif op < 0.65:
                handles[key] = timer.call_later(abs(delay), fired, key)
            elif op < 0.85 and handles:
                victim = rng.choice(sorted(handles))
                if victim not in cancelled and victim not in done:
                    handles[victim].cancel()
                    cancelled.add(victim)
                    log.append(["cancel", victim, round(loop.time(), 9)])
            elif op < 0.93:
                loop.advance(rng.uniform(0, 0.05))  # a callback that blocks the loop
            else:
                await asyncio.sleep(rng.uniform(0, 0.3))
            log.append(["pending", len(timer)])
        await asyncio.sleep(300)

    loop.run_until_complete(ops())
    stats = timer.stats()
    loop.close()
    ran = [entry[1] for entry in log if entry[0] == "ran"]
    return {
        "compiled": aiowheel.COMPILED,
        "log": log,
        "early": [entry for entry in log if entry[0] == "ran" and not entry[3]],
        "twice": len(ran) - len(set(ran)),
        "ran_cancelled": sorted(set(ran) & cancelled),
        "lost": sorted(set(handles) - cancelled - set(ran)),
        "stats": [stats.pending, stats.fired, stats.cancelled],
    }

print(json.dumps([main(seed) for seed in json.loads(sys.argv[1])]))
"""


def _random_run(no_extensions: bool, seeds: list[int]) -> list[dict[str, object]]:
    result: list[dict[str, object]] = json_from_build(
        no_extensions, _RANDOM_SCRIPT, json.dumps(seeds), str(ROOT), timeout=300
    )
    return result


def test_random_operations_run_the_same_in_both_builds() -> None:
    seeds = [1, 2, 3]
    compiled = _random_run(False, seeds)
    pure = _random_run(True, seeds)
    assert all(run["compiled"] is False for run in pure)
    if not all(run["compiled"] for run in compiled):
        assert os.environ.get("AIOWHEEL_EXPECT_COMPILED") != "1"
    for seed, got, want in zip(seeds, compiled, pure, strict=True):
        for run in (got, want):
            assert run["early"] == [] and run["twice"] == 0, seed
            assert run["ran_cancelled"] == [] and run["lost"] == [], seed
        assert got["log"] == want["log"], f"seed {seed}: the builds differ"
        assert got["stats"] == want["stats"], seed
        ran = sum(1 for entry in got["log"] if entry[0] == "ran")  # type: ignore[union-attr,index]
        assert ran > 500, ran  # the run really exercised firing


@pytest.mark.anyio
async def test_the_timer_repr_names_the_build() -> None:
    async with aiowheel.Timer() as timer:
        build = "compiled" if aiowheel.COMPILED else "pure-Python"
        assert repr(timer).endswith(f"pending=0 build={build}>"), repr(timer)


@pytest.mark.parametrize("use_uvloop", [False, True], ids=["asyncio", "uvloop"])
def test_cancelling_and_closing_emit_no_warnings(use_uvloop: bool) -> None:
    """Every way an aiowheel coroutine can be interrupted, under warnings-as-errors.

    (mypyc's coroutines throw into what they await with the three-argument throw() that
    Python 3.12 deprecates; the compiled build must not await anything that way.)
    """
    import asyncio
    import warnings

    async def main() -> None:
        timer = aiowheel.get_timer()
        sleeper = asyncio.ensure_future(timer.sleep(10))
        until = asyncio.ensure_future(timer.sleep_until(timer.time() + 10))

        async def ticks() -> None:
            async for _ in timer.interval(10):
                pass

        interval = asyncio.ensure_future(ticks())
        scheduled = timer.schedule_later(0, asyncio.sleep, 10)
        await asyncio.sleep(0.01)
        for task in (sleeper, until, interval, scheduled):
            task.cancel()
        for task in (sleeper, until, interval, scheduled):
            with pytest.raises(asyncio.CancelledError):
                await task
        with pytest.raises(TimeoutError):
            await timer.wait_for(asyncio.sleep(10), 0.01)
        with pytest.raises(TimeoutError):
            await timer.wait_for(asyncio.sleep(10), 0)
        with pytest.raises(TimeoutError):
            async with timer.timeout(0.01):
                await asyncio.sleep(10)
        async with aiowheel.Timer() as own:
            await own.sleep(0.001)
        timer.call_later(10, print)  # pending at exit: asyncio.run cancels the reaper

    import uvloop

    factory = uvloop.new_event_loop if use_uvloop else asyncio.new_event_loop
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(main())
