"""Threads: one event loop per thread, N at once (asyncio's model, and the way a free-threaded
3.14t scales), the GIL kept off, and what another thread may not do.

- The GIL stays off (free-threaded interpreters only): after ``import aiowheel`` and after a
  program on a loop-mode loop of each installed base, in a fresh interpreter.
- Per-thread loops, on every build: loop mode on each base, ``aiowheel.run``, ``get_timer()``
  on plain asyncio loops, heartbeats, with N threads started together; a loop made in one
  thread and run in another (debug mode too); set-up from a thread before the loop runs.
- Module-level state used from many threads at once: the loop-class cache, the loop watchers,
  each loop's list of engines.
- Misuse: threads that cancel the loop's handles and call its ``call_at`` / ``call_later``
  while another thread runs it. Each call either works or raises RuntimeError naming the
  thread; afterwards every timer has fired exactly once or not at all as its handle says,
  none early, and the wheel still works. On a free-threaded build that holds in every mode;
  with the GIL, as asyncio's own checks, in debug mode (the other case is skipped there).

No assertion depends on timing beyond "never early" and generous bounds.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

import aiowheel
import aiowheel.loops
from aiowheel._loopmode import _loop
from tests.support import BASES, FREE_THREADED, ROOT, Base
from tests.time.test_wakeup_stress import stress

_T = TypeVar("_T")

THREADS = 4

# The bases that run one loop per thread, several at once. rloop 0.5 does not on its own,
# without aiowheel: asyncio.Runner(loop_factory=rloop.new_event_loop) in 4 threads at once
# raises "Cannot close a running event loop" from some of them (3.11 and 3.14t alike).
per_thread_bases = pytest.mark.bases("asyncio", "uvloop", "zuvloop")

free_threaded_only = pytest.mark.skipif(
    not FREE_THREADED, reason="the GIL is what this checks the absence of (free-threaded builds)"
)


def in_threads(count: int, target: Callable[[int], _T], *, timeout: float = 120) -> list[_T]:
    """``target(i)`` in ``count`` threads released together; their results in order. A
    thread's exception is raised here; a thread still running after ``timeout`` fails."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            barrier.wait()
            results[index] = target(index)
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


# -- the GIL stays off --------------------------------------------------------------------------

_GIL_SCRIPT = """
import asyncio, importlib, os, sys, warnings
warnings.simplefilter("error", RuntimeWarning)  # "The global interpreter lock (GIL) has been..."
name = sys.argv[1]
module = {module!r}.get(name)
if module is not None:
    importlib.import_module(module)
    if sys._is_gil_enabled():
        print("the base enables the GIL itself")
        raise SystemExit(0)
assert not sys._is_gil_enabled(), "the GIL is on before aiowheel is imported"
import aiowheel, aiowheel.loops
assert not sys._is_gil_enabled(), "import aiowheel enabled the GIL"
if os.environ.get("AIOWHEEL_EXPECT_COMPILED") and not os.environ.get("AIOWHEEL_NO_EXTENSIONS"):
    assert aiowheel.COMPILED and aiowheel.NATIVE, (aiowheel.COMPILED, aiowheel.NATIVE)

async def main():
    loop = asyncio.get_running_loop()
    fired = []
    loop.call_later(0.02, fired.append, 1).cancel()
    loop.call_later(0.02, fired.append, 2)
    async with asyncio.timeout(5):
        await asyncio.sleep(0.05)
    beat = aiowheel.get_timer().every(0.01, fired.append, 3)
    async with aiowheel.timeout(5):
        await aiowheel.sleep(0.03)
    beat.cancel()
    assert fired[0] == 2 and 3 in fired, fired

aiowheel.run(main(), base=aiowheel.loops.installed()[name])
assert not sys._is_gil_enabled(), "a loop-mode loop enabled the GIL"
print("GIL off", "compiled" if aiowheel.COMPILED else "pure")
"""


