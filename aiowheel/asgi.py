"""Request deadlines that stop the work: an ASGI middleware, and the budget passed on.

``DeadlineMiddleware(app, timeout=5)`` awaits the downstream app *in the request's own task*,
inside ``aiowheel.timeout_at(...)``. That is the whole design, and the reason for this module:

- The shape most apps use, ``@app.middleware("http")`` (Starlette's ``BaseHTTPMiddleware``)
  around ``asyncio.timeout``, runs the endpoint in another task. When the deadline cancels the
  middleware's task the client gets its 504, but the endpoint keeps running: its database
  query, its upstream call and its CPU stay busy for a client that has gone, and
  ``aiowheel.time_left()`` is None inside it, since no timeout guards *its* task. A timeout that
  does not stop the work protects nothing.
- Awaited in the same task, the deadline's cancellation reaches the endpoint wherever it waits:
  it sees ``CancelledError``, its ``finally`` blocks and ``async with`` exits run, and when the
  middleware answers nothing of the request is left pending. The deadline is the task's, so
  :func:`aiowheel.time_left` / :func:`aiowheel.current_deadline` read it anywhere the endpoint
  awaits, on every loop, in loop mode or not.

Past the deadline, if no response has started, the client gets ``status`` (504) with ``body``.
If one has started, it cannot be replaced, and finishing it would pass a truncated body off as
complete (a final ``more_body: False``); so the ``TimeoutError`` is re-raised and the server
does what it does for any app error once the response started: it logs it and aborts the
connection, and the client sees a cut-off response.

A route's own deadline, three ways, each measured from the moment the request arrived:

- ``overrides={"/reports/yearly": 60, "/health": 1, "/export/*": 120}``: exact paths, and
  prefixes ending in ``*`` (the longest wins), known before the app runs;
- :func:`set_deadline` anywhere in the request's task (``set_deadline(30)``: 30 s after
  the request arrived, later or sooner than the default);
- :func:`deadline` for FastAPI: ``@app.get("/slow", dependencies=[Depends(deadline(30))])``,
  the way a FastAPI user scopes anything to a route (a path map cannot name ``/items/{id}``).

``header="x-request-timeout"`` (opt-in, named by the user) lets the caller cap the deadline, as
gRPC's ``grpc-timeout`` does: the value is seconds (``2.5``) or gRPC's form (``2500m``: digits
then one of ``H M S m u n``). It only ever shortens the deadline, and :func:`set_deadline`
cannot extend past it. A value that is not exactly one of those forms, or not positive, is
ignored with a warning on the ``aiowheel.asgi`` logger: a malformed header never makes a 500.

Passing the budget on: :func:`budget` is the seconds left (``httpx.get(url,
timeout=budget())``, ``aiohttp.ClientTimeout(total=budget())``, asyncpg's
``timeout=budget()``), and raises :class:`BudgetExhausted` (a ``TimeoutError``) when less than
``minimum`` is left, so that a call that cannot finish in time is never started;
:func:`budget_header` is the same as an outgoing deadline header value. The middleware answers
a :class:`BudgetExhausted` that escapes the endpoint as it answers its own deadline.

Only ``http`` scopes get a deadline: ``websocket`` and ``lifespan`` pass through untouched (a
websocket's liveness is a heartbeat's job: :meth:`aiowheel.Timer.watchdog`). The module needs
nothing but the standard library (no Starlette): it speaks ASGI 3 to any framework.
"""

from __future__ import annotations

import contextvars
import logging
import math
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, final

from ._census import time_left
from ._default import get_timer
from ._timeout import Timeout
from ._validate import period

__all__ = [
    "BudgetExhausted",
    "DeadlineMiddleware",
    "Expired",
    "budget",
    "budget_header",
    "deadline",
    "set_deadline",
]

logger: Final = logging.getLogger("aiowheel.asgi")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

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
    """When the answer was made: never before ``deadline`` unless the endpoint gave up
    early with :class:`BudgetExhausted`."""

    @property
    def waited(self) -> float:
        """Seconds from the request's start to the answer (``now - started``)."""
        return self.now - self.started


Body = bytes | Callable[[Expired], bytes]
"""A fixed response body, or a function making one from an :class:`Expired`."""


# --- shared with aiowheel.aiohttp -----------------------------------------------------------


@final
class _Request:
    """One request's deadline: the Timeout guarding its task and what bounds moving it."""

    __slots__ = ("cap", "started", "timeout")

    def __init__(self, started: float, cap: float | None) -> None:
        self.started = started
        self.cap = cap  # the inbound header's limit, in seconds from `started`
        self.timeout: Timeout | None = None


_current: Final[contextvars.ContextVar[_Request | None]] = contextvars.ContextVar(
    "aiowheel.asgi.request", default=None
)


