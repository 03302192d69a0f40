"""The request deadline, framework-neutral: what every adapter of aiowheel's deadlines shares.

The adapters are thin and import only this room's names, never each other's:
:mod:`aiowheel.asgi` (ASGI servers), :mod:`aiowheel.aiohttp` (aiohttp's server, and its client),
:mod:`aiowheel.grpc` (``grpc.aio`` servers and channels), :mod:`aiowheel.httpx` (httpx's
client). What lives here:

- the deadlines themselves (:class:`Deadlines`, :class:`Request`): one per request, noted when
  it starts, filed on the wheel only if the request suspends, grouped by tick (one wheel entry
  for every request whose deadline falls in it), moved, ended. The design, and what it costs
  a request, is :mod:`aiowheel.asgi`'s docstring;
- the request in the task's context (:data:`current`), which :func:`budget`,
  :func:`budget_header`, :func:`set_deadline` and :func:`aiowheel.current_deadline` read, in
  the request's task and in every task and worker thread its context reached;
- a server's checked configuration (:class:`Settings`: the default deadline, overrides by
  path or gRPC method, the inbound header) and the inbound header's parse
  (:func:`parse_timeout_header`) and cap (:func:`inbound_cap`), whose warnings a client
  cannot turn into a flood: one per client per minute, and a few per minute in all;
- the budget passed on (:func:`budget`, :func:`budget_header`, :func:`outgoing`): what a
  client adapter puts on the next hop, rounded down, less a margin for the network.

The module imports nothing but the standard library and aiowheel's own rooms: a framework is
the adapter's import, not this one's.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import re
import time
import weakref
from _thread import get_ident as _get_ident
from asyncio import _get_running_loop
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, final

from ._census import _deadline_sources, tasks_left, time_left
from ._default import get_timer
from ._tasks import current_task
from ._threads import FORKS
from ._validate import period

__all__ = [
    "DEFAULT_BODY",
    "DEFAULT_MARGIN",
    "Body",
    "BudgetExhausted",
    "Deadlines",
    "Expired",
    "Request",
    "Settings",
    "budget",
    "budget_header",
    "caller_left",
    "current",
    "deadline",
    "header_name",
    "header_value",
    "inbound_cap",
    "milliseconds",
    "nonnegative",
    "outgoing",
    "parse_timeout_header",
    "positive",
    "set_deadline",
]

DEFAULT_BODY: Final = b'{"error": "gateway timeout"}'


class BudgetExhausted(TimeoutError):
    """Less time is left of the request's deadline than a call needs: raised by
    :func:`budget` and :func:`budget_header` instead of starting a call that cannot finish.

    A ``TimeoutError``, so code that handles the deadline handles this too; the middlewares
    answer it as their own deadline (504 if no response has started)."""


@final
@dataclass(frozen=True, slots=True)
class Expired:
    """What the deadline's answer is made from (``body=`` may be a function of it).

    Times are loop times (``loop.time()``), the clock deadlines are kept by.
    """

    path: str
    """The request's path."""
    started: float
    """When the middleware armed the deadline."""
    deadline: float
    """The deadline it enforced (after any override, cap or :func:`set_deadline`)."""
    now: float
    """When the answer was made (never before ``deadline`` unless the endpoint gave up
    early with :class:`BudgetExhausted`)."""

    @property
    def waited(self) -> float:
        """Seconds from the request's start to the answer (``now - started``)."""
        return self.now - self.started


Body = bytes | Callable[[Expired], bytes]
"""A fixed response body, or a function making one from an :class:`Expired`."""


# --- shared with aiowheel.aiohttp: the deadlines, one wheel entry per tick -----------------