@free_threaded_only
@pytest.mark.parametrize("name", list(BASES))
def test_the_gil_stays_off_after_import_and_a_loop_mode_program(name: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "PYTHON_GIL"}
    script = _GIL_SCRIPT.format(module=aiowheel.loops.BASES)
    result = subprocess.run(
        [sys.executable, "-c", script, name],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    if result.stdout.startswith("the base enables the GIL itself"):
        pytest.skip(f"{name} enables the GIL on its own, without aiowheel")
    assert result.stdout.startswith("GIL off"), (result.stdout, result.stderr)
    assert "GIL" not in result.stderr, result.stderr


# -- one loop per thread ------------------------------------------------------------------------


DOG_TIMEOUT = 0.2


async def _a_loops_work(index: int) -> dict[str, Any]:
    """A little of everything, on the running loop-mode loop; what it saw."""
    loop = asyncio.get_running_loop()
    timer = aiowheel.get_timer()
    assert timer is aiowheel.timer_of(loop), "get_timer() is not the loop's own wheel"
    fired: list[tuple[float, float]] = []

    def note(deadline: float) -> None:
        fired.append((deadline, loop.time()))

    handles = []
    for k in range(200):
        delay = 0.02 + 0.001 * (k % 20)  # above the threshold: the wheel
        handles.append(loop.call_later(delay, note, loop.time() + delay))
    for handle in handles[::2]:
        assert handle.cancel()
    for _ in range(50):
        async with asyncio.timeout(10):
            await asyncio.sleep(0)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.03):
            await asyncio.sleep(10)
    beats: list[float] = []
    beat = timer.every(0.02, lambda: beats.append(loop.time()))
    dog_fired: list[int] = []
    fed = loop.time()  # read before each feed, so a gap measured is never shorter than the dog's
    dog = timer.watchdog(DOG_TIMEOUT, dog_fired.append, index)
    longest_hunger = 0.0
    for _ in range(20):  # fed for 0.3 s: longer than the timeout, so feeding is what keeps it quiet
        await aiowheel.sleep(0.015)
        longest_hunger = max(longest_hunger, loop.time() - fed)
        fed = loop.time()
        dog.feed()
    beat.cancel()
    dog.cancel()
    await asyncio.sleep(0.06)  # past the last deadline of `handles`
    return {
        "timer": id(timer),
        "fired": fired,
        "beats": beats,
        "dog": dog_fired,
        "longest_hunger": longest_hunger,
        "pending": len(timer),
    }


def _check_a_loops_work(seen: dict[str, Any]) -> None:
    assert len(seen["fired"]) == 100, len(seen["fired"])
    assert all(at >= deadline for deadline, at in seen["fired"]), "a timer fired early"
    assert len(seen["beats"]) >= 2, seen["beats"]
    # A starved thread (ASan, a loaded 2-core machine) can sleep past the timeout between two
    # feeds, and then the dog is right to fire. What must never happen is a fire with every gap
    # between feeds inside the timeout.
    if seen["dog"]:
        assert seen["longest_hunger"] >= DOG_TIMEOUT, ("a fed watchdog fired", seen)
    assert seen["pending"] == 0


@per_thread_bases
def test_one_loop_mode_loop_per_thread_with_threads_at_once(base: Base) -> None:
    seen = in_threads(THREADS, lambda index: aiowheel.run(_a_loops_work(index), base=base))
    for one in seen:
        _check_a_loops_work(one)
    assert len({one["timer"] for one in seen}) == THREADS


@per_thread_bases
def test_loop_factories_made_in_each_thread_with_asyncio_runner(base: Base) -> None:
    def work(index: int) -> dict[str, Any]:
        with asyncio.Runner(loop_factory=aiowheel.loop_factory(base)) as runner:
            return runner.run(_a_loops_work(index))

    for one in in_threads(THREADS, work):
        _check_a_loops_work(one)