def _positive(owner: str, name: str, value: object) -> float:
    """``value`` as a positive finite float; else the one check's error, naming ``owner``."""
    try:
        return period(name, value)
    except (TypeError, ValueError) as exc:
        raise type(exc)(f"{owner}: {exc}") from None


@final
class _Settings:
    """A middleware's checked configuration: the deadlines by path, the header, the answer."""

    __slots__ = ("body", "content_type", "exact", "header", "prefixes", "status", "timeout")

    def __init__(
        self,
        owner: str,
        timeout: object,
        overrides: object,
        header: object,
        status: object,
        body: object,
        content_type: object,
    ) -> None:
        self.timeout = _positive(owner, "timeout", timeout)
        self.exact: dict[str, float] = {}
        prefixes: list[tuple[str, float]] = []
        if overrides is not None:
            if not isinstance(overrides, Mapping):
                raise TypeError(
                    f"{owner}: overrides must be a mapping of paths to seconds, "
                    f"got {type(overrides).__name__}"
                )
            for path, seconds in overrides.items():
                if not isinstance(path, str) or not path.startswith("/"):
                    raise ValueError(
                        f"{owner}: overrides keys must be paths starting with '/', got {path!r}"
                    )
                value = _positive(owner, f"overrides[{path!r}]", seconds)
                if path.endswith("*"):
                    prefixes.append((path[:-1], value))
                else:
                    self.exact[path] = value
        prefixes.sort(key=lambda item: len(item[0]), reverse=True)  # the longest wins
        self.prefixes = tuple(prefixes)
        if header is not None and (not isinstance(header, str) or not header.strip()):
            raise TypeError(f"{owner}: header must be a header name (a str) or None")
        self.header: str | None = None if header is None else header.strip().lower()
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ValueError(f"{owner}: status must be an HTTP status code, got {status!r}")
        self.status: int = status
        if not isinstance(body, bytes) and not callable(body):
            raise TypeError(
                f"{owner}: body must be bytes or a function of Expired returning bytes, "
                f"got {type(body).__name__}"
            )
        self.body: Body = body
        if not isinstance(content_type, str):
            raise TypeError(f"{owner}: content_type must be a str")
        self.content_type: str = content_type

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
        """The body of the deadline's answer."""
        body = self.body
        return body if isinstance(body, bytes) else body(expired)


_SECONDS: Final = re.compile(r"[0-9]{1,9}(?:\.[0-9]{1,9})?")
_GRPC: Final = re.compile(r"([0-9]{1,8})([HMSmun])")
_GRPC_UNITS: Final = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}


def parse_timeout_header(value: str) -> float | None:
    """Seconds from an inbound deadline header's value, or None if it is not exactly a
    positive number of seconds (``2.5``) or gRPC's form (``2500m``: at most 8 digits, then
    one of ``H M S m u n``). Nothing lenient: no sign, exponent, spaces inside or ``inf``."""
    value = value.strip()
    if _SECONDS.fullmatch(value):
        seconds = float(value)
    else:
        match = _GRPC.fullmatch(value)
        if match is None:
            return None
        seconds = int(match[1]) * _GRPC_UNITS[match[2]]
    return seconds if seconds > 0 else None


def _cap(owner: str, name: str, raw: str | None) -> float | None:
    """The header's cap, or None (absent, or bad: then logged)."""
    if raw is None:
        return None
    seconds = parse_timeout_header(raw)
    if seconds is None:
        logger.warning(
            "%s: ignored the %s header %r (not a positive number of seconds, nor gRPC's "
            "form such as 100m); the route's deadline applies",
            owner, name, raw[:64],
        )  # fmt: skip
    return seconds


# --- the ASGI middleware --------------------------------------------------------------------