@final
class Request:
    """One request's deadline: the task it guards, where it is filed, what bounds moving it."""

    __slots__ = (
        "cancelling", "cap", "deadline", "ended", "expired", "route", "soon", "started", "table",
        "task", "tick", "unfiled",
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
        self.cap = cap  # the inbound header's limit, in seconds from `started`
        self.expired = False
        self.ended = False
        self.tick: _Tick | None = None  # the tick whose wheel entry guards it, once filed
        self.soon: asyncio.Handle | None = None  # or a passed deadline, handed to call_soon
        self.unfiled = True  # until _Table.file_started has seen it

    def live(self) -> bool:
        """Whether the deadline still guards the request (not ended, not expired)."""
        return not (self.ended or self.expired)

    def left(self) -> float | None:
        """Seconds left of the deadline (0.0 once passed), or None once the request has
        finished in time: what :func:`budget` reads of it."""
        if self.ended and not self.expired:
            return None
        return max(0.0, self.deadline - self.table.loop.time())

    def expire(self) -> None:
        """The deadline has passed: cancel the request's task (once)."""
        self.soon = None
        if not (self.ended or self.expired):
            self.expired = True
            self.task.cancel()

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
        """The request's app returned (``exc`` None) or raised ``exc``: its deadline is
        disarmed; True if the deadline ended it (then the middleware answers or cuts off),
        False if ``exc`` must propagate as it is.

        asyncio.timeout's accounting, as :class:`aiowheel.Timeout` keeps it: once expired,
        the task's cancellation is withdrawn (``uncancel``), and a ``CancelledError`` is the
        deadline's only if no other cancellation is pending (an outside ``task.cancel()`` is
        never swallowed). After :meth:`finish` (a complete response) nothing is the
        deadline's: what the app raised then propagates as it is."""
        if request.ended:  # finished: its response completed in time
            return False
        Deadlines.disarm(request)
        if not request.expired:
            return isinstance(exc, BudgetExhausted)
        remaining = request.task.uncancel()
        if exc is None or isinstance(exc, TimeoutError):
            return True  # swallowed its cancellation, or gave up on its own
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


_deadline_sources.append(_guarded)


# The longest request deadline, in seconds (about 31 years): a longer `timeout`, override or
# set_deadline() is this long. Beyond ~1e305 s a deadline could not even be filed (its tick
# overflows); well before that, every such deadline means "none".
_LONGEST: Final = 1e9


def positive(owner: str, name: str, value: object) -> float:
    """``value`` as a positive finite float, at most :data:`_LONGEST`; else the one check's
    error, naming ``owner`` (the function called) and ``name``."""
    seconds = period(f"{owner}(): {name}", value)
    return seconds if seconds <= _LONGEST else _LONGEST


def header_name(owner: str, header: object, *, optional: bool = True) -> str:
    """``header=`` as the lower-case header name it names (an HTTP token), or a clear error
    naming ``owner`` (the function called): a name that is not latin-1 could never be looked
    up or sent. ``optional``: the error says None is accepted too (the caller handles it)."""
    alternative = " or None" if optional else ""
    if not isinstance(header, str):
        raise TypeError(
            f"{owner}(): header must be a header name (a str){alternative}, "
            f"got {type(header).__name__}"
        )
    if not _TOKEN.fullmatch(header.strip()):
        raise ValueError(
            f"{owner}(): header must be a header name (ASCII letters, digits and "
            f"!#$%&'*+-.^_`|~){alternative}, got {header!r}"
        )
    return header.strip().lower()


def _content_type(owner: str, content_type: object) -> str:
    """``content_type=`` checked as a header value (latin-1, no control characters: what a
    504 sends, and no header injection), or a clear error naming ``owner``."""
    if not isinstance(content_type, str):
        raise TypeError(f"{owner}(): content_type must be a str, got {type(content_type).__name__}")
    if not _HEADER_VALUE.fullmatch(content_type):
        raise ValueError(
            f"{owner}(): content_type must be a header value (latin-1, no control "
            f"characters), got {content_type!r}"
        )
    return content_type


@final
class Settings:
    """A server adapter's checked configuration: the deadlines by path (or gRPC method: its
    full name, ``/package.Service/Method``, is a path too), the header, the HTTP answer."""

    __slots__ = (
        "body", "by_path", "content_type", "exact", "header", "owner", "prefixes", "status",
        "timeout",
    )  # fmt: skip

    def __init__(
        self,
        owner: str,
        timeout: object,
        overrides: object,
        header: object,
        status: object = 504,
        body: object = DEFAULT_BODY,
        content_type: object = "application/json",
        *,
        keys: str = "paths",
    ) -> None:
        self.owner = owner
        self.timeout = positive(owner, "timeout", timeout)
        self.exact: dict[str, float] = {}
        prefixes: list[tuple[str, float]] = []
        if overrides is not None:
            if not isinstance(overrides, Mapping):
                raise TypeError(
                    f"{owner}(): overrides must be a mapping of {keys} to seconds, "
                    f"got {type(overrides).__name__}"
                )
            for path, seconds in overrides.items():
                if not isinstance(path, str):
                    raise TypeError(
                        f"{owner}(): overrides keys must be {keys} starting with '/', "
                        f"got {type(path).__name__}"
                    )
                if not path.startswith("/"):
                    raise ValueError(
                        f"{owner}(): overrides keys must be {keys} starting with '/', got {path!r}"
                    )
                value = positive(owner, f"overrides[{path!r}]", seconds)
                if path.endswith("*"):
                    prefixes.append((path[:-1], value))
                else:
                    self.exact[path] = value
        prefixes.sort(key=lambda item: len(item[0]), reverse=True)  # the longest wins
        self.prefixes = tuple(prefixes)
        self.by_path = bool(self.exact or self.prefixes)  # else every request gets `timeout`
        self.header: str | None = None if header is None else header_name(owner, header)
        if isinstance(status, bool) or not isinstance(status, int):
            raise TypeError(
                f"{owner}(): status must be an HTTP status code (an int), "
                f"got {type(status).__name__}"
            )
        if not 100 <= status <= 599:
            raise ValueError(f"{owner}(): status must be an HTTP status code, got {status!r}")
        self.status: int = status
        if not isinstance(body, bytes) and not callable(body):
            raise TypeError(
                f"{owner}(): body must be bytes or a function of Expired returning bytes, "
                f"got {type(body).__name__}"
            )
        self.body: Body = body
        self.content_type: str = _content_type(owner, content_type)

    def cap(
        self, raw: str | Sequence[str] | None, client: object, log: logging.Logger
    ) -> float | None:
        """:func:`inbound_cap` of this server's header (its values on a request from
        ``client``; a bad one logged on ``log``, naming this adapter)."""
        assert self.header is not None
        return inbound_cap(self.owner, self.header, raw, client, log)

    def seconds_for(self, *paths: str) -> float:
        """The deadline, in seconds, of a request to the first of ``paths`` an override
        names (exact before prefix), else the default."""
        exact = self.exact
        if exact:
            for path in paths:
                found = exact.get(path)
                if found is not None:
                    return found
        for prefix, seconds in self.prefixes:
            for path in paths:
                if path.startswith(prefix):
                    return seconds
        return self.timeout

    def answer(self, expired: Expired) -> bytes:
        """The body of the deadline's answer (TypeError naming ``body`` if its function
        returns anything but bytes)."""
        body = self.body
        if isinstance(body, bytes):
            return body
        made = body(expired)
        if not isinstance(made, bytes):
            raise TypeError(
                f"{self.owner}(): body must return bytes from its Expired, "
                f"got {type(made).__name__}"
            )
        return made


_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # RFC 9110's token
_HEADER_VALUE: Final = re.compile(r"[\t\x20-\x7e\x80-\xff]*")  # latin-1, no controls

_SECONDS: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
_GRPC: Final = re.compile(r"([0-9]{1,8})([HMSmun])")
_GRPC_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout_header(value: str) -> float | None:
    """Seconds from an inbound deadline header's value, or None if it is not exactly a
    positive number of seconds (``2.5``) or gRPC's form (``2500m``: at most 8 digits, then
    one of ``H M S m u n``). Nothing lenient: no sign, exponent, spaces inside or ``inf``."""
    if not isinstance(value, str):
        raise TypeError(f"parse_timeout_header(): value must be a str, got {type(value).__name__}")
    value = value.strip()
    if _SECONDS.fullmatch(value):
        seconds = float(value)
    else:
        match = _GRPC.fullmatch(value)
        if match is None:
            return None
        seconds = int(match[1]) * _GRPC_UNITS[match[2]]
    return seconds if seconds > 0 else None


def inbound_cap(
    owner: str, name: str, raw: str | Sequence[str] | None, client: object, log: logging.Logger
) -> float | None:
    """The inbound header's cap in seconds, or None: absent, or bad (not exactly one value
    :func:`parse_timeout_header` accepts; a header sent twice is bad too, whatever its values).
    A header whose name ends in ``-ms`` is whole milliseconds instead (Envoy's
    ``x-envoy-expected-rq-timeout-ms: 1500``).

    A bad header is logged on ``log`` as a warning naming ``owner`` and the header, at most
    once per ``client`` (its address, or any hashable naming it) per minute and
    :data:`WARNINGS_PER_MINUTE` times a minute in all: the client sent it, so it must not be
    able to fill the server's log. The warnings left out are counted in the next one."""
    if raw is None:
        return None
    parse = milliseconds if name.endswith("-ms") else parse_timeout_header
    if isinstance(raw, str):
        value = raw
        seconds = parse(raw)
    else:
        if not raw:
            return None
        value = ", ".join(raw)
        seconds = parse(raw[0]) if len(raw) == 1 else None
    if seconds is None:
        _bad_headers.warn(owner, name, value, client, log)
    return seconds


_MILLIS: Final = re.compile(r"[0-9]{1,12}")


def milliseconds(value: str) -> float | None:
    """Seconds from a header in whole milliseconds (a name ending in ``-ms``: Envoy's
    ``x-envoy-expected-rq-timeout-ms``), or None if it is not a positive integer of at most
    12 digits."""
    value = value.strip()
    if not _MILLIS.fullmatch(value):
        return None
    millis = int(value)
    return millis / 1000 if millis > 0 else None


WARNINGS_PER_MINUTE: Final = 10
"""How many bad inbound headers are logged in a minute, over all clients."""


@final
class _Warnings:
    """The rate limit of :func:`inbound_cap`'s warnings (the module's one instance)."""

    __slots__ = ("clients", "logged", "minute", "suppressed")

    def __init__(self) -> None:
        self.clients: dict[object, float] = {}  # client -> when it was last logged
        self.minute = -math.inf  # when the current minute of WARNINGS_PER_MINUTE began
        self.logged = 0  # in the current minute
        self.suppressed = 0  # left out since the last warning

    def warn(self, owner: str, name: str, value: str, client: object, log: logging.Logger) -> None:
        now = time.monotonic()
        try:
            last = self.clients.get(client)
        except TypeError:  # unhashable: named by its text
            client = repr(client)
            last = self.clients.get(client)
        if last is not None and now - last < 60.0:
            self.suppressed += 1
            return
        if now - self.minute >= 60.0:
            self.minute = now
            self.logged = 0
            if len(self.clients) > 4096:  # forget clients not logged within the minute
                self.clients = {c: t for c, t in self.clients.items() if now - t < 60.0}
        if self.logged >= WARNINGS_PER_MINUTE:
            self.suppressed += 1
            return
        self.logged += 1
        self.clients[client] = now
        suppressed, self.suppressed = self.suppressed, 0
        log.warning(
            "%s: ignored the %s header %r from %s (not exactly one positive number of seconds, "
            "nor gRPC's form such as 100m); the server's own deadline applies%s",
            owner, name, value[:64], client,
            f" ({suppressed} more bad headers not logged)" if suppressed else "",
        )  # fmt: skip


_bad_headers: Final = _Warnings()


# --- the budget, read and moved from inside the request -------------------------------------


def set_deadline(seconds: float) -> float:
    """Move the current request's deadline to ``seconds`` after the request arrived (later
    or sooner than the middleware's), within the inbound header's cap; returns the new
    deadline in loop time. Call it anywhere in the request's task (or a task it started)::

        async def export(request):
            aiowheel.asgi.set_deadline(120)   # this route may take two minutes
            ...

    From a worker thread the request's context reached (a plain ``def`` FastAPI endpoint or
    dependency, Starlette's ``run_in_threadpool``) the deadline is moved as well: the change
    is filed on the loop's thread, and :func:`budget` in the worker reads the new deadline at
    once. (A 504 does not stop the thread: see the docs, request deadlines.)

    RuntimeError outside a request under :class:`DeadlineMiddleware` or
    :func:`aiowheel.aiohttp.deadline_middleware`, once the deadline has expired, or once
    the request has ended (its response complete). ``seconds`` above 10**9 (about 31 years)
    is 10**9.
    """
    value = positive("set_deadline", "seconds", seconds)
    request = current.get()
    if request is None:
        raise RuntimeError(
            "set_deadline(): no request deadline here (call it in a request served under "
            "aiowheel.asgi.DeadlineMiddleware or aiowheel.aiohttp.deadline_middleware)"
        )
    if request.expired:
        raise RuntimeError("set_deadline(): the request's deadline has already expired")
    if request.ended:
        raise RuntimeError("set_deadline(): the request has ended")
    if request.cap is not None and request.cap < value:
        value = request.cap
    when = request.started + value
    table = request.table
    if table.thread == _get_ident():
        Deadlines.move(request, when)
    else:  # a worker thread: the wheel is the loop's, so the move is filed there
        table.loop.call_soon_threadsafe(Deadlines.move_if_live, request, when)
        request.deadline = when  # what budget() reads here, until the loop moves it
    return when


def deadline(seconds: float) -> Callable[[], Awaitable[None]]:
    """A FastAPI dependency giving a route its own deadline (:func:`set_deadline`)::

        @app.get("/report", dependencies=[Depends(deadline(60))])

    Async, so FastAPI runs it in the request's task (a plain ``def`` dependency would run in
    a worker thread). ``seconds`` is checked here, when the route is declared."""
    value = positive("deadline", "seconds", seconds)

    async def request_deadline() -> None:
        set_deadline(value)

    request_deadline.__qualname__ = f"deadline({value!r})"
    return request_deadline


def budget(minimum: float = 0.0) -> float | None:
    """Seconds left before the current deadline, to hand to the next call; None if nothing
    bounds the task. The deadline is the tighter of the request's (from the middleware, seen
    also in tasks the request started) and every timeout guarding this task
    (:func:`aiowheel.time_left`)::

        await client.get(url, timeout=budget(0.05))                       # httpx
        await session.get(url, timeout=aiohttp.ClientTimeout(total=budget()))
        await conn.fetch(query, timeout=budget())                         # asyncpg

    Raises :class:`BudgetExhausted` when none is left or less than ``minimum`` seconds:
    fail fast instead of starting a call that cannot finish in time. Costs one pass over the
    loop's pending timers (see :func:`aiowheel.current_deadline`).
    """
    return _budget(minimum, "budget()")


def _minimum(minimum: object, where: str) -> float:
    """A budget's ``minimum``: a number of seconds, >= 0 and finite (errors naming ``where``)."""
    return nonnegative(where, "minimum", minimum)


def nonnegative(where: str, name: str, value: object) -> float:
    """``value`` as seconds: a number, >= 0 and finite (a budget's ``minimum``, a client
    adapter's ``margin``); else TypeError / ValueError naming ``where`` (the function
    called, with its parentheses) and ``name``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{where}: {name} must be a number of seconds, got {type(value).__name__}")
    if not 0 <= value < math.inf:
        raise ValueError(f"{where}: {name} must be >= 0 and finite, got {value!r}")
    return float(value)


def _budget(minimum: float, where: str) -> float | None:
    """:func:`budget`, its errors naming ``where`` (the function called)."""
    if minimum != 0.0:
        minimum = _minimum(minimum, where)
    left = time_left()
    request = current.get()
    own = None if request is None else request.left()
    if own is not None and (left is None or own < left):
        left = own
    if left is not None and (left <= 0.0 or left < minimum):
        raise BudgetExhausted(
            f"{left:.3f} s left of the deadline, under the {minimum:.3f} s this call needs"
        )
    return left


def budget_header(minimum: float = 0.0, *, grpc: bool = False) -> str | None:
    """The :func:`budget` as an outgoing deadline header's value, rounded down (a callee is
    never told it has more time than is left): seconds (``"1.234"``), or with ``grpc=True``
    gRPC's ``grpc-timeout`` form (``"1234m"``). None if nothing bounds the task::

        headers = {"x-request-timeout": budget_header(0.05)}   # drop it if None

    Raises :class:`BudgetExhausted` as :func:`budget` does (also when under 1 ms is left,
    which neither form can say)."""
    if not isinstance(grpc, bool):
        raise TypeError(f"budget_header(): grpc must be a bool, got {type(grpc).__name__}")
    left = _budget(minimum, "budget_header()")
    return None if left is None else header_value(left, grpc=grpc)


def header_value(seconds: float, grpc: bool = False) -> str:
    """``seconds`` as a deadline header's value, rounded down to the millisecond: seconds
    (``"1.234"``), or gRPC's form (``"1234m"``, at most 8 digits: ``"100000S"`` beyond).
    :class:`BudgetExhausted` under 1 ms, which neither form can say."""
    millis = math.floor(seconds * 1000)
    if millis < 1:
        raise BudgetExhausted(f"{seconds:.6f} s left of the deadline: under 1 ms")
    if not grpc:
        return f"{millis // 1000}.{millis % 1000:03d}"
    if millis <= 99_999_999:  # gRPC: at most 8 digits
        return f"{millis}m"
    return f"{min(millis // 1000, 99_999_999)}S"


def outgoing(margin: float, where: str = "outgoing()") -> float | None:
    """The seconds a client adapter gives the next hop: :func:`caller_left` less ``margin``
    (the network's share, checked by the adapter when it was made), or None where nothing
    bounds the task. :class:`BudgetExhausted` (naming ``where``, the adapter) when no more
    than ``margin`` is left: the call would be sent with no time to do anything."""
    left = caller_left(where)[0]
    if left is None:
        return None
    if left <= margin:
        raise BudgetExhausted(
            f"{where}: {left:.3f} s left of the deadline, no more than the {margin:.3f} s "
            "kept for the network: not sent"
        )
    return left - margin


def caller_left(where: str) -> tuple[float | None, bool]:
    """:func:`budget` as a client adapter sees it, and whether the deadline it comes from
    cancels the current task when it passes (then a call awaited here ends with it, and needs
    no timeout of its own).

    Bounded also by the deadlines of the tasks awaiting this one: a client library that makes
    its call in a task of its own (``grpc.aio`` runs its interceptors in one, which the caller
    awaits) works on the caller's behalf, under the caller's timeouts, and a cancelled awaiter
    cancels the task it awaits (not through ``asyncio.shield``, which the awaiter does not
    await directly: then nothing is counted). A request's deadline read in a task the request
    started (its context's) is not this task's: the adapter bounds the call itself. One pass
    over the loop's timers for the task and its awaiters together.
    :class:`BudgetExhausted` (naming ``where``) when none is left."""
    left: float | None = None
    chain: list[asyncio.Task[Any]] = []
    loop = _get_running_loop()
    task = None if loop is None else current_task(loop)
    if loop is not None and task is not None:
        chain = _awaited_by(task)
        left = tasks_left(loop, *chain)
    guarded = left is not None
    request = current.get()
    own = None if request is None else request.left()
    if own is not None and (left is None or own < left):
        left = own
        guarded = request is not None and request.task in chain
    if left is not None and left <= 0.0:
        raise BudgetExhausted(f"{left:.3f} s left of the deadline: {where} sends nothing")
    return left, guarded


DEFAULT_MARGIN: Final = 0.005
"""The seconds a client adapter keeps back for the network on each hop, by default.

A deadline crosses the wire as a duration (``grpc-timeout``, ``x-request-timeout``), which the
callee counts from when it arrives: without a margin it would see the time in transit more
than the caller has left, and give up after the caller. 5 ms covers a hop within a data
centre several times over, and keeps the callee's deadline before the caller's, so the callee
gives up first and the caller hears why (504, ``DEADLINE_EXCEEDED``) instead of timing out
itself. Across regions, pass a margin of the hop's round trip."""

_AWAITERS: Final = 8  # how far up a chain of awaiting tasks the budget looks


def _awaited_by(task: asyncio.Task[Any]) -> list[asyncio.Task[Any]]:
    """``task``, the task awaiting it, the one awaiting that, ... (:data:`_AWAITERS` up): a
    task's wake-up among a task's done-callbacks is bound to the task that awaits it."""
    chain = [task]
    for _ in range(_AWAITERS):
        callbacks = getattr(task, "_callbacks", None)
        if not callbacks:
            break
        for callback, _context in callbacks:
            awaiter = getattr(callback, "__self__", None)
            if isinstance(awaiter, asyncio.Task):
                break
        else:
            break
        chain.append(awaiter)
        task = awaiter
    return chain
