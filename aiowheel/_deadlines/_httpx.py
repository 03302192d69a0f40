"""The httpx adapter of the outgoing deadline, :mod:`aiowheel.httpx` (whose docstring is the
user's guide): ``DeadlineTransport`` over :mod:`._propagate`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import Final, final

import httpx

from . import _propagate, _seen
from ._asgi import BudgetExhausted
from ._deadline import ENDED_HEADER
from ._seen import SEEN

__all__ = ["DeadlineTransport"]

_PHASES: Final = (
    (httpx.ConnectTimeout, "connect"),
    (httpx.ReadTimeout, "read"),
    (httpx.WriteTimeout, "write"),
    (httpx.PoolTimeout, "pool"),
)


@final
class DeadlineTransport(httpx.AsyncBaseTransport):
    """An httpx transport passing the current deadline on with every request (see the
    module): ``httpx.AsyncClient(transport=DeadlineTransport())``.

    ``transport``: the transport that sends (any ``httpx.AsyncBaseTransport``, also
    ``httpx.ASGITransport``); None makes an ``httpx.AsyncHTTPTransport()``.
    ``header``: the deadline header's name (``grpc-timeout`` takes gRPC's form).
    ``margin``: seconds taken off what the callee is told, for the network (5 ms).
    Checked here (TypeError / ValueError naming ``DeadlineTransport()``), never per request.
    """

    __slots__ = ("_settings", "transport")

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport | None = None,
        *,
        header: str = _propagate.DEFAULT_HEADER,
        margin: float = _propagate.DEFAULT_MARGIN,
    ) -> None:
        owner = "DeadlineTransport()"
        self._settings = _propagate.settings(owner, header, margin)
        if transport is None:
            transport = httpx.AsyncHTTPTransport()
        elif not isinstance(transport, httpx.AsyncBaseTransport):
            raise TypeError(
                f"{owner}: transport must be an httpx.AsyncBaseTransport, "
                f"got {type(transport).__name__}"
            )
        self.transport: httpx.AsyncBaseTransport = transport
        """The wrapped transport, which sends."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """Send ``request`` through the wrapped transport with the deadline passed on."""
        settings = self._settings
        try:
            found = _propagate.outgoing_budget(settings.margin)  # BudgetExhausted: not sent
        except BudgetExhausted:
            _seen.refused("httpx")
            raise
        if found is None:
            return await self.transport.handle_async_request(request)
        if SEEN.watcher is not None:
            _seen.sent("httpx", found.callee)
        name = settings.header
        headers = request.headers
        headers[name] = _propagate.outgoing_header(
            found.callee, settings.form, headers.get_list(name)
        )
        if found.guarded:  # the deadline cancels this task: the call ends with it
            return await _answered(await self.transport.handle_async_request(request), found)
        capped = _cap(request, found.left)
        try:
            response = await self.transport.handle_async_request(request)
        except httpx.TimeoutException as exc:
            exhausted = _exhausted(exc, capped, found.left)
            if exhausted is None:
                raise
            raise exhausted from exc
        stream = response.stream
        if capped and isinstance(stream, httpx.AsyncByteStream):
            response.stream = _CappedStream(stream, capped, found.left)
        return await _answered(response, found)

    async def aclose(self) -> None:
        """Close the wrapped transport."""
        await self.transport.aclose()

    async def __aenter__(self) -> DeadlineTransport:
        await self.transport.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        await self.transport.__aexit__(exc_type, exc_value, traceback)


async def _answered(response: httpx.Response, found: _propagate.Outgoing) -> httpx.Response:
    """``response``, or :class:`BudgetExhausted` (the response closed) if it is the callee's
    504 at the end of the deadline it was told (:func:`aiowheel._deadlines._propagate.ran_out`)."""
    ended = response.headers.get(ENDED_HEADER)
    exhausted = _propagate.ran_out(found, response.status_code, ended, "DeadlineTransport")
    if exhausted is None:
        return response
    await response.aclose()
    raise exhausted


def _cap(request: httpx.Request, left: float) -> frozenset[str]:
    """Cap each of the request's timeouts by ``left``; the names of those it shortened."""
    timeouts = request.extensions.get("timeout")
    if not isinstance(timeouts, dict):
        timeouts = {}
    capped = dict(timeouts)
    shortened = []
    for _, phase in _PHASES:
        current = timeouts.get(phase)
        if current is None or current > left:
            capped[phase] = left
            shortened.append(phase)
    request.extensions["timeout"] = capped
    return frozenset(shortened)


def _exhausted(
    exc: httpx.TimeoutException, capped: frozenset[str], left: float
) -> BudgetExhausted | None:
    """What a timeout raised under the caps becomes: :class:`BudgetExhausted` if it is one the
    cap shortened (the deadline passed), else None (httpx's own, raised as it is)."""
    for kind, phase in _PHASES:
        if isinstance(exc, kind):
            if phase in capped:
                return BudgetExhausted(
                    f"the deadline passed: the request's {phase} timeout, capped at the "
                    f"{left:.3f} s that were left, fired ({exc})"
                )
            break
    return None


@final
class _CappedStream(httpx.AsyncByteStream):
    """A response body read under the caps: a capped timeout is raised as BudgetExhausted."""

    __slots__ = ("_capped", "_left", "_stream")

    def __init__(self, stream: httpx.AsyncByteStream, capped: frozenset[str], left: float) -> None:
        self._stream = stream
        self._capped = capped
        self._left = left

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._stream:
                yield chunk
        except httpx.TimeoutException as exc:
            exhausted = _exhausted(exc, self._capped, self._left)
            if exhausted is None:
                raise
            raise exhausted from exc

    async def aclose(self) -> None:
        """Close the wrapped body."""
        await self._stream.aclose()
