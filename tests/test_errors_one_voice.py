"""Errors in one voice (#37, 5): every public function x bad input, in one table.

A bad value is a ValueError, a bad type a TypeError, and the message starts with the function
the user called and the argument (``call_later(): delay must not be NaN``). Each row runs where
its function is used (a loop-mode loop, a virtual one, or no loop at all) and afterwards the
loop holds no timer and runs no task but the test's: a refused call changes nothing. The two
builds give the same exception and message for every row
(:func:`test_both_builds_answer_every_row_alike`).

The edges of single rooms stay in their own tests, a row or two of each here: NaN's many
spellings (``tests/test_validate.py``), the middlewares' every option (``tests/integration/
test_deadlines.py``); the pytest plugin's options and markers are usage errors
(``tests/plugin/test_pytest_plugin.py``), and the purgatory's are its room's
(``tests/purgatory/test_purgatory.py``).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

import aiowheel
import aiowheel.aiohttp
import aiowheel.asgi
import aiowheel.httpx
import aiowheel.loops
import aiowheel.otel
import aiowheel.testing
from aiowheel import LoopConfig, LoopFactory, Timer
from aiowheel.testing import VirtualTime
from tests.support import run_python

nan = math.nan


@dataclass
class Env:
    """What a row's call gets: the running loop (None outside one) and a Timer bound to it."""

    loop: Any
    timer: Any


@dataclass(frozen=True)
class Row:
    """One bad call: where it runs, what it raises, and the function and argument named."""

    where: str  # "loop" (loop mode, real clock), "virtual" (loop mode, virtual clock), "none"
    call: Callable[[Env], object]
    error: type[BaseException]
    function: str | None  # the message starts with it (one of a " / " list; None: asyncio's)
    argument: str | None  # and goes on with it (None: a message about no one argument)


async def _reschedule(timeout: Any, when: object) -> None:
    async with timeout:
        timeout.reschedule(when)


async def _enter(timeout: Any) -> None:
    async with timeout:
        pass


async def _sleeper() -> None:
    await asyncio.sleep(1)


def _main() -> Any:
    return asyncio.sleep(0)


def _loop_mode_class() -> type[asyncio.AbstractEventLoop]:
    loop = aiowheel.new_event_loop()
    loop.close()
    return type(loop)


WAIT_FOR = "asyncio.wait_for()" if sys.version_info < (3, 12) else "wait_for()"
"""Who files asyncio.wait_for's timeout: loop.call_later on 3.11, asyncio.timeout after."""

SLEEP = "asyncio.sleep()" if sys.version_info < (3, 13) else None
"""Who refuses asyncio.sleep(nan): loop mode on 3.11 and 3.12; asyncio itself from 3.13, in its
own words ("Invalid delay: NaN (not a number)"), before any loop sees it."""

T, V = TypeError, ValueError
L, VL, NO = "loop", "virtual", "none"

