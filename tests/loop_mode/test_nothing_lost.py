"""Nothing lost, ever: one regression test per defect of the 2026-11-25 adversarial run.

Each failed on 0.5 (the letter is the issue's): A a virtual clock started far from zero that
never got past its first sleep; B numbers that are not int or float left on the base's
real-time heap under a virtual clock; C the loop's own wheel closed under a pending
``asyncio.sleep``; D a ``slots`` the native core refuses accepted at construction; G a
heartbeat beside a loop timer run out of deadline order in a late pass; H a clock past 2**62
ticks on which the native core fired nothing. (E and F, the free-threaded ones, are in
``tests/time/test_threads.py``.) The suite runs on both builds, so each test holds for both.

A hang would stall the suite instead of failing it: the virtual-clock runs go through
:func:`_finishes`, which runs them in a daemon thread and fails the test if they do not end.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any, TypeVar

import pytest

import aiowheel
import aiowheel.testing

_T = TypeVar("_T")


def _finishes(run: Callable[[], _T], within: float = 30.0) -> _T:
    """``run()`` in a daemon thread; its result, or a failure if it spins past ``within``."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(("ok", run()))
        except BaseException as exc:  # handed to the test's thread
            outcome.append(("error", exc))

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(within)
    assert outcome, f"did not finish within {within} s (a hang)"
    kind, value = outcome[0]
    if kind == "error":
        raise value
    return value  # type: ignore[no-any-return]


def _virtual(
    main: Callable[[], Any], *, start: float = 0.0, tick: float = 0.001, base: Any = None
) -> Any:
    factory = aiowheel.testing.virtual_loop_factory(base, start=start, tick=tick)

    def run() -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(main())

    return _finishes(run)


# -- A: a virtual clock far from zero ----------------------------------------------------------


@pytest.mark.parametrize("start", [1e8, 1e9, 1.7e9, 2e9])
@pytest.mark.parametrize("tick", [1e-6, 1e-3, 0.05, 1.0])
def test_a_virtual_clock_started_far_from_zero_wakes_every_sleep(start: float, tick: float) -> None:
    async def main() -> list[float]:
        loop = asyncio.get_running_loop()
        seen = []
        for delay in (0.5, 0.001, 3.25, 1e-6, 60.0):
            before = loop.time()
            await asyncio.sleep(delay)
            seen.append(loop.time() - before)
            assert loop.time() >= before + delay  # never early, by the loop's own clock
        return seen

    elapsed = _virtual(main, start=start, tick=tick)
    # Each sleep ends within a tick of its delay (plus the float spacing of the clock there).
    slack = tick + 4 * (start * 2.0**-52)
    for delay, took in zip((0.5, 0.001, 3.25, 1e-6, 60.0), elapsed, strict=True):
        assert took <= delay + slack, (delay, took)


def test_the_issue_reproduction_of_a_returns_half_a_second_later() -> None:
    async def main() -> float:
        await asyncio.sleep(0.5)
        return asyncio.get_running_loop().time()

    assert _finishes(lambda: aiowheel.testing.run(main(), start=1e9)) == 1e9 + 0.5


# -- B: every kind of number a delay comes as --------------------------------------------------


def _numbers() -> list[Any]:
    kinds: list[Any] = [1, 1.0, True, Fraction(1), Decimal(1), Fraction(3, 2), Decimal("0.75")]
    try:
        import numpy
    except ImportError:  # pragma: no cover - numpy comes with matplotlib, a dev extra
        return kinds
    return [*kinds, numpy.int64(1), numpy.float32(1), numpy.float64(1.5), numpy.int32(2)]