@final
class DeadlineMiddleware:
    """Every ``http`` request under a deadline that stops its work (see the module).

    ``timeout``: the default deadline in seconds (a positive, finite number).
    ``overrides``: ``{path: seconds}``, a route's own deadline, longer or shorter (keys are
    exact paths, or prefixes ending in ``*``; the longest prefix wins).
    ``header``: the name of an inbound header that may cap the deadline (seconds, or
    gRPC's ``100m`` form); None (the default) reads none.
    ``status``, ``body``, ``content_type``: the answer when the deadline passes before a
    response has started; ``body`` may be a function of an :class:`Expired`.

    With Starlette or FastAPI::

        app.add_middleware(DeadlineMiddleware, timeout=5, overrides={"/export": 60})

    Any ASGI app::

        app = DeadlineMiddleware(app, timeout=5, header="x-request-timeout")
    """

    __slots__ = ("_settings", "app")

    def __init__(
        self,
        app: ASGIApp,
        timeout: float,
        *,
        overrides: Mapping[str, float] | None = None,
        header: str | None = None,
        status: int = 504,
        body: Body = DEFAULT_BODY,
        content_type: str = "application/json",
    ) -> None:
        """Wrap ``app``; every argument is checked here (ValueError / TypeError naming the
        middleware), never per request."""
        if not callable(app):
            raise TypeError(f"DeadlineMiddleware: app must be an ASGI app, got {app!r}")
        self.app = app
        self._settings = _Settings(
            "DeadlineMiddleware", timeout, overrides, header, status, body, content_type
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app for one connection; ``http`` ones under their deadline."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # websocket and lifespan: untouched
            return
        settings = self._settings
        path: str = scope.get("path", "")
        seconds = settings.seconds_for(path)
        cap = None
        if settings.header is not None:
            cap = _cap("DeadlineMiddleware", settings.header, _header(scope, settings.header))
            if cap is not None and cap < seconds:
                seconds = cap
        timer = get_timer()
        started = timer.time()
        request = _Request(started, cap)
        response_started = False

        async def tracked_send(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                # Set before the send: once the server may have it, a 504 would be a second
                # response, so a deadline from here on cuts the response off instead.
                response_started = True
            await send(message)

        token = _current.set(request)
        cm = timer.timeout_at(started + seconds)
        try:
            async with cm:
                request.timeout = cm
                await self.app(scope, receive, tracked_send)
        except TimeoutError as exc:
            if not (cm.expired() or isinstance(exc, BudgetExhausted)) or response_started:
                raise  # not ours, or too late to answer: the server aborts the response
            await self._answer(send, path, started, cm)
        else:
            if cm.expired() and not response_started:
                # The endpoint swallowed its cancellation and returned without answering.
                await self._answer(send, path, started, cm)
        finally:
            _current.reset(token)

    async def _answer(self, send: Send, path: str, started: float, cm: Timeout) -> None:
        settings = self._settings
        when = cm.when()
        now = get_timer().time()
        expired = Expired(path, started, now if when is None else when, now)
        body = settings.answer(expired)
        headers = [
            (b"content-type", settings.content_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode("ascii")),
        ]
        await send({"type": "http.response.start", "status": settings.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _header(scope: Scope, name: str) -> str | None:
    """The value of header ``name`` (lower case) in an ASGI scope, or None."""
    wanted = name.encode("latin-1")
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for key, value in headers:
        if key.lower() == wanted:
            return value.decode("latin-1")
    return None


# --- the budget, read and moved from inside the request -------------------------------------


def set_deadline(seconds: float) -> float:
    """Move the current request's deadline to ``seconds`` after the request arrived (later
    or sooner than the middleware's), within the inbound header's cap; returns the new
    deadline in loop time. Call it anywhere in the request's task (or a task it started)::

        async def export(request):
            aiowheel.asgi.set_deadline(120)   # this route may take two minutes
            ...

    RuntimeError outside a request under :class:`DeadlineMiddleware` or
    :func:`aiowheel.aiohttp.deadline_middleware`, or once the deadline has expired.
    """
    value = _positive("set_deadline", "seconds", seconds)
    request = _current.get()
    if request is None or request.timeout is None:
        raise RuntimeError(
            "set_deadline: no request deadline here (call it in a request served under "
            "aiowheel.asgi.DeadlineMiddleware or aiowheel.aiohttp.deadline_middleware)"
        )
    if request.timeout.expired():
        raise RuntimeError("set_deadline: the request's deadline has already expired")
    if request.cap is not None and request.cap < value:
        value = request.cap
    when = request.started + value
    request.timeout.reschedule(when)
    return when


def deadline(seconds: float) -> Callable[[], Awaitable[None]]:
    """A FastAPI dependency giving a route its own deadline (:func:`set_deadline`)::

        @app.get("/report", dependencies=[Depends(deadline(60))])

    Async, so FastAPI runs it in the request's task (a plain ``def`` dependency would run in
    a worker thread). ``seconds`` is checked here, when the route is declared."""
    value = _positive("deadline", "seconds", seconds)

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
    loop's pending timers (about 12 ns each, see :func:`aiowheel.current_deadline`).
    """
    if minimum != 0.0:
        if isinstance(minimum, bool) or not isinstance(minimum, int | float):
            raise TypeError(f"budget: minimum must be a number of seconds, got {minimum!r}")
        if not 0 <= minimum < math.inf:
            raise ValueError(f"budget: minimum must be >= 0 and finite, got {minimum!r}")
    left = time_left()
    request = _current.get()
    if request is not None and request.timeout is not None:
        when = request.timeout.when()
        if when is not None:
            own = max(0.0, when - get_timer().time())
            if left is None or own < left:
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
    left = budget(minimum)
    if left is None:
        return None
    millis = math.floor(left * 1000)
    if millis < 1:
        raise BudgetExhausted(f"{left:.6f} s left of the deadline: under 1 ms")
    if not grpc:
        return f"{millis // 1000}.{millis % 1000:03d}"
    if millis <= 99_999_999:  # gRPC: at most 8 digits
        return f"{millis}m"
    return f"{min(millis // 1000, 99_999_999)}S"