def test_get_timer_per_thread_on_plain_asyncio_loops() -> None:
    """The module-level helpers on asyncio's own loops, one per thread: each thread gets its
    loop's default timer every time, however the threads interleave."""

    async def main() -> tuple[int, int, list[float]]:
        loop = asyncio.get_running_loop()
        timer = aiowheel.get_timer()
        assert aiowheel.timer_of(loop) is None
        mismatches = 0
        late: list[float] = []
        for _ in range(300):
            if aiowheel.get_timer() is not timer:
                mismatches += 1
            async with aiowheel.timeout(5):
                await asyncio.sleep(0)
            handle = aiowheel.call_later(5, lambda: None)
            if aiowheel.get_timer() is not timer:
                mismatches += 1
            handle.cancel()
        deadline = loop.time() + 0.02
        await aiowheel.sleep_until(deadline)
        late.append(loop.time() - deadline)
        return id(timer), mismatches, late

    seen = in_threads(THREADS, lambda _: asyncio.run(main()))
    assert [mismatches for _, mismatches, _ in seen] == [0] * THREADS
    assert len({timer for timer, _, _ in seen}) == THREADS
    assert all(late >= 0 for _, _, lates in seen for late in lates)


@pytest.mark.parametrize("debug", [False, True], ids=["", "debug"])
def test_a_loop_made_in_one_thread_runs_in_another(base: Base, debug: bool) -> None:
    """The thread that runs a loop is its wheel's thread, also when another made it: its own
    cancels and timeouts are not refused as foreign (debug mode checks them; so does every
    free-threaded build), and the loop goes back to the first thread as well."""
    loop = aiowheel.new_event_loop(base)
    loop.set_debug(debug)
    fired: list[int] = []

    async def main() -> str:
        loop.call_later(0.02, fired.append, 1)
        loop.call_later(0.02, fired.append, 2).cancel()
        timer = aiowheel.get_timer()
        timer.call_later(0.02, fired.append, 3).cancel()
        async with aiowheel.timeout(5) as scope:
            scope.reschedule(loop.time() + 6)
            await asyncio.sleep(0.05)
        async with asyncio.timeout(5):
            await asyncio.sleep(0)
        return "done"

    try:
        assert in_threads(1, lambda _: loop.run_until_complete(main())) == ["done"]
        assert fired == [1]
        fired.clear()
        assert loop.run_until_complete(main()) == "done"  # back in this thread
        assert fired == [1]
    finally:
        loop.close()


def test_set_up_from_a_thread_before_the_loop_runs(base: Base) -> None:
    """asyncio lets any thread file a timer on a loop that is not running; loop mode does too
    (the thread that then runs it takes it over)."""
    loop = aiowheel.new_event_loop(base)
    fired: list[str] = []
    try:
        in_threads(1, lambda _: loop.call_later(0.02, fired.append, "set up in a thread"))
        loop.call_later(0.03, fired.append, "set up here")
        loop.run_until_complete(asyncio.sleep(0.1))
        assert fired == ["set up in a thread", "set up here"]
    finally:
        loop.close()


# -- module-level state, used from many threads ---------------------------------------------------


def test_one_loop_class_per_config_whatever_threads_ask_at_once(base: Base) -> None:
    tick = 0.000_937  # a config no other test makes: its class is made here, by the first thread

    def loop_class(_: int) -> type[Any]:
        loop = aiowheel.new_event_loop(base, tick=tick)
        loop.close()
        return type(loop).__base__  # the config's class (each loop has a class of its own)

    classes = in_threads(8, loop_class)
    assert len(set(classes)) == 1


def test_loop_watchers_from_many_threads() -> None:
    """What the pytest plugin relies on: each thread's watcher sees its loop made and closed;
    stopping one twice, from threads at once, is harmless."""

    def watch(_: int) -> list[str]:
        seen: list[tuple[str, asyncio.AbstractEventLoop]] = []
        unwatch = _loop.watch_loops(lambda event, loop: seen.append((event, loop)))
        try:
            loop = aiowheel.new_event_loop()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()
        finally:
            unwatch()
            unwatch()
        return [event for event, seen_loop in seen if seen_loop is loop]

    assert in_threads(THREADS, watch) == [["made", "closing"]] * THREADS
    here = test_loop_watchers_from_many_threads.__name__
    assert not [w for w in _loop._watchers if here in getattr(w, "__qualname__", "")]


