"""The aiohttp adapter of the request deadlines, :mod:`aiowheel.aiohttp` (whose docstring is the
user's guide): the server's ``deadline_middleware`` and the client's ``propagate_deadline``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from aiohttp import ClientHandlerType, ClientRequest, ClientResponse, web

from .._loopmode._default import timeout as _timeout
from . import _propagate, _seen
from ._deadline import ENDED_HEADER, BudgetExhausted, Deadlines, current
from ._seen import SEEN
from ._settings import DEFAULT_BODY, Body, Expired, Settings

__all__ = ["deadline_middleware", "propagate_deadline"]

logger: Final = logging.getLogger("aiowheel.asgi")  # the request deadlines' one logger

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


def deadline_middleware(
    timeout: float,
    *,
    overrides: Mapping[str, float] | None = None,
    header: str | None = None,
    status: int = 504,
    body: Body = DEFAULT_BODY,
    content_type: str = "application/json",
) -> Middleware:
    """An aiohttp middleware putting every request under a deadline that stops its work.

    The arguments are :class:`aiowheel.asgi.DeadlineMiddleware`'s, checked here (ValueError /
    TypeError naming ``deadline_middleware``)::

        app = web.Application(middlewares=[deadline_middleware(timeout=5)])
    """
    settings = Settings(
        "deadline_middleware", timeout, overrides, header, status, body, content_type
    )
    deadlines = Deadlines()

    @web.middleware
    async def request_deadline(request: web.Request, handler: Handler) -> web.StreamResponse:
        if settings.by_path:
            route: Any = request.match_info.route
            canonical = getattr(getattr(route, "resource", None), "canonical", None)
            paths = (request.path, canonical) if isinstance(canonical, str) else (request.path,)
            seconds = settings.seconds_for(*paths)  # an exact path first, of either
        else:
            seconds = settings.timeout
        cap = None
        if settings.header is not None:
            values = request.headers.getall(settings.header, None)
            cap = settings.cap(values, request.remote, logger)
            if cap is not None and cap < seconds:
                seconds = cap
        state = deadlines.start(seconds, cap, request)
        token = current.set(state)
        try:
            response = await handler(request)
        except BaseException as exc:
            current.reset(token)
            if not Deadlines.end(state, exc):
                raise  # not the deadline's
            if _started(request):  # aiohttp closes the connection: the response is cut off
                if isinstance(exc, TimeoutError):
                    raise
                raise TimeoutError() from exc
        else:
            current.reset(token)
            Deadlines.end(state, None)
            return response  # in time (or the handler swallowed its cancellation and answered)
        now = state.table.loop.time()
        expired = Expired(request.path, state.started, state.deadline, now)
        return web.Response(
            status=settings.status,
            body=settings.answer(expired),
            content_type=settings.content_type,
            headers={ENDED_HEADER: state.whose()},
        )

    return request_deadline


def _started(request: web.BaseRequest) -> bool:
    """Whether the handler has started a response (its headers are written: a prepared
    ``StreamResponse``), which a second response can no longer replace."""
    writer = request.writer
    return writer is not None and writer.output_size > 0


# --- the client side: the deadline passed on by aiohttp's ClientSession ----------------------


ClientMiddleware = Callable[[ClientRequest, ClientHandlerType], Awaitable[ClientResponse]]


def propagate_deadline(
    header: str = _propagate.DEFAULT_HEADER, *, margin: float = _propagate.DEFAULT_MARGIN
) -> ClientMiddleware:
    """An aiohttp client middleware (aiohttp 3.12+) passing the current deadline on with every
    request, as :class:`aiowheel.httpx.DeadlineTransport` does (the same rules: margin,
    rounding down, a header the caller set)::

        session = aiohttp.ClientSession(middlewares=[propagate_deadline()])

    Inside a budget (:func:`aiowheel.asgi.budget`): the ``header`` carries the seconds left
    less ``margin`` (5 ms), rounded down (gRPC's form for ``grpc-timeout``); the request, up to
    its response's headers, runs under a timeout of what is left (the session's timeouts are
    kept: a middleware cannot raise or see them), raised as
    :class:`aiowheel.asgi.BudgetExhausted` when it fires; with less than ``margin`` + 1 ms
    left, :class:`aiowheel.asgi.BudgetExhausted` and nothing is sent. The callee's 504 at the
    end of the deadline it was told is the caller's budget running out: raised as
    :class:`aiowheel.asgi.BudgetExhausted`; a 504 while more than the margin is left is the
    callee's own, returned as it is. Reading the body is bounded by the timeout that gave the
    budget. Outside any budget: untouched.
    Arguments are checked here (TypeError / ValueError naming ``propagate_deadline()``)."""
    settings = _propagate.settings("propagate_deadline()", header, margin)
    name, form, seconds = settings.header, settings.form, settings.margin

    async def deadline_propagated(req: ClientRequest, handler: ClientHandlerType) -> ClientResponse:
        try:
            found = _propagate.outgoing_budget(seconds)  # BudgetExhausted: nothing is sent
        except BudgetExhausted:
            _seen.refused("aiohttp")
            raise
        if found is None:
            return await handler(req)
        if SEEN.watcher is not None:
            _seen.sent("aiohttp", found.callee)
        headers = req.headers
        headers[name] = _propagate.outgoing_header(found.callee, form, headers.getall(name, ()))
        if found.guarded:  # the deadline cancels this task: the request ends with it
            return _answered(await handler(req), found)
        cap = _timeout(found.left)
        try:
            async with cap:
                response = await handler(req)
        except TimeoutError as exc:
            if not cap.expired():
                raise  # not the cap's
            raise BudgetExhausted(
                f"the deadline passed: no response within the {found.left:.3f} s that were left"
            ) from exc
        return _answered(response, found)

    return deadline_propagated


def _answered(response: ClientResponse, found: _propagate.Outgoing) -> ClientResponse:
    """``response``, or :class:`BudgetExhausted` (the response released) if it is the callee's
    504 at the end of the deadline it was told (:func:`aiowheel._deadlines._propagate.ran_out`)."""
    ended = response.headers.get(ENDED_HEADER)
    exhausted = _propagate.ran_out(found, response.status, ended, "propagate_deadline()")
    if exhausted is None:
        return response
    response.release()
    raise exhausted
