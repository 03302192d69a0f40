"""The virtual clock and threads (aiowheel._virtual._jobs, aiowheel._virtual._anyio_hook): work a
virtual loop hands to a thread, through asyncio (``run_in_executor``, ``asyncio.to_thread``) or
anyio (``anyio.to_thread.run_sync``, which runs in anyio's own worker threads), is waited for in
real time with the clock standing still; a thread that calls back into the loop and waits (
``run_coroutine_threadsafe``, ``anyio.from_thread.run``, a blocking portal) lets the clock move
while it waits. On every installed base.

Wall-time bounds here are generous (tens of seconds for work of 0.1 s): they only catch a
deadlock, never time a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anyio
import anyio.from_thread
import anyio.to_thread
import pytest

import aiowheel.testing as testing
from aiowheel._virtual import _jobs
from tests.support import Base, run_python

WORK = 0.1  # seconds of real work in a thread


def _in_a_thread(how: str) -> Awaitable[Any]:
    """``time.sleep(WORK)`` handed to a thread ``how``."""
    loop = asyncio.get_running_loop()
    if how == "anyio.to_thread.run_sync":
        return anyio.to_thread.run_sync(time.sleep, WORK)
    if how == "asyncio.to_thread":
        return asyncio.to_thread(time.sleep, WORK)
    if how == "run_in_executor":
        return loop.run_in_executor(None, time.sleep, WORK)
    assert how == "run_in_executor(own pool)"

    async def own_pool() -> None:
        with ThreadPoolExecutor(1) as pool:
            await loop.run_in_executor(pool, time.sleep, WORK)

    return own_pool()


HOWS = [
    "anyio.to_thread.run_sync",
    "asyncio.to_thread",
    "run_in_executor",
    "run_in_executor(own pool)",
]


async def the_issue_shape(how: str) -> tuple[str, float]:
    """Issue 37's shape: 0.1 s of work in a thread under ``anyio.fail_after(5)``; what it
    gives and the virtual time it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        with anyio.fail_after(5):
            await _in_a_thread(how)
        result = "done"
    except TimeoutError:
        result = "timed out"
    return result, loop.time() - start


@pytest.mark.parametrize("how", HOWS)
def test_work_in_a_thread_is_waited_for_with_the_clock_standing_still(base: Base, how: str) -> None:
    # Before: anyio's worker threads were invisible, and the clock jumped to the deadline
    # while the thread worked (anyio.to_thread.run_sync ended at virtual 5.0).
    assert testing.run(the_issue_shape(how), base=base) == ("done", 0.0)


def test_a_blocking_portals_loop_waits_for_its_threads(base: Base) -> None:
    """A virtual loop run by anyio's blocking portal, in a thread of its own (idle between two
    calls, its clock may move: each call measures its own time)."""
    options = {"loop_factory": testing.virtual_loop_factory(base)}
    with anyio.from_thread.start_blocking_portal("asyncio", options) as portal:
        for how in HOWS:
            assert portal.call(the_issue_shape, how) == ("done", 0.0), how


# -- a thread that calls back into the loop and waits ----------------------------------------


def _call_back(how: str, portal: Any) -> Callable[[], str]:
    """A job: wait for a 1 s sleep on the loop, then work WORK in the thread."""
    loop = asyncio.get_running_loop()

    def job() -> str:
        if how == "run_coroutine_threadsafe":
            asyncio.run_coroutine_threadsafe(asyncio.sleep(1), loop).result()
        elif how == "anyio.from_thread.run":
            anyio.from_thread.run(anyio.sleep, 1)
        else:
            assert how == "BlockingPortal.call"
            portal.call(anyio.sleep, 1)
        time.sleep(WORK)  # the thread works on: the clock must wait for it again
        return "done"

    return job


clocks: list[Any] = []  # the clock of the loop under test (for _no_deadlock)


