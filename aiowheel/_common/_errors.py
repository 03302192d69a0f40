"""The exceptions aiowheel raises of its own (everything else is a builtin, as asyncio's)."""

from __future__ import annotations

__all__ = ["PendingLimitError", "TimerClosedError", "chained"]


class PendingLimitError(RuntimeError):
    """Raised by a scheduling call that would exceed the Timer's ``max_pending``."""


class TimerClosedError(RuntimeError):
    """Set on pending sleepers and scheduled futures when their timer shuts down under them."""


def chained(error: BaseException, cause: BaseException | None) -> BaseException:
    """``error`` with ``cause`` as ``__cause__``: ``raise chained(E(), c)`` is ``raise E from c``.

    Spelled out because the compiled build's mypyc (2.4) drops the cause of ``raise ... from``;
    assigning ``__cause__`` also sets ``__suppress_context__``, exactly as ``from`` does.
    """
    error.__cause__ = cause
    return error
