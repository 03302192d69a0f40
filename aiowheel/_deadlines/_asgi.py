"""The ASGI adapter of the request deadlines, :mod:`aiowheel.asgi` (whose docstring is the
user's guide): ``DeadlineMiddleware`` over :mod:`._deadline`, :mod:`._settings` and
:mod:`._budget`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any, Final, final

from ._budget import budget, budget_header, deadline, set_deadline
from ._deadline import ENDED_HEADER, BudgetExhausted, Deadlines, Request, current
from ._inbound import parse_timeout_header
from ._settings import DEFAULT_BODY, Body, Expired, Settings

__all__ = [
    "BudgetExhausted",
    "DeadlineMiddleware",
    "Expired",
    "budget",
    "budget_header",
    "deadline",
    "parse_timeout_header",
    "set_deadline",
]

logger: Final = logging.getLogger("aiowheel.asgi")
_ENDED: Final = ENDED_HEADER.encode("ascii")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# --- the ASGI middleware --------------------------------------------------------------------


@final
class DeadlineMiddleware:
    """Every ``http`` request under a deadline that stops its work (see the module).

    ``timeout``: the default deadline in seconds (a positive, finite number).
    ``overrides``: ``{path: seconds}``, a route's own deadline, longer or shorter (keys are
    exact paths, or prefixes ending in ``*``; the longest prefix wins).
    ``header``: the name of an inbound header that may cap the deadline (seconds, or
    gRPC's ``100m`` form; milliseconds if the name ends in ``-ms``, as Envoy's
    ``x-envoy-expected-rq-timeout-ms``); None (the default) reads none.
    ``status``, ``body``, ``content_type``: the answer when the deadline passes before a
    response has started; ``body`` may be a function of an :class:`Expired`.

    With Starlette or FastAPI::

        app.add_middleware(DeadlineMiddleware, timeout=5, overrides={"/export": 60})

    Any ASGI app::

        app = DeadlineMiddleware(app, timeout=5, header="x-request-timeout")
    """

    __slots__ = ("_deadlines", "_settings", "app")

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
            raise TypeError(f"DeadlineMiddleware(): app must be an ASGI app, got {app!r}")
        self.app = app
        self._settings = Settings(
            "DeadlineMiddleware", timeout, overrides, header, status, body, content_type
        )
        self._deadlines = Deadlines()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app for one connection; ``http`` ones under their deadline."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)  # websocket and lifespan: untouched
            return
        settings = self._settings
        seconds = settings.timeout
        if settings.by_path:
            seconds = settings.seconds_for(scope.get("path", ""))
        cap = None
        if settings.header is not None:
            cap = settings.cap(_header(scope, settings.header), _client(scope), logger)
            if cap is not None and cap < seconds:
                seconds = cap
        request = self._deadlines.start(seconds, cap, scope)
        response_started = False
        trailers = False

        def tracked_send(message: Message) -> Awaitable[None]:
            # A plain function handing back the server's awaitable: no coroutine of its own.
            nonlocal response_started, trailers
            kind = message["type"]
            if kind == "http.response.body":
                if not message.get("more_body", False) and not trailers:
                    Deadlines.finish(request)  # complete: the deadline ends with it
            elif kind == "http.response.start":
                # Set before the send: once the server may have it, a 504 would be a second
                # response, so a deadline from here on cuts the response off instead.
                response_started = True
                trailers = bool(message.get("trailers", False))
            elif _completes(kind, message):
                Deadlines.finish(request)
            return send(message)

        token = current.set(request)
        try:
            await self.app(scope, receive, tracked_send)
        except BaseException as exc:
            current.reset(token)
            if not Deadlines.end(request, exc):
                raise  # not the deadline's
            if response_started:  # too late to answer: the server aborts the response
                if isinstance(exc, TimeoutError):
                    raise
                raise TimeoutError() from exc
            await self._answer(send, scope, request)
        else:
            current.reset(token)
            if Deadlines.end(request, None) and not response_started:
                # The endpoint swallowed its cancellation and returned without answering.
                await self._answer(send, scope, request)

    async def _answer(self, send: Send, scope: Scope, request: Request) -> None:
        settings = self._settings
        now = request.table.loop.time()
        expired = Expired(scope.get("path", ""), request.started, request.deadline, now)
        body = settings.answer(expired)
        headers = [
            (b"content-type", settings.content_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode("ascii")),
            (_ENDED, request.whose().encode("ascii")),
        ]
        await send({"type": "http.response.start", "status": settings.status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})


def _completes(kind: str, message: Message) -> bool:
    """Whether an ASGI message other than ``http.response.start`` / ``.body`` completes the
    response: the last trailers (the HTTP trailers extension), a path sent whole (pathsend),
    the last zero-copy chunk (zerocopy)."""
    if kind == "http.response.trailers":
        return not message.get("more_trailers", False)
    if kind == "http.response.zerocopy":
        return not message.get("more_body", False)
    return kind == "http.response.pathsend"


def _header(scope: Scope, name: str) -> list[str] | None:
    """The values of header ``name`` (lower case) in an ASGI scope (more than one if the
    client sent it more than once), or None."""
    wanted = name.encode("latin-1")
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    found = None
    for key, value in headers:
        if key.lower() == wanted:
            if found is None:
                found = [value.decode("latin-1")]
            else:
                found.append(value.decode("latin-1"))
    return found


def _client(scope: Scope) -> object:
    """The client's address (host), what a bad header's warnings are limited by."""
    client = scope.get("client")
    return client[0] if client else None
