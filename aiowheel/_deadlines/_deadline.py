"""The request deadline, framework-neutral: the requests' table, one wheel entry per tick.

Why a room of its own. Every server adapter of aiowheel's deadlines (:mod:`aiowheel.asgi`,
:mod:`aiowheel.aiohttp`, :mod:`aiowheel.grpc`) keeps its requests' deadlines the same way, so
the way is written once, here, and nothing else: a deadline per request (:class:`Request`),
noted when it starts, filed on the wheel only if the request suspends, grouped by tick (one
wheel entry, :class:`_Tick`, for every request whose deadline falls in it), moved, ended
(:class:`Deadlines`, on each loop's :class:`_Table`). The design, and what it costs a request,
is :mod:`aiowheel.asgi`'s docstring. The request also lives in the task's context
(:data:`current`), where the budget (:mod:`aiowheel._deadlines._budget`) and
:func:`aiowheel.current_deadline` read it, in the request's task and in every task and worker
thread its context reached.

The rest of the deadlines' core has rooms of its own: a server adapter's checked settings
(:mod:`aiowheel._deadlines._settings`), the inbound header's parse and cap
(:mod:`aiowheel._deadlines._inbound`), the budget read, moved and passed on
(:mod:`aiowheel._deadlines._budget`). The adapters are thin and import only these rooms' public
names, never each other's. None of them imports a framework: that is the adapter's import.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from _thread import get_ident as _get_ident
from asyncio import _get_running_loop
from collections.abc import Callable, Mapping
from typing import Any, Final, final

from .._loopmode._default import get_timer
from .._seeing._census import deadline_sources
from .._time._tasks import current_task
from .._time._threads import FORKS
from ._exhausted import BudgetExhausted
from ._seen import SEEN

__all__ = [
    "END_WINDOW",
    "ENDED_HEADER",
    "BudgetExhausted",
    "Deadlines",
    "Request",
    "Stops",
    "current",
]


END_WINDOW: Final = 0.001
"""How near its deadline a failure is the deadline's own: 1 ms, the instant's width here.

The end of a budget is one event, whoever notices it first: a callee's 504 or
``DEADLINE_EXCEEDED`` (the callee was told the budget rounded down to the millisecond), a
timeout set from :func:`aiowheel.time_left` (uvloop fires a timer up to 1 ms early, and a
timer filed for the deadline's instant may run before the deadline's own), an error the
database raised at a ``statement_timeout`` set from the budget. Within this window of the
deadline, or after it, such a failure is answered as the deadline (504, ``DEADLINE_EXCEEDED``);
earlier, it is the failure it is. The window is that of the instant, not of the network:
a callee's answer is judged by when the callee's own deadline fell, on the caller's clock."""


ENDED_HEADER: Final = "x-deadline-ended"
"""The header (gRPC: trailing metadata) on a deadline adapter's 504 (``DEADLINE_EXCEEDED``)
naming whose deadline ended the request: ``caller`` (the budget the caller sent, in the
inbound header or ``grpc-timeout``, ran out, whichever hop noticed it first) or ``own`` (the
service's own deadline for the route, shorter than the caller's budget). A client adapter
above reads it to tell the caller's budget from the callee's own deadline across any number
of hops; from a callee that sends none, it judges by the time (:data:`END_WINDOW`)."""


