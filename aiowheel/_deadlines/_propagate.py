"""The deadline passed on by an HTTP client: what the callee is told, and how; shared by
:class:`aiowheel.httpx.DeadlineTransport` and :func:`aiowheel.aiohttp.propagate_deadline`.

Both adapters ask this module once per request: :func:`outgoing_budget` (None outside any
budget: the request goes out untouched), then :func:`outgoing_header` for the header's value.
The rules, written once here:

- *What is left* is :func:`aiowheel.asgi.budget`: the request's deadline (under
  :class:`aiowheel.asgi.DeadlineMiddleware` or :func:`aiowheel.aiohttp.deadline_middleware`)
  or any asyncio / aiowheel timeout guarding the task, whichever is sooner. The client's own
  timeouts are capped by all of it: the caller may wait until its own deadline, never longer.
- *The margin* is taken off what the callee is told, not off what the caller waits: the header
  is relative (seconds, not a clock time, as gRPC's ``grpc-timeout``), so the callee's deadline
  starts when it reads the header, after the request's transit; and its answer (its own 504
  when it runs out) must travel back. The margin is that round trip, plus the callee's queueing
  before its middleware reads the header. The default, :data:`DEFAULT_MARGIN`, is 5 ms: a
  round trip within a data centre (well under 1 ms) with room for a loaded server, and
  a small part of the budgets worth passing on (100 ms and up). Across regions, pass the
  round trip (``margin=0.08``); 0 passes on everything that is left, as gRPC does.
- *Rounded down*: a callee is never told it has more time than is left. The header says
  milliseconds at the finest, so less than 1 ms after the margin cannot be said at all:
  :class:`aiowheel.asgi.BudgetExhausted` then, and nothing is sent (no callee could do
  anything useful in under 1 ms across a network).
- *The callee's 504 for the budget it was told is the caller's deadline* (:func:`ran_out`):
  the callee was told the budget less the margin, so it runs out first and answers first;
  that 504 is the caller's budget running out, raised to the caller as
  :class:`aiowheel.asgi.BudgetExhausted` (its own middleware answers 504 in turn, with no code
  at the call site). A deadline adapter's 504 says whose deadline ended it (its
  ``x-deadline-ended`` header: ``caller``, the budget it was sent, whichever hop below
  noticed it first; ``own``, its route's shorter deadline); a callee that does not say is
  judged by the time: its 504 before the end of what it was told (less the 1 ms the
  header's rounding may take off) is its own. Its own reaches the caller as the response
  it is.
- *A header the caller set on the request itself* is kept if it is a valid deadline no
  larger than the budget's (the caller may tell a callee to be quicker than the budget
  requires, never slower): the smaller of the two goes out, and one value only. A larger or
  malformed value is replaced by the budget's.

Pure: imports neither httpx nor aiohttp (the gRPC adapter may use :func:`outgoing` and
:func:`header_value` too). Not compiled.
"""

from __future__ import annotations

import math
from asyncio import _get_running_loop
from collections.abc import Iterable
from typing import Final, NamedTuple

from ._budget import DEFAULT_MARGIN, caller_left, header_value
from ._deadline import END_WINDOW, BudgetExhausted
from ._inbound import milliseconds, parse_timeout_header
from ._settings import header_name, nonnegative

__all__ = [
    "DEFAULT_HEADER",
    "DEFAULT_MARGIN",
    "SMALLEST",
    "Outgoing",
    "Settings",
    "form_of",
    "outgoing_budget",
    "outgoing_header",
    "ran_out",
    "settings",
]

DEFAULT_HEADER: Final = "x-request-timeout"
"""The header the adapters send by default: what ``DeadlineMiddleware(header=...)`` reads."""

GATEWAY_TIMEOUT: Final = 504
"""The status a deadline middleware answers when its deadline passes (HTTP's Gateway Timeout)."""

SMALLEST: Final = 0.001
"""The least a callee can be told: 1 ms, the finest either header form says here."""


class Outgoing(NamedTuple):
    """What a request made inside a budget gets."""

    left: float
    """Seconds left of the caller's deadline: the cap of the client's own timeouts."""
    callee: float
    """Seconds the callee is told: ``left`` less the margin, at least :data:`SMALLEST`."""
    guarded: bool
    """Whether the deadline cancels the calling task when it passes (see
    :func:`aiowheel._deadlines._budget.caller_left`): then the call ends with it, and the adapter
    sets no timeout of its own (a timer per read and write, in httpx)."""
    ends: float
    """The loop time from which the callee's deadline answer (504) is the caller's budget
    running out (:func:`ran_out`): when the deadline the callee was told ends, counted from
    the send, less :data:`aiowheel._deadlines._deadline.END_WINDOW`."""


