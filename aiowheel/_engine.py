"""Engine: the wheel driven by an asyncio loop's clock (the delay queue, the reaper, dispatch).

Why a class of its own. tokio's time driver keeps three things apart: the ``Handle`` users
hold, the ``Driver`` that owns the wheel and parks the thread until the next expiration, and
the ``entry`` with one timer's state. Kafka's ``SystemTimer`` is likewise a thin facade over
``TimingWheel`` with the reaper apart. Here the entries are :mod:`aiowheel._handles`,
:mod:`aiowheel._timeout` and :mod:`aiowheel._periodic` (sans-IO wheel: :mod:`aiowheel._wheel`),
the facade is :class:`aiowheel.Timer` (validation, the public API and the objects it returns),
and this is the driver, the **only owner** of the wheel and the wake-up: it alone inserts,
moves and removes entries, arms the one loop handle, binds to a loop (the loop check and its
slow path), starts and ends the reaper, and dispatches. Entries reach it only through
:class:`aiowheel._entry.Owner`, the protected API it implements (file, move, push back,
reschedule, unfile, queue, the loop check, the clock); the coroutines of
:mod:`aiowheel._awaiting` call down to its synchronous halves. "Insert, then re-arm if that
bucket is now the earliest" is written once, in :meth:`Engine._insert`; every filing ends
there (Kafka's ``addTimerTaskEntry``, tokio's ``reregister``), so a virtual clock, a view of
every pending timer or a native core each has one place to hook.
``Timer`` subclasses ``Engine`` rather than holding one: one object per wheel, and no extra
attribute hop on the API's hot path; the entries hold the engine as an ``Owner``.

Ticks. A deadline ``when`` (loop clock, seconds) becomes tick ``ceil((when - epoch) / tick)``,
rounded **up**, so a bucket is never processed before every deadline in it can have passed.
Rounding errors of the float arithmetic cannot make a timer early either: before an entry
fires, the reaper compares its exact ``when`` with ``loop.time()`` and re-files it from that
deadline if the clock has not reached it (asyncio and uvloop may run a loop timer a little
early; that is where this guard earns its keep). The same check makes pushing a deadline
later free (:meth:`Engine._push_back`, used by ``Timeout.reschedule`` and ``Watchdog.feed``):
only ``when`` is rewritten, and the entry is re-filed when its old bucket comes due (the
wheel's lazy re-file, one level up).

Delay queue and reaper (Kafka's DelayQueue + ExpiredOperationReaper, on the loop instead of a
thread). The wheel keeps one heap item per non-empty bucket, keyed by the bucket's expiration
tick. One reaper Task per engine awaits a future that a single ``loop.call_at`` handle resolves
at the earliest expiration, so there is at most one loop timer handle outstanding per engine,
whatever the number of pending timers. ``Wheel.insert`` returns a tick when a bucket was
queued; only if that tick is earlier than the armed one is the loop handle replaced (the
reaper is "woken early": :meth:`Engine._insert`). While nothing is due the reaper does not
wake: no periodic ticks.

Dispatch. The due callbacks of one reaper pass run, in deadline order, in *one* loop callback
(``_run_ready``): exactly like loop callbacks (no current task, the loop's exception handler,
KeyboardInterrupt leaves the loop, the rest of the batch then runs on the next iteration) and
never inside the reaper, at the cost of one loop handle per batch instead of one per timer:
that is why a storm of due timers costs aiowheel far less than the loop's own heap. Sleepers
resolve their future; scheduled coroutines start as Tasks; timeouts cancel their task. A
periodic timer re-files itself from inside the pass; it left the count when it came due, so
``max_pending`` can never refuse it.

Compiled build. This module is compiled with mypyc where possible; its coroutines are not
(see :mod:`aiowheel._awaiting`): the reaper task is a plain-Python loop that awaits
:meth:`Engine._reaper_waiter` and calls the compiled :meth:`Engine._reap_due`, so all the
per-timer work stays in C and nothing compiled ever suspends.

Loop mode (:mod:`aiowheel._loop`). A loop's own engine has no reaper task: its wake-up handle's
callback (:meth:`Engine._drive`) advances the wheel, re-arms and runs the due callbacks inline.
Any other Timer bound to such a loop keeps its task but files its wake-up on the loop's heap too.

Native core (compiled build, :mod:`aiowheel._core`, written in C). The engine owns two wheels
on one tick grid: its own (mypyc) for aiowheel's entries (timeouts, heartbeats, sleepers,
scheduled starts: mypyc classes whose methods it calls natively) and the Core's for every
*callback* handle (loop mode's ``call_at`` / ``call_later``, ``Timer.call_at`` / ``call_later``).
A callback handle's whole life (filed by the loop's ``call_later``, which is the Core's own
FASTCALL function installed on the loop; ``cancel()``; its run in the due batch) then stays in
C, which is where the per-call cost was (a GC-tracked handle, mypyc's argument parsing, the
clock through a Python call); an entry of aiowheel's own would cost a crossing per operation
(15-25 ns) for nothing, since its methods are compiled already. Composition the other way (a C
entry owned by each mypyc object) was rejected for that reason. Each pass advances both wheels
to the same tick, merges their due batches by deadline (``_merged``), and arms one wake-up
for the earlier of their next expirations; the Core calls back into the engine only to say that
a bucket earlier than the armed wake-up was queued (:meth:`Engine._arm`). The pure-Python build
has no Core: its callback handles live in the one wheel, and it is the Core's reference
(``tests/test_native.py`` feeds both the same random operations and programs).

Failure. If the reaper task is cancelled from outside (``asyncio.run`` does this to every task
at exit) or dies of a bug, the engine closes itself (:meth:`Engine._on_reaper_done`, then
:meth:`Engine._shutdown`): pending sleepers and scheduled futures fail
with :class:`TimerClosedError` naming the cause, pending callbacks are marked cancelled, and any
later use raises RuntimeError. It never hangs silently.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import os
import sys
import sysconfig
import threading
import time
import warnings
import weakref
from collections.abc import Callable, Coroutine
from math import ceil, floor, inf
from typing import Any, Final, NoReturn, Protocol

from . import _awaiting, _build, _debug, _validate
from ._build import mypyc_attr
from ._entry import Owner, Sleeper, _Timed
from ._errors import PendingLimitError, TimerClosedError
from ._handles import EMPTY_CONTEXT, Handle, Scheduled, TimerHandle, _Call, callback_repr
from ._observe import LagHistogram, asyncio_timeout_task, classify, origin_key
from ._timeout import Timeout
from ._validate import Count, Seconds
from ._wheel import NEVER, Entry, Wheel

__all__ = ["TOO_MANY_TIMERS", "Engine", "WakeAt", "engines_of", "track_loop"]

# asyncio's C accelerated lookup of the running loop (~25 ns): one identity check against it
# covers "not started", "closed", "another loop" and "another thread" on the hot path.
_get_running_loop: Final = asyncio._get_running_loop

# Python 3.11's _get_running_loop() checks the process id: a getpid() system call, ~200 ns
# on a VM, as much as the rest of a call_later. There the hot path asks the bound loop, if it
# is asyncio's, whether it runs in this thread instead (its `_thread_id`, which run_forever sets
# and clears together with the running loop): a thread id is ~10 ns. A forked child forgets
# those loops (_after_fork_in_child), so it gets asyncio's answer there too. From 3.12 on the
# running loop lives in the thread state and costs ~25 ns: asked directly.
_GETPID_IN_RUNNING_LOOP: Final = sys.version_info < (3, 12)
_get_ident: Final = threading.get_ident

# A free-threaded build (3.14t): no GIL makes one thread's wheel operation atomic with respect
# to another's, so the calls another thread can make by mistake (a handle's cancel(), loop
# mode's call_at / call_later into the wheel) check the thread always, not only in debug mode:
# they raise RuntimeError before anything changes instead of racing the loop's own thread
# through the wheel's lists. With the GIL they are checked in debug mode only, as asyncio checks
# its own (a C static here: the check costs GIL builds one test of a constant).
_FREE_THREADED: Final = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

# Module constants, so that the compiled build reads them from a C static: a builtin or module
# attribute named in a function is looked up in a dict on every call (~10 ns each).
_callable: Final = callable
_copy_context: Final = contextvars.copy_context

# While the reaper is about to run or is running, inserts need not re-arm the loop handle: it
# re-reads the earliest expiration before it sleeps again. No expiration is below this (they
# are never below the wheel's start, 0), and it is a tagged int in the compiled build.
_REAPER_AWAKE: Final = -(1 << 62)

# A clock reading within this fraction of a tick below a boundary counts as having reached it
# (the reaper), and a deadline within it above one is filed in that boundary's tick (_admit).
_TICK_EPSILON: Final = 1e-6

# The native core's grid: its ticks are int64, and it files no finite deadline at or past
# this tick (aiowheel/_core.c's NEVER_TICK: the engine's wheel takes those), so a clock that
# has gone further is, to the core, at its last tick.
_CORE_TICKS: Final = 1 << 62

# What a call from a thread that is not running the loop raises where it is checked (debug mode;
# always on a free-threaded build): asyncio's debug-mode words, then what to do instead.
_FOREIGN_THREAD: Final = (
    "Non-thread-safe operation invoked on an event loop other than the current one: "
    "a loop-mode loop's call_at / call_later must be called from the thread running it; "
    "from another thread use loop.call_soon_threadsafe()"
)
_FOREIGN_CANCEL: Final = (
    "a timer must be cancelled from the thread running its event loop; from another thread "
    "use loop.call_soon_threadsafe(handle.cancel)"
)

# max_pending=None: no limit (a C static in the compiled build).
_NO_LIMIT: Final = sys.maxsize

DEFAULT_MAX_BATCH: Final[int | None] = None
"""The most due callbacks a wheel runs per loop iteration by default (``max_batch``): no bound,
as asyncio runs every timer due in one iteration. A server that expires thousands of timers at
once sets it (64 halved the hub's live p99 during a mass expiry; docs/loop-mode.md); a bound
costs a program that runs a big due batch of cheap callbacks one loop iteration per chunk."""

# A backlog of due callbacks gets further chunks in one iteration only when the rest of the
# loop took longer than this since its last chunk (Engine._run_backlog): then as much time as
# the rest took. Below it, one chunk per iteration (the I/O between costs little).
_FAIR_FLOOR: Final = 0.002
_perf_counter: Final = time.perf_counter

# Past this many live engines (Timers) on one loop, warn once (Netty's too-many-instances lesson).
TOO_MANY_TIMERS: Final = 64


def _load_native() -> Any:
    """The native core (aiowheel/_core.c) if this is the compiled build and it was built with
    it; None for the pure-Python build (the executable reference) or without a compiler."""
    if _build.sources_preferred("aiowheel"):
        return None  # the pure-Python build runs: all of it, the core's reference included
    try:
        from . import _core  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # pragma: no cover - setup.py builds it with the mypyc modules
        return None
    _core.setup(callback_repr, EMPTY_CONTEXT, asyncio.get_running_loop)
    return _core


# The native core module, or None. Engines made while it is None keep their callback handles in
# the (compiled or pure) wheel: tests set it to None to compare both.
native: Any = _load_native()


@mypyc_attr(native_class=False)
class _Listing:
    """An engine's place in its loop's list of engines: listed weakly and held by the engine
    (a plain Python object, which can be weakly referenced in both builds), so the list never
    keeps an engine, or through it its loop, alive."""

    def __init__(self, engine: Engine) -> None:
        self.engine: Engine | None = engine


# The engines bound to each loop (aiowheel.pending_timers and friends read them; the
# too-many-timers warning counts them).
_engines: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[_Listing]] = (
    weakref.WeakKeyDictionary()
)
# Loops whose engines note where each timer is filed from (aiowheel.track_origins).
_tracked_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def engines_of(loop: asyncio.AbstractEventLoop) -> list[Engine]:
    """The open engines bound to ``loop``, in no set order."""
    listed = _engines.get(loop)
    if listed is None:
        return []
    return [engine for listing in listed if (engine := listing.engine) is not None]


def track_loop(loop: asyncio.AbstractEventLoop, enabled: bool) -> None:
    """Note (or stop noting) where every timer of ``loop``'s engines is filed from, for the
    engines bound now and later (debug mode notes it too)."""
    if enabled:
        _tracked_loops.add(loop)
    else:
        _tracked_loops.discard(loop)
    for engine in engines_of(loop):
        engine._track_origins(enabled or engine._debug)


_warned_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


class _Forks:
    """How many times this process is a forked child (3.11's thread check; see _on_loop)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# A Final instance, not a module global: the compiled build reads it from a C static.
_FORKS: Final = _Forks()


def _after_fork_in_child() -> None:
    # The child has a copy of the loop that says it runs in this (copied) thread, while
    # asyncio's running loop is gone there (its pid check): engines bound before the fork
    # go back to asking asyncio.
    _FORKS.count += 1


if _GETPID_IN_RUNNING_LOOP and hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class _WakeHandle(Protocol):
    """The loop handle of the reaper's wake-up: asyncio's, uvloop's, or any loop's."""

    def cancel(self) -> object:
        """Cancel it (asyncio's returns None, aiowheel's a bool: typed loosely on purpose)."""
        ...


#: Files the wake-up handle on the loop's own heap: ``wake_at(when, callback) -> handle``.
WakeAt = Callable[[float, Callable[[], None]], _WakeHandle]

# Loop mode's hook, declared here once: for each loop-mode loop, how a wake-up handle reaches
# the loop's own heap (aiowheel._loop's _BaseHeap.wake_at), kept on the loop as this attribute.
# Its own engine sets it when it starts driving the loop (_drive_loop); any other engine bound
# to that loop files its wake-up there too (_adopt): filed in the loop's wheel it would be
# rounded up twice. (Not a WeakKeyDictionary: the value holds the loop, which would then never
# be collected unclosed.)
_WAKE_AT_ATTRIBUTE: Final = "_aiowheel_wake_at"


class Engine(Owner):
    """The wheel on one event loop: clock, delay queue, wake-up handle, reaper and dispatch.

    Not public: :class:`aiowheel.Timer` is this plus the API (see the module docstring).
    """

    __slots__ = (
        "_armed",
        "_asyncio_loop",
        "_backlog",
        "_backlog_at",
        "_backlog_native",
        "_backlog_queued",
        "_backlog_when",
        "_backlog_yielded",
        "_bound_loop",
        "_cancelled_on_close",
        "_claim_lock",
        "_clock",
        "_closed",
        "_closing_cause",
        "_core",
        "_debug",
        "_driven",
        "_epoch",
        "_fired",
        "_forks",
        "_in_run",
        "_inverse_tick",
        "_lag",
        "_limit",
        "_listing",
        "_loop",
        "_max_batch",
        "_max_lateness",
        "_native_ready",
        "_origins",
        "_pass_floor",
        "_ready",
        "_ready_when",
        "_reaper",
        "_slots",
        "_thread_id",
        "_tick",
        "_waiter",
        "_wake_at",
        "_wake_handle",
        "_wake_tick",
        "_wakeups",
        "_wheel",
    )

    def __init__(
        self,
        *,
        tick: Seconds = 0.001,
        slots: Count = 64,
        max_pending: Count | None = None,
        max_batch: Count | None = DEFAULT_MAX_BATCH,
    ) -> None:
        """Create an unbound engine; see :class:`aiowheel.Timer` for the parameters."""
        resolution = _validate.tick(tick, "Timer()")
        limit = _validate.max_pending(max_pending, "Timer()")
        batch = _validate.max_batch(max_batch, "Timer()")
        self._wheel: Final = Wheel(_validate.slots(slots, "Timer()"))
        self._tick: Final = resolution
        self._inverse_tick: Final = 1.0 / resolution
        self._slots: Final = self._wheel.slots
        self._limit: Final = _NO_LIMIT if limit is None else limit
        # At most this many due callbacks run per loop iteration (_dispatch_ready): the rest
        # wait in the backlog, in deadline order, and the loop polls its I/O in between.
        self._max_batch: Final = _NO_LIMIT if batch is None else batch
        # `_loop` is what the hot path compares the running loop with: None until bound and
        # again once closed, so that one identity check routes every odd case to _check_loop.
        self._loop: asyncio.AbstractEventLoop | None = None
        self._bound_loop: asyncio.AbstractEventLoop | None = None
        # The bound loop's thread. Pushing a deadline later (_push_back) rewrites one float
        # that only the reaper reads, so the one thing it must check is the thread; comparing
        # thread ids is ~5x cheaper on 3.11 than asking for the running loop (a getpid()
        # system call there). No thread has id -1.
        self._thread_id = -1
        # Held by every change of the loop's thread (_claim_thread, _run_here) together with
        # the call that made it, and by loop.close(): a thread that takes over a loop that is
        # not running finishes its call before the loop can start (or close) in another.
        self._claim_lock: Final = threading.RLock()
        # Between _run_here and the end of run_forever (loop mode): the loop is, or is about
        # to be, running in `_thread_id`; no other thread may take it over.
        self._in_run = False
        self._epoch = 0.0
        self._closed = False
        self._closing_cause: str | None = None
        self._debug = False
        self._reaper: asyncio.Task[None] | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._wake_handle: _WakeHandle | None = None
        self._armed = NEVER
        # The expiration the last wake-up was filed for (kept while the pass it starts runs).
        self._wake_tick = NEVER
        self._fired = 0
        self._cancelled_on_close = 0
        self._wakeups = 0
        self._max_lateness = 0.0
        # Loop lag: how late the passes that fired timers ran (aiowheel._observe).
        self._lag: Final = LagHistogram(0.0)
        # Where each pending timer was filed from, while origin tracking is on (debug mode or
        # aiowheel.track_origins); None otherwise, and then filing pays one comparison.
        self._origins: dict[object, tuple[str, object]] | None = None
        self._listing = _Listing(self)
        # The start of the first tick the last reaper pass left unprocessed: a timer due
        # before it cannot have been pending then, so it was filed later, already due.
        self._pass_floor = 0.0
        self._ready: list[_Timed] = []
        # The deadline each entry of ``_ready`` came due at, read when it was queued: a
        # heartbeat re-files itself (a new ``_when``) before the batch runs, and the merge with
        # the core's batch must order it by the deadline it fired for.
        self._ready_when: list[float] = []
        self._clock: Callable[[], float] = time.monotonic
        # Set when the engine is bound to a loop-mode loop (aiowheel._loop): `_wake_at` files
        # the wake-up handle on the loop's own heap; `_driven`: its callback is the reaper
        # itself (the loop's own engine, which has no reaper task).
        self._wake_at: WakeAt | None = None
        self._driven = False
        # The bound loop while it is open, if the hot path may ask it whether it is running in
        # this thread (see _GETPID_IN_RUNNING_LOOP); None otherwise.
        self._asyncio_loop: Any = None
        self._forks = 0  # _FORKS.count when _asyncio_loop was set
        # The native core (aiowheel/_core.c), which holds this engine's callback handles in
        # the compiled build; None otherwise (the module docstring, "Native core").
        self._core: Any = None
        # The due handles of the core this pass found (a list), run with the engine's own batch.
        self._native_ready: Any = None
        # Due callbacks beyond max_batch, in deadline order (engine entries and core handles
        # alike), with the deadline each came due at; those before _backlog_at have run.
        # _backlog_native: every one is a core handle (a chunk runs through core.run);
        # _backlog_queued: _run_backlog is queued on the loop (call_soon).
        self._backlog: list[Any] = []
        self._backlog_when: list[float] = []
        self._backlog_at = 0
        self._backlog_native = True
        self._backlog_queued = False
        # When the last chunk ended (time.perf_counter): the fair share (_run_backlog).
        self._backlog_yielded = 0.0

    # -- the loop check, binding, the reaper's life ----------------------------------------------

    def _on_loop(self) -> bool:
        """Whether this thread's running loop is the bound one: the hot path's one check.

        False covers "not bound yet", "closed", "no loop running", "another loop" and
        "another thread": the caller then calls :meth:`_check_loop`, which binds or explains.
        """
        fast = self._asyncio_loop
        if fast is not None:
            if self._forks == _FORKS.count:
                return bool(fast._thread_id == _get_ident())
            self._asyncio_loop = None  # a forked child: asyncio's answer from now on
        loop = self._loop
        return loop is not None and _get_running_loop() is loop

    def _check_loop(self) -> asyncio.AbstractEventLoop:
        """The slow path behind :meth:`_on_loop`: bind (lazily, to the loop running now, with
        a reaper task), or raise RuntimeError saying what is wrong."""
        running = _get_running_loop()
        if self._closed:
            raise RuntimeError(f"Timer is closed{self._closing_cause or ''}")
        if running is None:
            raise RuntimeError(
                "Timer must be used from the thread running its event loop "
                "(no event loop is running in this thread)"
            )
        if self._bound_loop is None:
            self._bind(running)
            return running
        if running is not self._bound_loop:
            raise RuntimeError(f"Timer is bound to a different event loop ({self._bound_loop!r})")
        thread_id = threading.get_ident()  # a loop may be run from another thread later
        if thread_id != self._thread_id:
            self._thread_id = thread_id
            self._sync_core()
        return running

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The bound loop, after the check every scheduling call makes (see :class:`Owner`)."""
        loop = self._loop
        if loop is None or not self._on_loop():
            loop = self._check_loop()
        return loop

    def _loop_here(self) -> asyncio.AbstractEventLoop | None:
        """This thread's running loop, or None (see :class:`Owner`)."""
        if self._on_loop():
            return self._loop
        return _get_running_loop()

    def _now(self) -> float:
        """The bound loop's clock (a direct ``time.monotonic`` on asyncio's loops)."""
        return self._clock()

    def _loop_time(self) -> float:
        """``loop.time()`` of the bound loop, or of the running one before binding."""
        loop = self._bound_loop
        if loop is None:
            loop = asyncio.get_running_loop()
        return loop.time()

    def _bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``loop`` and start the reaper task (see aiowheel._awaiting.reap)."""
        self._adopt(loop)
        # The reaper runs in an empty context: nothing of whoever started the timer leaks in.
        reaper = loop.create_task(
            _awaiting.reap(self._reaper_waiter, self._reap_due), context=contextvars.Context()
        )
        # A loop closed with timers pending must not print "Task was destroyed but it is
        # pending!" for the reaper: asyncio drops its own pending TimerHandles silently too.
        reaper._log_destroy_pending = False  # type: ignore[attr-defined]
        reaper.add_done_callback(self._on_reaper_done)
        self._reaper = reaper
        self._loop = loop
        self._use_thread_check(loop)

    def _on_reaper_done(self, reaper: asyncio.Task[None]) -> None:
        # A done callback, not an except clause in the reaper: a task cancelled before its
        # first step never runs any of its code.
        if self._closed:
            return
        if reaper.cancelled():
            # Most often asyncio.run() (or a test runner) ending its loop: it cancels every
            # task left, this one too. Say so, and what to do about a Timer kept past it.
            cause = (
                "its reaper task was cancelled: its event loop ended or cancelled it; a Timer "
                "serves one loop, so make one per loop (async with Timer(), or "
                "aiowheel.get_timer())"
            )
        else:
            exc = reaper.exception()
            cause = f"its reaper task failed: {exc!r}"
            reaper.get_loop().call_exception_handler(
                {"message": f"aiowheel Timer closed: {cause}", "exception": exc, "task": reaper}
            )
        self._shutdown(TimerClosedError(f"timer closed: {cause}"), f" ({cause})")

    def _use_thread_check(self, loop: asyncio.AbstractEventLoop) -> None:
        """Let :meth:`_on_loop` ask ``loop`` for its thread, where that is asyncio's answer."""
        if (
            _GETPID_IN_RUNNING_LOOP
            and getattr(type(loop), "run_forever", None) is asyncio.BaseEventLoop.run_forever
        ):
            self._asyncio_loop = loop
            self._forks = _FORKS.count

    def _adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``loop``'s clock, debug flag and thread; count this timer against the loop."""
        self._bound_loop = loop
        self._epoch = loop.time()
        self._pass_floor = self._epoch
        # On a loop-mode loop (aiowheel._loop) the wake-up handle goes on the loop's own heap,
        # as that loop's Timer's does: filed in the loop's wheel it would be rounded up twice.
        self._wake_at = wake_at = getattr(loop, _WAKE_AT_ATTRIBUTE, None)
        # The loop's clock, as a direct call where the loop has not replaced asyncio's
        # (BaseEventLoop.time is a Python method around time.monotonic: ~40 ns per call saved
        # on every hot path); uvloop's and any custom loop's own method otherwise. Another
        # Timer on a loop-mode loop asks the loop each time: that loop's clock may be replaced
        # (a fake `loop.time`) and its wake-ups must then be filed by the clock the heap uses.
        if wake_at is not None:
            self._clock = _ClockOf(loop).time
        elif getattr(type(loop), "time", None) is asyncio.BaseEventLoop.time:
            self._clock = time.monotonic
        else:
            self._clock = loop.time
        self._debug = loop.get_debug()
        if self._debug or loop in _tracked_loops:
            self._track_origins(True)
        self._lag.since = self._epoch
        self._thread_id = threading.get_ident()
        if native is not None:
            self._core = native.Core(
                self._arm,
                self._tick,
                self._slots,
                self._epoch,
                None if self._clock is time.monotonic else self._clock,
                claim=self._claim_for_cancel,
            )
            self._sync_core()
        listed = _engines.get(loop)
        if listed is None:
            listed = _engines[loop] = weakref.WeakSet()
        listed.add(self._listing)
        count = len(listed)
        if count > TOO_MANY_TIMERS and loop not in _warned_loops:
            _warned_loops.add(loop)
            warnings.warn(
                f"{count} aiowheel Timers are running on one event loop; a Timer is built to "
                "be shared: use aiowheel.get_timer() (or pass one Timer around) instead",
                RuntimeWarning,
                stacklevel=5,
            )

    def _drive_loop(self, loop: asyncio.AbstractEventLoop, wake_at: WakeAt) -> None:
        """Become ``loop``'s own engine, before the loop runs (see aiowheel._loop): no reaper
        task; the wake-up handle goes on the loop's heap through ``wake_at`` and its callback
        is :meth:`_drive`.

        Adopted before the loop is listed as loop mode, so this engine reads the clock
        directly (``time.monotonic`` on asyncio's loops), not through ``loop.time()`` as other
        Timers on the loop do: its ``call_later`` reads the clock on every call (a Python
        method call more made loop mode's churn 1.6x slower on asyncio, measured). A replaced
        ``loop.time`` reaches this engine anyway, through :meth:`_use_clock`."""
        self._adopt(loop)
        setattr(loop, _WAKE_AT_ATTRIBUTE, wake_at)
        self._wake_at = wake_at
        self._loop = loop
        self._use_thread_check(loop)
        self._driven = True

    def _native_front(
        self,
        threshold: float,
        near_pad: float,
        near_call_at: Callable[..., object],
        near_call_later: Callable[..., object] | None,
        slow_call_at: Callable[..., object],
        slow_call_later: Callable[..., object],
    ) -> tuple[Callable[..., object], Callable[..., object]] | None:
        """Loop mode's ``call_at`` / ``call_later`` in the native core, routing as
        :class:`~aiowheel._loopcalls.LoopCalls` does (whose methods are the slow path it hands
        every other call to); None without a core. ``near_call_later`` None: the base's is
        asyncio's, ``call_at(time() + delay)``, which the core does itself."""
        core = self._core
        if core is None:
            return None
        core.route(
            threshold, near_pad, near_call_at, near_call_later, slow_call_at, slow_call_later
        )
        self._sync_core()
        return core.call_at, core.call_later

    def _use_clock(self, clock: Callable[[], float], wake_at: WakeAt) -> None:
        """Read time from ``clock`` and file the wake-up with ``wake_at`` from now on (loop
        mode: a loop whose ``time`` was replaced, or a virtual clock; see aiowheel._loop).

        As on asyncio's heap, where a replaced ``loop.time`` decides what is due: the wheel
        keeps the tick it has reached, now on the new clock (the epoch moves), and every
        pending timer is filed again by its deadline read on that clock, so one already past
        comes due at once and the others when the clock reaches them.
        """
        self._clock = clock
        self._wake_at = wake_at
        loop = self._bound_loop
        if loop is None or self._closed:
            return
        setattr(loop, _WAKE_AT_ATTRIBUTE, wake_at)
        wheel = self._wheel
        now = clock()
        self._epoch = now - wheel.elapsed * self._tick
        self._pass_floor = now
        entries = wheel.drain()
        entries.sort(key=_deadline_of)  # stable: filing order within a deadline
        for entry in entries:
            assert isinstance(entry, _Timed)
            wheel.insert(entry, self._tick_for(entry._when))
        core = self._core
        if core is not None:
            core.set_clock(None if clock is time.monotonic else clock)
            core.rebase(self._epoch)
        if self._armed != _REAPER_AWAKE:  # else the pass under way re-arms when it ends
            self._arm()

    def _set_debug(self, enabled: bool) -> None:
        """Follow the loop's debug mode (loop mode's set_debug calls this at once); debug
        mode tracks where timers are filed from."""
        self._debug = enabled
        loop = self._bound_loop
        self._track_origins(enabled or (loop is not None and loop in _tracked_loops))
        self._sync_core()

    def _sync_core(self) -> None:
        """Tell the native core what decides its fast lane (loop mode's call_at / call_later
        file there directly unless the engine is closed, in debug mode, noting origins, or
        counting against max_pending) and whose thread may cancel in debug mode."""
        core = self._core
        if core is not None:
            core.update(
                not self._closed
                and not self._debug
                and self._origins is None
                and self._limit == _NO_LIMIT,
                self._debug,
                self._thread_id,
            )

    # -- seeing every timer (aiowheel._census): read only when asked ----------------------------

    def _track_origins(self, enabled: bool) -> None:
        """Start (keeping what is noted) or stop noting where each timer is filed from."""
        if not enabled:
            self._origins = None
        elif self._origins is None:
            self._origins = {}
        self._sync_core()

    def _note_origin(self, entry: object, origins: dict[object, tuple[str, object]]) -> None:
        """Note where ``entry`` is filed from, the first time it is filed (origin tracking)."""
        if entry in origins:
            return
        if len(origins) > 2 * self._wheel._count + 1024:
            # Timers that left the wheel are forgotten here, not on the paths they leave by
            # (which then cost nothing more with tracking on): at most half the notes are stale.
            for stale in [noted for noted in origins if not _pending(noted)]:
                del origins[stale]
        loop = self._bound_loop
        task = asyncio.current_task(loop) if loop is not None else None
        origins[entry] = (_debug.filed_at(), task)

    def _classified(self, entry: Entry) -> tuple[object, str, object, object, object]:
        """A pending timer as :func:`classify` sees it: (what the user holds: the entry, or
        a callback entry's handle; kind, what names it, task, where it was filed from or
        None)."""
        assert isinstance(entry, _Timed)
        kind, what, who = entry._describe()
        kind, what, task = classify(kind, what, who)
        origins = self._origins
        noted = None if origins is None else origins.get(entry)
        shown: object = entry._handle if isinstance(entry, _Call) else entry
        return shown, kind, what, task, noted

    def _native_entries(self) -> list[Any]:
        """The core's pending handles (none without a core)."""
        core = self._core
        return [] if core is None else core.entries()

    def _classified_handle(self, handle: Any) -> tuple[str, object, object, object]:
        """A pending handle of the core as :func:`classify` sees it: (kind, what names it,
        task, where it was filed from or None)."""
        kind, what, who = handle._describe()
        kind, what, task = classify(kind, what, who)
        origins = self._origins
        return kind, what, task, None if origins is None else origins.get(handle)

    def _timers(self) -> list[tuple[object, float, str, object, object, object]]:
        """Every pending timer: (entry, deadline, kind, what names it, task, where it was
        filed from or None)."""
        out: list[tuple[object, float, str, object, object, object]] = []
        for pending in self._wheel.entries():
            entry, kind, what, task, noted = self._classified(pending)
            assert isinstance(pending, _Timed)
            out.append((entry, pending._when, kind, what, task, noted))
        for handle in self._native_entries():
            kind, what, task, noted = self._classified_handle(handle)
            out.append((handle, handle._when, kind, what, task, noted))
        return out

    def _tally(self, counts: dict[tuple[str, object], int]) -> None:
        """Count the pending timers into ``counts`` by (kind, :func:`origin_key`), without a
        snapshot of each (aiowheel.timer_census)."""
        for pending in self._wheel.entries():
            _, kind, what, task, noted = self._classified(pending)
            key = (kind, origin_key(what, task, noted))
            counts[key] = counts.get(key, 0) + 1
        for handle in self._native_entries():
            kind, what, task, noted = self._classified_handle(handle)
            key = (kind, origin_key(what, task, noted))
            counts[key] = counts.get(key, 0) + 1

    def _deadline_for(self, task: object) -> float | None:
        """The earliest deadline of the timeouts on this wheel that guard ``task``: aiowheel's
        own, and asyncio's (``asyncio.timeout``, ``wait_for`` on 3.12+) filed here by loop
        mode. One pass over the pending timers: nothing is kept for it while nobody asks."""
        earliest: float | None = None
        guarded: object
        for entry in self._wheel.entries():
            if isinstance(entry, Timeout):
                guarded = entry._task
            elif isinstance(entry, _Call):
                guarded = asyncio_timeout_task(entry._handle._callback)
            else:
                continue
            if guarded is task:
                when = entry._when
                if earliest is None or when < earliest:
                    earliest = when
        for handle in self._native_entries():
            if asyncio_timeout_task(handle._callback) is task:
                when = handle._when
                if earliest is None or when < earliest:
                    earliest = when
        return earliest

    def _take_lag(self, reset: bool) -> tuple[list[int], int, float, float]:
        """The lag histogram, its count, its max and the loop time its window began; a new
        window begins now if ``reset``."""
        now = (self._clock() if self._bound_loop is not None else 0.0) if reset else None
        return self._lag.take(now)

    def _shutdown(self, exc: BaseException | None, cause: str | None) -> list[Handle]:
        """Close: cancel the wake-up and the reaper, let go of the loop, and abandon every
        pending entry (failing it with ``exc``, or cancelling it); the unfired handles."""
        if self._closed:
            return []
        self._closed = True
        self._closing_cause = cause
        self._loop = None
        self._asyncio_loop = None
        self._thread_id = -1
        loop = self._bound_loop
        if loop is not None:
            listed = _engines.get(loop)
            if listed is not None:
                listed.discard(self._listing)
        # And out of the cycle it made with its listing: a closed engine is freed with its
        # loop in one collection, as it was before it was listed (3.13's collector otherwise
        # kept the pair for a second one).
        self._listing.engine = None
        self._origins = None
        if self._wake_handle is not None:
            self._wake_handle.cancel()
            self._wake_handle = None
        reaper = self._reaper
        if reaper is not None and reaper is not asyncio.current_task():
            reaper.cancel()
        # Let go of the loop: a closed timer kept in get_timer()'s weak registry must not keep
        # its loop alive (the value would pin its own weak key).
        self._reaper = None
        self._waiter = None
        self._bound_loop = None
        self._clock = time.monotonic
        unfired: list[Handle] = []
        core = self._core
        if core is not None:
            # Out of the fast lane, drained, and no longer holding this engine.
            for handle in core.close():
                handle._abandon(exc)
                unfired.append(handle)
            self._cancelled_on_close += len(unfired)
        entries = self._wheel.drain()
        self._cancelled_on_close += len(entries)
        for entry in entries:
            assert isinstance(entry, _Timed)
            entry._abandon(exc)
            if isinstance(entry, _Call):
                unfired.append(entry._handle)
        return unfired

    def _refuse_closing_a_loops_own(self) -> None:
        """RuntimeError if this is a loop-mode loop's own engine and its loop is open: it holds
        the loop's own timers (``asyncio.sleep``'s among them), which closing would lose."""
        if self._driven and not self._closed:
            raise RuntimeError(
                "this Timer is its event loop's own (loop mode: every call_at / call_later of "
                "the loop, asyncio.sleep's too, is on it): it closes with the loop "
                "(loop.close()); close a Timer of your own instead"
            )

    def _close_for_waiting(self) -> tuple[list[Handle], asyncio.Task[None] | None]:
        """Close (as ``Timer.close``) and return the unfired handles with the reaper task
        that ``aclose`` then waits for (None: no task, or it is the caller)."""
        self._refuse_closing_a_loops_own()
        reaper = self._reaper
        unfired = self._shutdown(None, None)
        if reaper is asyncio.current_task():
            reaper = None
        return unfired, reaper

    # -- counters ------------------------------------------------------------------------------

    def _pending(self) -> int:
        """The exact number of pending timers."""
        core = self._core
        return len(self._wheel) + (0 if core is None else len(core))

    def _counters(self) -> tuple[int, int, int, int, float, int]:
        """pending, fired, cancelled, wake-ups, max lateness, queued buckets."""
        wheel = self._wheel
        core = self._core
        return (
            self._pending(),
            self._fired,
            wheel.removed + self._cancelled_on_close + (0 if core is None else core.removed),
            self._wakeups,
            self._max_lateness,
            wheel.queued + (0 if core is None else core.queued),
        )

    # -- filing: every timer enters the wheel through _insert ------------------------------------

    def _tick_for(self, when: float) -> int:
        """The tick of deadline ``when``, rounded up; NEVER for +inf. ValueError for NaN."""
        try:
            return ceil((when - self._epoch) * self._inverse_tick - _TICK_EPSILON)  # see _admit
        except OverflowError:
            if when > 0:
                return NEVER
            return self._wheel.elapsed  # -inf: already due
        except ValueError:
            pass
        # Raised outside the except clause, so that no internal error shows as its context
        # (in both builds: the compiled one ignores `from None`).
        raise ValueError("deadline must not be NaN")

    def _admit(self, when: float) -> int:
        """The tick of ``when``, if the wheel may take one more timer: ValueError for NaN,
        PendingLimitError at ``max_pending``; raised before anything changes.

        Every filing starts here. Paid by every timer, so the tick arithmetic of _tick_for is
        inlined (its except branches cost nothing unless taken) and the count is read without
        len().
        """
        try:
            # Less the epsilon: float rounding must not put a deadline that is a tick's own
            # time one tick up (0.007 s is 7.000000000000001 ms), since its own tick runs it no
            # earlier and exactly on time. A deadline truly within the epsilon (a nanosecond at
            # the default tick) past a boundary lands a tick low: the reaper finds it not yet
            # due and files it again from its exact deadline, so it is never early. (One float
            # subtraction: an exact check of the tick's time cost loop mode's churn 4% on uvloop.)
            tick = ceil((when - self._epoch) * self._inverse_tick - _TICK_EPSILON)
        except (OverflowError, ValueError):
            tick = self._tick_for(when)
        if self._limit != _NO_LIMIT and self._pending() >= self._limit:
            raise PendingLimitError(f"max_pending={self._limit} timers are already pending")
        return tick

    def _insert(self, entry: _Timed, tick: int) -> None:
        """The one place a timer enters the wheel: insert it, and if its bucket is now the
        earliest, move the wake-up earlier (Kafka's addTimerTaskEntry, tokio's reregister).
        With origin tracking on, note where the timer was filed from first."""
        origins = self._origins
        if origins is not None:
            self._note_origin(entry, origins)
        if self._wheel.insert(entry, tick) < self._armed:
            self._arm()

    def _file(self, entry: _Timed, when: float) -> None:
        """Put an unlinked entry in the wheel for deadline ``when`` (see :class:`Owner`)."""
        tick = self._admit(when)
        entry._when = when
        # _insert, inlined: every timeout entered and every heartbeat re-filed comes here.
        origins = self._origins
        if origins is not None:
            self._note_origin(entry, origins)
        if self._wheel.insert(entry, tick) < self._armed:
            self._arm()

    def _move(self, entry: _Timed, when: float) -> None:
        """Give ``entry`` the deadline ``when`` (see :class:`Owner`)."""
        if entry._prev is None:
            self._file(entry, when)
        elif when >= entry._when:
            entry._when = when  # lazy: re-filed from `_when` when its bucket comes due
        else:
            tick = self._tick_for(when)
            entry._when = when
            if self._wheel.move(entry, tick) < self._armed:
                self._arm()

    def _push_back(self, entry: _Timed, when: float) -> bool:
        """The lazy move later, for the hot paths (see :class:`Owner`): a thread check, a
        clock read, two comparisons and one store. (A closed engine has unlinked every entry
        and has no thread, so it always answers False.)"""
        if (
            entry._prev is not None
            and when >= entry._when
            and _get_ident() == self._thread_id
            and when > self._clock()
        ):
            entry._when = when
            return True
        return False

    def _push_back_by(self, entry: _Timed, delay: float) -> bool:
        """:meth:`_push_back` to ``delay`` seconds from now, for ``Watchdog.feed`` (see
        :class:`Owner`). A positive delay from now is always ahead of the clock, so the clock
        is read once, not twice: the feed path is a third cheaper for it (measured: 10.2M
        feeds/s with two reads, 15.7M with one)."""
        if entry._prev is not None and _get_ident() == self._thread_id:
            when = self._clock() + delay
            if when >= entry._when:
                entry._when = when
                return True
        return False

    def _arm_at(self, entry: _Timed, when: float, loop: asyncio.AbstractEventLoop) -> bool:
        """File an unlinked ``entry`` for ``when``, for a caller that found ``loop`` running
        in this thread (:meth:`_loop_here`); True if ``when`` has already passed (nothing is
        filed: the caller hands the firing to ``loop.call_soon``). See :class:`Owner`."""
        if loop is not self._loop:
            self._check_loop()  # binds, or raises (another loop, closed)
        if when <= self._clock():
            return True
        self._file(entry, when)
        return False

    def _set_deadline(self, entry: _Timed, when: float | None) -> asyncio.AbstractEventLoop | None:
        """Check the loop, then give ``entry`` the deadline ``when`` (see :class:`Owner`):
        the loop if ``when`` has already passed (the entry is then out of the wheel), None
        otherwise."""
        loop = self._running_loop()
        if when is None:
            self._unfile(entry)
            return None
        if when <= self._clock():
            self._unfile(entry)
            return loop
        self._move(entry, when)  # NaN is refused here, before anything changes
        return None

    def _unfile(self, entry: _Timed) -> bool:
        """Take ``entry`` out of the wheel if it is in it; True if it was.

        Like asyncio's, a handle's ``cancel()`` is not thread-safe. With the GIL it is checked
        in debug mode only, as asyncio's debug mode checks its calls; on a free-threaded build
        always (see ``_FREE_THREADED``): from a thread that is not running the loop it raises,
        before anything changes (:meth:`_claim_thread`)."""
        if entry._prev is not None:
            if (self._debug or _FREE_THREADED) and _get_ident() != self._thread_id:
                with self._claim_lock:  # the take-over and the removal, as one
                    self._claim_thread(_FOREIGN_CANCEL)
                    return entry._prev is not None and self._wheel.remove(entry)
            return self._wheel.remove(entry)
        return False

    def _claim_for_cancel(self) -> None:
        """The native core's thread check of a cancel() from another thread (see
        :meth:`_claim_thread`)."""
        self._claim_thread(_FOREIGN_CANCEL)

    def _check_cancel_of_due(self) -> None:
        """See :class:`Owner`: the thread check of :meth:`_unfile`, for a due handle."""
        if _FREE_THREADED and _get_ident() != self._thread_id:
            self._claim_thread(_FOREIGN_CANCEL)

    def _claim_thread(self, refusal: str) -> None:
        """The slow path of the thread checks (a cancel in debug mode or on a free-threaded
        build; loop mode's ``call_at`` / ``call_later`` into the wheel on a free-threaded build):
        the calling thread is not the one the engine last saw run its loop.

        It becomes the loop's thread if it runs the loop now (a loop made in one thread and run
        in another) or if the loop is not running at all (set-up before ``run_forever``, which
        asyncio allows from any thread); otherwise RuntimeError(``refusal``), before anything
        has changed. A take-over holds ``_claim_lock``, as :meth:`_run_here` and the loop's
        ``close()`` do, so that a loop about to run, or running, is never taken over."""
        with self._claim_lock:
            loop = self._bound_loop
            if loop is None:  # not bound yet, or closed: no loop's thread to keep
                return
            running_here = _get_running_loop() is loop
            if not running_here and (self._in_run or loop.is_running()):
                raise RuntimeError(refusal)
            self._thread_id = _get_ident()
            self._sync_core()

    def _run_here(self) -> None:
        """This thread is about to run the bound loop (loop mode's ``run_forever``): the
        thread checks, the native core's included, answer for it from now on, and no other
        thread can take the loop over until :meth:`_run_ended`."""
        with self._claim_lock:
            if not self._closed:
                self._thread_id = _get_ident()
                self._in_run = True
                self._sync_core()

    def _run_ended(self) -> None:
        """Loop mode's ``run_forever`` returned: a thread may take the loop over again."""
        self._in_run = False

    def _close_with_loop(self, cause: str) -> None:
        """Loop mode's ``loop.close()``: :meth:`_shutdown`, never during a take-over."""
        with self._claim_lock:
            self._shutdown(None, cause)

    def _call(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
        where: str,
    ) -> Handle:
        """call_at's hot path, once the loop is checked: refuse a NaN deadline (here, where
        ``when`` is a native float in the compiled build: the test costs nothing), a
        non-callable or a context that is not one (``where`` names the function called:
        ``"call_at()"``), then file."""
        if when != when:
            raise ValueError(f"{where}: deadline must not be NaN")
        if not _callable(callback) or (
            context is not None and not isinstance(context, contextvars.Context)
        ):
            _refuse_call(where, callback, context)
        if self._debug:
            _check_not_coroutine_function(callback, where)
        return self._call_callable(when, callback, args, context)

    def _call_callable(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> Handle:
        """File ``callback(*args)`` for ``when``; ``callback`` is known to be callable (loop
        mode checks that itself, to choose its path, so the check is not made twice)."""
        if self._debug:
            _check_not_coroutine_function(callback)
        core = self._core
        if core is not None:
            # The native core holds every callback handle of the compiled build.
            if self._limit != _NO_LIMIT:
                self._admit(when)  # NaN, then the limit, against the two wheels' count
            filed: Any = core.file(when, callback, args, context)
            if filed is not NotImplemented:
                handle: Handle = filed
                origins = self._origins
                if origins is not None:
                    self._note_origin(handle, origins)
                return handle
            # NotImplemented: 2**62 ticks or more past the epoch, beyond the core's grid; the
            # engine's wheel (Python ints) holds it, as the pure-Python build does.
        tick = self._admit(when)
        if context is None:
            context = _copy_context()
            if not context:
                context = EMPTY_CONTEXT
        handle = TimerHandle(when, callback, args, context, self)
        call = handle._call  # the wheel's entry (aiowheel._handles: the handle is asyncio's)
        assert call is not None
        # _insert, inlined: this is every call_at / call_later of a loop-mode loop.
        origins = self._origins
        if origins is not None:
            self._note_origin(call, origins)
        if self._wheel.insert(call, tick) < self._armed:
            self._arm()
        return handle

    def _schedule(
        self,
        when: float,
        target: Coroutine[Any, Any, Any] | Callable[..., Any],
        args: tuple[object, ...],
    ) -> asyncio.Future[Any]:
        """File a :class:`~aiowheel._handles.Scheduled` start of ``target`` (checked by the
        caller) for ``when``; the future the user holds."""
        tick = self._admit(when)
        loop = self._bound_loop
        assert loop is not None
        future: asyncio.Future[Any] = loop.create_future()
        entry = Scheduled(when, future, target, args, _copy_context(), self)
        self._insert(entry, tick)
        return future

    def _sleeper_at(self, deadline: Seconds, result: object) -> Sleeper | None:
        """The synchronous half of ``sleep_until`` (see :class:`Owner`)."""
        if not self._on_loop():
            self._check_loop()
        if not isinstance(deadline, float):
            deadline = _validate.seconds("sleep_until(): deadline", deadline)
        if deadline != deadline:
            raise ValueError("sleep_until(): deadline must not be NaN")
        return self._sleeper(deadline, result)

    def _sleeper_after(self, delay: Seconds, result: object) -> Sleeper | None:
        """The synchronous half of ``sleep`` (see :class:`Owner`)."""
        if not self._on_loop():
            self._check_loop()
        if not isinstance(delay, float):
            delay = _validate.seconds("sleep(): delay", delay)
        if delay != delay:
            raise ValueError("sleep(): delay must not be NaN")
        return self._sleeper(self._clock() + delay, result)

    def _sleeper(self, deadline: float, result: object) -> Sleeper | None:
        """File a sleeper for ``deadline``; None if it has passed (then just yield once)."""
        tick = self._admit(deadline)
        if deadline <= self._clock():
            return None
        loop = self._bound_loop
        assert loop is not None
        entry = Sleeper(deadline, loop.create_future(), result)
        self._insert(entry, tick)
        return entry

    # -- the delay queue and the reaper --------------------------------------------------------

    def _arm(self) -> None:
        """Make the single loop handle fire at the wheel's earliest bucket expiration."""
        loop = self._loop
        assert loop is not None
        expiration = self._wheel.next_expiration()
        core = self._core
        if core is not None:
            theirs: int | None = core.next_expiration()
            if theirs is not None and (expiration is None or theirs < expiration):
                expiration = theirs
        handle = self._wake_handle
        if handle is not None:
            handle.cancel()
            self._wake_handle = None
        if expiration is None:
            self._set_armed(NEVER)
            return
        self._set_armed(expiration)
        self._wake_tick = expiration
        when = self._epoch + expiration * self._tick
        wake_at = self._wake_at
        if wake_at is None:
            self._wake_handle = loop.call_at(when, self._wake)
        elif self._driven:
            self._wake_handle = wake_at(when, self._drive)
        else:
            self._wake_handle = wake_at(when, self._wake)

    def _set_armed(self, expiration: int) -> None:
        """The expiration the wake-up is armed for (or _REAPER_AWAKE), told to the core too:
        a core that queues an earlier bucket calls :meth:`_arm`."""
        self._armed = expiration
        core = self._core
        if core is not None:
            core.set_armed(expiration)

    def _wake(self) -> None:
        self._wake_handle = None
        self._set_armed(_REAPER_AWAKE)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _reaper_waiter(self) -> asyncio.Future[None]:
        """The future the reaper task awaits next: resolved when the earliest bucket is due."""
        loop = self._bound_loop
        assert loop is not None
        if self._armed == _REAPER_AWAKE or self._wake_handle is None:
            self._arm()
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiter = waiter
        return waiter

    def _reap_due(self) -> None:
        """The reaper task woke: advance the wheel to now and dispatch every due entry."""
        self._advance()
        if self._ready or self._native_ready is not None:
            self._dispatch_ready(inline=False)

    def _drive(self) -> None:
        """Loop mode's reaper: the wake-up handle's own callback (see aiowheel._loop).

        It advances the wheel, re-arms, then runs the due callbacks right here, inside this
        loop callback: they run in the loop iteration that found them due, as the loop's own
        timer handles do, with no task and no extra loop handle in between.
        """
        self._wake_handle = None
        if self._closed:
            return
        try:
            self._advance()
        finally:
            self._arm()
        if self._ready or self._native_ready is not None:
            self._dispatch_ready(inline=True)

    def _queue(self, entry: _Timed) -> None:
        """Run ``entry._run()`` in this pass's batch of due callbacks (see :class:`Owner`)."""
        self._ready.append(entry)
        self._ready_when.append(entry._when)

    def _create_task(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> asyncio.Task[Any]:
        """Start ``coro`` as a task of the bound loop, in ``context``."""
        loop = self._bound_loop
        assert loop is not None
        return loop.create_task(coro, context=context)

    def _dispatch_ready(self, inline: bool) -> None:
        """Hand the due callbacks collected in ``_ready`` to the loop.

        Normally as one batch (one loop callback, or run inline by loop mode's reaper). In
        debug mode each gets a loop callback of its own, so that asyncio's debug machinery
        (the slow-callback report, the current handle) sees and names each one. More than
        ``max_batch`` of them, or any while earlier ones still wait, go through the backlog:
        ``max_batch`` per loop iteration (:meth:`_run_backlog`).
        """
        batch = self._ready
        self._ready = []
        whens = self._ready_when
        self._ready_when = []
        native_batch = self._native_ready
        self._native_ready = None
        loop = self._bound_loop
        assert loop is not None
        count = len(batch) if native_batch is None else len(batch) + len(native_batch)
        if count > self._max_batch or self._backlog_at < len(self._backlog):
            self._to_backlog(batch, whens, native_batch)
            if self._debug:
                self._backlog_to_loop(loop)
            elif not self._backlog_queued:
                if inline:
                    self._run_backlog()
                else:
                    self._backlog_queued = True
                    loop.call_soon(self._run_backlog)
            return
        if native_batch is not None:
            if batch:
                # Both wheels had callbacks due: one batch, in deadline order.
                merged = _merged(batch, whens, native_batch)
                if self._debug:
                    for due in merged:
                        loop.call_soon(_debug.DueCallback(due))
                elif inline:
                    _run_mixed(merged)
                else:
                    loop.call_soon(_run_mixed, merged)
                return
            if self._debug:
                for due in native_batch:
                    loop.call_soon(_debug.DueCallback(due))
            elif inline:
                self._core.run(native_batch)
            else:
                loop.call_soon(self._core.run, native_batch)
            return
        if self._debug:
            for handle in batch:
                loop.call_soon(_debug.DueCallback(handle))
        elif inline:
            _run_ready(batch)
        else:
            loop.call_soon(_run_ready, batch)

    def _to_backlog(
        self, batch: list[_Timed], whens: list[float], native_batch: list[Any] | None
    ) -> None:
        """Add a pass's due callbacks to the backlog, keeping it in deadline order (ahead of
        a new one within a deadline: it came due first)."""
        if native_batch is None:
            items: list[Any] = list(batch)
            item_whens = whens
        else:
            native_whens = [_when_of(handle) for handle in native_batch]
            if batch:
                items, item_whens = _merge(batch, whens, native_batch, native_whens)
            else:
                items, item_whens = native_batch, native_whens
        native = self._backlog_native or self._backlog_at >= len(self._backlog)
        self._backlog_native = native and not batch
        at = self._backlog_at
        backlog = self._backlog
        backlog_when = self._backlog_when
        if at >= len(backlog):
            self._backlog = items
            self._backlog_when = item_whens
            self._backlog_at = 0
            self._backlog_yielded = _perf_counter()  # a new backlog owes nothing yet
        elif not item_whens or item_whens[0] >= backlog_when[-1]:
            backlog.extend(items)  # nearly always: later than every one still waiting
            backlog_when.extend(item_whens)
        else:  # a deadline filed already past, earlier than some still waiting
            self._backlog, self._backlog_when = _merge(
                backlog[at:], backlog_when[at:], items, item_whens
            )
            self._backlog_at = 0

    def _run_backlog(self) -> None:
        """Run the next ``max_batch`` callbacks of the backlog (a loop callback, or inline in
        loop mode's reaper); if more wait, queue itself on the loop again, so that the loop
        polls its I/O and runs what that woke before the next chunk. SystemExit or
        KeyboardInterrupt leaves the loop as from any loop callback; the rest of the chunk
        and of the backlog run on the loop's next iteration, in order.

        A fair share, so that timers never starve: when the rest of the loop took more than
        ``_FAIR_FLOOR`` since the last chunk (a loop saturated with I/O), further chunks run
        until the backlog has had as much time as the rest. One chunk per iteration against
        an iteration of 20 ms of reads would drain 64 callbacks in 20 ms while heartbeats
        come due faster: the backlog, and every idle timeout behind it, would fall behind
        for good (measured: the hub's mass expiry on ``max_batch=64``).
        """
        self._backlog_queued = False
        started = _perf_counter()
        owed = started - self._backlog_yielded
        if owed < _FAIR_FLOOR:
            owed = 0.0
        try:
            while True:
                backlog = self._backlog
                at = self._backlog_at
                if at >= len(backlog):
                    return  # drained, or debug mode handed it to the loop (_backlog_to_loop)
                native = self._backlog_native
                end = at + self._max_batch
                if end >= len(backlog):
                    chunk = backlog[at:] if at else backlog
                    # Drained before it runs: a pass the chunk's callbacks start begins anew.
                    self._backlog = []
                    self._backlog_when = []
                    self._backlog_at = 0
                    self._backlog_native = True
                else:
                    chunk = backlog[at:end]
                    self._backlog_at = end
                if native:
                    self._core.run(chunk)
                else:
                    _run_mixed(chunk)
                if _perf_counter() - started >= owed:
                    return
        finally:
            self._backlog_yielded = _perf_counter()
            if self._backlog_at < len(self._backlog) and not self._backlog_queued:
                loop = self._bound_loop
                if loop is None:  # closed meanwhile: what was handed over still runs
                    loop = asyncio.get_running_loop()
                self._backlog_queued = True
                loop.call_soon(self._run_backlog)

    def _backlog_to_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Debug mode: every callback of the backlog a loop callback of its own, in order."""
        backlog = self._backlog
        at = self._backlog_at
        self._backlog = []
        self._backlog_when = []
        self._backlog_at = 0
        self._backlog_native = True
        for index in range(at, len(backlog)):
            loop.call_soon(_debug.DueCallback(backlog[index]))

    def _advance(self) -> None:
        """Advance the wheel to now: fire every due entry, queueing callbacks in ``_ready``."""
        loop = self._bound_loop
        assert loop is not None
        wheel = self._wheel
        self._waiter = None
        self._set_armed(_REAPER_AWAKE)
        self._wakeups += 1
        debug = loop.get_debug()
        if debug != self._debug:
            self._debug = debug
            self._sync_core()
        now = self._clock()  # loop.time(), read the way the engine reads it everywhere
        # The epsilon absorbs float error at tick boundaries (a reading of 10.9999999 ticks
        # on a clock that says "tick 11 has begun"); without it uvloop, whose clock moves in
        # whole milliseconds, would spin for a millisecond. Entries are still checked against
        # their exact deadline below.
        now_tick = floor((now - self._epoch) * self._inverse_tick + _TICK_EPSILON)
        wake_tick = self._wake_tick
        if now_tick < wake_tick < NEVER and self._epoch + wake_tick * self._tick <= now:
            # The clock has reached the wake-up's own time, computed as _arm filed it: its
            # bucket is due, whatever the division above says. Far from the epoch the two
            # disagree (a virtual clock started at 1e9: 0.448 s past it reads as 447.99995
            # ticks, below the bucket's 448, and the wake-up was filed again at the same time
            # forever). The wake-up's time is the one that decides, as on the loop's heap.
            now_tick = wake_tick
        if now_tick < wheel.elapsed:
            return  # woken early, before the last tick we processed ended
        due = wheel.advance(now_tick)
        if len(due) > 1:
            _in_deadline_order(due)
        fired = 0
        first_tick = 0
        lateness = self._max_lateness
        for entry in due:
            assert isinstance(entry, _Timed)
            when = entry._when
            if when > now:
                # Not due after all: its deadline was pushed back without touching the wheel
                # (_push_back: the lazy re-file), or float rounding put it a hair early. File
                # it again from the exact deadline.
                tick = self._tick_for(when)
                wheel.insert(entry, tick if tick > now_tick else now_tick + 1)
                continue
            if not fired:
                first_tick = entry._tick
            fired += 1
            if now - when > lateness:
                # How late the loop ran it. A deadline already past when it was filed (call_at
                # of a past time, even -inf) is late only from when the wheel could first run
                # it: the start of the tick the previous pass had not reached.
                floor_ = self._pass_floor
                late = now - when if when >= floor_ else now - floor_
                if late > lateness:
                    lateness = late
            try:
                entry._fire(self)
            except Exception as exc:  # a bug must cost one timer, not the reaper
                loop.call_exception_handler(
                    {"message": f"aiowheel: error firing {entry!r}", "exception": exc}
                )
        core = self._core
        if core is not None:
            native_batch, native_fired, native_first, lateness = core.advance(
                now_tick if now_tick < _CORE_TICKS else _CORE_TICKS - 1,
                now,
                self._pass_floor,
                lateness,
            )
            if native_fired:
                if not fired or native_first < first_tick:
                    first_tick = native_first
                fired += native_fired
                self._native_ready = native_batch
        self._fired += fired
        self._max_lateness = lateness
        if fired:
            # The loop's lag: how long after the earliest fired timer's tick began (when the
            # wheel could first run it; a deadline filed already past counts from when the
            # wheel could first see it) this pass ran. Once per pass, weighted by what fired.
            could_run = self._epoch + first_tick * self._tick
            floor_ = self._pass_floor
            self._lag.record(now - (could_run if could_run > floor_ else floor_), fired)
        self._pass_floor = self._epoch + now_tick * self._tick


class _ClockOf:
    """A loop's clock as it is at each reading (``loop.time`` may be replaced on the loop)."""

    __slots__ = ("_loop",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop: Final = loop

    def time(self) -> float:
        """``loop.time()``."""
        return self._loop.time()


def _deadline_of(entry: Entry) -> float:
    assert isinstance(entry, _Timed)
    return entry._when


def _in_deadline_order(due: list[Entry]) -> None:
    """Put a pass's due entries in deadline order (stable: filing order within a deadline).

    The wheel hands back each bucket's entries in the order they were filed, and a coarse
    bucket holds many deadlines: when the loop comes back late, a 10 ms timer could run before
    a 9 ms one filed after it. The loop's own heap runs them in deadline order, and so does
    this. Nearly every pass is in order already: one scan, and a sort only when it is not.
    """
    last = -inf
    for entry in due:
        when = _deadline_of(entry)
        if when < last:
            due.sort(key=_deadline_of)
            return
        last = when


def _pending(entry: Any) -> bool:
    return bool(entry.pending())


def _when_of(entry: Any) -> float:
    when: float = entry._when
    return when


def _merged(batch: list[_Timed], whens: list[float], native_batch: list[Any]) -> list[Any]:
    """The engine's due callbacks and the core's, each in deadline order, as one list in
    deadline order (the engine's first within a deadline). ``whens`` are the deadlines the
    engine's came due at (a heartbeat's ``_when`` is its next one by now)."""
    return _merge(batch, whens, native_batch, [_when_of(handle) for handle in native_batch])[0]


def _merge(
    first: list[Any], first_whens: list[float], second: list[Any], second_whens: list[float]
) -> tuple[list[Any], list[float]]:
    """Two lists in deadline order as one, with its deadlines (``first``'s ahead in a tie)."""
    merged: list[Any] = []
    merged_whens: list[float] = []
    i = j = 0
    while i < len(first) and j < len(second):
        if second_whens[j] < first_whens[i]:
            merged.append(second[j])
            merged_whens.append(second_whens[j])
            j += 1
        else:
            merged.append(first[i])
            merged_whens.append(first_whens[i])
            i += 1
    merged.extend(first[i:])
    merged_whens.extend(first_whens[i:])
    merged.extend(second[j:])
    merged_whens.extend(second_whens[j:])
    return merged, merged_whens


def _run_mixed(batch: list[Any]) -> None:
    """:func:`_run_ready` for a batch of both wheels' callbacks."""
    for index, handle in enumerate(batch):
        try:
            handle._run()
        except BaseException:
            rest = batch[index + 1 :]
            if rest:
                asyncio.get_running_loop().call_soon(_run_mixed, rest)
            raise


def _run_ready(batch: list[_Timed]) -> None:
    """Run a batch of due callbacks, in deadline order, as one loop callback."""
    for index, handle in enumerate(batch):
        try:
            handle._run()
        except BaseException:
            # SystemExit or KeyboardInterrupt leaves the loop, as it would from a loop
            # callback; the rest of the batch runs on the loop's next iteration.
            rest = batch[index + 1 :]
            if rest:
                asyncio.get_running_loop().call_soon(_run_ready, rest)
            raise


def _refuse_call(where: str, callback: object, context: object) -> NoReturn:
    """The TypeError for a ``call_at`` / ``call_later`` whose callback is not callable or
    whose context is not a ``contextvars.Context`` (``where`` names the function)."""
    if not _callable(callback):
        raise TypeError(f"{where}: callback must be callable, got {type(callback).__name__}")
    raise TypeError(
        f"{where}: context must be a contextvars.Context or None, got {type(context).__name__}"
    )


def _check_not_coroutine_function(
    callback: Callable[..., object], where: str = "call_at()"
) -> None:
    # asyncio makes this check in debug mode only, for its cost; so do we.
    if inspect.iscoroutinefunction(callback):
        raise TypeError(
            f"{where}: callback must not be a coroutine function (use schedule_at() to run one)"
        )
