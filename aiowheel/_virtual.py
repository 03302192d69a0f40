"""Virtual time: a loop-mode loop whose clock moves only when the loop is idle or a test says so.

Why it can be exact here. A loop-mode loop owns every timer of its program. With the threshold
at minus infinity (every deadline, even a past one, goes to the wheel) the loop's own heap holds
nothing, the wheel's wake-up is the only thing that waits for time, and :class:`VirtualClock`
is where that wake-up is filed instead of the base loop's heap. ``loop.time()`` reads the
clock; no ``time.monotonic`` is patched, so nothing else in the process is fooled, and the same
code works on asyncio's loops, uvloop, rloop and zuvloop.

When the clock moves. Only forward, and only

- by a jump, when the loop is *idle* and has a reason to jump (autojump with a pending wake-up,
  or a test's :func:`aiowheel.testing.advance` still short of its target): it lands on the
  earliest wake-up (the earliest exact deadline pending, see *Exact*) or on the advance's
  target, whichever is first, and runs what is due there; the tasks woken run before the loop
  can be idle again, so before the clock moves past that deadline;
- never while a callback is ready, a poll of the loop's I/O finds something, or work the loop
  handed to a thread is still running (*Threads*, below).

"Idle" is a fact read off the loop, not a count of quiet cycles (looptime's "42 no-op cycles"):

- **asyncio's selector loops** ask their selector to wait only when nothing is ready and no
  timer of their own is due; a wrapper around ``selector.select`` polls with a zero timeout
  first, and an empty answer is idleness (:class:`_SelectorIdle`);
- **libuv loops and others** (uvloop, rloop, zuvloop) are closed to Python, so a probe callback
  re-queues itself with the loop's ``call_soon`` while a jump is wanted (:class:`_ProbeIdle`).
  These loops poll their I/O between two batches of ready callbacks, so a probe that finds
  nothing queued behind it twice in a row, with no callback scheduled through the loop in
  between, has seen a whole poll find nothing. On uvloop "nothing queued" is read from its
  ready queue itself; on rloop and zuvloop, whose queues live in native code, from every
  ``call_soon`` / ``call_soon_threadsafe`` made through the loop (a task's step or a future's
  callback included): a callback a native transport queues without the loop's ``call_soon``
  is seen only when it schedules one.

Threads. A thread is invisible to the loop: while it works, the loop has nothing ready and
nothing to poll, and would look idle. The clock counts a *job* for each piece of work the loop
hands to a thread, from the hand-off (on the loop's thread, before the loop can look idle) to
the moment its result is back on the loop, and does not jump while a job runs:

- ``loop.run_in_executor`` (``asyncio.to_thread``, ``loop.getaddrinfo`` and everything else
  built on it), wrapped on the loop itself;
- ``anyio.to_thread.run_sync`` (and what is built on it: ``anyio.Path``, ``anyio.open_file``,
  Starlette's ``run_in_threadpool``, FastAPI's ``def`` endpoints), which runs in anyio's own
  worker threads and hands its result back with ``call_soon_threadsafe``: the loop never sees
  it start. anyio's asyncio backend is reached through its one entry point,
  ``AsyncIOBackend.run_sync_in_worker_thread`` (anyio's backend interface, the call every
  ``to_thread.run_sync`` makes), wrapped once per process when that module is imported (a
  finder on ``sys.meta_path`` waits for it if it is not imported yet); on a loop without a
  virtual clock the wrapper calls anyio's own at once.

Why entry points and not something more general. What a thread is doing cannot be read from
Python: a thread that works for the loop and one that waits on a peer look alike, and work
handed over through a queue of the library's own (anyio's workers each have one) leaves no
trace on the loop until its result comes back. So the clock is told where work starts; the
two entry points above are where asyncio and anyio start it, and work started any other way
(a pool's own ``submit``, a thread of the program's own) stays invisible, as documented.

A job that calls back into the loop and waits for it (``asyncio.run_coroutine_threadsafe(...)
.result()``, ``anyio.from_thread.run``, a ``BlockingPortal``'s ``call`` or ``start_task_soon``)
is not running while it waits: counted, it would stop the clock from reaching the very
``sleep`` it waits for (a deadlock, before this). This part is general: the job's thread is
marked while it runs the job, every ``call_soon_threadsafe`` made from a marked thread carries
the job in its context (a context variable), every task the loop creates in such a context
(``run_coroutine_threadsafe``'s, a portal's) is the job's *loop work*, and while a job has loop
work pending the clock does not wait for it. When the last of that work is done, on the loop's
thread, the job counts again, before its thread can take the result and go on. Loop work a
job starts without waiting for it (fire and forget) lends the job as well: while that work
runs, the job's own work is not waited for.

A job blocked on another thread does not hold the clock (issue 48). A job whose thread waits
for something the loop gives it after a timer (``queue.get()`` fed after ``sleep(1)``, an
``Event`` set by a callback) would otherwise stop the clock for good: the clock waiting for the
thread, the thread for the loop. The rule: a job counts while its thread *runs*; a job whose
thread is seen blocked in a lock's wait (the system call a ``Lock``, ``Condition``,
``Event``, ``Queue``, ``SimpleQueue`` or ``Future`` wait makes: ``futex`` on Linux, found
once per process by watching two threads wait on a held lock) and using no CPU, look after
look, for ``_PARK_GRACE`` (50 ms) of real time is *parked*, and the clock may move without
it. Blocked means asleep, too (``S`` in ``stat``): a thread the loop has just woken is still
inside the wait's system call until the scheduler runs it, but runnable from the moment it
was woken, so a busy machine cannot make it look parked. Read off
``/proc/self/task/<tid>/syscall``, ``stat`` and ``schedstat``, every ``_PARK_POLL``
(10 ms) while threads hold the clock. The thread counts again as soon as a look finds it
running (woken: the loop's ``put`` makes it runnable before the loop can look idle again),
so what it does next is waited for. A thread sleeping (``time.sleep``) or waiting on I/O
(a socket, a file, a subprocess) is not blocked on a thread: it holds the clock as before.
Limits: the rule cannot tell *which* thread a parked job waits for, so a job waiting on a
thread the loop did not start (a pool's own ``submit``, a thread of the program's own) that
works in real time lets the clock go on after the grace (a job waiting on another *job*
is fine: that job holds the clock while it works); a job still queued in a full executor
(no thread yet) counts; a thread starved of the GIL for the whole grace by another thread
of the process, while the loop is idle, looks parked. Where threads cannot be read (not
Linux, no ``/proc``), every job counts until its result is back, as before this rule.

The base's own threads. uvloop and zuvloop resolve names (``getaddrinfo``, ``getnameinfo``,
also inside ``create_connection``) in libuv's worker threads, which no Python entry point
starts: while one of those threads (named ``libuv-worker``) is not waiting for work, the
clock does not jump (Linux, read as above). asyncio's and rloop's lookups go through
``run_in_executor`` (counted).

``autojump`` as a number is trio's ``autojump_threshold``: the loop must also stay idle that
many seconds of *real* time before the clock jumps, for code that waits on a peer outside the
loop (another process, a thread the loop did not start).

Exact. A loop's clock value is a float (``start`` plus what the jumps and advances added), and
a deadline ``D`` runs with ``loop.time()`` equal to ``D`` itself (``handle.when()``, the
sleep's or timeout's deadline), not ``D`` rounded up to the tick (600 x ``sleep(0.1)`` ended at
60.288 when it was): tests compare times with ``==``, and trio's ``MockClock`` and looptime
land exactly. The wheel still files by tick, and a bucket holds deadlines that differ; so the
clock is *exact* (:attr:`VirtualClock.exact`) and the engine files its wake-up on it at the
earliest exact deadline in the bucket due rather than at the bucket's tick
(the reaper's ``Reaper.arm``, which asks the store: both wheels in the compiled build).
The pass run there takes the whole bucket, fires what is due at that time and files the rest
one tick on; the next wake-up is at the earliest of those, and so on: the clock lands on each
distinct deadline in turn, and ties run in the order they were filed. A timer filed meanwhile
before the armed wake-up, even into a bucket already queued, re-arms it. What it costs: the
entries of the bucket due are read at each wake-up (a real clock's wake-up stays at the tick
and reads none).

Fuzzing time (:class:`aiowheel._fuzz.Fuzz`, armed on a clock by :meth:`VirtualClock.fuzz`;
the settings and the draws live in :mod:`aiowheel._fuzz`, imported only when a clock is
fuzzed). The exact clock above makes one schedule: every timer on time. A real loop makes
many: timers late by whatever the loop was busy with, batches of them coalesced, the whole loop
stalled by one slow callback. A seed picks one of those schedules, and only ones a real
loop-mode loop could make:

- **late, never early**: a jump to a wake-up lands a seeded amount in ``[0, jitter]`` past it
  (past the exact deadline: exact plus the seeded lateness).
  Every timer due by then runs in that one pass, in deadline order (the engine sorts a pass's
  due entries), so timers a few ticks apart coalesce, as they do on a loaded loop;
- **stalls**: after a pass of timers, at a seeded rate, the clock leaps a seeded amount in
  ``[0, stall]`` before anything the pass woke can run: as if one of its callbacks had blocked
  the loop. What is due by then runs next, after the callbacks already queued, as a real loop
  appends its due timers behind its ready queue;
- **call_soon order is never touched**: the clock moves between callbacks, never reorders them;
- **advance() stays exact**: no move goes past the target of a pending
  :func:`aiowheel.testing.advance` (what a test says about time stays true).

Every draw comes from one ``random.Random(seed)`` per clock, drawn at jumps and passes only, so
a program that is itself deterministic (no threads racing the loop, no real I/O, no unseeded
``random``) makes the same draws at the same points: the seed replays the run. Whether it did
is checked by a *trace* (:meth:`VirtualClock.trace`): at each pass the virtual time and the
origin (the line that filed it) of every timer due there; two runs with one seed must give
equal traces.

What it costs. Nothing when off: the real-time loop never reaches this code, the fuzzing module
(and ``random``) is imported only when a clock is fuzzed, and an unfuzzed virtual clock pays
one ``is None`` test per jump and per pass.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import gc
import heapq
import importlib.abc
import inspect
import itertools
import math
import os
import selectors
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from . import _validate
from ._clock import STATE_ATTRIBUTE

if TYPE_CHECKING:
    from ._fuzz import Chance, Fuzz

__all__ = ["VirtualClock", "VirtualTime"]


@dataclass(frozen=True, slots=True, eq=False)
class VirtualTime:
    """How a virtual loop's clock behaves: where it starts and when it jumps (part of its
    :class:`~aiowheel.LoopConfig`)."""

    autojump: bool | float
    """When the clock jumps. True jumps as soon as the loop is idle; a number, after that many
    seconds of real idle time; False, only by :func:`aiowheel.testing.advance`."""
    start: float
    """``loop.time()`` when the loop is made."""

    def __post_init__(self) -> None:
        # Made by hand too (it is public): the checks virtual_loop_factory makes.
        _validate.autojump(self.autojump, "VirtualTime()")
        _validate.start(self.start, "VirtualTime()")

    # Equal (and hashed) by kind as well as value: True == 1.0 and False == 0 in Python, but
    # autojump=True (jump when idle) and autojump=1.0 (after 1 s of real idle time) are
    # different clocks, and so are False and 0; configs are cache keys for loop classes.
    def _key(self) -> tuple[bool, bool | float, float]:
        return (isinstance(self.autojump, bool), self.autojump, self.start)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, VirtualTime) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class _Wake:
    """One wake-up filed on the clock: a callback for a time, cancellable (a wheel's wake-up
    handle, as the base heap's handle would be)."""

    __slots__ = ("callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], None]) -> None:
        self.when = when
        self.callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        """Drop it (the clock skips it when it comes due)."""
        self.cancelled = True


class VirtualClock:
    """A loop's virtual clock: its time, the wake-ups filed on it, and the jumps.

    :func:`aiowheel.testing.clock_of` returns it; tests read :attr:`now` and move it with
    :meth:`advance`.
    """

    exact: Final = True
    """True, since its time is where its wake-ups are, and the wheel files them at exact
    deadlines (:class:`aiowheel._clock.Clock`)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, settings: VirtualTime) -> None:
        self._loop = loop
        self._now = float(settings.start)
        autojump = settings.autojump
        self._autojump = autojump is True or (autojump is not False and autojump >= 0)
        self._real_wait = 0.0 if isinstance(autojump, bool) else float(autojump)
        self._wakes: list[tuple[float, int, _Wake]] = []
        self._order = itertools.count()
        # Pending advances: (target, order, future), earliest target first.
        self._advances: list[tuple[float, int, asyncio.Future[None]]] = []
        self._jobs = 0  # work handed to threads, not back yet (see "Threads" above)
        self._lent = 0  # of those, jobs whose threads wait on loop work of theirs
        self._active: dict[_Job, None] = {}  # the jobs not ended (those with a _Job)
        self._recheck = False  # threads held the clock at the last look: look again soon
        self._pool: _LibuvPool | None = None  # the base's own resolver threads, if watched
        self._due_scheduled = False
        self._idle: _Idle | None = None
        self._base_call_soon: Callable[..., Any] = loop.call_soon
        self._chance: Chance | None = None  # fuzzing off: the exact clock
        self._trace: list[tuple[float, str]] | None = None
        # An advance finished and its task has not run yet: no stall until the loop is idle
        # again (the test reads the time the advance promised).
        self._held = False

    # -- reading -----------------------------------------------------------------------------

    @property
    def now(self) -> float:
        """The virtual time (what ``loop.time()`` returns)."""
        return self._now

    def time(self) -> float:
        """The virtual time: the loop's ``time()``."""
        return self._now

    @property
    def autojump(self) -> bool | float:
        """True, False or the real idle time before a jump (as the loop was made with)."""
        if not self._autojump:
            return False
        return self._real_wait if self._real_wait else True

    @property
    def fuzzed(self) -> Fuzz | None:
        """The :class:`Fuzz` the clock runs under, or None (the exact clock)."""
        chance = self._chance
        return None if chance is None else chance.fuzz

    def fuzz(self, fuzz: Fuzz | None) -> None:
        """Run under ``fuzz`` from now on (None: exact again). Arm it before the loop runs
        anything to replay a seed: the draws follow the jumps from the first one on."""
        from ._fuzz import Chance, Fuzz  # here: a program that never fuzzes never imports it

        if fuzz is not None and not isinstance(fuzz, Fuzz):
            raise TypeError(
                f"fuzz(): fuzz must be an aiowheel.testing.Fuzz or None, got {type(fuzz).__name__}"
            )
        self._chance = None if fuzz is None else Chance(fuzz)

    def trace(self) -> list[tuple[float, str]]:
        """Start (or keep) recording, and return the record: ``(time, origin)`` for each timer
        due at each pass of the wheel, in deadline order, and ``(time, "stall <seconds>")`` for
        each stall. Two runs of a deterministic program with one seed record equal lists.

        It turns on origin tracking for the loop (each timer named by the line that filed it)
        and lists the pending timers at every pass: for tests, not for a busy loop.
        """
        if self._trace is None:
            from ._census import track_origins

            track_origins(True, loop=self._loop)
            self._trace = []
        return self._trace

    def _record_due(self) -> Callable[[], None]:
        """Note the timers due at this pass (the loop's census, before it runs); the returned
        function, called once it ran, records those it took (ran or cancelled), in deadline
        order: a timer due but not yet in a bucket the clock has reached stays for a later
        pass."""
        from ._census import pending

        loop = self._loop
        now = self._now
        due = []
        for entry, timer in pending(loop):
            if timer.when > now:
                break  # in deadline order
            due.append((entry, timer))

        def record() -> None:
            trace = self._trace
            assert trace is not None
            left = {id(entry) for entry, _ in pending(loop)}
            for entry, timer in due:
                if id(entry) not in left:
                    trace.append((now, f"{timer.kind} {timer.origin}"))

        return record

    def _next_wake(self) -> float | None:
        """The time of the earliest wake-up filed on the clock, or None (a bucket's expiration:
        for a far timer, a step where it is filed finer, before its own deadline)."""
        wakes = self._wakes
        while wakes and wakes[0][2].cancelled:
            heapq.heappop(wakes)
        return wakes[0][0] if wakes else None

    # -- moving ------------------------------------------------------------------------------

    def advance(self, seconds: float) -> asyncio.Future[None]:
        """Move the clock ``seconds`` forward, running each timer due on the way at its own
        deadline and letting what it wakes run before the clock moves on; a future that is
        done once the clock is there (:func:`aiowheel.testing.advance` awaits it)."""
        seconds = _validate.advance(seconds, "advance()")
        loop = self._loop
        future: asyncio.Future[None] = loop.create_future()
        heapq.heappush(self._advances, (self._now + seconds, next(self._order), future))
        self._want()
        return future

    # -- the engine's side: wake-ups filed instead of on the base loop's heap ------------------

    def wake_at(self, when: float, callback: Callable[[], None]) -> _Wake:
        """File the wheel's wake-up (:class:`aiowheel._clock.Clock`)."""
        wake = _Wake(when, callback)
        heapq.heappush(self._wakes, (when, next(self._order), wake))
        if when <= self._now:
            self._schedule_due()
        else:
            self._want()
        return wake

    def _schedule_due(self) -> None:
        if not self._due_scheduled:
            self._due_scheduled = True
            self._base_call_soon(self._run_due)

    def _run_due(self) -> None:
        """Run every wake-up due at the clock's time (a loop callback)."""
        self._due_scheduled = False
        record = None if self._trace is None else self._record_due()
        wakes = self._wakes
        now = self._now
        while wakes and wakes[0][0] <= now:
            wake = heapq.heappop(wakes)[2]
            if not wake.cancelled:
                wake.cancelled = True
                wake.callback()
        if record is not None:
            record()
        if self._chance is not None:
            self._stall(self._chance.stall())
        self._finish_advances()
        self._want()

    def _stall(self, seconds: float) -> None:
        """The pass just run blocked the loop ``seconds``: move the clock (never past a pending
        advance's target), and run what came due meanwhile after what is already queued."""
        if not seconds or self._held:
            return
        goal = min(self._now + seconds, self._cap())
        if goal <= self._now:
            return
        self._now = goal
        if self._trace is not None:
            self._trace.append((goal, f"stall {seconds:.6f}"))
        if self._wakes and self._wakes[0][0] <= goal:
            self._schedule_due()

    def _cap(self) -> float:
        """How far a fuzzed move may go: the earliest pending advance's target, or infinity."""
        advances = self._advances
        while advances and advances[0][2].done():
            heapq.heappop(advances)
        return advances[0][0] if advances else math.inf

    def _finish_advances(self) -> None:
        advances = self._advances
        while advances and advances[0][0] <= self._now:
            future = heapq.heappop(advances)[2]
            if not future.done():
                future.set_result(None)
                self._held = self._chance is not None

    # -- idleness and jumps --------------------------------------------------------------------

    def _goal(self, threads: bool = True) -> float | None:
        """Where the clock would jump if the loop were idle now; None: it would not.
        ``threads=False`` leaves out whether threads hold the clock (a look at ``/proc``): the
        idle detectors ask that once, when they are about to jump (:meth:`_jump`)."""
        if threads and self._threads_hold():
            return None  # a thread works for the loop: it may still file timers or wake tasks
        advances = self._advances
        while advances and advances[0][2].done():  # an advance whose task was cancelled
            heapq.heappop(advances)
        target = advances[0][0] if advances else None
        if target is None and not self._autojump:
            return None
        wake = self._next_wake()
        if wake is None:
            return target
        if target is None or wake < target:
            return wake
        return target

    def _want(self) -> None:
        """Something may be worth a jump: let the idle detector look (the probe bases)."""
        idle = self._idle
        if idle is not None:
            idle.want()

    def _jump(self) -> bool:
        """The loop is idle: move to the goal and schedule what is due there; False if there
        is nothing to jump to."""
        goal = self._goal()
        if goal is None:
            return False
        self._held = False  # idle: whatever an advance woke has run
        if goal > self._now:
            chance = self._chance
            if chance is not None:  # late by a seeded amount, never past an advance's target
                goal = max(goal, min(goal + chance.late(), self._cap()))
            self._now = goal
        if self._wakes and self._wakes[0][0] <= self._now:
            self._schedule_due()
        else:
            self._finish_advances()
        return True

    # -- work handed to threads (all on the loop's thread) ------------------------------------

    def _job_begin(self) -> _Job:
        """Work is being handed to a thread: count it until :meth:`_job_end`."""
        self._jobs += 1
        job = _Job(self)
        self._active[job] = None
        return job

    def _threads_hold(self) -> bool:
        """Whether a thread working for the loop holds the clock now: a job not lent and not
        parked (blocked on another thread for the grace, see "Threads"), or the base's own
        resolver threads at work. When True, the idle detector looks again in
        ``_PARK_POLL`` seconds of real time (a job may park meanwhile)."""
        self._recheck = False
        waiting = self._jobs - self._lent
        if waiting > 0:
            sampler = _sampler()
            if sampler is not None:
                for job in list(self._active):
                    if not job.work and not job.ended and sampler.parked(job):
                        waiting -= 1
            if waiting > 0:
                self._recheck = sampler is not None
                return True
        pool = self._pool
        if pool is not None and pool.busy():
            self._recheck = True
            return True
        return False

    def _job_end(self, job: _Job) -> None:
        """``job``'s result is back on the loop (or its waiter gave up on it)."""
        if job.ended:
            return
        job.ended = True
        self._active.pop(job, None)
        if job.work:
            self._lent -= 1
        self._jobs -= 1
        self._want()

    def _loop_work(self, job: _Job, task: asyncio.Future[Any]) -> None:
        """``task`` was made on behalf of ``job``'s thread, which waits for it (or may)."""
        job.work += 1
        if job.work == 1 and not job.ended:
            self._lent += 1
            self._want()
        task.add_done_callback(job.loop_work_done)


class _Job:
    """One piece of work a virtual loop handed to a thread (see "Threads" above)."""

    __slots__ = ("clock", "cpu", "ended", "since", "thread", "work")

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.work = 0  # tasks made for the job's thread, not done yet
        self.ended = False
        # The native id of the thread running the job (set by that thread while it runs it),
        # and what _Sampler last read of it: its CPU time, and since when (real time) it has
        # been seen blocked on another thread without using CPU (None: not blocked).
        self.thread: int | None = None
        self.cpu: int | None = None
        self.since: float | None = None

    def loop_work_done(self, _task: asyncio.Future[Any]) -> None:
        """A task of the job's loop work is done (a done callback, on the loop's thread)."""
        self.work -= 1
        if not self.work and not self.ended:
            self.clock._lent -= 1  # its thread goes on working: the clock waits for it again

    def wrap(self, func: Callable[..., Any]) -> Callable[..., Any]:
        """``func``, marking the thread that runs it as this job's while it runs."""
        job = self

        def run_as_job(*args: Any, **kwargs: Any) -> Any:
            outer = getattr(_threads, "job", None)
            _threads.job = job
            job.thread = threading.get_native_id()
            try:
                return func(*args, **kwargs)
            finally:
                job.thread = None
                _threads.job = outer

        return run_as_job


_THREAD_POOL: Final = concurrent.futures.ThreadPoolExecutor
# The job the current thread is running, if any (``_threads.job``: set by _Job.wrap).
_threads: Final = threading.local()
# The job whose thread asked for the loop work running in this context (see _threadsafe).
_job_var: Final[contextvars.ContextVar[_Job | None]] = contextvars.ContextVar(
    "aiowheel_virtual_job", default=None
)


# -- which threads run: read off /proc (see "Threads") ---------------------------------------

_PARK_GRACE: Final = 0.05  # real seconds a job's thread waits on another thread before it parks
_PARK_POLL: Final = 0.01  # real seconds between two looks while threads hold the clock
_TASKS: Final = "/proc/self/task"
_SETTLE: Final = 0.25  # seconds after a change of the thread count before a listing is trusted


class _Sampler:
    """Reads, for a thread of this process, whether it is blocked waiting on another thread
    (in the system call a lock's wait makes: ``futex`` on Linux, found by :func:`_calibrate`)
    and how much CPU it has used (``schedstat``)."""

    def __init__(self, lock_waits: frozenset[str]) -> None:
        self.lock_waits = lock_waits

    def syscall(self, tid: int) -> str | None:
        """The thread's system call as ``/proc`` names it: a number, or "running"; None if
        it is gone."""
        try:
            with open(f"{_TASKS}/{tid}/syscall", "rb") as file:
                return file.read(32).split(b" ", 1)[0].strip().decode()
        except OSError:
            return None

    def waits_on_a_thread(self, tid: int) -> bool:
        """Whether the thread is blocked in a lock's wait now: in the system call a lock's
        wait makes, *and* asleep. A thread the loop has just woken (a ``put``, a ``set``)
        is still inside that system call until it is scheduled, which on a busy machine may
        take a while, but it is runnable (``R``) from the moment it was woken: it is not
        blocked, and what it does next is waited for."""
        return self.syscall(tid) in self.lock_waits and self.state(tid) == "S"

    @staticmethod
    def state(tid: int) -> str | None:
        """The thread's scheduler state (``R`` runnable, ``S`` asleep, ...), or None."""
        try:
            with open(f"{_TASKS}/{tid}/stat", "rb") as file:
                stat = file.read()
            return stat[stat.rindex(b")") + 2 :][:1].decode()
        except (OSError, ValueError):
            return None

    @staticmethod
    def cpu(tid: int) -> int | None:
        """The thread's CPU time in nanoseconds, or None."""
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as file:
                return int(file.read(64).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def parked(self, job: _Job) -> bool:
        """Whether ``job``'s thread has waited on another thread, using no CPU, for the whole
        grace (each look that finds it otherwise starts the grace again)."""
        tid = job.thread
        if tid is None or not self.waits_on_a_thread(tid):
            job.since = None
            return False
        cpu = self.cpu(tid)
        now = time.monotonic()
        if job.since is None or cpu != job.cpu:
            job.since = now
            job.cpu = cpu
            return False
        return now - job.since >= _PARK_GRACE


_sampler_state: list[_Sampler | None] = []  # [] until calibrated, then [the sampler or None]
_sampler_lock: Final = threading.Lock()


def _sampler() -> _Sampler | None:
    """The process's sampler, or None where threads cannot be read (not Linux, no ``/proc``):
    there every job counts until its result is back, as before."""
    if not _sampler_state:
        with _sampler_lock:
            if not _sampler_state:
                _sampler_state.append(_calibrate())
    return _sampler_state[0]


def _calibrate() -> _Sampler | None:
    """Which system calls a thread blocked on a lock is in: two threads wait on a held lock
    (one with a timeout, as ``Condition.wait(timeout)`` does), read through ``/proc``."""
    if not sys.platform.startswith("linux"):
        return None
    probe = _Sampler(frozenset())
    if probe.syscall(threading.get_native_id()) is None:
        return None
    held = threading.Lock()
    held.acquire()
    tids: list[int] = []
    ready = threading.Barrier(3)

    def wait(timeout: float) -> None:
        tids.append(threading.get_native_id())
        ready.wait()
        if held.acquire(timeout=timeout):
            held.release()

    threads = [threading.Thread(target=wait, args=(t,), daemon=True) for t in (-1, 30.0)]
    for thread in threads:
        thread.start()
    found: set[str] = set()
    try:
        ready.wait()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            calls = [probe.syscall(tid) for tid in tids]
            if all(call is not None and call.isdigit() for call in calls):
                found = {call for call in calls if call is not None}
                break
            time.sleep(0.001)
    finally:
        held.release()
        for thread in threads:
            thread.join()
    return _Sampler(frozenset(found)) if found else None


class _LibuvPool:
    """libuv's worker threads ("libuv-worker"), where uvloop and zuvloop resolve names
    (``getaddrinfo``, ``getnameinfo``) and do their file work: busy while one of them is not
    waiting for work (on its condition variable, a lock's wait).

    The threads are listed again only when the process's thread count changes: one stat per
    idle check instead of a directory listing (the virtual clock asks at each jump; a listing
    each time made a long uvloop run 4x slower). libuv starts its pool in the thread that first
    queues work, before that call returns, so the count has changed before a worker can be
    busy for the loop; but a worker names itself when it starts, so a new thread may not read
    "libuv-worker" yet. For ``_SETTLE`` seconds of real time after a change, every thread new
    since the last trusted listing (but the loop's own) is watched as if it were a worker, and
    the threads are listed again at each check; then the names are trusted. The price: a new
    thread of the program's own that runs (not waiting on a lock) holds the clock for at most
    that long."""

    def __init__(self, sampler: _Sampler) -> None:
        self._sampler = sampler
        self._names: dict[str, bool] = {}  # thread id -> whether it is a libuv worker
        self._threads = -1  # the thread count at the last listing
        self._settled = 0.0  # time.monotonic() from which a listing is trusted; 0.0: it is
        self._known: frozenset[str] = frozenset()  # the threads of the last trusted listing
        self._watch: tuple[int, ...] = ()

    def busy(self) -> bool:
        """Whether a libuv worker of this process is at work now."""
        try:
            threads = os.stat(_TASKS).st_nlink  # 2 + the number of threads
        except OSError:
            return False
        if threads != self._threads:
            first = self._threads < 0  # the threads there before the clock: trusted
            self._threads = threads
            self._settled = 0.0 if first else time.monotonic() + _SETTLE
            self._list(first)
        elif self._settled:
            trusted = time.monotonic() >= self._settled
            self._list(trusted)
            if trusted:
                self._settled = 0.0
        sampler = self._sampler
        for tid in self._watch:
            call = sampler.syscall(tid)
            if call is not None and call not in sampler.lock_waits:
                return True
        return False

    def _list(self, trusted: bool) -> None:
        """List the threads to watch: the workers and, until a listing is ``trusted``, each
        thread new since the last trusted one that has not named itself a worker yet."""
        try:
            tids = os.listdir(_TASKS)
        except OSError:
            self._watch = ()
            return
        names = self._names
        if len(names) > 4 * len(tids) + 64:
            names.clear()  # threads come and go: forget the ones gone
        known = self._known
        own = str(threading.get_native_id())
        watch = []
        for tid in tids:
            worker = names.get(tid)
            if worker is None:
                try:
                    with open(f"{_TASKS}/{tid}/comm", "rb") as file:
                        worker = file.read().strip() == b"libuv-worker"
                except OSError:
                    continue
                if worker or trusted:
                    names[tid] = worker
            if worker or (not trusted and tid not in known and tid != own):
                watch.append(int(tid))
        if trusted:
            self._known = frozenset(tids)
        self._watch = tuple(watch)


# -- idle detectors ---------------------------------------------------------------------------


class _Idle:
    """How one kind of loop tells the clock it is idle."""

    def want(self) -> None:
        """The clock has a reason to jump: make sure idleness will be noticed."""


class _SelectorIdle(_Idle):
    """asyncio's selector loops: the selector is asked to wait only when the loop is idle."""

    def __init__(self, clock: VirtualClock, selector: selectors.BaseSelector) -> None:
        self._clock = clock
        self._select: Final = selector.select
        selector.select = self.select  # type: ignore[method-assign]

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        """The selector's select: a zero-timeout poll first; if it finds nothing (idle), jump
        instead of waiting, unless nothing is worth a jump (then wait as asked)."""
        if timeout is not None and timeout <= 0:
            return self._select(timeout)
        events = self._select(0)
        if events:
            return events
        clock = self._clock
        if clock._goal(False) is None:
            return self._select(timeout)
        if clock._real_wait:
            events = self._select(clock._real_wait)
            if events:
                return events
        if not clock._jump():
            if clock._recheck:  # threads hold the clock: look again soon (one may park)
                timeout = _PARK_POLL if timeout is None else min(timeout, _PARK_POLL)
            return self._select(timeout)
        return events


class _ProbeIdle(_Idle):
    """Loops closed to Python (uvloop, rloop, zuvloop): a probe callback re-queued with the
    base loop's ``call_soon`` while a jump is wanted (see the module docstring)."""

    def __init__(
        self,
        clock: VirtualClock,
        loop: Any,
        ready: collections.deque[Any] | None,
        requeue: Callable[[Callable[[], None]], object],
    ) -> None:
        self._clock = clock
        self._loop = loop
        self._ready_queue = ready
        self._call_soon: Final = requeue
        self._probe_queued = False
        self._quiet = False
        self._activity = 0  # callbacks scheduled through the loop (the wrappers below)
        self._seen = -1
        self._waiting = False
        self._rechecking = False  # a look again is filed (threads held the clock)

    def counted(self, method: Callable[..., Any]) -> Callable[..., Any]:
        """``method`` (the loop's call_soon or call_soon_threadsafe) counting each call."""

        def call(callback: Any, *args: Any, context: Any = None) -> Any:
            self._activity += 1
            return method(callback, *args, context=context)

        call.__doc__ = method.__doc__
        return call

    def want(self) -> None:
        """Queue the probe unless it is queued (or a real-time wait is under way)."""
        if not self._probe_queued and not self._waiting:
            self._probe_queued = True
            self._quiet = False
            self._call_soon(self._probe)

    def _probe(self) -> None:
        self._probe_queued = False
        clock = self._clock
        if clock._goal(False) is None:
            self._quiet = False
            return  # nothing to jump to: the next timer, advance or finished job re-queues it
        ready = self._ready_queue
        busy = (ready is not None and len(ready) > 0) or self._activity != self._seen
        self._seen = self._activity
        if busy or not self._quiet:
            # Something ran or is queued: let it run, and a poll happen, before looking again.
            # A quiet round starts with the threads idle: a poll must follow the moment they
            # were seen so (a libuv worker's result waits in the loop's I/O until one does).
            if not busy and clock._threads_hold():
                self._hold()
                return
            self._quiet = not busy
            self._probe_queued = True
            self._call_soon(self._probe)
            return
        self._quiet = False
        if clock._real_wait:
            self._waiting = True
            # On the base's own heap, in real time (the loop's call_later is the wheel's).
            _loop_state(self._loop).heap.near_call_later(
                clock._real_wait, self._after_wait, self._activity
            )
            return
        if self._jump():
            self.want()

    def _jump(self) -> bool:
        """Jump if no thread holds the clock; else :meth:`_hold` and say False."""
        if self._clock._jump():
            return True
        self._hold()
        return False

    def _hold(self) -> None:
        """Threads hold the clock: look again in ``_PARK_POLL`` seconds of real time (a
        thread may park, or a worker finish, meanwhile)."""
        self._quiet = False
        if self._clock._recheck and not self._rechecking:
            self._rechecking = True
            _loop_state(self._loop).heap.near_call_later(_PARK_POLL, self._look_again)

    def _look_again(self) -> None:
        self._rechecking = False
        self.want()

    def _after_wait(self, activity: int) -> None:
        self._waiting = False
        if activity == self._activity and not self._jump():  # nothing scheduled meanwhile
            return
        self.want()


def install(loop: Any, clock: VirtualClock) -> None:
    """Give ``loop`` its idle detector and the wrappers virtual time needs on it."""
    _watch_anyio()
    base_run_in_executor = loop.run_in_executor

    def run_in_executor(executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        job = clock._job_begin()
        try:
            # Only a thread can be marked; a process pool pickles func: given as it is.
            threads = executor is None or isinstance(executor, _THREAD_POOL)
            if threads and callable(func) and not inspect.iscoroutinefunction(func):
                func = job.wrap(func)
            future: asyncio.Future[Any] = base_run_in_executor(executor, func, *args)
        except BaseException:
            clock._job_end(job)
            raise
        future.add_done_callback(lambda _: clock._job_end(job))
        return future

    run_in_executor.__doc__ = base_run_in_executor.__doc__
    loop.run_in_executor = run_in_executor
    base_shutdown = loop.shutdown_default_executor

    async def shutdown_default_executor(*args: Any, **kwargs: Any) -> None:
        # The executor's threads are joined by a thread of asyncio's own, not through
        # run_in_executor, and (3.12+) under a timeout of THREAD_JOIN_TIMEOUT (300 s) on the
        # loop's clock: counted as executor work, so the clock does not jump over the join and
        # warn that the threads "did not finish joining" while they were still finishing.
        clock._jobs += 1
        try:
            await base_shutdown(*args, **kwargs)
        finally:
            clock._jobs -= 1
            clock._want()

    shutdown_default_executor.__doc__ = base_shutdown.__doc__
    loop.shutdown_default_executor = shutdown_default_executor
    base_create_task = loop.create_task

    def create_task(coro: Any, *args: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = base_create_task(coro, *args, **kwargs)
        context = kwargs.get("context")
        job = _job_var.get() if context is None else context.get(_job_var)
        if job is not None and job.clock is clock:
            clock._loop_work(job, task)
        return task

    create_task.__doc__ = base_create_task.__doc__
    loop.create_task = create_task
    selector = getattr(loop, "_selector", None)
    if isinstance(loop, asyncio.BaseEventLoop) and isinstance(selector, selectors.BaseSelector):
        clock._idle = _SelectorIdle(clock, selector)
        threadsafe: Callable[..., Any] = loop.call_soon_threadsafe
    else:
        clock._pool = _resolver_pool(loop)
        probe = _ProbeIdle(clock, loop, _ready_queue(loop), _requeue_for(loop, clock))
        loop.call_soon = probe.counted(clock._base_call_soon)
        threadsafe = probe.counted(loop.call_soon_threadsafe)
        clock._idle = probe
    loop.call_soon_threadsafe = _threadsafe(clock, threadsafe)


def _threadsafe(clock: VirtualClock, method: Callable[..., Any]) -> Callable[..., Any]:
    """The loop's ``call_soon_threadsafe``: a call from a thread running one of the clock's jobs
    carries the job in the callback's context, so the tasks it makes are the job's loop work."""

    def call_soon_threadsafe(callback: Any, *args: Any, context: Any = None) -> Any:
        job = getattr(_threads, "job", None)
        if job is not None and job.clock is clock:
            # A copy: the caller's context (or the one it passed) is left as it was.
            context = contextvars.copy_context() if context is None else context.copy()
            context.run(_job_var.set, job)
        return method(callback, *args, context=context)

    call_soon_threadsafe.__doc__ = method.__doc__
    return call_soon_threadsafe


# -- anyio's worker threads ----------------------------------------------------------------

_ANYIO_BACKEND: Final = "anyio._backends._asyncio"
_anyio_lock: Final = threading.Lock()
_anyio_state: list[str] = []  # "hooked" once a finder waits for anyio's backend, "wrapped"


def _watch_anyio() -> None:
    """Wrap anyio's worker-thread entry point now if its asyncio backend is imported, else as
    soon as it is (a finder on ``sys.meta_path``); once per process."""
    if "wrapped" in _anyio_state:
        return
    with _anyio_lock:
        module = sys.modules.get(_ANYIO_BACKEND)
        if module is not None:
            _wrap_anyio(module)
        elif "hooked" not in _anyio_state:
            _anyio_state.append("hooked")
            sys.meta_path.insert(0, _AnyioFinder())


def _wrap_anyio(module: ModuleType) -> None:
    """Count the work ``anyio.to_thread.run_sync`` hands to anyio's workers as the running
    virtual loop's jobs (the caller holds ``_anyio_lock``, or the import lock)."""
    if "wrapped" in _anyio_state:
        return
    _anyio_state.append("wrapped")
    backend = getattr(module, "AsyncIOBackend", None)
    original = getattr(backend, "run_sync_in_worker_thread", None)
    if backend is None or original is None or not inspect.iscoroutinefunction(original):
        return  # not an anyio 4 backend: left as it is (its threads stay invisible)

    async def run_sync_in_worker_thread(
        cls: Any, func: Callable[..., Any], args: Sequence[Any], *rest: Any, **kwargs: Any
    ) -> Any:
        state = getattr(asyncio.get_running_loop(), STATE_ATTRIBUTE, None)
        clock = None if state is None else state.virtual
        if clock is None:
            return await original(func, args, *rest, **kwargs)
        job = clock._job_begin()
        try:
            return await original(job.wrap(func), args, *rest, **kwargs)
        finally:
            clock._job_end(job)

    run_sync_in_worker_thread.__doc__ = original.__doc__
    run_sync_in_worker_thread.__wrapped__ = original  # type: ignore[attr-defined]
    backend.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)


class _AnyioFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when anyio's asyncio backend is imported, it lets the other
    finders find it and wraps the loader so that the module is patched once executed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        """None for every module but anyio's asyncio backend (found by the finders after it)."""
        if fullname != _ANYIO_BACKEND:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WrappingLoader(spec.loader)
                return spec
        return None


class _WrappingLoader(importlib.abc.Loader):
    """A loader that runs the real one, then wraps anyio's entry point in the new module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        """The real loader's module."""
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Run the module, then wrap its worker-thread entry point."""
        self._loader.exec_module(module)
        with _anyio_lock:
            _wrap_anyio(module)
            for finder in [f for f in sys.meta_path if isinstance(f, _AnyioFinder)]:
                sys.meta_path.remove(finder)  # its work is done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


_LIBUV: Final = ("uvloop", "zuvloop")


def _resolver_pool(loop: Any) -> _LibuvPool | None:
    """The threads ``loop``'s base resolves names in, watched (libuv's: uvloop, zuvloop), or
    None (asyncio's and rloop's go through ``run_in_executor``; or threads cannot be read)."""
    sampler = _sampler() if _libuv(loop) else None
    return None if sampler is None else _LibuvPool(sampler)


def _libuv(loop: Any) -> bool:
    """Whether ``loop``'s base runs on libuv (uvloop, zuvloop)."""
    base = type(loop)._aiowheel_config.base
    return any(klass.__module__.partition(".")[0] in _LIBUV for klass in base.__mro__)


def _requeue_for(loop: Any, clock: VirtualClock) -> Callable[[Callable[[], None]], object]:
    """How the probe comes back: with the loop's ``call_soon`` where every iteration of the
    loop polls its I/O (libuv's loops: uvloop, zuvloop); as a timer on the base's own heap
    where an iteration with callbacks queued may skip the poll (rloop skips it for up to 250 us
    after the last one; a due timer makes it poll): on rloop a timer due at once (its native
    ``_call_later`` of 0 us), elsewhere (bases not measured here) one of a microsecond."""
    base = type(loop)._aiowheel_config.base
    if _libuv(loop):
        return clock._base_call_soon
    native_call_later = getattr(base, "_call_later", None)
    if native_call_later is not None and base.__module__.partition(".")[0] == "rloop":
        # rloop's native call_later takes whole microseconds, and a timer of 0 is due at once:
        # the next step polls with a zero timeout. Through the public call_later the smallest
        # timer is 1 us, which its poll (epoll, milliseconds) rounds up to a 1 ms wait: two
        # quiet probes cost 2 ms of wall time per jump.
        def requeue_now(probe: Callable[[], None]) -> object:
            return native_call_later(loop, 0, probe, (), contextvars.copy_context())

        return requeue_now
    base_call_later = _loop_state(loop).heap.near_call_later

    def requeue(probe: Callable[[], None]) -> object:
        return base_call_later(1e-6, probe)

    return requeue


def _ready_queue(loop: Any) -> collections.deque[Any] | None:
    """uvloop's ready queue (the one deque the loop object holds), found once through the
    garbage collector's view of the loop; None where the loop keeps it in native memory."""
    deques = [ref for ref in gc.get_referents(loop) if type(ref) is collections.deque]
    if len(deques) != 1:
        return None
    marker = loop.call_soon(_no_op)
    try:
        found = any(item is marker for item in deques[0])
    finally:
        marker.cancel()  # skipped when the loop runs
    return deques[0] if found else None


def _no_op() -> None:
    pass


def _loop_state(loop: Any) -> Any:
    """A loop-mode loop's state (aiowheel._loopstate.LoopState, which sits above this room)."""
    return getattr(loop, STATE_ATTRIBUTE)