# fmt: off
ROWS: dict[str, Row] = {
    # -- the module-level helpers (the running loop's default Timer) -------------------------
    "call_at-nan": Row(L, lambda e: aiowheel.call_at(nan, print), V, "call_at()", "deadline"),
    "call_at-str": Row(L, lambda e: aiowheel.call_at("1", print), T, "call_at()", "deadline"),
    "call_at-callback": Row(L, lambda e: aiowheel.call_at(1, 42), T, "call_at()", "callback"),
    "call_at-context": Row(L, lambda e: aiowheel.call_at(1, print, context=1), T, "call_at()",
                           "context"),
    "call_later-nan": Row(L, lambda e: aiowheel.call_later(nan, print), V, "call_later()",
                          "delay"),
    "call_later-None": Row(L, lambda e: aiowheel.call_later(None, print), T, "call_later()",
                           "delay"),
    "call_later-callback": Row(L, lambda e: aiowheel.call_later(1, 42), T, "call_later()",
                               "callback"),
    "call_later-context": Row(L, lambda e: aiowheel.call_later(1, print, context={}), T,
                              "call_later()", "context"),
    "sleep-nan": Row(L, lambda e: aiowheel.sleep(nan), V, "sleep()", "delay"),
    "sleep-str": Row(L, lambda e: aiowheel.sleep("1"), T, "sleep()", "delay"),
    "sleep_until-nan": Row(L, lambda e: aiowheel.sleep_until(nan), V, "sleep_until()",
                           "deadline"),
    "sleep_until-str": Row(L, lambda e: aiowheel.sleep_until("1"), T, "sleep_until()",
                           "deadline"),
    "timeout-nan": Row(L, lambda e: aiowheel.timeout(nan), V, "timeout()", "delay"),
    "timeout-str": Row(L, lambda e: aiowheel.timeout("1"), T, "timeout()", "delay"),
    "timeout_at-nan": Row(L, lambda e: aiowheel.timeout_at(nan), V, "timeout_at()", "deadline"),
    "timeout_at-str": Row(L, lambda e: aiowheel.timeout_at("1"), T, "timeout_at()", "deadline"),
    "wait_for-nan": Row(L, lambda e: aiowheel.wait_for(_sleeper(), nan), V, "wait_for()",
                        "timeout"),
    "wait_for-str": Row(L, lambda e: aiowheel.wait_for(_sleeper(), "1"), T, "wait_for()",
                        "timeout"),
    # -- Timer and its methods ---------------------------------------------------------------
    "Timer-tick": Row(L, lambda e: Timer(tick=0), V, "Timer()", "tick"),
    "Timer-tick-str": Row(L, lambda e: Timer(tick="1"), T, "Timer()", "tick"),
    "Timer-slots": Row(L, lambda e: Timer(slots=3), V, "Timer()", "slots"),
    "Timer-slots-float": Row(L, lambda e: Timer(slots=64.0), T, "Timer()", "slots"),
    "Timer-max_pending": Row(L, lambda e: Timer(max_pending=0), V, "Timer()", "max_pending"),
    "Timer-max_pending-str": Row(L, lambda e: Timer(max_pending="9"), T, "Timer()",
                                 "max_pending"),
    "Timer.call_at-nan": Row(L, lambda e: e.timer.call_at(nan, print), V, "call_at()",
                             "deadline"),
    "Timer.call_later-str": Row(L, lambda e: e.timer.call_later("1", print), T, "call_later()",
                                "delay"),
    "Timer.schedule_at-nan": Row(L, lambda e: e.timer.schedule_at(nan, _sleeper()), V,
                                 "schedule_at()", "deadline"),
    "Timer.schedule_at-str": Row(L, lambda e: e.timer.schedule_at("1", _sleeper()), T,
                                 "schedule_at()", "deadline"),
    "Timer.schedule_at-target": Row(L, lambda e: e.timer.schedule_at(1, 42), T, "schedule_at()",
                                    "coro_or_function"),
    "Timer.schedule_at-args": Row(L, lambda e: e.timer.schedule_at(1, _sleeper(), 1), T,
                                  "schedule_at()", None),
    "Timer.schedule_later-nan": Row(L, lambda e: e.timer.schedule_later(nan, _sleeper()), V,
                                    "schedule_later()", "delay"),
    "Timer.schedule_later-str": Row(L, lambda e: e.timer.schedule_later("1", print), T,
                                    "schedule_later()", "delay"),
    "Timer.every-zero": Row(L, lambda e: e.timer.every(0, print), V, "every()", "interval"),
    "Timer.every-str": Row(L, lambda e: e.timer.every("1", print), T, "every()", "interval"),
    "Timer.every-callback": Row(L, lambda e: e.timer.every(1, 42), T, "every()", "callback"),
    "Timer.every-missed": Row(L, lambda e: e.timer.every(1, print, missed="x"), V, "every()",
                              "missed"),
    "Timer.every-missed-int": Row(L, lambda e: e.timer.every(1, print, missed=1), T, "every()",
                                  "missed"),
    "Timer.every-start-nan": Row(L, lambda e: e.timer.every(1, print, start=nan), V, "every()",
                                 "start"),
    "Timer.every-start-str": Row(L, lambda e: e.timer.every(1, print, start="0"), T, "every()",
                                 "start"),
    "Timer.interval-zero": Row(L, lambda e: e.timer.interval(0), V, "interval()", "period"),
    "Timer.interval-str": Row(L, lambda e: e.timer.interval("1"), T, "interval()", "period"),
    "Timer.interval-missed": Row(L, lambda e: e.timer.interval(1, missed=None), T,
                                 "interval()", "missed"),
    "Timer.watchdog-zero": Row(L, lambda e: e.timer.watchdog(0, print), V, "watchdog()",
                               "timeout"),
    "Timer.watchdog-str": Row(L, lambda e: e.timer.watchdog("1", print), T, "watchdog()",
                              "timeout"),
    "Timer.watchdog-callback": Row(L, lambda e: e.timer.watchdog(1, 42), T, "watchdog()",
                                   "on_expire"),
    "Timeout.reschedule-nan": Row(L, lambda e: _reschedule(e.timer.timeout(9), nan), V,
                                  "reschedule()", "deadline"),
    "Timeout.reschedule-str": Row(L, lambda e: _reschedule(e.timer.timeout(9), "1"), T,
                                  "reschedule()", "deadline"),
    # -- loop mode: the loop's own methods, and asyncio's functions that end in them ---------
    "loop.call_at-nan": Row(L, lambda e: e.loop.call_at(nan, print), V, "call_at()",
                            "deadline"),
    "loop.call_at-None": Row(L, lambda e: e.loop.call_at(None, print), T, "call_at()",
                             "deadline"),
    "loop.call_at-str": Row(L, lambda e: e.loop.call_at("1", print), T, "call_at()",
                            "deadline"),
    "loop.call_later-nan": Row(L, lambda e: e.loop.call_later(nan, print), V, "call_later()",
                               "delay"),
    "loop.call_later-None": Row(L, lambda e: e.loop.call_later(None, print), T,
                                "call_later()", "delay"),
    "loop.call_later-str": Row(L, lambda e: e.loop.call_later("1", print), T, "call_later()",
                               "delay"),
    "asyncio.timeout-nan": Row(L, lambda e: _enter(asyncio.timeout(nan)), V,
                               "asyncio.timeout()", "deadline"),
    "asyncio.timeout_at-nan": Row(L, lambda e: _enter(asyncio.timeout_at(nan)), V,
                                  "timeout_at()", "deadline"),
    "asyncio.Timeout.reschedule-nan": Row(L, lambda e: _reschedule(asyncio.timeout(9), nan), V,
                                          "Timeout.reschedule()", "deadline"),
    "asyncio.sleep-nan": Row(L, lambda e: asyncio.sleep(nan), V, SLEEP, "delay" if SLEEP else None),
    "asyncio.wait_for-nan": Row(L, lambda e: asyncio.wait_for(e.loop.create_future(), nan), V,
                                WAIT_FOR, None),
    "asyncio.wait-nan": Row(L, lambda e: asyncio.wait([e.loop.create_future()], timeout=nan),
                            V, "asyncio.wait()", "timeout"),
    "loop_factory-tick": Row(NO, lambda e: aiowheel.loop_factory(tick=0), V, "loop_factory()",
                             "tick"),
    "loop_factory-tick-str": Row(NO, lambda e: aiowheel.loop_factory(tick="1"), T,
                                 "loop_factory()", "tick"),
    "loop_factory-threshold": Row(NO, lambda e: aiowheel.loop_factory(threshold=-1), V,
                                  "loop_factory()", "threshold"),
    "loop_factory-threshold-str": Row(NO, lambda e: aiowheel.loop_factory(threshold="1"), T,
                                      "loop_factory()", "threshold"),
    "loop_factory-base": Row(NO, lambda e: aiowheel.loop_factory(int), T, "loop_factory()",
                             "base"),
    "loop_factory-base-loop-mode": Row(NO, lambda e: aiowheel.loop_factory(_loop_mode_class()),
                                       V, "loop_factory()", "base"),
    "new_event_loop-tick": Row(NO, lambda e: aiowheel.new_event_loop(tick=-1), V,
                               "new_event_loop()", "tick"),
    "new_event_loop-base": Row(NO, lambda e: aiowheel.new_event_loop("uvloop"), T,
                               "new_event_loop()", "base"),
    "run-main": Row(NO, lambda e: aiowheel.run(42), T, "run()", "main"),
    "run-debug": Row(NO, lambda e: aiowheel.run(_main(), debug="x"), T, "run()", "debug"),
    "run-threshold": Row(NO, lambda e: aiowheel.run(_main(), threshold=nan), V, "run()",
                         "threshold"),
    "LoopFactory-config": Row(NO, lambda e: LoopFactory(42), T, "LoopFactory()", "config"),
    "LoopConfig-base": Row(NO, lambda e: LoopConfig(None, 0.001, 0.01), T, "LoopConfig()",
                           "base"),
    "LoopConfig-tick": Row(NO, lambda e: LoopConfig(asyncio.SelectorEventLoop, 0, 0.01), V,
                           "LoopConfig()", "tick"),
    "LoopConfig-clock": Row(NO, lambda e: LoopConfig(asyncio.SelectorEventLoop, 0.001, 0.01,
                                                     42), T, "LoopConfig()", "clock"),
    # -- inspection: an optional loop, checked -----------------------------------------------
    "pending_timers-loop": Row(L, lambda e: aiowheel.pending_timers("loop"), T,
                               "pending_timers()", "loop"),
    "pending_timers-no-loop": Row(NO, lambda e: aiowheel.pending_timers(), RuntimeError,
                                  "pending_timers()", None),
    "timer_census-top": Row(L, lambda e: aiowheel.timer_census(top=0), V, "timer_census()",
                            "top"),
    "timer_census-top-float": Row(L, lambda e: aiowheel.timer_census(top=1.5), T,
                                  "timer_census()", "top"),
    "timer_census-loop": Row(L, lambda e: aiowheel.timer_census(1), T, "timer_census()",
                             "loop"),
    "timer_census-no-loop": Row(NO, lambda e: aiowheel.timer_census(), RuntimeError,
                                "timer_census()", None),
    "loop_lag-reset": Row(L, lambda e: aiowheel.loop_lag(reset=1), T, "loop_lag()", "reset"),
    "loop_lag-loop": Row(L, lambda e: aiowheel.loop_lag(object()), T, "loop_lag()", "loop"),
    "track_origins-enabled": Row(L, lambda e: aiowheel.track_origins(1), T, "track_origins()",
                                 "enabled"),
    "track_origins-loop": Row(L, lambda e: aiowheel.track_origins(loop=1), T,
                              "track_origins()", "loop"),
    "current_deadline-loop": Row(L, lambda e: aiowheel.current_deadline("x"), T,
                                 "current_deadline()", "loop"),
    "time_left-loop": Row(L, lambda e: aiowheel.time_left("x"), T, "time_left()", "loop"),
    "timer_of-loop": Row(L, lambda e: aiowheel.timer_of("x"), T, "timer_of()", "loop"),
    "config_of-loop": Row(L, lambda e: aiowheel.config_of("x"), T, "config_of()", "loop"),
    "config_of-no-loop": Row(NO, lambda e: aiowheel.config_of(), RuntimeError, "config_of()",
                             None),
    # -- aiowheel.testing ---------------------------------------------------------------------
    "virtual_loop_factory-start": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        start=-5), V, "virtual_loop_factory()", "start"),
    "virtual_loop_factory-start-str": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        start="0"), T, "virtual_loop_factory()", "start"),
    "virtual_loop_factory-autojump": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        autojump=-1), V, "virtual_loop_factory()", "autojump"),
    "virtual_loop_factory-autojump-str": Row(NO, lambda e: aiowheel.testing
                                             .virtual_loop_factory(autojump="yes"), T,
                                             "virtual_loop_factory()", "autojump"),
    "virtual_loop_factory-tick": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        tick=0), V, "virtual_loop_factory()", "tick"),
    "virtual_loop_factory-base": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        1), T, "virtual_loop_factory()", "base"),
    "virtual_loop_factory-seed": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        seed=-1), V, "virtual_loop_factory()", "seed"),
    "virtual_loop_factory-seed-str": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        seed="1"), T, "virtual_loop_factory()", "seed"),
    "virtual_loop_factory-jitter": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        seed=1, jitter=-1), V, "virtual_loop_factory()", "jitter"),
    "virtual_loop_factory-stall_rate": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        seed=1, stall_rate=2), V, "virtual_loop_factory()", "stall_rate"),
    "virtual_loop_factory-no-seed": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        stall=1), T, "virtual_loop_factory()", None),
    "testing.run-start": Row(NO, lambda e: aiowheel.testing.run(_main(), start=-5), V,
                             "testing.run()", "start"),
    "testing.run-debug": Row(NO, lambda e: aiowheel.testing.run(_main(), debug="x"), T,
                             "testing.run()", "debug"),
    "testing.run-main": Row(NO, lambda e: aiowheel.testing.run(42), T, "testing.run()", "main"),
    "testing.run-autojump": Row(NO, lambda e: aiowheel.testing.run(_main(), autojump=nan), V,
                                "testing.run()", "autojump"),
    "testing.run-seed": Row(NO, lambda e: aiowheel.testing.run(_main(), seed=1.5), T,
                            "testing.run()", "seed"),
    "testing.run-max_batch": Row(NO, lambda e: aiowheel.testing.run(_main(), max_batch=0), V,
                                 "testing.run()", "max_batch"),
    "testing.run-max_batch-float": Row(NO, lambda e: aiowheel.testing.run(
        _main(), max_batch=1.5), T, "testing.run()", "max_batch"),
    "virtual_loop_factory-max_batch": Row(NO, lambda e: aiowheel.testing.virtual_loop_factory(
        max_batch=0), V, "virtual_loop_factory()", "max_batch"),
    "testing.advance-negative": Row(VL, lambda e: aiowheel.testing.advance(-1), V, "advance()",
                                    "seconds"),
    "testing.advance-str": Row(VL, lambda e: aiowheel.testing.advance("1"), T, "advance()",
                               "seconds"),
    "VirtualClock.fuzz": Row(VL, lambda e: aiowheel.testing.clock_of().fuzz(7), T, "fuzz()",
                             "fuzz"),
    "clock_of-loop": Row(VL, lambda e: aiowheel.testing.clock_of(7), T, "clock_of()", "loop"),
    "check_determinism-main": Row(NO, lambda e: aiowheel.testing.check_determinism(42), T,
                                  "check_determinism()", "main"),
    "check_determinism-seed": Row(NO, lambda e: aiowheel.testing.check_determinism(
        _main, seed=-1), V, "check_determinism()", "seed"),
    "first_divergence-context": Row(NO, lambda e: aiowheel.testing.first_divergence(
        [], [], context=-1), V, "first_divergence()", "context"),
    "first_divergence-context-str": Row(NO, lambda e: aiowheel.testing.first_divergence(
        [], [], context="3"), T, "first_divergence()", "context"),
    "VirtualTime-autojump": Row(NO, lambda e: VirtualTime("x", 0.0), T, "VirtualTime()",
                                "autojump"),
    "VirtualTime-start": Row(NO, lambda e: VirtualTime(True, nan), V, "VirtualTime()", "start"),
    # -- aiowheel.loops, aiowheel.asgi ----------------------------------------------------------
    "loops.base_class": Row(NO, lambda e: aiowheel.loops.base_class("trio"), V, "base_class()",
                            None),
    "loops.base_class-int": Row(NO, lambda e: aiowheel.loops.base_class(1), T, "base_class()",
                                "name"),
    "asgi.DeadlineMiddleware-timeout": Row(NO, lambda e: aiowheel.asgi.DeadlineMiddleware(
        print, timeout=0), V, "DeadlineMiddleware()", "timeout"),
    "asgi.DeadlineMiddleware-status": Row(NO, lambda e: aiowheel.asgi.DeadlineMiddleware(
        print, timeout=1, status="504"), T, "DeadlineMiddleware()", "status"),
    "asgi.deadline": Row(NO, lambda e: aiowheel.asgi.deadline(-1), V, "deadline()", "seconds"),
    "asgi.deadline-str": Row(NO, lambda e: aiowheel.asgi.deadline("1"), T, "deadline()",
                             "seconds"),
    "asgi.set_deadline": Row(L, lambda e: aiowheel.asgi.set_deadline(nan), V, "set_deadline()",
                             "seconds"),
    "asgi.set_deadline-str": Row(L, lambda e: aiowheel.asgi.set_deadline(None), T,
                                 "set_deadline()", "seconds"),
    "asgi.budget": Row(L, lambda e: aiowheel.asgi.budget(-1), V, "budget()", "minimum"),
    "asgi.budget-str": Row(L, lambda e: aiowheel.asgi.budget("1"), T, "budget()", "minimum"),
    "asgi.budget_header": Row(L, lambda e: aiowheel.asgi.budget_header(math.inf), V,
                              "budget_header()", "minimum"),
    "asgi.budget_header-grpc": Row(L, lambda e: aiowheel.asgi.budget_header(grpc="yes"), T,
                                   "budget_header()", "grpc"),
    "asgi.parse_timeout_header": Row(NO, lambda e: aiowheel.asgi.parse_timeout_header(b"5"), T,
                                     "parse_timeout_header()", "value"),
    "aiohttp.deadline_middleware": Row(NO, lambda e: aiowheel.aiohttp.deadline_middleware(
        timeout=math.inf), V, "deadline_middleware()", "timeout"),
    "aiohttp.deadline_middleware-body": Row(NO, lambda e: aiowheel.aiohttp.deadline_middleware(
        timeout=1, body="late"), T, "deadline_middleware()", "body"),
    "aiohttp.propagate_deadline": Row(NO, lambda e: aiowheel.aiohttp.propagate_deadline(
        margin=-1), V, "propagate_deadline()", "margin"),
    "aiohttp.propagate_deadline-header": Row(NO, lambda e: aiowheel.aiohttp.propagate_deadline(
        "bad header"), V, "propagate_deadline()", "header"),
    "httpx.DeadlineTransport": Row(NO, lambda e: aiowheel.httpx.DeadlineTransport(
        margin="x"), T, "DeadlineTransport()", "margin"),
    "httpx.DeadlineTransport-header": Row(NO, lambda e: aiowheel.httpx.DeadlineTransport(
        header=b"x-request-timeout"), T, "DeadlineTransport()", "header"),
    # -- aiowheel.otel ---------------------------------------------------------------------------
    "otel.instrument-loop": Row(L, lambda e: aiowheel.otel.instrument("loop"), T, "instrument()",
                                "loop"),
    "otel.instrument-attributes": Row(L, lambda e: aiowheel.otel.instrument(attributes=[1]), T,
                                      "instrument()", "attributes"),
}
# fmt: on