@per_thread_bases
def test_each_loop_lists_its_own_timers_with_threads_at_once(base: Base) -> None:
    """The registry of each loop's engines (pending_timers, the too-many-timers count) under
    threads that each make, use and close many Timers on their own loops."""

    async def main(index: int) -> tuple[int, int]:
        loop = asyncio.get_running_loop()
        own: list[aiowheel.Timer] = []
        for _ in range(20):
            timer = aiowheel.Timer()
            timer.call_later(30, lambda: None)
            own.append(timer)
        for timer in own[:10]:
            timer.close()
        loop.call_later(30, lambda: None)
        listed = len(aiowheel.pending_timers(loop))
        for timer in own[10:]:
            timer.close()
        return index, listed

    seen = in_threads(THREADS, lambda index: aiowheel.run(main(index), base=base))
    assert [listed for _, listed in seen] == [11] * THREADS


# -- misuse from other threads ------------------------------------------------------------------


def _refused_or_worked(call: Callable[[], _T]) -> tuple[_T | None, RuntimeError | None]:
    try:
        return call(), None
    except RuntimeError as exc:
        return None, exc


@pytest.mark.parametrize(
    "debug",
    [
        pytest.param(
            False,
            id="",
            marks=pytest.mark.skipif(
                not FREE_THREADED,
                reason="with the GIL, calls from another thread are checked in debug mode "
                "only, as asyncio's are",
            ),
        ),
        pytest.param(True, id="debug"),
    ],
)
def test_other_threads_cancelling_and_filing_never_corrupt_the_wheel(
    base: Base, debug: bool
) -> None:
    """Threads hammer a loop another thread runs: ``handle.cancel()`` on its handles and its
    ``call_at`` / ``call_later`` (asyncio supports neither; this is misuse). Each call works or
    raises RuntimeError naming the thread; no handle both ran and said cancelled, none ran
    twice or early, and the loop's wheel still fires a fresh batch afterwards."""
    loop = aiowheel.new_event_loop(base)
    loop.set_debug(debug)
    if not FREE_THREADED and not loop.get_debug():
        loop.close()
        pytest.skip("this base has no debug mode (rloop 0.5): nothing checks threads with the GIL")
    shared: list[Any] = []  # handles the loop's thread filed, for the others to cancel
    ran: dict[int, int] = {}
    deadlines: dict[int, float] = {}
    early: list[tuple[int, float, float]] = []
    stop = threading.Event()
    started = threading.Event()
    lock = threading.Lock()
    tokens = iter(range(1 << 62))

    def fire(token: int) -> None:
        now = loop.time()
        if now < deadlines[token]:
            early.append((token, deadlines[token], now))
        ran[token] = ran.get(token, 0) + 1

    def file(call: Callable[..., Any], when: float, delay: float) -> tuple[Any, Any]:
        with lock:
            token = next(tokens)
        deadlines[token] = when
        return _refused_or_worked(lambda: call(delay, fire, token)), token

    owned: list[tuple[Any, int]] = []

    async def churn() -> None:
        started.set()
        rounds = 0
        while not stop.is_set() or rounds < 20:
            rounds += 1
            for k in range(50):
                delay = 0.015 + 0.001 * (k % 30)
                (handle, _), token = file(loop.call_later, loop.time() + delay, delay)
                owned.append((handle, token))
                shared.append(handle)
                if k % 3 == 0:
                    handle.cancel()
            async with asyncio.timeout(5):
                await asyncio.sleep(0.001)
            del shared[:-200]
        await asyncio.sleep(0.2)  # every deadline filed has passed

    foreign: list[tuple[Any, int]] = []
    refusals: list[RuntimeError] = []
    cancelled_by_others: list[Any] = []

    def meddle(index: int) -> None:
        started.wait(30)
        for i in range(3000):
            try:  # the loop's thread trims the list meanwhile
                handle = shared[(i * 7 + index) % max(len(shared), 1)]
            except IndexError:
                handle = None
            if handle is not None:
                result, refused = _refused_or_worked(handle.cancel)
                if refused is not None:
                    refusals.append(refused)
                elif result:
                    cancelled_by_others.append(handle)
            if i % 10 == 0:
                delay = 0.02
                now = loop.time()
                call = loop.call_later if i % 20 else loop.call_at
                when_arg = delay if call is loop.call_later else now + delay
                (handle, refused), token = file(call, now + delay, when_arg)
                if refused is not None:
                    refusals.append(refused)
                else:
                    foreign.append((handle, token))

    def run_loop() -> None:
        loop.run_until_complete(churn())

    runner = threading.Thread(target=run_loop)
    runner.start()
    try:
        in_threads(2, meddle)
    finally:
        stop.set()
        runner.join(120)
    assert not runner.is_alive()
    try:
        # The other threads did meddle: 600 calls each at least, besides the cancels.
        assert len(refusals) + len(foreign) >= 2 * 300, (len(refusals), len(foreign))
        assert all("thread" in str(exc).lower() for exc in refusals), refusals[:3]
        assert not early, early[:3]
        assert all(count == 1 for count in ran.values()), "a timer ran twice"
        for handle, token in owned + foreign:
            assert handle is not None
            assert (ran.get(token, 0) == 1) != handle.cancelled(), (handle, ran.get(token))
        assert all(handle.cancelled() for handle in cancelled_by_others)
        timer = aiowheel.timer_of(loop)
        assert timer is not None
        assert len(timer) == 0, "pending timers left after every deadline passed"

        async def fresh_batch() -> list[int]:
            done: list[int] = []
            for k in range(100):
                loop.call_later(0.02 + 0.0005 * k, done.append, k)
            await asyncio.sleep(0.2)
            return done

        assert sorted(loop.run_until_complete(fresh_batch())) == list(range(100))
    finally:
        loop.close()