@final
class Request:
    """One request's deadline: the task it guards, where it is filed, what bounds moving it."""

    __slots__ = (
        "arrived", "cancelling", "cap", "deadline", "ended", "expired", "route", "soon", "started",
        "stops", "table", "task", "tick", "unfiled",
    )  # fmt: skip

    def __init__(
        self,
        table: _Table,
        task: asyncio.Task[Any],
        started: float,
        deadline: float,
        cap: float | None,
        route: object,
    ) -> None:
        self.table = table  # the middleware's deadlines on the request's loop
        self.route = route  # an ASGI scope or an aiohttp request: named only when asked
        self.task = task
        self.cancelling = task.cancelling()  # asyncio.timeout's accounting, see Deadlines.end
        self.started = started
        self.deadline = deadline
        self.arrived = deadline  # the deadline it arrived with (set_deadline moves `deadline`)
        self.cap = cap  # the inbound header's limit, in seconds from `started`
        self.expired = False
        self.ended = False
        self.tick: _Tick | None = None  # the tick whose wheel entry guards it, once filed
        self.soon: asyncio.Handle | None = None  # or a passed deadline, handed to call_soon
        self.unfiled = True  # until _Table.file_started has seen it
        self.stops: Stops | None = None  # what runs when the deadline fires, once asked for

    def live(self) -> bool:
        """Whether the deadline still guards the request (not ended, not expired)."""
        return not (self.ended or self.expired)

    def left(self) -> float | None:
        """Seconds left of the deadline (0.0 once passed), or None once the request has
        finished in time: what :func:`budget` reads of it."""
        if self.ended and not self.expired:
            return None
        return max(0.0, self.deadline - self.table.loop.time())

    def whose(self) -> str:
        """Whose deadline this is (:data:`ENDED_HEADER`'s value): ``"caller"`` if the inbound
        header's cap set it (the caller's budget), else ``"own"``."""
        cap = self.cap
        return "caller" if cap is not None and self.deadline >= self.started + cap else "own"

    def expire(self) -> None:
        """The deadline has passed: cancel the request's task (once), and run what was to run
        at the deadline (:func:`aiowheel.at_deadline`)."""
        self.soon = None
        if not (self.ended or self.expired):
            self.expired = True
            self.task.cancel()
            with _MAKING_STOPS:  # a Stops made from here on starts fired
                stops = self.stops
            if stops is not None:
                stops.fire(self.table.loop)

    def stops_here(self) -> Stops:
        """This request's :class:`Stops`, made on first use (from any thread)."""
        stops = self.stops
        if stops is None:
            with _MAKING_STOPS:
                stops = self.stops
                if stops is None:
                    stops = self.stops = Stops(self)
        return stops

    def name(self) -> str:
        """The request as the census names its deadline: its method and route (the route's
        template where the framework has matched one, else the path)."""
        route = self.route
        match_info = getattr(route, "match_info", None)
        if match_info is not None:  # an aiohttp request (a mapping too: asked first)
            method = getattr(route, "method", "")
            resource = getattr(getattr(match_info, "route", None), "resource", None)
            canonical = getattr(resource, "canonical", None)
            path = canonical if isinstance(canonical, str) else getattr(route, "path", "")
        elif isinstance(route, Mapping):  # an ASGI scope
            method = route.get("method", "")
            matched = getattr(route.get("route"), "path", None)  # FastAPI's matched route
            path = matched if isinstance(matched, str) else route.get("path", "")
        elif isinstance(route, str):  # a gRPC method's full name
            return f"gRPC {route}"
        else:
            return "?"
        return f"{method} {path}"


_MAKING_STOPS: Final = threading.Lock()  # one Stops per request, made from any thread

Callback = Callable[[], object]


@final
class Stops:
    """What runs when a request's deadline fires (:func:`aiowheel.at_deadline`): callbacks
    added and withdrawn from any thread (the request's task, a worker thread its context
    reached), run once, in the loop's thread, when the deadline fires; dropped when the request
    ends in time. One lock guards the three states (armed, fired, ended), so a callback added
    as the deadline fires runs exactly once: with the others, or, added just after, soon."""

    __slots__ = ("callbacks", "lock", "request", "state")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.lock = threading.Lock()
        self.callbacks: dict[object, Callback] = {}  # by the handle that withdraws it
        # Made under _MAKING_STOPS, which expire() and disarm() take after setting these.
        self.state = "fired" if request.expired else "ended" if request.ended else "armed"

    def add(self, key: object, callback: Callback) -> bool:
        """Run ``callback`` when the deadline fires: True; False if it has fired already
        (nothing filed: the caller decides). RuntimeError once the request has ended in time."""
        with self.lock:
            state = self.state
            if state == "armed":
                self.callbacks[key] = callback
                return True
        if state == "ended":
            raise RuntimeError("at_deadline(): the request has ended")
        return False

    def run_soon(self, callback: Callback) -> None:
        """Run ``callback`` next in the loop's thread (the deadline has fired), from any
        thread."""
        loop = self.request.table.loop
        loop.call_soon_threadsafe(_run, loop, callback)

    def remove(self, key: object) -> bool:
        """Withdraw the callback filed under ``key``; whether it was still to run."""
        with self.lock:
            return self.callbacks.pop(key, None) is not None

    def fire(self, loop: asyncio.AbstractEventLoop) -> None:
        """The deadline fired: run every callback, in the order they were added."""
        with self.lock:
            self.state = "fired"
            callbacks, self.callbacks = self.callbacks, {}
        for callback in callbacks.values():
            _run(loop, callback)

    def end(self) -> None:
        """The request has ended: nothing more runs (callbacks still filed are dropped)."""
        with self.lock:
            if self.state == "armed":
                self.state = "ended"
                self.callbacks = {}