async def calls_back(how: str) -> tuple[str, float]:
    """A thread waits for the loop's sleep(1), then works; a racer sleeps 3 s meanwhile."""
    loop = asyncio.get_running_loop()
    clocks.append(testing.clock_of(loop))
    async with anyio.from_thread.BlockingPortal() as portal:
        job = _call_back(how, portal)
        work = (
            asyncio.ensure_future(asyncio.to_thread(job))
            if how == "run_coroutine_threadsafe"
            else asyncio.ensure_future(anyio.to_thread.run_sync(job))
        )
        racer = asyncio.ensure_future(asyncio.sleep(3))
        done, _ = await asyncio.wait([work, racer], return_when=asyncio.FIRST_COMPLETED)
        assert done == {work}, "the clock jumped while the thread worked"
        at = loop.time()
        await racer
        return work.result(), at


def _no_deadlock(main: Callable[[], Any]) -> Any:
    """Run ``main`` in a thread; if it is stuck after 30 s (the clock waiting for a thread
    that waits for the clock), let the clock move so that everything ends, and fail."""
    clocks.clear()
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(main()), daemon=True)
    thread.start()
    thread.join(30)
    if thread.is_alive():
        clock = clocks[-1]

        def unstick() -> None:
            clock._jobs.lent += 1000

        clock._loop.call_soon_threadsafe(unstick)
        thread.join(30)
        pytest.fail("deadlock: the clock waited for a thread that waited for the clock")
    return result[0]


@pytest.mark.parametrize(
    "how", ["run_coroutine_threadsafe", "anyio.from_thread.run", "BlockingPortal.call"]
)
def test_a_thread_waiting_on_the_loop_lets_the_clock_move(base: Base, how: str) -> None:
    # Before: the job counted while its thread waited for the loop's sleep, which the clock
    # could never reach (a deadlock). Now the sleep runs at 1.0, and the work that follows in
    # the thread is waited for: the thread is done before the racer's 3 s.
    result = _no_deadlock(lambda: testing.run(calls_back(how), base=base))
    assert result == ("done", 1.0)


def test_only_virtual_loops_count_anyios_jobs() -> None:
    """On a loop without a virtual clock, anyio's entry point is anyio's own: the thread runs
    the function itself, marked as no job."""

    def seen() -> object:
        return getattr(_jobs._threads, "job", None)

    async def main() -> tuple[object, object]:
        return await anyio.to_thread.run_sync(seen), await asyncio.to_thread(seen)

    assert asyncio.run(main()) == (None, None)
    jobs = testing.run(main())
    assert all(isinstance(job, _jobs._Job) for job in jobs)


@pytest.mark.once  # an import order, the same on every interpreter and build
def test_anyio_imported_after_the_virtual_loop_is_made() -> None:
    """The backend module imported inside the running loop (lazily, by anyio's first call)
    is wrapped as it is imported; the finder that waited for it leaves sys.meta_path."""
    script = """
import asyncio, sys, time
import aiowheel.testing as testing
from aiowheel._virtual import _anyio_hook

async def main():
    assert "anyio" not in sys.modules
    import anyio, anyio.to_thread
    with anyio.fail_after(5):
        await anyio.to_thread.run_sync(time.sleep, 0.1)
    return asyncio.get_running_loop().time()

print(testing.run(main()), any(isinstance(f, _anyio_hook._AnyioFinder) for f in sys.meta_path))
"""
    proc = run_python(["-c", script])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0.0", "False"]


# -- a thread blocked on something the loop provides after a timer (issue 48) -----------------

BOUND = 30.0  # real seconds before a run counts as stuck (it takes well under one)


def run_unless_stuck(
    main: Callable[[], Coroutine[Any, Any, Any]],
    base: Base,
    unstick: Callable[[], object],
    stuck: str,
) -> list[Any]:
    """``testing.run(main(), base=base)`` in a thread of its own, its result in a list; if it
    still runs after ``BOUND`` real seconds, ``unstick()`` ends it (and with it the loop) and
    the test fails with ``stuck``."""
    result: list[Any] = []
    thread = threading.Thread(
        target=lambda: result.append(testing.run(main(), base=base)), daemon=True
    )
    thread.start()
    thread.join(BOUND)
    if thread.is_alive():
        unstick()
        thread.join(BOUND)
        pytest.fail(stuck)
    return result


