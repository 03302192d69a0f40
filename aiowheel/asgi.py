"""Request deadlines that stop the work: an ASGI middleware, and the budget passed on.

``DeadlineMiddleware(app, timeout=5)`` awaits the downstream app *in the request's own task*,
under a deadline that cancels that task as an ``aiowheel.timeout_at(...)`` would. That is the
whole design, and the reason for this module:

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

What a deadline costs a request that meets it (most of them) is the point of the rest. A
timeout per request (``async with timer.timeout_at(...)``: an object, an enter and an exit, a
wheel entry filed and unlinked) was over half of what the middleware added to a request in
process (the figures are on the performance page, docs/performance.md, request deadlines).
Two facts make most of it unnecessary:

- *A deadline can only act where the task waits.* Cancelling a task takes effect at its next
  suspension, and a wheel timer fires from a loop callback, which cannot run while the task's
  step does. A request that is answered within its first step (a fast endpoint under uvicorn:
  ``receive`` and ``send`` do not suspend) can never be reached by its deadline, so it needs no
  timer. The middleware notes the deadline (the request object, also what
  :func:`aiowheel.time_left` reads) and files it only if the request is still running when the
  loop next runs its ready callbacks: one ``loop.call_soon`` per loop iteration that started
  requests, shared by all of them, files each that suspended. Filed one iteration late, at its
  exact deadline: a deadline is never early, and it is late only if it is shorter than that
  iteration (then it fires at once, as ``asyncio.timeout`` hands a deadline already passed to
  ``call_soon``).
- *Requests that arrive together expire together.* Those filed are grouped by the tick of
  their deadline: one wheel entry per tick (filed at the earliest deadline of its requests),
  a dict insert and delete per request. When it fires, every member whose deadline has passed
  is cancelled; one that has not (a tick of the group's grid that straddles two of the wheel's)
  is filed again for its own deadline. So no request is cancelled before its deadline, and none
  later than its own wheel timer would have fired: at the first tick at or after its deadline.
  The entry is cancelled when its last request ends, so nothing is left pending.

Per request that meets its deadline, what is left is a clock read, the request object, a
context variable (what :func:`budget` and :func:`set_deadline` find the request by) and the
``send`` wrapper that tells a 504 from a cut-off (the performance page measures what that
costs per request). The cancellation, its ``uncancel`` accounting (an outside
``task.cancel()`` is never swallowed) and the ``CancelledError``-to-``TimeoutError`` turn are
``asyncio.timeout``'s, kept here.

Past the deadline, if no response has started, the client gets ``status`` (504) with ``body``.
If one has started, it cannot be replaced, and finishing it would pass a truncated body off as
complete (a final ``more_body: False``); so the ``TimeoutError`` is re-raised and the server
does what it does for any app error once the response started: it logs it and aborts the
connection, and the client sees a cut-off response.

The end is one event, whoever notices it first: any exception that escapes the app once the
deadline has expired, or within 1 ms of it (a timeout set from :func:`budget`, a driver's
error as the cancellation closes its connection), is answered as the deadline, not as an
error; earlier, it is the app's own. The 504 says whose deadline ended the request
(``x-deadline-ended: caller``, the budget the inbound header carried; ``own``, the route's
own deadline), which the client adapters above (:mod:`aiowheel.httpx`,
:func:`aiowheel.aiohttp.propagate_deadline`) read to raise the caller's budget running out as
:class:`BudgetExhausted`, and to return a callee's own 504 as the response it is.

The deadline ends with the response: once the app hands the server its last body message
(or its last trailers, or a ``pathsend``), the request leaves the wheel and nothing reads its
deadline any more, so what the app still does in the request's task (Starlette's
``BackgroundTasks`` run there after the response) is neither cancelled nor reported as an
error. A background task that needs a bound puts its own ``aiowheel.timeout`` around it.

A route's own deadline, three ways, each measured from the moment the request arrived:

- ``overrides={"/reports/yearly": 60, "/health": 1, "/export/*": 120}``: exact paths, and
  prefixes ending in ``*`` (the longest wins), known before the app runs;
- :func:`set_deadline` anywhere in the request's task (``set_deadline(30)``: 30 s after
  the request arrived, later or sooner than the default), or in a worker thread the
  request's context reached (a plain ``def`` endpoint): the move is then filed on the loop's
  thread;
- :func:`deadline` for FastAPI: ``@app.get("/slow", dependencies=[Depends(deadline(30))])``,
  the way a FastAPI user scopes anything to a route (a path map cannot name ``/items/{id}``).

``header="x-request-timeout"`` (opt-in, named by the user) lets the caller cap the deadline, as
gRPC's ``grpc-timeout`` does: the value is seconds (``2.5``) or gRPC's form (``2500m``: digits
then one of ``H M S m u n``); a header whose name ends in ``-ms`` is whole milliseconds
(Envoy's ``header="x-envoy-expected-rq-timeout-ms"``). It only ever shortens the deadline, and
:func:`set_deadline` cannot extend past it. A value that is not exactly one of those forms,
not positive, or sent twice is ignored with a warning on the ``aiowheel.asgi`` logger, once
per client a minute (a client cannot fill the log): a malformed header never makes a 500.

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

from ._deadlines._asgi import (
    BudgetExhausted,
    DeadlineMiddleware,
    Expired,
    budget,
    budget_header,
    deadline,
    parse_timeout_header,
    set_deadline,
)

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
