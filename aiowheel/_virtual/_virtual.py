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

"Idle" is a fact read off the loop, not a count of quiet cycles: asyncio's selector loops are
seen idle when their selector would wait, loops closed to Python (uvloop, rloop, zuvloop) by a
probe callback that finds nothing queued behind it twice in a row (the idle detectors,
:mod:`aiowheel._virtual._idle`).

Threads. A thread is invisible to the loop: while it works, the loop has nothing ready and
nothing to poll, and would look idle. So the clock counts a *job* for each piece of work the
loop hands to a thread (``run_in_executor``, ``anyio.to_thread.run_sync``), and does not jump
while one runs, unless its thread waits on the loop's own work or is blocked on another thread
(*parked*); nor while the base's own resolver threads work. How jobs are counted and read is
:mod:`aiowheel._virtual._jobs` (anyio's entry point: :mod:`aiowheel._virtual._anyio_hook`): the
clock asks it one question, whether a thread holds it now.

``autojump`` as a number is trio's ``autojump_threshold``: the loop must also stay idle that
many seconds of *real* time before the clock jumps, for code that waits on a peer outside the
loop (another process, a thread the loop did not start).

Exact. A loop's clock value is a float (``start`` plus what the jumps and advances added), and
a deadline ``D`` runs with ``loop.time()`` equal to ``D`` itself (``handle.when()``, the
sleep's or timeout's deadline), not ``D`` rounded up to the tick (600 x ``sleep(0.1)`` ended at
60.288 when it was): tests compare times with ``==``, and trio's ``MockClock`` and looptime
land exactly. The wheel still files by tick, and a bucket holds deadlines that differ; so the
clock is *exact* (:attr:`VirtualClock.exact`) and the driver files its wake-up on it at the
earliest exact deadline in the bucket due rather than at the bucket's tick
(the reaper's ``Reaper.arm``, which asks the store: both wheels in the compiled build).
The pass run there takes the whole bucket, fires what is due at that time and files the rest
one tick on; the next wake-up is at the earliest of those, and so on: the clock lands on each
distinct deadline in turn, and ties run in the order they were filed. A timer filed meanwhile
before the armed wake-up, even into a bucket already queued, re-arms it. What it costs: the
entries of the bucket due are read at each wake-up (a real clock's wake-up stays at the tick
and reads none).

Fuzzing time (:class:`aiowheel._virtual._fuzz.Fuzz`, armed on a clock by :meth:`VirtualClock.fuzz`;
the settings and the draws live in :mod:`aiowheel._virtual._fuzz`, imported only when a clock is
fuzzed). The exact clock above makes one schedule: every timer on time. A real loop makes
many: timers late by whatever the loop was busy with, batches of them coalesced, the whole loop
stalled by one slow callback. A seed picks one of those schedules, and only ones a real
loop-mode loop could make:

- **late, never early**: a jump to a wake-up lands a seeded amount in ``[0, jitter]`` past it
  (past the exact deadline: exact plus the seeded lateness).
  Every timer due by then runs in that one pass, in deadline order (the driver sorts a pass's
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
import contextvars
import gc
import heapq
import itertools
import math
import selectors
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .._common import _bases, _validate
from ._anyio_hook import watch_anyio
from ._idle import Idle, ProbeIdle, SelectorIdle, loop_state
from ._jobs import Jobs, LibuvPool, marking_job, process_sampler, watch_executors

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


VirtualTime.__module__ = (
    "aiowheel.testing"  # in a pickled factory: the public path (as LoopFactory)
)


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
    deadlines (:class:`aiowheel._time._clock.Clock`)."""

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
        self._jobs = Jobs(self._want)  # work handed to threads, not back yet (see "Threads")
        self._due_scheduled = False
        self._idle: Idle | None = None
        self._base_call_soon: Callable[..., Any] = loop.call_soon
        self._chance: Chance | None = None  # fuzzing off: the exact clock
        self._trace: list[tuple[float, str]] | None = None
        # An advance finished and its task has not run yet: no stall until the loop is idle
        # again (the test reads the time the advance promised).
        self._held = False

    def close(self) -> None:
        """The loop closes: release what the clock holds outside Python (the ``/proc`` files
        its resolver pool reads)."""
        self._jobs.close()

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
            from .._seeing._census import track_origins

            track_origins(True, loop=self._loop)
            self._trace = []
        return self._trace

    def _record_due(self) -> Callable[[], None]:
        """Note the timers due at this pass (the loop's census, before it runs); the returned
        function, called once it ran, records those it took (ran or cancelled), in deadline
        order: a timer due but not yet in a bucket the clock has reached stays for a later
        pass."""
        from .._seeing._census import pending

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

    # -- the driver's side: wake-ups filed instead of on the base loop's heap ------------------

    def wake_at(self, when: float, callback: Callable[[], None]) -> _Wake:
        """File the wheel's wake-up (:class:`aiowheel._time._clock.Clock`)."""
        wake = _Wake(when, callback)
        heapq.heappush(self._wakes, (when, next(self._order), wake))
        if when <= self._now:
            # Due already: run from the next iteration's ready callbacks, where asyncio's
            # _run_once moves a timer due by then, after the callbacks queued before it (a
            # call_soon now ran it ahead of those queued later in this iteration: a task's
            # next step that would have cancelled it came too late).
            self._base_call_soon(self._schedule_due)
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
        if threads and self._jobs.hold():
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


def install(loop: Any, clock: VirtualClock) -> None:
    """Give ``loop`` its idle detector and the wrappers virtual time needs on it."""
    watch_anyio()
    jobs = clock._jobs
    watch_executors(loop, jobs)
    selector = getattr(loop, "_selector", None)
    if isinstance(loop, asyncio.BaseEventLoop) and isinstance(selector, selectors.BaseSelector):
        clock._idle = SelectorIdle(clock, selector)
        threadsafe: Callable[..., Any] = loop.call_soon_threadsafe
    else:
        jobs.pool = _resolver_pool(loop)
        probe = ProbeIdle(clock, loop, _ready_queue(loop), _requeue_for(loop, clock))
        loop.call_soon = probe.counted(clock._base_call_soon)
        threadsafe = probe.counted(loop.call_soon_threadsafe)
        clock._idle = probe
    loop.call_soon_threadsafe = marking_job(jobs, threadsafe)


def _resolver_pool(loop: Any) -> LibuvPool | None:
    """The threads ``loop``'s base resolves names in, watched (libuv's: the bases whose record
    says ``libuv``, uvloop and zuvloop), or None (asyncio's and rloop's go through
    ``run_in_executor``; or threads cannot be read)."""
    sampler = process_sampler() if _libuv(loop) else None
    return None if sampler is None else LibuvPool(sampler)


def _libuv(loop: Any) -> bool:
    """Whether ``loop``'s base runs on libuv (its record's ``libuv``: uvloop, zuvloop)."""
    record = _bases.of_class(type(loop)._aiowheel_config.base)
    return record is not None and record.libuv


def _requeue_for(loop: Any, clock: VirtualClock) -> Callable[[Callable[[], None]], object]:
    """How the probe comes back, as the base's record says (``requeue``): with the loop's
    ``call_soon`` where every iteration of the loop polls its I/O (libuv's loops: uvloop,
    zuvloop); as a timer on the base's own heap where an iteration with callbacks queued may
    skip the poll (rloop skips it for up to 250 us after the last one; a due timer makes it
    poll): on rloop a timer due at once (its native ``_call_later`` of 0 us), elsewhere (bases
    not measured here) one of a microsecond."""
    base = type(loop)._aiowheel_config.base
    record = _bases.of_class(base)
    if record is not None and record.requeue == "call_soon":
        return clock._base_call_soon
    native_call_later = getattr(base, "_call_later", None)
    own = _bases.of_module(base.__module__)
    if native_call_later is not None and own is not None and own.requeue == "native_call_later":
        # rloop's native call_later takes whole microseconds, and a timer of 0 is due at once:
        # the next step polls with a zero timeout. Through the public call_later the smallest
        # timer is 1 us, which its poll (epoll, milliseconds) rounds up to a 1 ms wait: two
        # quiet probes cost 2 ms of wall time per jump.
        def requeue_now(probe: Callable[[], None]) -> object:
            return native_call_later(loop, 0, probe, (), contextvars.copy_context())

        return requeue_now
    base_call_later = loop_state(loop).heap.near_call_later

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