def _waits_for_the_loop(kind: str) -> tuple[Callable[[], str], Callable[[str], None]]:
    """A blocking wait on another thread, and how the loop (or the test) ends it."""
    if kind == "queue.Queue":
        fifo: queue.Queue[str] = queue.Queue()
        return fifo.get, fifo.put
    if kind == "queue.SimpleQueue":
        simple: queue.SimpleQueue[str] = queue.SimpleQueue()
        return simple.get, simple.put
    assert kind == "threading.Event"
    event = threading.Event()
    said: list[str] = []

    def wait() -> str:
        event.wait()
        return said[0]

    def tell(item: str) -> None:
        said.append(item)
        event.set()

    return wait, tell


async def fed_after_a_timer(kind: str, how: str, feed: list[Callable[[str], None]]) -> Any:
    """Issue 48's deadlock: a thread waits for an item the loop gives it after sleep(1), then
    works WORK; a racer sleeps 3 s meanwhile. What the thread got, the virtual time it was
    done at, and whether that was before the racer."""
    loop = asyncio.get_running_loop()
    wait, give = _waits_for_the_loop(kind)
    feed.append(give)

    def job() -> str:
        item = wait()
        time.sleep(WORK)  # the thread works on: the clock must wait for it again
        return item

    async def feeder() -> None:
        await asyncio.sleep(1)
        give("fed")

    feeding = asyncio.ensure_future(feeder())
    if how == "anyio.to_thread.run_sync":
        work = asyncio.ensure_future(anyio.to_thread.run_sync(job))
    elif how == "asyncio.to_thread":
        work = asyncio.ensure_future(asyncio.to_thread(job))
    else:
        work = asyncio.ensure_future(loop.run_in_executor(None, job))
    racer = asyncio.ensure_future(asyncio.sleep(3))
    got = await asyncio.wait_for(work, 5)
    at = loop.time()
    first = not racer.done()
    await feeding
    await racer
    return got, at, first


@pytest.mark.parametrize("kind", ["queue.Queue", "queue.SimpleQueue", "threading.Event"])
@pytest.mark.parametrize(
    "how", ["asyncio.to_thread", "run_in_executor", "anyio.to_thread.run_sync"]
)
def test_a_thread_blocked_on_the_loop_lets_the_clock_move(base: Base, kind: str, how: str) -> None:
    # Before: the job counted while its thread waited for the item the loop gives after
    # sleep(1), which the clock could never reach: stuck for good (wait_for's 5 s never came).
    # Now the thread parks (blocked on a lock, using no CPU, for _PARK_GRACE of real time),
    # the clock reaches 1.0, and the work that follows in the thread is waited for again.
    if _jobs.process_sampler() is None:
        pytest.skip("threads cannot be read here (no /proc): every job holds the clock")
    feed: list[Callable[[str], None]] = []
    result = run_unless_stuck(
        lambda: fed_after_a_timer(kind, how, feed),
        base,
        lambda: feed[-1]("fed by the test"),
        "deadlock: the clock waited for a thread that waited for the loop",
    )
    assert result == [("fed", 1.0, True)]


async def job_waits_on_a_sleeping_job() -> tuple[str, float]:
    """One job waits (blocked on a lock) for another that sleeps WORK of real time: the
    sleeper holds the clock, so the waiter is done at virtual 0.0, before any timeout."""
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(2) as pool:
        sleeper = loop.run_in_executor(pool, time.sleep, WORK * 3)
        done = threading.Event()
        sleeper.add_done_callback(lambda _: done.set())
        async with asyncio.timeout(5):
            await loop.run_in_executor(pool, done.wait)
    return "done", loop.time()


def test_a_thread_blocked_on_a_working_thread_holds_the_clock(base: Base) -> None:
    assert testing.run(job_waits_on_a_sleeping_job(), base=base) == ("done", 0.0)


def _timed_waits() -> dict[str, Callable[[], object]]:
    """A job's lock waits with a timeout of 0.5 s of real time, none of them ever satisfied:
    each ends by itself."""
    held = threading.Lock()
    held.acquire()
    return {
        "Event().wait(0.5)": lambda: threading.Event().wait(0.5),
        "Queue().get(timeout=0.5)": lambda: _empty_get(),
        "Lock.acquire(timeout=0.5)": lambda: held.acquire(timeout=0.5),
        "Condition.wait(0.5)": lambda: _condition_wait(),
    }


