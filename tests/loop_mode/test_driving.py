"""Loop mode however the loop is driven, and ``loop._scheduled`` however it is used (issue 59).

Each test is one of the issue's defects (or one the differential harness of
``test_differential.py`` found), run on stock asyncio where a comparison says what is right, and
on loop mode; both builds (CI runs the suite on each). Every test here failed before its fix.
"""

from __future__ import annotations

import asyncio
import heapq
import sys
import textwrap
import threading
import types
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

import aiowheel
from aiowheel._time._wakeup import WakeUp


def drain(loop: Any, limit: int = 20_000) -> int:
    """Home Assistant's and many libraries' drain: ``_run_once`` while anything is ready or
    scheduled, with no loop running; bounded, so a wedge fails instead of hanging."""
    runs = 0
    while loop._ready or loop._scheduled:
        # Timers shown pending, and neither a ready callback nor a handle on the heap to end
        # the next select(): it would wait for ever.
        assert loop._ready or list.__len__(loop._scheduled), "wedged: nothing to wake the loop"
        loop._run_once()
        runs += 1
        assert runs < limit, "the drain never ended"
    return runs


def run_bounded(make: Callable[[], Any], main: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    """``main()`` on a new loop of ``make``, stopped from a thread after 30 s: a wedged wheel
    (which no timer of its own can end) fails the test instead of hanging it."""
    loop = make()
    watchdog = threading.Timer(30, loop.call_soon_threadsafe, (loop.stop,))
    watchdog.start()
    try:
        return loop.run_until_complete(main())
    finally:
        watchdog.cancel()
        loop.close()


def makers() -> list[Any]:
    return [
        pytest.param(asyncio.new_event_loop, id="asyncio"),
        pytest.param(aiowheel.new_event_loop, id="loop-mode"),
        pytest.param(lambda: aiowheel.new_event_loop(max_batch=2), id="loop-mode-max_batch"),
    ]


@pytest.fixture(params=makers())
def loop(request: pytest.FixtureRequest) -> Any:
    made = request.param()
    yield made
    made.close()


def test_a_hand_driven_loop_runs_every_timer_and_the_later_ones(loop: Any) -> None:
    # Defect 1: with max_batch, the backlog asked asyncio for the running loop (none: driven by
    # hand), its "queued" flag stayed set, 2 of 10 ran and every later timer hung.
    fired: list[int] = []
    now = loop.time()
    for i in range(10):
        loop.call_at(now + 0.02, fired.append, i)
    drain(loop)
    assert sorted(fired) == list(range(10))  # asyncio's heap: ties in any order
    loop.call_later(0.02, fired.append, 10)
    drain(loop)
    assert sorted(fired) == list(range(11))
    assert loop.run_until_complete(asyncio.wait_for(asyncio.sleep(0.03, "slept"), 5)) == "slept"


def test_backlog_timers_are_pending_timers_to_every_reader() -> None:
    # Defect 2: timers due and waiting in the backlog were in neither loop._scheduled nor
    # aiowheel.pending_timers() (0 of 8 seen), though they had not run.
    loop: Any = aiowheel.new_event_loop(max_batch=2)
    try:
        fired: list[int] = []
        now = loop.time()
        handles = [loop.call_at(now + 0.02, fired.append, i) for i in range(200)]
        while not fired:
            loop._run_once()
        # A chunk of 2 ran (more only if the loop came back over a quarter second late).
        assert 2 <= len(fired) < 200
        waiting = handles[len(fired) :]
        seen = list(loop._scheduled)
        assert all(handle in seen for handle in waiting)
        assert len(loop._scheduled) == len(waiting)
        shown = [timer.callback for timer in aiowheel.pending_timers(loop)]
        assert shown.count(fired.append) == len(waiting)
        stopped = waiting[0]
        stopped.cancel()  # still stops it, and it is no longer shown
        assert stopped not in loop._scheduled
        drain(loop)
        assert fired == [i for i in range(200) if handles[i] is not stopped]
        assert not loop._scheduled
    finally:
        loop.close()


async def _clear_then(how: str) -> tuple[int, list[str], str]:
    loop: Any = asyncio.get_running_loop()
    fired: list[str] = []
    loop.call_later(30, fired.append, "far")
    loop.call_later(0.2, fired.append, "mid")
    await asyncio.sleep(0)
    if how == "clear":
        loop._scheduled.clear()
    else:
        for handle in loop._scheduled[:]:
            handle.cancel()
    try:
        await asyncio.wait_for(asyncio.sleep(0.3), 2)
        later = "completed"
    except TimeoutError:
        later = "timed out"
    return len([h for h in loop._scheduled if not h.cancelled()]), fired, later


@pytest.mark.parametrize("how", ["clear", "cancel-each-of-a-slice"])
def test_dropping_every_timer_through_the_list_leaves_the_wheel_awake(how: str) -> None:
    # Defect 3: clear() or cancel() on each handle of loop._scheduled[:] (the heap's slice,
    # wake-up included) and the wheel never armed again: every later timer hung.
    stock = run_bounded(asyncio.new_event_loop, lambda: _clear_then(how))
    assert stock == (0, [], "completed")
    assert run_bounded(aiowheel.new_event_loop, lambda: _clear_then(how)) == stock


def test_a_wake_up_taken_off_the_heap_by_hand_is_filed_again_on_the_next_read() -> None:
    # Not asyncio's to survive (heapq.heappop by hand loses a timer there too), but never a
    # silent wedge: the next read of loop._scheduled files the wheel's wake-up again.
    loop: Any = aiowheel.new_event_loop()
    try:
        fired: list[int] = []
        loop.call_later(0.05, fired.append, 1)
        popped = heapq.heappop(loop._scheduled)  # list.__getitem__ sees the wake-up
        assert isinstance(popped, WakeUp)
        assert len(loop._scheduled) == 1
        drain(loop, limit=1000)
        assert fired == [1]
    finally:
        loop.close()


@pytest.mark.parametrize(
    "change",
    [
        lambda heap: heap.pop(),
        lambda heap: heap.remove(heap[0]),
        lambda heap: heap.__delitem__(0),
        lambda heap: heap.__setitem__(slice(None), []),
        lambda heap: heap.reverse(),
    ],
    ids=["pop", "remove", "del", "setitem", "reverse"],
)
def test_changes_in_place_are_refused_naming_scheduled_and_change_nothing(change: Any) -> None:
    loop: Any = aiowheel.new_event_loop()
    try:
        fired: list[int] = []
        loop.call_later(0.002, fired.append, 1)  # the heap's
        loop.call_later(0.05, fired.append, 2)  # the wheel's
        before = list.copy(loop._scheduled)
        with pytest.raises(RuntimeError, match=r"loop\._scheduled\."):
            change(loop._scheduled)
        assert list.copy(loop._scheduled) == before
        drain(loop)
        assert fired == [1, 2]
    finally:
        loop.close()


_FRAMEWORK = '''
import asyncio, heapq

class FrameworkLoop(asyncio.SelectorEventLoop):
    """A framework's loop with a _run_once of its own (asyncio's timer handling, abridged)."""

    mismatches = 0

    def _run_once(self):
        if len(self._scheduled) != list.__len__(self._scheduled):
            FrameworkLoop.mismatches += 1
        timeout = None
        if self._ready or self._stopping:
            timeout = 0
        elif self._scheduled:
            timeout = min(max(0, self._scheduled[0]._when - self.time()), 86400)
        self._process_events(self._selector.select(timeout))
        end_time = self.time() + self._clock_resolution
        while self._scheduled:
            handle = self._scheduled[0]
            if handle._when >= end_time:
                break
            handle = heapq.heappop(self._scheduled)
            handle._scheduled = False
            self._ready.append(handle)
        for _ in range(len(self._ready)):
            handle = self._ready.popleft()
            if not handle._cancelled:
                handle._run()
'''

_APP = """
from framework_loop_t59 import FrameworkLoop

class AppLoop(FrameworkLoop):
    def _run_once(self):
        super()._run_once()
"""


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(textwrap.dedent(source), f"<{name}>", "exec"), module.__dict__)
    return module