def _run(loop: asyncio.AbstractEventLoop, callback: Callback) -> None:
    """``callback()``; what it raises goes to ``loop``'s exception handler."""
    try:
        callback()
    except Exception as exc:
        loop.call_exception_handler(
            {
                "message": f"aiowheel.at_deadline() callback {callback!r} failed",
                "exception": exc,
            }
        )


@final
class _Tick:
    """The requests of one middleware, on one loop, whose deadlines fall in one tick: one wheel
    entry for all of them, filed at the earliest of their deadlines."""

    __slots__ = ("handle", "key", "members", "table", "timer", "when")

    def __init__(self, table: _Table, key: int, when: float) -> None:
        self.table = table
        self.key = key
        self.when = when
        self.members: dict[Request, None] = {}  # a set in arrival (so deadline) order
        self.timer = table.timer
        self.handle = table.timer.call_at(when, self)

    def _census_name(self) -> str:
        """What :func:`aiowheel.pending_timers` and :func:`aiowheel.timer_census` name this
        entry by: its first request's method and route, and how many more it guards."""
        members = self.members
        if not members:
            return "request deadline"
        first = next(iter(members)).name()
        more = len(members) - 1
        return f"request deadline {first} +{more} more" if more else f"request deadline {first}"

    def __call__(self) -> None:
        """The wheel entry's callback (:meth:`expire_requests`)."""
        self.expire_requests()

    def expire_requests(self) -> None:
        """The wheel entry's callback: cancel every member whose deadline has passed (all of
        them, unless the tick straddles two of the wheel's ticks: the rest are filed again)."""
        table = self.table
        if table.ticks.get(self.key) is self:
            del table.ticks[self.key]
        now = table.loop.time()
        members = self.members
        self.members = {}
        later = []
        for request in members:
            request.tick = None
            if request.deadline <= now:
                request.expire()
            else:
                later.append(request)
        for request in later:  # never early: filed again for its own deadline
            table.file(request)

    def leave(self, request: Request) -> None:
        """``request`` is done (or moved): out of the tick; the entry cancelled once empty."""
        members = self.members
        del members[request]
        request.tick = None
        if not members:
            self.handle.cancel()
            ticks = self.table.ticks
            if ticks.get(self.key) is self:
                del ticks[self.key]