def _outcome(row: Row) -> tuple[str, str, list[str]]:
    """Run ``row`` where it runs: (the exception's type, its message, what the refused call
    left behind on the loop: pending timers and tasks, which must be none)."""
    caught: list[BaseException] = []
    left: list[str] = []

    async def attempt(env: Env) -> None:
        before = asyncio.all_tasks()  # the test's, and the reapers of the Timers bound here
        try:
            result = row.call(env)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:  # the row's error is what the test reads
            caught.append(exc)
        else:
            left.append("accepted")
        await asyncio.sleep(0)
        left.extend(f"timer {t.kind} {t.origin}" for t in aiowheel.pending_timers(env.loop))
        for task in asyncio.all_tasks() - before:
            left.append(f"task {task.get_coro()!r}")
            task.cancel()

    async def main() -> None:
        async with Timer() as timer:
            timer._binding.check_loop()  # bound to the loop: its refusals are checked with it
            aiowheel.get_timer()  # the default Timer, bound before the call
            await attempt(Env(asyncio.get_running_loop(), timer))

    if row.where == NO:
        try:
            result = row.call(Env(None, None))
            if inspect.iscoroutine(result):
                result.close()
            left.append("accepted")
        except Exception as exc:
            caught.append(exc)
    elif row.where == VL:
        aiowheel.testing.run(main())
    else:
        aiowheel.run(main())
    if not caught:
        return ("", "", left)
    return (type(caught[0]).__name__, str(caught[0]), left)