def _empty_get() -> str:
    with contextlib.suppress(queue.Empty):
        queue.Queue().get(timeout=0.5)
    return "waited"


def _condition_wait() -> bool:
    condition = threading.Condition()
    with condition:
        return condition.wait(0.5)


async def job_in_a_timed_wait(wait: str) -> tuple[str, float]:
    """``wait_for(run_in_executor(job), 5)`` where the job waits 0.5 s of real time on a lock
    no one releases, with a timeout: what it gives, and the virtual time it took."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, _timed_waits()[wait]), 5)
        result = "done"
    except TimeoutError:
        result = "timed out"
    return result, loop.time() - start


@pytest.mark.parametrize(
    "wait",
    [
        "Event().wait(0.5)",
        "Queue().get(timeout=0.5)",
        "Lock.acquire(timeout=0.5)",
        "Condition.wait(0.5)",
    ],
)
def test_a_timed_wait_in_a_thread_holds_the_clock(base: Base, wait: str) -> None:
    # Issue 59, defect 7: a job in a timed lock wait was read as parked after the grace, and
    # wait_for's 5 s came at virtual 5.0 after 0.06 s of real time. A wait with a timeout ends
    # by itself in real time (it cannot deadlock the clock): work in progress, like a sleep.
    if _jobs.process_sampler() is None:
        pytest.skip("threads cannot be read here (no /proc): every job holds the clock")
    assert testing.run(job_in_a_timed_wait(wait), base=base) == ("done", 0.0)


def _reads_timed(sampler: _jobs._Sampler, timeout: float | None) -> bool:
    """What ``sampler`` reads of a thread asleep in ``Event().wait(timeout)``."""
    entered = threading.Event()
    release = threading.Event()
    tids: list[int] = []

    def wait() -> None:
        tids.append(threading.get_native_id())
        entered.set()
        release.wait(timeout)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    try:
        entered.wait(5)
        deadline = time.monotonic() + 5
        while not sampler.waits_on_a_thread(tids[0]) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert sampler.waits_on_a_thread(tids[0])
        return sampler.waits_timed(tids[0])
    finally:
        release.set()
        thread.join(5)


def test_the_timeout_of_a_lock_wait_is_read_from_its_system_call(
    sampler: _jobs._Sampler,
) -> None:
    # Timed and untimed, on this machine's /proc (futex's fourth argument: the timeout), with
    # wchan and where it is hidden.
    assert sampler.timeouts  # the calibration found that syscall tells them apart
    assert _reads_timed(sampler, 30.0) is True
    assert _reads_timed(sampler, None) is False
    assert not _jobs._timed_wait(b"running", sampler.lock_waits)  # no arguments: untimed
    assert not _jobs._timed_wait(b"", sampler.lock_waits)


def _every_wait_reads(monkeypatch: pytest.MonkeyPatch, timeout: bytes) -> None:
    """Make every system call's fourth argument in ``/proc/<tid>/syscall`` read ``timeout``,
    as on a libc whose lock waits pass no timeout there (``0x0``) or one in every wait."""
    read = _jobs._read

    def reading(tid: int, name: str) -> bytes:
        text = read(tid, name)
        fields = text.split()
        if name != "syscall" or len(fields) < 5:
            return text
        fields[4] = timeout
        return b" ".join(fields) + b"\n"

    monkeypatch.setattr(_jobs, "_read", reading)


@pytest.mark.parametrize("timeout", [b"0x0", b"0x7f0000001000"])
def test_timeouts_are_read_only_where_the_calibration_tells_them_apart(
    timeout: bytes, monkeypatch: pytest.MonkeyPatch, calibrated: _jobs._Sampler
) -> None:
    # A system call whose fourth argument is not the timeout (a libc that passes one to every
    # wait, or none): the calibration's two waiters read alike, and every wait reads untimed
    # (it parks after the grace, as before timed waits held the clock).
    read = _jobs._read
    _every_wait_reads(monkeypatch, timeout)
    alike = _jobs._calibrate()
    assert alike is not None
    assert alike.lock_waits == calibrated.lock_waits  # the rest is found as before
    assert alike.timeouts is False
    monkeypatch.setattr(_jobs, "_read", read)
    assert _reads_timed(alike, 30.0) is False  # untimed: it may park
    told = _jobs._calibrate()
    assert told is not None
    assert told.timeouts is calibrated.timeouts


def test_where_every_wait_reads_timed_a_thread_blocked_on_the_loop_still_parks(
    base: Base, monkeypatch: pytest.MonkeyPatch, calibrated: _jobs._Sampler
) -> None:
    # Were the fourth argument taken as the timeout without the calibration's check, a libc
    # that passes one to every wait would bring issue 48's deadlock back: no wait would park.
    _every_wait_reads(monkeypatch, b"0x7f0000001000")
    monkeypatch.setattr(_jobs, "_sampler_state", [_jobs._calibrate()])
    feed: list[Callable[[str], None]] = []
    result = run_unless_stuck(
        lambda: fed_after_a_timer("queue.Queue", "run_in_executor", feed),
        base,
        lambda: feed[-1]("fed by the test"),
        "deadlock: the clock waited for a thread that waited for the loop",
    )
    assert result == [("fed", 1.0, True)]


def _untimed_waits() -> dict[str, tuple[Callable[[], object], Callable[[], None]]]:
    """A job's lock waits without a timeout, on things no one gives until the test ends
    them: the wait, and how to end it."""
    event = threading.Event()
    fifo: queue.Queue[str] = queue.Queue()
    held = threading.Lock()
    held.acquire()
    return {
        "Event().wait()": (event.wait, event.set),
        "Queue().get()": (fifo.get, lambda: fifo.put("ended")),
        "Lock.acquire()": (held.acquire, held.release),
    }


async def job_in_an_untimed_wait(wait: str, ends: list[Callable[[], None]]) -> tuple[str, float]:
    """``wait_for(run_in_executor(job), 5)`` where the job waits on a lock no one releases,
    without a timeout: what it gives, and the virtual time it took (the job is ended after)."""
    loop = asyncio.get_running_loop()
    job, end = _untimed_waits()[wait]
    ends.append(end)
    start = loop.time()
    try:
        await asyncio.wait_for(loop.run_in_executor(None, job), 5)
        result = "done"
    except TimeoutError:
        result = "timed out"
    took = loop.time() - start
    end()  # the thread goes on (and the default executor's shutdown can join it)
    return result, took


@pytest.mark.parametrize("wait", ["Event().wait()", "Queue().get()", "Lock.acquire()"])
def test_an_untimed_wait_no_one_ends_lets_the_clock_move(base: Base, wait: str) -> None:
    # The other side of the timed waits above: a wait with no timeout on another thread may
    # never end (issue 48), so it parks after the grace and wait_for's 5 s comes, at virtual
    # 5.0, after some 50 ms of real time.
    if _jobs.process_sampler() is None:
        pytest.skip("threads cannot be read here (no /proc): every job holds the clock")
    ends: list[Callable[[], None]] = []
    result = run_unless_stuck(
        lambda: job_in_an_untimed_wait(wait, ends),
        base,
        lambda: ends[-1](),
        "deadlock: the clock waited for a thread in a wait no one ends",
    )
    assert result == [("timed out", 5.0)]


async def resolve_and_connect(rounds: int) -> list[float]:
    """Issue 48: ``open_connection("localhost", port)`` inside ``asyncio.timeout(5)``, each
    round's virtual time (5.0 where the clock jumped while the name was resolved)."""
    loop = asyncio.get_running_loop()
    server = await asyncio.start_server(lambda _r, w: w.close(), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    took = []
    try:
        for _ in range(rounds):
            start = loop.time()
            try:
                async with asyncio.timeout(5):
                    _reader, writer = await asyncio.open_connection("localhost", port)
                writer.close()
            except TimeoutError:
                pass
            took.append(loop.time() - start)
    finally:
        server.close()
    return took


def test_names_the_base_resolves_are_waited_for(base: Base) -> None:
    # Before: uvloop resolves in libuv's own threads, which the clock did not count, and the
    # clock jumped to the timeout while "localhost" was looked up (every round here, 20-35% in
    # the issue's runs). Now libuv's workers at work hold the clock (Linux); asyncio's and
    # rloop's lookups were waited for already.
    if _jobs.process_sampler() is None:
        pytest.skip("threads cannot be read here (no /proc): libuv's resolver is not watched")
    result: list[list[float]] = []
    thread = threading.Thread(
        target=lambda: result.append(testing.run(resolve_and_connect(20), base=base)),
        daemon=True,
    )
    thread.start()
    thread.join(BOUND * 2)
    assert result, "stuck"
    assert result[0] == [0.0] * 20


# -- libuv's workers read off /proc (aiowheel._virtual._jobs.LibuvPool)
# ---------------------------------

_NAME = "aiowheel-test-w"  # a worker name no real thread has (comm holds 15 bytes)


class _Worker:
    """A thread of the test's that names itself as libuv's workers do (under ``_NAME``, the
    name the pool is told to look for) and then waits on a lock, as an idle worker waits on
    its condition variable; or, ``at_work``, reads a pipe, as one at work waits for a DNS
    reply (a thread waiting on I/O holds the clock). Made once it is in that wait."""

    def __init__(self, at_work: bool) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.pipe = os.pipe()
        self.tid = -1
        named = threading.Event()

        def run() -> None:
            self.tid = threading.get_native_id()
            with open(f"/proc/self/task/{self.tid}/comm", "w") as file:
                file.write(_NAME)
            named.set()
            if at_work:
                os.read(self.pipe[0], 1)
            else:
                self.lock.acquire()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert named.wait(BOUND)
        sampler = _jobs.process_sampler()
        assert sampler is not None
        deadline = time.monotonic() + BOUND
        while True:  # until it is in its wait (not running, not waiting for the GIL)
            if at_work:
                call = sampler.syscall(self.tid) or ""
                if call.isdigit() and call not in sampler.lock_waits:
                    break  # in the pipe's read
            elif sampler.waits_on_a_thread(self.tid):
                break
            assert time.monotonic() < deadline, "the thread never reached its wait"
            time.sleep(0.001)

    def end(self) -> None:
        self.lock.release()
        os.write(self.pipe[1], b"x")
        self.thread.join(BOUND)
        for fd in self.pipe:
            os.close(fd)
        deadline = time.monotonic() + BOUND  # join() returns before the kernel's thread is gone
        while os.path.exists(f"/proc/self/task/{self.tid}"):
            assert time.monotonic() < deadline, "the thread never ended"
            time.sleep(0.001)


@pytest.fixture
def calibrated() -> _jobs._Sampler:
    """The process's sampler (the test is skipped where threads cannot be read)."""
    found = _jobs.process_sampler()
    if found is None:
        pytest.skip("threads cannot be read here (no /proc)")
    return found


@pytest.fixture(params=["as calibrated", "without wchan"])
def sampler(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, calibrated: _jobs._Sampler
) -> _jobs._Sampler:
    """The process's sampler, and the same with ``wchan`` hidden (as some kernels hide it)."""
    found = calibrated
    monkeypatch.setattr(_jobs, "_WORKER", _NAME.encode())
    if request.param == "without wchan":
        return _jobs._Sampler(found.lock_waits, frozenset(), timeouts=found.timeouts)
    if not found.lock_wchans:
        pytest.skip("this kernel hides wchan")
    return found


def test_a_thread_woken_and_not_yet_running_is_not_asleep(sampler: _jobs._Sampler) -> None:
    # Before: a libuv worker was read by its system call alone, and one the loop had woken
    # still showed the lock's wait until its CPU took the wake-up: the clock jumped over a
    # resolve (3.14t CI). What /proc shows of such a thread: wchan 0, the wait's system call
    # and R; of one asleep in the wait: the wait's wchan, the same call and S.
    call = sorted(sampler.lock_waits)[0].encode()
    readings = {
        "wchan": (b"0\n", b"futex_do_wait\n"),
        "syscall": (call + b" 0x7f01 0x189 0x0\n",) * 2,
        "stat": (b"4711 (libuv-worker) R 1 1", b"4711 (libuv-worker) S 1 1"),
    }
    woken = [readings[name][0] for name in sampler.files]
    if sampler.lock_wchans:  # the calibrated kernel's own name of the wait
        asleep = [b"%s\n" % sorted(sampler.lock_wchans)[0]]
    else:
        asleep = [readings[name][1] for name in sampler.files]
    assert not sampler.asleep(woken)
    assert sampler.asleep(asleep)


def test_a_worker_asleep_at_work_and_gone(sampler: _jobs._Sampler) -> None:
    idle = _Worker(at_work=False)
    pool = _jobs.LibuvPool(sampler)
    try:
        assert not pool.busy()  # an idle worker: asleep in a lock's wait
        working = _Worker(at_work=True)
        try:
            assert pool.busy()  # a new thread: listed again (the count changed), and at work
            files = [pool._files[worker.tid] for worker in (idle, working)]
        finally:
            working.end()
    finally:
        idle.end()
    # Gone: their files, kept open, read ESRCH (not at work): an open file is the thread's,
    # not its id's, so a new thread given the same id is not read through it.
    for fds in files:
        for fd in fds:
            with pytest.raises(ProcessLookupError):
                os.pread(fd, 512, 0)
    pool.close()
    assert pool._files == {}
    for fds in files:
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)
    assert not pool.busy()  # closed: nothing is opened again
    assert pool._files == {}