@final
class _Table:
    """A middleware's deadlines on one loop: the requests started since the loop last ran its
    ready callbacks (not filed yet), and the ticks of those filed."""

    __slots__ = ("arming", "forks", "loop", "per_tick", "thread", "ticks", "timer", "unfiled")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.thread = _get_ident()  # where `loop` ran when this table was made
        self.forks = FORKS.count
        self.timer = timer = get_timer()
        self.per_tick = 1.0 / timer.tick
        self.ticks: dict[int, _Tick] = {}
        self.unfiled: list[Request] = []
        self.arming = False  # file_started is scheduled

    def file_started(self) -> None:
        """A ready callback, one per loop iteration that started requests: file the deadline of
        each that is still running (it has suspended: only now can a deadline reach it)."""
        self.arming = False
        started = self.unfiled
        if not started:
            return
        self.unfiled = []
        now = self.loop.time()
        for request in started:
            request.unfiled = False
            if request.ended or request.expired or request.soon is not None:
                continue
            if request.deadline <= now:
                request.expire()  # a deadline shorter than one loop iteration
            else:
                self.file(request)

    def file(self, request: Request) -> None:
        """:meth:`join`, which never fails another request: should filing ``request`` raise,
        the error goes to the loop's exception handler and the request's deadline is kept
        on the loop's own ``call_at`` instead (a request is never left without one)."""
        try:
            self.join(request)
        except Exception as exc:  # reported, and the deadline kept anyway
            loop = self.loop
            loop.call_exception_handler({
                "message": "aiowheel.asgi: a request deadline could not be filed on the wheel; "
                           "kept on the loop's call_at instead",
                "exception": exc,
            })  # fmt: skip
            request.soon = loop.call_at(request.deadline, request.expire)

    def join(self, request: Request) -> None:
        """Put ``request`` under the tick of its deadline (an entry filed for it if the tick
        has none, or moved earlier if its deadline is the tick's earliest)."""
        deadline = request.deadline
        key = int(deadline * self.per_tick)
        tick = self.ticks.get(key)
        if tick is None:
            if self.timer.closed():  # closed under us: the loop's timer now
                self.timer = get_timer()
            tick = self.ticks[key] = _Tick(self, key, deadline)
        elif deadline < tick.when:  # a shorter deadline joined (an override, a cap)
            handle = self.timer.call_at(deadline, tick)  # filed before the old one goes
            tick.handle.cancel()
            tick.when = deadline
            tick.handle = handle
        tick.members[request] = None
        request.tick = tick


@final
class Deadlines:
    """A middleware's request deadlines: started, moved and ended here, for both middlewares
    (see the module's docstring for the design)."""

    __slots__ = ("_table", "_tables")

    def __init__(self) -> None:
        self._table: _Table | None = None  # the last loop's (one attribute: read atomically)
        self._tables: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Table] = (
            weakref.WeakKeyDictionary()
        )

    def start(self, seconds: float, cap: float | None, route: object) -> Request:
        """A deadline ``seconds`` from now for the current task (RuntimeError outside one):
        noted, and filed on the wheel only if the request is still running when the loop next
        runs its ready callbacks. ``route`` (the ASGI scope, or the aiohttp request) names it
        in the census."""
        # The last request's loop, if it is the one running this task: asked first because
        # asking which loop runs (asyncio._get_running_loop) costs a getpid() system call on
        # 3.11, a tenth of all this. Its current task is ours only if the loop runs in this
        # thread: the loop ran here when the table was made, and it has a current task now
        # (3.11's registry holds one only during a task's step), so it still runs here, short
        # of a running loop handed to another thread while this one runs another loop.
        table = self._table
        task = None
        if table is not None and table.thread == _get_ident() and table.forks == FORKS.count:
            task = current_task(table.loop)
        if task is None:
            loop = _get_running_loop()
            task = None if loop is None else current_task(loop)
            if loop is None or task is None:
                raise RuntimeError("a request deadline needs to run inside a task")
            table = self._tables.get(loop)
            if table is None or table.thread != _get_ident() or table.forks != FORKS.count:
                table = self._tables[loop] = _Table(loop)
            self._table = table
        assert table is not None
        loop = table.loop
        now = loop.time()
        request = Request(table, task, now, now + seconds, cap, route)
        watcher = SEEN.watcher
        if watcher is not None:
            watcher.started(request)
        table.unfiled.append(request)
        if not table.arming:
            table.arming = True
            loop.call_soon(table.file_started)
        return request

    @staticmethod
    def move(request: Request, when: float) -> None:
        """Give the live ``request`` the deadline ``when`` (loop time), later or sooner."""
        tick = request.tick
        if tick is not None:
            tick.leave(request)
        soon = request.soon
        if soon is not None:
            soon.cancel()
            request.soon = None
        request.deadline = when
        table = request.table
        if when <= table.loop.time():  # passed: handed to call_soon, as asyncio.timeout does
            request.soon = table.loop.call_soon(request.expire)
        elif not request.unfiled:
            table.file(request)
        # else file_started files it with this deadline

    @staticmethod
    def move_if_live(request: Request, when: float) -> None:
        """:meth:`move`, run on the loop's thread for a :func:`set_deadline` called in another
        (a worker thread): nothing if the request has ended or expired meanwhile."""
        if request.live():
            Deadlines.move(request, when)

    @staticmethod
    def disarm(request: Request) -> None:
        """The deadline no longer guards ``request``: out of its tick (or of the requests not
        filed yet, or of ``call_soon``). Called when its app returns or raises, or earlier,
        when its response is complete (:meth:`finish`)."""
        request.ended = True
        stops = request.stops  # no lock on every request's way out: one made just now by
        if stops is not None:  # another thread stays armed, and never runs (it ended in time)
            stops.end()
        tick = request.tick
        if tick is not None:
            tick.leave(request)
        else:
            unfiled = request.table.unfiled
            if unfiled and unfiled[-1] is request:
                unfiled.pop()  # ended in its first step (the common case): never filed
            soon = request.soon
            if soon is not None:
                soon.cancel()
                request.soon = None

    @staticmethod
    def finish(request: Request) -> None:
        """The request's response is complete (its last body message handed to the server):
        the deadline ends with it, so what the app still does in the request's task
        (Starlette's ``BackgroundTasks``) runs without it. Nothing if the deadline has
        already expired: its cancellation is on its way, and :meth:`end` accounts for it."""
        if not (request.ended or request.expired):
            Deadlines.disarm(request)

    @staticmethod
    def end(request: Request, exc: BaseException | None) -> bool:
        """:func:`_end` (whose docstring says what it does), reported to the watcher if one is
        set (:mod:`aiowheel._deadlines._seen`)."""
        missed = _end(request, exc)
        watcher = SEEN.watcher
        if watcher is not None:
            watcher.ended(request, exc, missed)
        return missed


