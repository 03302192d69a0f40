"""Request deadlines for ``grpc.aio``: a server interceptor that stops the work, and a client
interceptor that passes what is left to the next call.

gRPC carries a deadline on the wire (``grpc-timeout``), and gRPC in C++, Go and Java passes the
one a server received to the calls its handler makes. Python's does not (grpc/grpc#18358 closed
as stale; #26236: passing ``context.time_remaining()`` as a timeout "doesn't work"), and its
server cancels a handler only when the caller's deadline passes, never for a deadline of its own.
Two interceptors close both gaps, set up once per server and once per channel:

- :class:`DeadlineInterceptor` puts every method under a deadline: the method's own
  (``timeout``, ``overrides`` by method name), capped by the caller's (what gRPC parsed from
  ``grpc-timeout``: ``context.time_remaining()``). The handler is awaited in the call's own
  task, as :class:`aiowheel.asgi.DeadlineMiddleware` awaits an ASGI app, so at the deadline that
  task is cancelled wherever it waits: its ``finally`` blocks run, and the call ends with
  ``DEADLINE_EXCEEDED``. Inside the handler, and in every task its context reached,
  :func:`aiowheel.time_left` and :func:`aiowheel.asgi.budget` read the deadline. The deadlines
  are aiowheel's request deadlines (one wheel entry per tick for every call due in it, filed
  only for calls that suspend: the design is :mod:`aiowheel.asgi`'s).
- :class:`PropagateDeadline` gives each call made inside a budget ``timeout = min(its own,
  the budget less a margin)``, so the callee's deadline is the caller's remainder; with
  nothing left it raises :class:`aiowheel.asgi.BudgetExhausted` and the call is never sent.
  A ``DEADLINE_EXCEEDED`` for the budget (whoever noticed it first: gRPC's client or a hop
  below) is raised as :class:`aiowheel.asgi.BudgetExhausted`, which the caller's own deadline
  adapter answers as its deadline; the callee's own shorter deadline reaches the caller as
  the ``AioRpcError`` it is (code that falls back on it keeps working). A
  :class:`DeadlineInterceptor` says whose deadline ended a call (trailing metadata
  ``x-deadline-ended``: ``caller`` or ``own``); from a server that does not say, one that
  comes at or after the end of the deadline the call was given is the budget's. Outside any
  budget (no request deadline, no ``asyncio.timeout``) it changes nothing.

Unary and streaming methods alike: a streaming response written with ``yield`` is cut where it
waits, mid-stream. Handlers that are plain functions (run in a thread pool by ``grpc.aio``)
pass through untouched: a thread cannot be cancelled.

The caller's deadline comes parsed by gRPC's core (``context.time_remaining()``), and the
interceptor never gives a method more than its own ``timeout``, whatever the caller sends: an
absurdly large ``grpc-timeout`` (``99999999H``) leaves the method its own deadline, and of a
repeated one the core keeps one, which the method's own caps. A malformed or negative one
(``abc``, ``-1S``, ``1.5S``) the core refuses before any Python code runs, ending the call with
``INTERNAL`` ("Error parsing 'grpc-timeout' metadata", measured on grpcio 1.85): nothing of
the method runs, so there is no deadline to apply and nothing to log. (The HTTP adapters,
which parse their header themselves, apply the route's own deadline then, and log it once per
client per minute.) An integration module, like :mod:`aiowheel.aiohttp`: it
imports grpc (the absolute ``import grpc`` reaches the real package), and is not compiled.
"""

from ._deadlines._grpc import (
    DeadlineInterceptor,
    PropagateDeadline,
)

__all__ = [
    "DeadlineInterceptor",
    "PropagateDeadline",
]