def test_a_virtual_loop_closes_its_worker_files(base: Base) -> None:
    if _jobs.process_sampler() is None:
        pytest.skip("threads cannot be read here (no /proc)")

    async def resolve() -> _jobs.LibuvPool | None:
        loop = asyncio.get_running_loop()
        await loop.getaddrinfo("localhost", 80)
        pool: _jobs.LibuvPool | None = loop._aiowheel.virtual._jobs.pool  # type: ignore[attr-defined]
        if pool is not None:
            pool.busy()  # lists the workers (libuv's pool is started by now)
            assert pool._files
        return pool

    pool = testing.run(resolve(), base=base)
    if pool is None:
        return  # the base resolves through run_in_executor: no pool is watched
    assert pool._files == {}
    assert not pool._finalizer.alive


def test_where_wchan_is_hidden_the_system_call_and_state_serve(
    base: Base, monkeypatch: pytest.MonkeyPatch, calibrated: _jobs._Sampler
) -> None:
    # Some kernels hide wchan (it reads 0 for every thread): the sampler then reads the system
    # call and the state. Issue 48's deadlock, the resolves and a timed wait (issue 59), end
    # to end, that way.
    hidden = _jobs._Sampler(calibrated.lock_waits, frozenset(), timeouts=calibrated.timeouts)
    monkeypatch.setattr(_jobs, "_sampler_state", [hidden])
    feed: list[Callable[[str], None]] = []

    async def main() -> tuple[Any, list[float], tuple[str, float]]:
        fed = await fed_after_a_timer("queue.Queue", "run_in_executor", feed)
        resolved = await resolve_and_connect(5)
        return fed, resolved, await job_in_a_timed_wait("Queue().get(timeout=0.5)")

    result = run_unless_stuck(
        main,
        base,
        lambda: feed[-1]("fed by the test"),
        "deadlock: the clock waited for a thread that waited for the loop",
    )
    assert result == [(("fed", 1.0, True), [0.0] * 5, ("done", 0.0))]


@pytest.mark.parametrize("every_sleep_reads", [b"0\n", b"schedule\n"])
def test_wchan_is_used_only_where_it_tells_a_lock_from_io(
    every_sleep_reads: bytes, monkeypatch: pytest.MonkeyPatch, calibrated: _jobs._Sampler
) -> None:
    # A kernel that hides wchan (0) or names every sleep alike would read a thread in
    # time.sleep or a socket's wait as blocked on a lock: the calibration falls back to the
    # system call and the state there.
    found = calibrated
    read = _jobs._read

    def reading(tid: int, name: str) -> bytes:
        return every_sleep_reads if name == "wchan" else read(tid, name)

    monkeypatch.setattr(_jobs, "_read", reading)
    alike = _jobs._calibrate()
    assert alike is not None
    assert alike.lock_waits == found.lock_waits
    assert alike.lock_wchans == frozenset()
    assert alike.files == ("syscall", "stat")
    assert alike.timeouts is found.timeouts  # read off syscall, whatever wchan says
    monkeypatch.setattr(_jobs, "_read", read)
    told = _jobs._calibrate()  # this kernel's own reading, as the process's sampler has it
    assert told is not None
    assert told.lock_wchans == found.lock_wchans