def test_an_inherited_run_once_sees_the_heap() -> None:
    # Defect 4: only the nearest _run_once's module was registered as the base's: the
    # framework's, under an app's subclass calling super()._run_once(), measured the readers'
    # list while heappop took from the heap.
    framework = _module("framework_loop_t59", _FRAMEWORK)
    app = _module("app_loop_t59", _APP)
    try:
        loop: Any = aiowheel.new_event_loop(app.AppLoop)
        fired: list[int] = []

        async def main() -> None:
            for i in range(150):
                loop.call_later(0.02 + i * 0.0005, fired.append, i)
            await asyncio.sleep(0.15)

        loop.run_until_complete(asyncio.wait_for(main(), 10))
        loop.close()
        assert fired == list(range(150))
        assert framework.FrameworkLoop.mismatches == 0
    finally:
        del sys.modules["framework_loop_t59"], sys.modules["app_loop_t59"]


@pytest.mark.parametrize("then_cancel", [False, True], ids=["run-again", "then-cancel"])
def test_run_of_a_handle_due_in_the_same_batch(then_cancel: bool) -> None:
    # Defect 5: a callback calling B._run() on a handle due in its own batch. asyncio runs B
    # again at its turn, or not at all if B.cancel() follows (B then reads cancelled).
    def program(loop: Any) -> list[object]:
        ran: list[object] = []
        handles: dict[str, Any] = {}

        def a() -> None:
            ran.append("A")
            handles["B"]._run()
            if then_cancel:
                handles["B"].cancel()
                ran.append(("cancelled", handles["B"].cancelled()))

        async def main() -> None:
            now = loop.time()
            handles["A"] = loop.call_at(now + 0.05, a)
            handles["B"] = loop.call_at(now + 0.05, ran.append, "B")
            await asyncio.sleep(0.1)

        loop.run_until_complete(main())
        loop.close()
        return ran

    stock = program(asyncio.new_event_loop())
    assert stock == (["A", "B", ("cancelled", True)] if then_cancel else ["A", "B", "B"])
    assert program(aiowheel.new_event_loop()) == stock
    assert program(aiowheel.new_event_loop(max_batch=1)) == stock
    # uvloop's own handles have no _run(); loop mode's on uvloop are asyncio's in this.
    uvloop = pytest.importorskip("uvloop")
    assert program(aiowheel.new_event_loop(uvloop.Loop)) == stock
    assert program(aiowheel.new_event_loop(uvloop.Loop, max_batch=1)) == stock