def form_of(header: str) -> str:
    """The form of ``header``'s value (lower case): ``"grpc"`` for ``grpc-timeout``
    (``1234m``), ``"ms"`` for a name ending in ``-ms`` (whole milliseconds, Envoy's
    ``x-envoy-expected-rq-timeout-ms``), else ``"seconds"`` (``1.234``): what the deadline
    middlewares read under that name."""
    if header == "grpc-timeout":
        return "grpc"
    return "ms" if header.endswith("-ms") else "seconds"


class Settings(NamedTuple):
    """An adapter's arguments, checked once when it is made."""

    header: str
    """The deadline header's name, lower case."""
    form: str
    """Its value's form: ``"seconds"``, ``"grpc"`` or ``"ms"`` (:func:`form_of`)."""
    margin: float
    """Seconds taken off what the callee is told."""


def settings(owner: str, header: object, margin: object) -> Settings:
    """An adapter's ``header`` and ``margin``, checked (TypeError / ValueError naming
    ``owner``, the function the user called, and the argument)."""
    name = header_name(owner.removesuffix("()"), header, optional=False)
    return Settings(name, form_of(name), nonnegative(owner, "margin", margin))


def outgoing_budget(margin: float) -> Outgoing | None:
    """What a request made here gets, or None outside any budget (nothing bounds the task).

    Raises :class:`aiowheel.asgi.BudgetExhausted` when nothing is left, or less than
    ``margin`` + 1 ms: the request must not be sent."""
    left, guarded = caller_left("the deadline's HTTP adapter")
    if left is None:
        return None
    callee = left - margin
    if callee < SMALLEST:
        raise BudgetExhausted(
            f"{left:.3f} s left of the deadline: under the {margin:.3f} s margin and the "
            f"1 ms the least a callee can be told; the request is not sent"
        )
    return Outgoing(left, callee, guarded, _now() + callee - END_WINDOW)


def _now() -> float:
    """The running loop's time (the adapters run in a task: there is one)."""
    loop = _get_running_loop()
    assert loop is not None, "an HTTP adapter runs in a task"
    return loop.time()


def ran_out(found: Outgoing, status: int, ended: str | None, where: str) -> BudgetExhausted | None:
    """What a response with ``status`` is to the caller: :class:`BudgetExhausted` if it is
    the callee's 504 for the budget it was told (the caller's budget ran out: one event,
    whichever hop noticed it first), None if the response is the callee's own (any other
    status, or the callee's own shorter deadline, or one the caller set on the request) and
    reaches the caller as it is.

    Whose 504 it is, the callee says in ``ended`` (its ``x-deadline-ended`` header: ``caller``
    or ``own``). A callee that does not say is judged by the time: its 504 at or after the end
    of the deadline it was told (:attr:`Outgoing.ends`) is the budget's, an earlier one its
    own."""
    if status != GATEWAY_TIMEOUT:
        return None
    said = None if ended is None else ended.strip().lower()
    if said == "own" or (said != "caller" and _now() < found.ends):
        return None
    return BudgetExhausted(
        f"the deadline passed: {where}'s callee answered 504 at the end of the "
        f"{found.callee:.3f} s it was told of the {found.left:.3f} s left of the budget"
    )


def outgoing_header(callee: float, form: str, explicit: Iterable[str] = ()) -> str:
    """The one value the deadline header goes out with, in ``form`` (:func:`form_of`): the
    caller's own (``explicit``, the values already on the request) if it is a valid deadline
    in that form no larger than ``callee``, kept as it is; otherwise ``callee`` rounded down
    (:func:`aiowheel._deadlines._budget.header_value`, or whole milliseconds)."""
    kept: str | None = None
    smallest = callee
    for raw in explicit:
        value = raw.strip()
        if form == "grpc" and not value[-1:].isalpha():  # gRPC's form ends in its unit
            continue
        seconds = milliseconds(value) if form == "ms" else parse_timeout_header(value)
        if seconds is not None and seconds <= smallest:
            kept, smallest = value, seconds
    if kept is not None:
        return kept
    if form == "ms":
        return str(math.floor(callee * 1000))
    return header_value(callee, form == "grpc")
