"""Where the request path reports to a watcher, if one is set: the one check it makes.

Why a room of its own. :func:`aiowheel.otel.instrument_deadlines` turns on metrics and span
attributes of the deadlines (:mod:`aiowheel._deadlines._metrics`, which imports OpenTelemetry);
the request path must neither import OpenTelemetry nor do any of that work when it is off. So
the adapters and the requests' table read one attribute, :data:`SEEN`'s ``watcher``, at the
points that matter (a request ended, a budget sent downstream, a call refused for want of
budget), and call it only when it is set. This room holds that attribute and the interface a
watcher has; it imports nothing of aiowheel's, so every room of the folder may import it.
"""

from __future__ import annotations

from typing import Any, Final, final

__all__ = ["SEEN", "Seen", "Watcher", "refused", "sent"]


class Watcher:
    """What the request path tells a watcher (the methods do nothing here; the metrics'
    watcher overrides them). Called in the request's task, so the current span is its own."""

    __slots__ = ()

    def started(self, request: Any) -> None:
        """``request`` (a :class:`~aiowheel._deadlines._deadline.Request`) has started, in
        its own task (its server span, if any, is current and still open)."""

    def ended(self, request: Any, exc: BaseException | None, missed: bool) -> None:
        """``request`` (a :class:`~aiowheel._deadlines._deadline.Request`) has ended, its
        handler having raised ``exc`` (None: returned): ``missed`` if its deadline ended it
        (504, ``DEADLINE_EXCEEDED``)."""

    def sent(self, client: str, seconds: float) -> None:
        """A ``client`` adapter (``httpx``, ``aiohttp``, ``grpc``) sent a call downstream with
        a budget of ``seconds``."""

    def refused(self, client: str) -> None:
        """A ``client`` adapter refused a call (:class:`BudgetExhausted`): too little budget
        was left to send it."""


@final
class Seen:
    """The holder of the process's one watcher (None: nothing is watched, the default)."""

    __slots__ = ("watcher",)

    def __init__(self) -> None:
        self.watcher: Watcher | None = None


SEEN: Final = Seen()
"""The process's watcher, read by the request path at each point it reports."""


def refused(client: str) -> None:
    """Tell the watcher, if any, that a ``client`` adapter refused a call (off the fast path:
    the call raises :class:`BudgetExhausted` after this)."""
    watcher = SEEN.watcher
    if watcher is not None:
        watcher.refused(client)


def sent(client: str, seconds: float) -> None:
    """Tell the watcher that a ``client`` adapter sent a budget of ``seconds``; the caller
    checks ``SEEN.watcher`` first, so that nothing is called when none is set."""
    watcher = SEEN.watcher
    if watcher is not None:
        watcher.sent(client, seconds)