def _end(request: Request, exc: BaseException | None) -> bool:
    """The request's app returned (``exc`` None) or raised ``exc``: its deadline is
    disarmed; True if the deadline ended it (then the middleware answers or cuts off),
    False if ``exc`` must propagate as it is.

    asyncio.timeout's accounting, as :class:`aiowheel.Timeout` keeps it: once expired,
    the task's cancellation is withdrawn (``uncancel``), and a ``CancelledError`` is the
    deadline's only if no other cancellation is pending (an outside ``task.cancel()`` is
    never swallowed). Any ``Exception`` raised once the deadline has expired, or within
    :data:`END_WINDOW` of it, is the deadline's too (one event, whoever noticed it
    first). After :meth:`finish` (a complete response) nothing is the deadline's: what
    the app raised then propagates as it is."""
    if request.ended:  # finished: its response completed in time
        return False
    Deadlines.disarm(request)
    if not request.expired:
        if isinstance(exc, BudgetExhausted):
            return True
        # One event (END_WINDOW): a failure at the deadline's instant is the deadline's,
        # whichever timer noticed first (one set from the budget, the database's own).
        return (
            isinstance(exc, Exception)
            and request.deadline - request.table.loop.time() <= END_WINDOW
        )
    remaining = request.task.uncancel()
    if exc is None or isinstance(exc, Exception):
        # Swallowed its cancellation, gave up on its own, or failed on the way out (a
        # driver's error from the query the cancellation stopped): the deadline's.
        return True
    return isinstance(exc, asyncio.CancelledError) and remaining <= request.cancelling


current: Final[contextvars.ContextVar[Request | None]] = contextvars.ContextVar(
    "aiowheel.asgi.request", default=None
)


def _guarded(task: object) -> float | None:
    """The request deadline guarding ``task`` (for :func:`aiowheel.current_deadline`)."""
    request = current.get()
    if request is None or request.task is not task or not request.live():
        return None
    return request.deadline


deadline_sources.append(_guarded)