@pytest.mark.parametrize("delay", _numbers(), ids=lambda d: f"{type(d).__name__}({d})")
def test_a_virtual_clock_wakes_a_sleep_of_any_real_number(delay: Any) -> None:
    async def main() -> tuple[float, float, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        async with asyncio.timeout(10):  # on 0.5 this fired first, at 10.0
            await asyncio.sleep(delay)
        slept = loop.time() - start
        handle = loop.call_later(delay, lambda: None)
        exact = handle.when() - loop.time()
        handle.cancel()
        return slept, exact, float(delay)

    slept, exact, want = _virtual(main)
    assert want <= slept <= want + 0.001
    assert exact >= want - 1e-9  # the deadline filed is never below the one asked for


def test_a_deadline_that_is_not_a_float_is_never_rounded_down() -> None:
    third = Fraction(1, 3)  # float(1/3) is below it

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        when = loop.call_later(third, lambda: None).when()
        at = loop.call_at(Fraction(10) + third, lambda: None).when()
        return when - loop.time(), at

    ahead, at = _virtual(main)
    assert Fraction(ahead) >= third
    assert Fraction(at) >= Fraction(10) + third


@pytest.mark.parametrize("nan", [Decimal("NaN"), Decimal("sNaN"), float("nan")], ids=str)
def test_a_nan_deadline_of_any_type_is_refused_and_nothing_is_filed(nan: Any) -> None:
    async def main() -> tuple[str, str, int]:
        loop = asyncio.get_running_loop()
        timer = aiowheel.timer_of(loop)
        assert timer is not None
        before = len(loop._scheduled)  # type: ignore[attr-defined]
        with pytest.raises(ValueError) as at:
            loop.call_at(nan, print)
        with pytest.raises(ValueError) as later:
            loop.call_later(nan, print)
        await asyncio.sleep(0.01)  # the heap was not poisoned: the loop still runs
        return str(at.value), str(later.value), len(loop._scheduled) - before + len(timer)  # type: ignore[attr-defined]

    at, later, filed = _finishes(lambda: aiowheel.run(main()))
    assert at == "call_at(): deadline must not be NaN"
    assert later == "call_later(): delay must not be NaN"
    assert filed == 0


# -- C: the loop's own wheel -------------------------------------------------------------------


def test_closing_the_loops_own_timer_is_refused_and_loses_no_sleep() -> None:
    async def main() -> tuple[str, object, int]:
        sleeping = asyncio.ensure_future(asyncio.sleep(0.05, "woke"))
        await asyncio.sleep(0)
        timer = aiowheel.get_timer()
        assert timer is aiowheel.timer_of(asyncio.get_running_loop())
        pending = len(timer)
        with pytest.raises(RuntimeError) as refused:
            timer.close()
        with pytest.raises(RuntimeError):
            await timer.aclose()
        assert not timer.closed() and len(timer) == pending  # nothing changed
        return str(refused.value), await asyncio.wait_for(sleeping, 5), pending

    message, woke, pending = _finishes(lambda: aiowheel.run(main()))
    assert "closes with the loop" in message
    assert woke == "woke" and pending >= 1


def test_closing_the_loops_own_timer_in_a_due_batch_is_refused_and_the_batch_runs() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        refusals: list[str] = []

        def closer() -> None:
            ran.append("closer")
            try:
                aiowheel.get_timer().close()
            except RuntimeError as exc:
                refusals.append(str(exc))

        start = loop.time()
        loop.call_at(start + 0.05, closer)
        loop.call_at(start + 0.05, ran.append, "after")
        await asyncio.wait_for(asyncio.sleep(0.1), 5)
        assert len(refusals) == 1
        return ran

    assert _finishes(lambda: aiowheel.testing.run(main())) == ["closer", "after"]


def test_a_timer_of_its_own_closed_in_a_due_batch_lets_that_batch_finish() -> None:
    """What was due before close() runs (it was dispatched: as a loop callback already ready
    when ``loop.close()`` is called); what was still pending is cancelled and returned."""

    async def main() -> tuple[list[int], list[Any], list[Any]]:
        timer = aiowheel.Timer()
        ran: list[int] = []
        unfired: list[Any] = []

        def first() -> None:
            ran.append(0)
            unfired.extend(timer.close())

        start = asyncio.get_running_loop().time()
        due = [timer.call_at(start + 0.05, first)]
        due += [timer.call_at(start + 0.05, ran.append, k) for k in range(1, 4)]
        later = [timer.call_at(start + 1.0, ran.append, k) for k in range(10, 13)]
        await asyncio.sleep(2)
        assert not any(handle.cancelled() for handle in due)
        return ran, unfired, later

    ran, unfired, later = _finishes(lambda: aiowheel.testing.run(main()))
    assert ran == [0, 1, 2, 3]
    assert sorted(unfired, key=id) == sorted(later, key=id)
    assert all(handle.cancelled() for handle in later)


# -- D: slots ----------------------------------------------------------------------------------


def test_slots_past_the_limit_are_refused_at_construction_as_the_core_refuses_them() -> None:
    with pytest.raises(
        ValueError, match=r"^Timer\(\): slots must be a power of two from 2 to 1048576"
    ):
        aiowheel.Timer(slots=2**21)
    if aiowheel.NATIVE:  # the native core's limit is the wheel's, with the same words
        from aiowheel._time import _core  # type: ignore[attr-defined]
        from aiowheel._time._wheel import MAX_SLOTS

        assert len(_core.Core(lambda: None, 0.001, MAX_SLOTS, 0.0, None)) == 0
        with pytest.raises(ValueError, match=r"^slots must be a power of two from 2 to 1048576"):
            _core.Core(lambda: None, 0.001, 2 * MAX_SLOTS, 0.0, None)

    async def main() -> list[int]:
        timer = aiowheel.Timer(slots=2**10)
        out: list[int] = []
        timer.call_later(0.01, out.append, 1)
        timer.call_later(0.02, out.append, 2)
        await asyncio.sleep(0.05)
        await timer.aclose()
        return out

    assert _finishes(lambda: aiowheel.testing.run(main())) == [1, 2]


# -- G: deadline order in a late pass ----------------------------------------------------------


def test_a_heartbeat_and_a_loop_timer_due_in_one_late_pass_run_in_deadline_order() -> None:
    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        t0, order = loop.time(), []
        beat = aiowheel.get_timer().every(0.05, order.append, "every@50ms")
        loop.call_at(t0 + 0.07, order.append, "call_at@70ms")
        time.sleep(0.15)  # noqa: ASYNC251 - the loop is blocked: both are due in the next pass
        await asyncio.sleep(0.03)
        beat.cancel()
        return order

    order = _finishes(lambda: aiowheel.run(main()))
    assert order[:2] == ["every@50ms", "call_at@70ms"], order


# -- H: past 2**62 ticks -----------------------------------------------------------------------


def test_timers_fire_past_two_to_the_62_ticks() -> None:
    async def main() -> tuple[list[Any], int]:
        loop = asyncio.get_running_loop()
        out: list[Any] = []

        async def sleeper() -> None:
            await asyncio.sleep(4e15)
            out.append("sleep")

        task = asyncio.ensure_future(sleeper())
        loop.call_later(4.7e15, out.append, "far call")  # 4.7e18 ticks: past 2**62
        await asyncio.sleep(0)
        await aiowheel.testing.advance(5e15)
        await task
        # The clock is now past 2**62 ticks: new timers, near and far, still fire.
        loop.call_later(0.5, out.append, "near call")
        async with asyncio.timeout(2):
            await asyncio.sleep(1)
        out.append("timeout kept")
        await asyncio.sleep(1e3)
        timer = aiowheel.timer_of(loop)
        assert timer is not None
        return out, len(timer)

    out, pending = _virtual(main)
    assert out == ["sleep", "far call", "near call", "timeout kept"]
    assert pending == 0