@free_threaded_only
def test_a_due_handle_cancelled_from_another_thread_during_its_batch_is_refused() -> None:
    """Issue #35 F (the pure build answered True, then ran the callback anyway, or failed an
    assertion in the batch): a callback of the running batch starts a thread that cancels a
    handle due behind it. The cancel is refused, the handle runs once, and says it ran."""

    async def main() -> tuple[list[str], list[str], bool]:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        answers: list[str] = []
        behind: list[Any] = []

        def cancel_from_a_thread() -> None:
            try:
                answers.append(f"returned {behind[0].cancel()}")
            except RuntimeError as exc:
                answers.append(f"refused: {exc}")

        def first() -> None:
            ran.append("first")
            thread = threading.Thread(target=cancel_from_a_thread)
            thread.start()
            thread.join(10)

        when = loop.time() + 0.05
        loop.call_at(when, first)
        behind.append(loop.call_at(when, ran.append, "behind"))
        await asyncio.sleep(0.2)
        return ran, answers, behind[0].cancelled()

    for _ in range(20):
        ran, answers, cancelled = aiowheel.run(main())
        assert ran == ["first", "behind"]
        assert len(answers) == 1 and answers[0].startswith("refused:"), answers
        assert "thread" in answers[0]
        assert not cancelled


@free_threaded_only
@per_thread_bases
def test_loops_made_run_and_closed_while_other_threads_misuse_them_lose_no_wake_up(
    base: Base,
) -> None:
    """Issue #35 E (a lost wake-up within a few dozen loops, both builds, on 3.14t): threads
    call ``call_later`` / ``cancel()`` on whichever loop is current (misuse: each call works or
    raises RuntimeError) while this thread makes, runs and closes loops, each running a short
    sleep. Every loop's sleep ends: none sleeps in its selector forever."""
    # The harness of tests/time/test_wakeup_stress.py (it fails past its bound); a loop it had to
    # nudge lost its wake-up, which fails here too.
    result = stress(base, loops=40, bound=120.0)
    lost = [report for report in result["overruns"] if not report["outcome"].startswith("late")]
    assert not lost, f"a loop slept forever: its wheel's wake-up was lost: {lost}"
    assert result["done"] == 40
    assert sum(result["calls"]) > 100, result["calls"]  # the other threads did meddle


def _no_op() -> None:
    pass


