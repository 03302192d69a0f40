"""The deadline passed on by httpx, set up once: ``DeadlineTransport``.

Give the client the transport, and every request it makes inside a budget (a request under
:class:`aiowheel.asgi.DeadlineMiddleware`, or any asyncio / aiowheel timeout guarding the
task: :func:`aiowheel.asgi.budget`) carries what is left to the callee; no call site
changes::

    client = httpx.AsyncClient(transport=aiowheel.httpx.DeadlineTransport())

    async with asyncio.timeout(2):
        await client.get(url)   # x-request-timeout: 1.994 (what is left, less the margin)

Per request inside a budget:

- the header (``x-request-timeout``, or the one named) carries the seconds left less
  ``margin``, rounded down to the millisecond (``"1.994"``; gRPC's ``"1994m"`` when the header
  is ``grpc-timeout``), which ``DeadlineMiddleware(header=...)`` reads on the other side;
- the client's timeouts (``connect``, ``read``, ``write``, ``pool``: the request's
  ``timeout`` extension) are each capped by what is left, never raised; one that the cap
  shortened and that fires is raised as :class:`aiowheel.asgi.BudgetExhausted` (a
  ``TimeoutError``, from httpx's exception), so the middleware answers it as the deadline,
  with its 504, and not as an error (httpx's own timeout, uncapped, stays httpx's exception);
- with less than ``margin`` + 1 ms left, :class:`aiowheel.asgi.BudgetExhausted` is raised
  and nothing is sent;
- the callee's 504 at the end of the deadline it was told is the caller's budget running
  out (one event, whoever noticed it first): raised as :class:`aiowheel.asgi.BudgetExhausted`,
  so the caller's middleware answers 504 with no code at the call site; a 504 that comes
  while more than the margin is left (the callee's own shorter deadline) is returned as the
  response it is.

Outside any budget the request goes out untouched. The margin (5 ms by default), rounding
down and the rule for a header the caller set on the request itself (kept if it is no
larger than the budget's, else replaced: one value goes out) are
:mod:`aiowheel._deadlines._propagate`'s, shared with :func:`aiowheel.aiohttp.propagate_deadline`.

httpx's timeouts are per operation (a read timeout bounds each read, not the whole body), so
the cap bounds each wait by the deadline; the whole call is bounded by the timeout that gave
the budget, which cancels the task. (In a task a request started, which its deadline does not
cancel, the caps are what bounds the call.) ``httpx.ASGITransport`` has no timeouts: wrapped,
it gets the header only.

An integration module, like :mod:`aiowheel.aiohttp`: it imports httpx (the absolute
``import httpx`` reaches the real package, not this module), and is not compiled.
"""

from ._deadlines._httpx import (
    DeadlineTransport,
)

__all__ = [
    "DeadlineTransport",
]
