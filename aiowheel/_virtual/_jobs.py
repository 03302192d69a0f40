"""The work a virtual loop hands to threads, which its clock waits for: the jobs.

Why a room of its own. The clock (:mod:`aiowheel._virtual._virtual`) moves when its loop is idle;
what makes a loop that looks idle busy after all is work in threads, and reading that is a subject
of its own: where work is handed over (the entry points), which thread runs which job, whether a
thread runs or is blocked on another one (read off ``/proc``), and the base's own resolver
threads. The clock asks one question of it, :meth:`Jobs.hold` ("does a thread hold me now?"),
and tells it when to look for a jump again (the ``want`` it is made with); this room imports
nothing of the clock's. anyio's entry point is wrapped in :mod:`aiowheel._virtual._anyio_hook`.

Threads. A thread is invisible to the loop: while it works, the loop has nothing ready and
nothing to poll, and would look idle. The clock counts a *job* for each piece of work the loop
hands to a thread, from the hand-off (on the loop's thread, before the loop can look idle) to
the moment its result is back on the loop, and does not jump while a job runs:

- ``loop.run_in_executor`` (``asyncio.to_thread``, ``loop.getaddrinfo`` and everything else
  built on it), wrapped on the loop itself;
- ``anyio.to_thread.run_sync`` (and what is built on it: ``anyio.Path``, ``anyio.open_file``,
  Starlette's ``run_in_threadpool``, FastAPI's ``def`` endpoints), which runs in anyio's own
  worker threads and hands its result back with ``call_soon_threadsafe``: the loop never sees
  it start. Its one entry point (``AsyncIOBackend.run_sync_in_worker_thread``) is wrapped
  once per process by :mod:`aiowheel._virtual._anyio_hook`, which counts its calls here.

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
it. Blocked means asleep, too: a thread the loop has just woken still shows the wait's system
call until its CPU takes the wake-up, but is runnable from the moment it was woken, so a busy
machine cannot make it look parked. Read off ``/proc/self/task/<tid>/wchan`` (where a thread
sleeps in the kernel; ``syscall`` and ``stat`` where that is hidden, see :class:`_Sampler`)
and ``schedstat``, every ``PARK_POLL`` (10 ms) while threads hold the clock. The thread
counts again as soon as a look finds it running (woken: the loop's ``put`` makes it runnable
before the loop can look idle again), so what it does next is waited for. A thread sleeping
(``time.sleep``) or waiting on I/O (a socket, a file, a subprocess) is not blocked on a
thread: it holds the clock as before. Nor is one in a *timed* lock wait
(``Event().wait(0.5)``, ``Queue().get(timeout=0.5)``, ``Lock().acquire(timeout=0.5)``,
``Condition.wait(0.5)``): that wait ends by itself in real time, so it can never deadlock the
clock; it is work in progress, like a sleep, and holds the clock (issue 59: it was read as
parked after the grace, and ``wait_for(run_in_executor(job), 5)`` timed out at virtual 5.0
after 0.06 s of real time). The wait's timeout is its ``futex`` call's fourth argument in
``/proc/<tid>/syscall`` (a pointer to the timeout, ``0x0`` for none: glibc's
``sem_clockwait`` and ``pthread_cond_timedwait`` pass one, their untimed forms none), read once
a thread looks asleep in a lock's wait; the calibration checks it on its two waiters (the
timed one must read timed, the untimed one untimed). Where it cannot tell them apart that
way, or a thread's ``syscall`` cannot be read at a look or shows no arguments, the wait counts
as untimed and parks after the grace, as before: the clock may move, never a clock held for
good by a wait that has no end. Where ``syscall`` cannot be read at all (``wchan`` alone
would not tell a timed wait), there is no sampler: every job holds the clock (below).
Waiting for the GIL is a timed wait (CPython's rounds of 5 ms): such a thread holds the clock.
Limits: the rule cannot tell *which* thread a parked job waits for, so a job waiting on a
thread the loop did not start (a pool's own ``submit``, a thread of the program's own) that
works in real time lets the clock go on after the grace (a job waiting on another *job*
is fine: that job holds the clock while it works); a job still queued in a full executor
(no thread yet) counts; a job that polls, waiting with a timeout again and again for
something the loop gives after a timer, holds the clock for good (as a job that polls with
``time.sleep`` does), and one whose timed wait is for such a thing holds it until the wait's
timeout. Where threads cannot be read (not Linux, no ``/proc``, no ``syscall``), every job
counts until its result is back, as before this rule.

The base's own threads. uvloop and zuvloop resolve names (``getaddrinfo``, ``getnameinfo``,
also inside ``create_connection``) in libuv's worker threads, which no Python entry point
starts: while one of those threads (named ``libuv-worker``) is not waiting for work, the
clock does not jump (Linux, read as above). asyncio's and rloop's lookups go through
``run_in_executor`` (counted).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import inspect
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["Jobs", "watch_executors"]


class Jobs:
    """One virtual clock's jobs: the work its loop has handed to threads and not got back.
    All on the loop's thread."""

    def __init__(self, want: Callable[[], None]) -> None:
        self.want: Final = want  # the clock's: something may be worth a jump, let it look
        self.count = 0  # work handed to threads, not back yet (see "Threads" above)
        self.lent = 0  # of those, jobs whose threads wait on loop work of theirs
        self.active: dict[_Job, None] = {}  # the jobs not ended (those with a _Job)
        self.recheck = False  # threads held the clock at the last look: look again soon
        self.pool: LibuvPool | None = None  # the base's own resolver threads, if watched

    def begin(self) -> _Job:
        """Work is being handed to a thread: count it until :meth:`end`."""
        self.count += 1
        job = _Job(self)
        self.active[job] = None
        return job

    def hold(self) -> bool:
        """Whether a thread working for the loop holds the clock now: a job not lent and not
        parked (blocked on another thread for the grace, see "Threads"), or the base's own
        resolver threads at work. When True, the idle detector looks again in
        ``PARK_POLL`` seconds of real time (a job may park meanwhile)."""
        self.recheck = False
        waiting = self.count - self.lent
        if waiting > 0:
            sampler = process_sampler()
            if sampler is not None:
                for job in list(self.active):
                    if not job.work and not job.ended and sampler.parked(job):
                        waiting -= 1
            if waiting > 0:
                self.recheck = sampler is not None
                return True
        pool = self.pool
        if pool is not None and pool.busy():
            self.recheck = True
            return True
        return False

    def close(self) -> None:
        """Release what the jobs hold outside Python: the resolver pool's ``/proc`` files."""
        if self.pool is not None:
            self.pool.close()

    def end(self, job: _Job) -> None:
        """``job``'s result is back on the loop (or its waiter gave up on it)."""
        if job.ended:
            return
        job.ended = True
        self.active.pop(job, None)
        if job.work:
            self.lent -= 1
        self.count -= 1
        self.want()

    def loop_work(self, job: _Job, task: asyncio.Future[Any]) -> None:
        """``task`` was made on behalf of ``job``'s thread, which waits for it (or may)."""
        job.work += 1
        if job.work == 1 and not job.ended:
            self.lent += 1
            self.want()
        task.add_done_callback(job.loop_work_done)