def test_a_cancelled_wake_up_is_never_shown() -> None:
    # Defect 6: the wake-up cancelled by a re-arm (call_later(30), then call_later(0.2)) lost
    # its callback, was no longer told from a timer, and was shown: len 3 where asyncio's is 2.
    async def main() -> tuple[int, list[str]]:
        loop: Any = asyncio.get_running_loop()
        far = loop.call_later(30, print)
        near = loop.call_later(0.2, print)
        seen = (len(loop._scheduled), [type(h).__name__ for h in loop._scheduled])
        far.cancel()
        near.cancel()
        return seen

    stock = asyncio.run(main())
    assert stock == (2, ["TimerHandle", "TimerHandle"])
    assert aiowheel.run(main()) == stock


def test_a_callbacks_error_on_a_hand_driven_loop_goes_to_its_handler(loop: Any) -> None:
    # Found beyond the eight: the error was reported as Reaper._drive's (asyncio's
    # get_running_loop raised in the report) and the rest of the batch was lost.
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context["exception"]))
    fired: list[int] = []

    def boom() -> None:
        raise ValueError("boom")

    now = loop.time()
    loop.call_at(now + 0.02, fired.append, 1)
    loop.call_at(now + 0.02, boom)
    loop.call_at(now + 0.02, fired.append, 2)
    drain(loop)
    assert fired == [1, 2]
    assert [type(error) for error in errors] == [ValueError]


def test_keyboard_interrupt_on_a_hand_driven_loop_keeps_the_rest(loop: Any) -> None:
    # Found beyond the eight: the rest of the batch after a KeyboardInterrupt was handed to
    # the running loop, of which there was none: lost.
    fired: list[int] = []

    def interrupt() -> None:
        raise KeyboardInterrupt

    now = loop.time()
    loop.call_at(now + 0.02, fired.append, 1)
    loop.call_at(now + 0.02, interrupt)
    loop.call_at(now + 0.02, fired.append, 2)
    with pytest.raises(KeyboardInterrupt):
        drain(loop)
    drain(loop)
    assert fired == [1, 2]