def outcomes() -> dict[str, tuple[str, str]]:
    """Every row's exception and message in this build (the cross-build test's subprocess)."""
    return {name: _outcome(row)[:2] for name, row in ROWS.items()}


@pytest.mark.parametrize("name", list(ROWS))
def test_a_bad_input_is_refused_naming_the_function_and_changes_nothing(name: str) -> None:
    row = ROWS[name]
    error, message, left = _outcome(row)
    assert error == row.error.__name__, (error, message)
    functions, colon, rest = message.partition(": ")
    if row.function is not None:
        assert colon and row.function in functions.split(" / "), message
    if row.argument is not None:
        assert rest.startswith(f"{row.argument} "), message
    assert left == []


@pytest.mark.once
def test_both_builds_answer_every_row_alike() -> None:
    script = "import json; from tests.test_errors_one_voice import outcomes; " \
             "print(json.dumps(outcomes()))"  # fmt: skip
    builds = {}
    for build in ("0", "1"):
        proc = run_python(["-c", script], AIOWHEEL_NO_EXTENSIONS=build)
        assert proc.returncode == 0, proc.stderr
        builds[build] = json.loads(proc.stdout.splitlines()[-1])
    assert builds["0"] == builds["1"]
    assert set(builds["0"]) == set(ROWS)