class _Job:
    """One piece of work a virtual loop handed to a thread (see "Threads" above)."""

    __slots__ = ("cpu", "ended", "jobs", "since", "thread", "work")

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs  # the clock's jobs it is one of
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
            self.jobs.lent -= 1  # its thread goes on working: the clock waits for it again

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
# The job whose thread asked for the loop work running in this context (see marking_job).
_job_var: Final[contextvars.ContextVar[_Job | None]] = contextvars.ContextVar(
    "aiowheel_virtual_job", default=None
)


# -- which threads run: read off /proc (see "Threads") ---------------------------------------

_PARK_GRACE: Final = 0.05  # real seconds a job's thread waits on another thread before it parks
PARK_POLL: Final = 0.01  # real seconds between two looks while threads hold the clock
_TASKS: Final = "/proc/self/task"
_SETTLE: Final = 0.25  # seconds after a change of the thread count before a listing is trusted
_WORKER = b"libuv-worker"  # the name libuv's pool threads give themselves (``comm``)


class _Sampler:
    """Reads, for a thread of this process, whether it is asleep in a lock's wait (blocked on
    another thread) and how much CPU it has used (``schedstat``).

    Asleep in a lock's wait is read from one of two sets of ``/proc`` files, the first that
    :func:`_calibrate` finds usable: ``wchan``, where the kernel says a sleeping thread
    sleeps (``futex_do_wait`` here) and ``0`` for one running or runnable (one read of 2 us);
    else, where ``wchan`` is hidden (it reads ``0`` for every thread), ``syscall`` (in the
    system call a lock's wait makes, ``futex`` on Linux) *and* ``stat`` (asleep, ``S``). A
    thread just woken (a ``put``, a ``set``, libuv's ``uv_queue_work``) is not blocked: its
    wake-up, queued to another CPU, completes only when that CPU takes it, on a busy machine
    milliseconds later, and until then ``syscall`` still shows the wait; but ``wchan`` reads
    ``0`` and ``stat`` ``R`` from the moment it was woken.

    Whether a lock's wait has a timeout is read off ``syscall`` alone (:func:`_timed_wait`),
    where :func:`_calibrate` found that it tells a timed wait from an untimed one
    (``timeouts``)."""

    def __init__(
        self, lock_waits: frozenset[str], lock_wchans: frozenset[bytes], *, timeouts: bool
    ) -> None:
        self.lock_waits = lock_waits  # a lock's wait's system calls, as ``syscall`` names them
        self.lock_wchans = lock_wchans  # where in the kernel such a wait sleeps; empty: hidden
        # Whether a wait's timeout argument can be read (False: every wait reads untimed).
        self.timeouts = timeouts
        # The files read, in the order asleep() takes their readings.
        self.files: Final = ("wchan",) if lock_wchans else ("syscall", "stat")

    def asleep(self, readings: Sequence[bytes]) -> bool:
        """Whether a thread whose :attr:`files` read ``readings`` is asleep in a lock's wait."""
        if self.lock_wchans:
            return readings[0].strip() in self.lock_wchans
        return _syscall_of(readings[0]) in self.lock_waits and _state_of(readings[1]) == "S"

    def syscall(self, tid: int) -> str | None:
        """The thread's system call as ``/proc`` names it: a number, or "running"; None if
        it is gone."""
        try:
            return _syscall_of(_read(tid, "syscall"))
        except OSError:
            return None

    def waits_on_a_thread(self, tid: int) -> bool:
        """Whether the thread is asleep in a lock's wait now (False if it is gone)."""
        try:
            return self.asleep([_read(tid, name) for name in self.files])
        except OSError:
            return False

    @staticmethod
    def cpu(tid: int) -> int | None:
        """The thread's CPU time in nanoseconds, or None."""
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as file:
                return int(file.read(64).split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def waits_timed(self, tid: int) -> bool:
        """Whether the thread's lock wait has a timeout (it ends by itself: work in
        progress, like a sleep); False if that cannot be read (see the module docstring)."""
        if not self.timeouts:
            return False
        try:
            return _timed_wait(_read(tid, "syscall"), self.lock_waits)
        except OSError:
            return False

    def parked(self, job: _Job) -> bool:
        """Whether ``job``'s thread has waited on another thread, using no CPU, for the whole
        grace (each look that finds it otherwise starts the grace again); a wait with a
        timeout never parks."""
        tid = job.thread
        if tid is None or not self.waits_on_a_thread(tid) or self.waits_timed(tid):
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


def process_sampler() -> _Sampler | None:
    """The process's sampler, or None where threads cannot be read (not Linux, no ``/proc``):
    there every job counts until its result is back, as before."""
    if not _sampler_state:
        with _sampler_lock:
            if not _sampler_state:
                _sampler_state.append(_calibrate())
    return _sampler_state[0]


def _calibrate() -> _Sampler | None:
    """Which system calls a thread blocked on a lock is in, and where in the kernel it sleeps
    (``wchan``): two threads wait on a held lock (one with a timeout, as
    ``Condition.wait(timeout)`` does), read through ``/proc``. ``wchan`` is used only if it
    tells them from a third thread waiting on I/O (a pipe's read): a kernel that names every
    sleep alike, or hides it (``0``), leaves the sampler to the system call and the state.
    A wait's timeout is read only if the two waiters' ``syscall`` tells which one has it."""
    if not sys.platform.startswith("linux"):
        return None
    probe = _Sampler(frozenset(), frozenset(), timeouts=False)
    if probe.syscall(threading.get_native_id()) is None:
        return None
    held = threading.Lock()
    held.acquire()
    reading, feeding = os.pipe()
    tids = [0, 0]  # the lock's two waiters: untimed, timed
    reader: list[int] = []  # the pipe's
    ready = threading.Barrier(4)

    def wait(index: int, timeout: float) -> None:
        tids[index] = threading.get_native_id()
        ready.wait()
        if held.acquire(timeout=timeout):
            held.release()

    def read() -> None:
        reader.append(threading.get_native_id())
        ready.wait()
        os.read(reading, 1)

    threads = [threading.Thread(target=wait, args=(0, -1), daemon=True)]
    threads.append(threading.Thread(target=wait, args=(1, 30.0), daemon=True))
    threads.append(threading.Thread(target=read, daemon=True))
    for thread in threads:
        thread.start()
    try:
        ready.wait()
        found, wchans, io_wchan, timeouts = _read_waiters(tids, reader[0])
    finally:
        held.release()
        os.write(feeding, b"x")
        for thread in threads:
            thread.join()
        os.close(reading)
        os.close(feeding)
    if not found:
        return None
    hidden = (
        not wchans
        or any(not name or name.isdigit() for name in wchans)
        or not io_wchan
        or io_wchan in wchans
    )
    return _Sampler(
        frozenset(found), frozenset() if hidden else frozenset(wchans), timeouts=timeouts
    )


def _read_waiters(tids: list[int], reader: int) -> tuple[set[str], set[bytes], bytes, bool]:
    """What :func:`_calibrate`'s threads read once all are in their waits (2 s at most): the
    lock's waiters' system calls and ``wchan``, the pipe reader's ``wchan`` (empty sets and
    ``b""`` where not read), and whether the waiters' ``syscall`` readings tell the timed wait
    (``tids[1]``) from the untimed one (``tids[0]``, :func:`_timed_wait`). A waiter may be
    read on its way to the lock, in another lock's wait (the barrier's, untimed; the GIL's,
    timed): that can hide the difference, never make one up. So they are read again until
    they differ, for 0.25 s at most, before the timeouts count as unread."""
    deadline = time.monotonic() + 2.0
    found: tuple[set[str], set[bytes], bytes] | None = None
    settled = deadline
    while True:
        try:
            lines = [_read(tid, "syscall") for tid in tids]
            io_call = _syscall_of(_read(reader, "syscall"))
        except OSError:
            lines, io_call = [], ""
        calls = {_syscall_of(line) for line in lines}
        # Asleep now (a system call is read only from a thread inactive).
        if lines and all(call.isdigit() for call in calls) and io_call.isdigit():
            if io_call not in calls and found is None:
                try:
                    wchans = {_read(tid, "wchan").strip() for tid in tids}
                    io_wchan = _read(reader, "wchan").strip()
                except OSError:
                    wchans, io_wchan = set(), b""
                found = calls, wchans, io_wchan
                settled = min(deadline, time.monotonic() + 0.25)
            if found is not None:
                waits = frozenset(found[0])
                if _timed_wait(lines[1], waits) and not _timed_wait(lines[0], waits):
                    return *found, True
        if time.monotonic() >= settled:
            return (*found, False) if found is not None else (set(), set(), b"", False)
        time.sleep(0.001)


class LibuvPool:
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
    that long. The watched threads' files stay open between looks (re-read with ``pread``),
    until a listing drops the thread or the loop closes."""

    def __init__(self, sampler: _Sampler) -> None:
        self._sampler = sampler
        self._names: dict[str, bool] = {}  # thread id -> whether it is a libuv worker
        self._threads = -1  # the thread count at the last listing
        self._settled = 0.0  # time.monotonic() from which a listing is trusted; 0.0: it is
        self._known: frozenset[str] = frozenset()  # the threads of the last trusted listing
        # The threads watched: thread id -> its files the sampler reads, kept open and re-read
        # with pread (a read at offset 0 is a fresh snapshot; a thread gone reads ESRCH, even
        # if its id is reused): 2-3 us a read instead of 20 for an open and a read.
        self._files: dict[int, tuple[int, ...]] = {}
        self._finalizer: Final = weakref.finalize(self, _close_files, self._files)

    def busy(self) -> bool:
        """Whether a libuv worker of this process is at work now: not asleep in a lock's wait
        (:meth:`_Sampler.asleep`). One the loop's ``uv_queue_work`` has woken is at work
        from then on, even before its CPU takes the wake-up (read by the system call alone,
        it was not: the clock jumped over a resolve once in a CI run of 3.14t)."""
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
        for fds in self._files.values():
            try:
                if not sampler.asleep([os.pread(fd, 512, 0) for fd in fds]):
                    return True
            except OSError:
                continue  # the thread is gone (ESRCH): not at work
        return False

    def close(self) -> None:
        """Close the ``/proc`` files kept open (the loop closes; also when collected)."""
        self._finalizer()

    def _list(self, trusted: bool) -> None:
        """List the threads to watch: the workers and, until a listing is ``trusted``, each
        thread new since the last trusted one that has not named itself a worker yet."""
        try:
            tids = os.listdir(_TASKS)
        except OSError:
            _close_files(self._files)
            return
        names = self._names
        if len(names) > 4 * len(tids) + 64:
            names.clear()  # threads come and go: forget the ones gone
        known = self._known
        own = str(threading.get_native_id())
        watch: list[int] = []
        for tid in tids:
            worker = names.get(tid)
            if worker is None:
                try:
                    with open(f"{_TASKS}/{tid}/comm", "rb") as file:
                        worker = file.read().strip() == _WORKER
                except OSError:
                    continue
                if worker or trusted:
                    names[tid] = worker
            if worker or (not trusted and tid not in known and tid != own):
                watch.append(int(tid))
        if trusted:
            self._known = frozenset(tids)
        files = self._files
        for gone in files.keys() - set(watch):
            for fd in files.pop(gone):
                os.close(fd)
        if not self._finalizer.alive:
            return  # closed: nothing is opened again
        for number in watch:
            if number not in files:
                opened = _open_thread_files(number, self._sampler.files)
                if opened is not None:
                    files[number] = opened


def _syscall_of(text: bytes) -> str:
    """A ``/proc/<tid>/syscall`` reading's first field: the system call's number, or "running"
    ("" if empty)."""
    return text.split(b" ", 1)[0].strip().decode()


def _timed_wait(text: bytes, lock_waits: frozenset[str]) -> bool:
    """Whether a ``/proc/<tid>/syscall`` reading is a lock's wait with a timeout: the system
    call one of ``lock_waits`` (``futex``) and its fourth argument, the timeout's pointer, not
    ``0x0``."""
    fields = text.split()
    return (
        len(fields) > 4 and fields[0].decode(errors="replace") in lock_waits and fields[4] != b"0x0"
    )


def _state_of(stat: bytes) -> str | None:
    """A ``/proc/<tid>/stat`` reading's scheduler state (``R``, ``S``, ...), or None."""
    end = stat.rfind(b")")  # the name before it may hold spaces and parentheses
    return stat[end + 2 : end + 3].decode() if end >= 0 else None


def _read(tid: int, name: str) -> bytes:
    """A thread's ``/proc`` file ``name``, read whole (OSError if the thread is gone)."""
    with open(f"{_TASKS}/{tid}/{name}", "rb") as file:
        return file.read(512)


def _open_thread_files(tid: int, names: Sequence[str]) -> tuple[int, ...] | None:
    """A thread's ``/proc`` files ``names``, opened to be re-read; None if it is gone."""
    fds: list[int] = []
    try:
        for name in names:
            fds.append(os.open(f"{_TASKS}/{tid}/{name}", os.O_RDONLY | os.O_CLOEXEC))
    except OSError:
        for fd in fds:
            os.close(fd)
        return None
    return tuple(fds)


def _close_files(files: dict[int, tuple[int, ...]]) -> None:
    """Close and forget every thread's files in ``files``."""
    while files:
        for fd in files.popitem()[1]:
            os.close(fd)


# -- where asyncio hands work to threads: wrapped on the loop ----------------------------------


def watch_executors(loop: Any, jobs: Jobs) -> None:
    """Count the work ``loop`` hands to threads through ``run_in_executor`` (and the join of
    its default executor's threads) as ``jobs``, and the tasks a job's thread asks the loop
    for as that job's loop work."""
    base_run_in_executor = loop.run_in_executor

    def run_in_executor(executor: Any, func: Any, *args: Any) -> asyncio.Future[Any]:
        job = jobs.begin()
        try:
            # Only a thread can be marked; a process pool pickles func: given as it is.
            threads = executor is None or isinstance(executor, _THREAD_POOL)
            if threads and callable(func) and not inspect.iscoroutinefunction(func):
                func = job.wrap(func)
            future: asyncio.Future[Any] = base_run_in_executor(executor, func, *args)
        except BaseException:
            jobs.end(job)
            raise
        future.add_done_callback(lambda _: jobs.end(job))
        return future

    run_in_executor.__doc__ = base_run_in_executor.__doc__
    loop.run_in_executor = run_in_executor
    base_shutdown = loop.shutdown_default_executor

    async def shutdown_default_executor(*args: Any, **kwargs: Any) -> None:
        # The executor's threads are joined by a thread of asyncio's own, not through
        # run_in_executor, and (3.12+) under a timeout of THREAD_JOIN_TIMEOUT (300 s) on the
        # loop's clock: counted as executor work, so the clock does not jump over the join and
        # warn that the threads "did not finish joining" while they were still finishing.
        jobs.count += 1
        try:
            await base_shutdown(*args, **kwargs)
        finally:
            jobs.count -= 1
            jobs.want()

    shutdown_default_executor.__doc__ = base_shutdown.__doc__
    loop.shutdown_default_executor = shutdown_default_executor
    base_create_task = loop.create_task

    def create_task(coro: Any, *args: Any, **kwargs: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = base_create_task(coro, *args, **kwargs)
        context = kwargs.get("context")
        job = _job_var.get() if context is None else context.get(_job_var)
        if job is not None and job.jobs is jobs:
            jobs.loop_work(job, task)
        return task

    create_task.__doc__ = base_create_task.__doc__
    loop.create_task = create_task


def marking_job(jobs: Jobs, method: Callable[..., Any]) -> Callable[..., Any]:
    """The loop's ``call_soon_threadsafe``: a call from a thread running one of the clock's jobs
    carries the job in the callback's context, so the tasks it makes are the job's loop work."""

    def call_soon_threadsafe(callback: Any, *args: Any, context: Any = None) -> Any:
        job = getattr(_threads, "job", None)
        if job is not None and job.jobs is jobs:
            # A copy: the caller's context (or the one it passed) is left as it was.
            context = contextvars.copy_context() if context is None else context.copy()
            context.run(_job_var.set, job)
        return method(callback, *args, context=context)

    call_soon_threadsafe.__doc__ = method.__doc__
    return call_soon_threadsafe