@free_threaded_only
def test_a_tight_foreign_call_later_loop_does_not_starve_the_loops_own_sleep() -> None:
    """Issue #35 (unclear case, 3.14t): a thread calling ``call_later`` on a running loop in a
    tight loop starved the loop's own 11 ms sleep for over 5 s (its calls were filed, and the
    loop thread ran one huge batch, contending for the core's lock). They are refused now, and
    the sleeps end on time (bound: 10 s for twenty 11 ms sleeps, for a loaded machine)."""
    loop = aiowheel.new_event_loop()
    stop = threading.Event()
    refused = [0]

    def hammer() -> None:
        while not stop.is_set():
            try:
                loop.call_later(0.02, _no_op)
            except RuntimeError:
                refused[0] += 1

    async def sleeps() -> float:
        start = time.monotonic()
        for _ in range(20):
            await asyncio.sleep(0.011)
        return time.monotonic() - start

    thread = threading.Thread(target=hammer, daemon=True)
    try:
        loop.call_soon(thread.start)
        took = loop.run_until_complete(sleeps())
    finally:
        stop.set()
        thread.join(10)
        loop.close()
    assert took < 10, took
    assert refused[0] > 0


# The forked child of a running loop, in an interpreter of its own: a fork from this process,
# where earlier tests' threads may be running (an exporter's, a pool's), can leave the child
# waiting forever on an allocator lock one of them held at the fork (seen under AddressSanitizer
# with PYTHONMALLOC=malloc), which no aiowheel code could undo. The child is bounded too.
FORKED_CHILD = """
import asyncio, importlib, os, sys, warnings
from aiowheel._time._threads import running_loop
module, name = sys.argv[1:]
loop = getattr(importlib.import_module(module), name)()

async def main() -> bytes:
    assert running_loop() is loop is asyncio._get_running_loop()
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.write(write, b"%d" % ((running_loop(), asyncio._get_running_loop()) == (None, None)))
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return os.read(read, 1)

print(loop.run_until_complete(main()).decode())
loop.close()
"""


@pytest.mark.bases("asyncio", "uvloop")
def test_the_running_loop_lookup_answers_as_asyncio_in_threads_runs_and_forks(base: Base) -> None:
    """``aiowheel._time._threads.running_loop`` (on 3.11's compiled build the native lookup without
    asyncio's ``getpid()``) answers what ``asyncio._get_running_loop()`` answers: None with
    no loop, the loop while it runs in this thread only, None again once it stops, the loop in
    the thread that runs it next, and None in a forked child of a running loop."""
    from aiowheel._time._threads import running_loop

    def both() -> tuple[object, object]:
        return running_loop(), asyncio._get_running_loop()

    loop = (base or asyncio.SelectorEventLoop)()
    seen: dict[str, Any] = {}

    async def here(name: str) -> None:
        seen[name] = both()
        elsewhere: list[tuple[object, object]] = []
        thread = threading.Thread(target=lambda: elsewhere.append(both()))
        thread.start()
        thread.join()
        seen[name + " elsewhere"] = elsewhere[0]

    try:
        seen["before"] = both()
        loop.run_until_complete(here("main"))
        seen["stopped"] = both()
        in_threads(1, lambda _: loop.run_until_complete(here("thread")))
    finally:
        loop.close()
    assert seen["before"] == seen["stopped"] == (None, None)
    assert seen["main"] == seen["thread"] == (loop, loop)
    assert seen["main elsewhere"] == seen["thread elsewhere"] == (None, None)
    if hasattr(os, "fork"):
        kind = base or asyncio.SelectorEventLoop
        child = subprocess.run(
            [sys.executable, "-c", FORKED_CHILD, kind.__module__, kind.__qualname__],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.strip() == "1", "a forked child saw its parent's loop running"


@pytest.mark.bases("asyncio", "uvloop")
def test_the_api_follows_its_loop_to_another_thread_and_refuses_the_one_left(base: Base) -> None:
    """A Timer bound to a loop that stops and runs next in another thread files from that
    thread, and the thread it left (no loop running there now) is refused, on asyncio's loops
    (their thread id) and uvloop's (the running-loop lookup)."""
    timer = aiowheel.Timer()
    loop = (base or asyncio.SelectorEventLoop)()
    fired: list[int] = []

    async def file(n: int) -> None:
        timer.call_later(0, fired.append, n)
        await asyncio.sleep(0.01)

    try:
        loop.run_until_complete(file(1))
        in_threads(1, lambda _: loop.run_until_complete(file(2)))
        with pytest.raises(RuntimeError, match="no event loop is running in this thread"):
            timer.call_later(0, fired.append, 3)
        loop.run_until_complete(timer.aclose())
    finally:
        loop.close()
    assert fired == [1, 2]
