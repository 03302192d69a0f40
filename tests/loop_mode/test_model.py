"""The harness that would have found #35's defects: random operations over the configuration
space, checked against a model, on every installed base and (CI's two passes) both builds.

Configurations: ticks from 1e-6 to 1 s, virtual clocks started from 0 to 2e9, and one run whose
clock is pushed past 2**53 ms and 2**62 ticks halfway. Operations: loop mode's ``call_at`` /
``call_later`` with every kind of number users pass (int, float, bool, numpy scalars,
Fraction, Decimal), a Timer of its own beside the loop's wheel (closed in the middle of a due
batch once), heartbeats beside loop timers, cancels before and after a timer ran, a timeout
rescheduled, sleeps, and *stalls* (the clock leaps inside a callback, as if it had blocked the
loop: every pass after one is a late pass).

The model is the guarantees page: a timer runs exactly once unless ``cancel()`` returned True
first, never before its deadline by the loop's clock, no later than its deadline's tick (or the
end of a stall that covered it) plus the float spacing there; within one wheel, never before a
timer of an earlier deadline that was already pending; ``cancel()`` after a run returns False
and ``cancelled()`` stays False; nothing pending at the end. :func:`run_model` returns the log
it checked, so that the builds can be compared line for line (``test_the_builds_agree``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import sys
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

import aiowheel
import aiowheel.testing
from tests.loop_mode.test_nothing_lost import _finishes
from tests.support import ROOT

# (tick, virtual start, push the clock past 2**62 ticks halfway)
CONFIGS = [
    (1e-6, 0.0, False),
    (1e-6, 2e9, False),
    (1e-4, 1e8, False),
    (1e-3, 1.7e9, False),
    (0.05, 1e9, False),
    (1.0, 2e9, False),
    (1e-3, 0.0, True),
]


def _delay_kinds() -> list[Any]:
    kinds: list[Any] = [int, float, bool, Fraction, Decimal]
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with matplotlib, a dev extra
        return kinds
    return [*kinds, numpy.int64, numpy.float32, numpy.float64]


def _as_kind(kind: Any, seconds: float) -> Any:
    if kind is bool:
        return seconds >= 0.5
    if kind is int:
        return round(seconds)
    if kind is Fraction:
        return Fraction(seconds).limit_denominator(10**6)
    if kind is Decimal:
        return Decimal(repr(seconds))
    return kind(seconds)


def run_model(tick: float, start: float, far: bool, seed: int, base: Any = None) -> list[Any]:
    """One seeded run; AssertionError on the first broken rule; the log of what ran."""
    rng = random.Random(seed)
    kinds = _delay_kinds()
    factory = aiowheel.testing.virtual_loop_factory(base, start=start, tick=tick, autojump=True)
    log: list[Any] = []

    def spacing(at: float) -> float:
        """Four times the float spacing of the clock at ``at`` (its reading's own error)."""
        return 4 * max(abs(at), 1.0) * 2.0**-52

    async def main() -> None:
        loop = asyncio.get_running_loop()
        errors: list[Any] = []
        loop.set_exception_handler(lambda _, context: errors.append(context))
        clock = aiowheel.testing.clock_of(loop)
        assert clock is not None
        own = aiowheel.timer_of(loop)
        assert own is not None
        other = aiowheel.Timer(tick=tick)
        wheels = {"loop": own, "timer": other}
        handles: dict[int, Any] = {}
        deadline: dict[int, float] = {}
        wheel_of: dict[int, str] = {}
        cancelled: set[int] = set()
        ran: dict[int, float] = {}
        stalls: list[tuple[float, float]] = []
        closed_in_batch: list[Any] = []

        def latest_run_time(when: float) -> float:
            # The loop is free a tick after the deadline, unless a stall began before then:
            # then a tick after it ends (stalls in a row add up).
            bound = when + tick + spacing(when)
            for begin, end in stalls:  # in the order they happened
                if begin <= bound and end + tick > bound:
                    bound = end + tick + spacing(end)
            return bound

        def fire(key: int) -> None:
            now = loop.time()
            assert key not in ran, f"{key} ran twice"
            assert key not in cancelled, f"{key} ran after cancel() returned True"
            ran[key] = now  # first: the rest of the run goes on if an assertion fails
            log.append(["ran", key, now])
            when = deadline[key]
            assert now >= when, f"{key} early: {now} < {when}"
            assert now <= latest_run_time(when), f"{key} late: {now} for {when}"
            name = wheel_of[key]
            for other_key, other_when in deadline.items():
                if (
                    other_when < when
                    and wheel_of[other_key] == name
                    and other_key not in ran
                    and other_key not in cancelled
                    and other_key < key  # filed before this one was
                    and handles[other_key] is not None
                    and not handles[other_key].cancelled()
                ):
                    raise AssertionError(f"{key} ({when}) ran before {other_key} ({other_when})")

        def stall(seconds: float) -> None:
            begin = loop.time()
            clock._now += seconds  # a callback that blocked the loop (test-only reach)
            stalls.append((begin, clock._now))
            log.append(["stall", begin, clock._now])

        def close_other() -> None:
            if not other.closed():
                for handle in other.close():
                    closed_in_batch.append(handle)

        beats: list[float] = []
        beat = own.every(max(tick * 7, 0.003), lambda: beats.append(loop.time()))
        key = 0
        pushed = False
        for step in range(260):
            op = rng.random()
            seconds = rng.choice([rng.uniform(0, 0.05), rng.uniform(0, 3), 1e-6, 0.0, 30.0])
            kind = rng.choice(kinds)
            delay = _as_kind(kind, seconds)
            key += 1
            handles[key] = None
            if op < 0.3:
                handle = loop.call_later(delay, fire, key)
                wheel_of[key], ahead = "loop", float(delay)
            elif op < 0.45:
                handle = loop.call_at(loop.time() + float(seconds), fire, key)
                wheel_of[key], ahead = "loop", float(seconds)
            elif op < 0.55 and not other.closed():
                handle = other.call_later(seconds, fire, key)
                wheel_of[key], ahead = "timer", seconds
            elif op < 0.7 and len(handles) > 1:
                victim = rng.randrange(1, key)
                if handles.get(victim) is not None:
                    expected = victim not in ran and not handles[victim].cancelled()
                    answer = handles[victim].cancel()
                    assert answer is expected, (
                        victim,
                        answer,
                        wheel_of.get(victim),
                        handles[victim],
                        loop.time(),
                    )
                    if answer:
                        cancelled.add(victim)
                    # Cancelled after it ran: False, and it does not say it was cancelled.
                    assert handles[victim].cancelled() is (victim not in ran)
                    log.append(["cancel", victim, answer])
                continue
            elif op < 0.75:
                when = loop.time() + rng.uniform(0, 0.2)
                loop.call_at(when, stall, rng.uniform(0, 0.5))
                continue
            elif op < 0.78 and step > 100 and not other.closed():
                loop.call_at(loop.time() + 0.01, close_other)
                continue
            elif op < 0.82:
                async with asyncio.timeout(5) as scope:
                    scope.reschedule(loop.time() + 10)
                    await asyncio.sleep(float(seconds) / 10)
                continue
            else:
                await asyncio.sleep(rng.uniform(0, 0.05))
                continue
            handles[key] = handle
            deadline[key] = handle.when()
            # Never filed earlier than asked (float32 delays are coarser than the clock).
            asked = loop.time() + ahead * (1 - 2.0**-23)
            assert deadline[key] >= asked - spacing(asked), (delay, deadline[key])
            if far and not pushed and step == 130:
                pushed = True
                # A stall, not an advance: the heartbeat would run at each of its deadlines
                # on the way (7e17 of them).
                loop.call_soon(stall, 5e15 if tick >= 1e-3 else 5e12)
                await asyncio.sleep(0)
        await asyncio.sleep(100)
        beat.cancel()
        if errors:
            raise AssertionError(errors[0].get("exception") or errors[0]["message"])
        lost = [
            k
            for k, h in handles.items()
            if h is not None and k not in ran and k not in cancelled and not h.cancelled()
        ]
        assert not lost, f"lost: {lost[:5]}"
        for handle in closed_in_batch:
            assert handle.cancelled()
        assert all(b >= a for a, b in itertools.pairwise(beats))
        assert len(own) == 0, [t for t in aiowheel.pending_timers()]
        if not other.closed():
            assert len(other) == 0
            await other.aclose()
        log.append(["end", len(ran), len(cancelled), len(beats), wheels["loop"].stats().fired])

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
    return log


@pytest.mark.bases("asyncio", "uvloop")
@pytest.mark.parametrize(("tick", "start", "far"), CONFIGS, ids=lambda v: repr(v))
def test_random_operations_keep_every_guarantee(
    tick: float, start: float, far: bool, base: Any
) -> None:
    seed = hash((tick, start, far)) & 0xFFFF
    # A hang, not a slow run: 12 s alone on 3.11 for the largest, over 30 s in CI's first
    # pass while the later passes' venvs built beside it.
    log = _finishes(lambda: run_model(tick, start, far, seed=seed, base=base), within=180.0)
    ran = sum(1 for entry in log if entry[0] == "ran")
    assert ran > 60, ran  # the run really exercised firing


_SCRIPT = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from tests.loop_mode.test_model import CONFIGS, run_model
import aiowheel
print(json.dumps([aiowheel.COMPILED] + [run_model(*config, seed=7) for config in CONFIGS]))
"""


def _logs(no_extensions: bool) -> list[Any]:
    env = dict(os.environ)
    env.pop("AIOWHEEL_NO_EXTENSIONS", None)
    if no_extensions:
        env["AIOWHEEL_NO_EXTENSIONS"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(ROOT)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result: list[Any] = json.loads(done.stdout)
    return result


def test_the_builds_agree_line_for_line() -> None:
    if not aiowheel.COMPILED:
        pytest.skip("the compiled pass compares the two builds (this is the pure-Python pass)")
    compiled = _logs(False)
    pure = _logs(True)
    assert compiled[0] is True and pure[0] is False
    for config, got, want in zip(CONFIGS, compiled[1:], pure[1:], strict=True):
        assert got == want, f"{config}: the builds differ"
