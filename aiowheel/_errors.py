"""The exceptions aiowheel raises of its own (everything else is a builtin, as asyncio's)."""

from __future__ import annotations

__all__ = ["PendingLimitError", "TimerClosedError"]


class PendingLimitError(RuntimeError):
    """Raised by a scheduling call that would exceed the Timer's ``max_pending``."""


class TimerClosedError(RuntimeError):
    """Set on pending sleepers and scheduled futures when their timer shuts down under them."""
