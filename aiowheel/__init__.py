"""aiowheel: an asyncio-native hierarchical timing wheel.

O(1) timers, request timeouts and heartbeats for asyncio (and uvloop) that never fire early.
"""

from ._default import (
    call_at,
    call_later,
    get_timer,
    sleep,
    sleep_until,
    timeout,
    timeout_at,
    wait_for,
)
from ._errors import PendingLimitError, TimerClosedError
from ._handles import TimerHandle
from ._periodic import Interval, PeriodicHandle, Watchdog
from ._timeout import Timeout
from ._timer import Timer, TimerStats

__all__ = [
    "Interval",
    "PendingLimitError",
    "PeriodicHandle",
    "Timeout",
    "Timer",
    "TimerClosedError",
    "TimerHandle",
    "TimerStats",
    "Watchdog",
    "call_at",
    "call_later",
    "get_timer",
    "sleep",
    "sleep_until",
    "timeout",
    "timeout_at",
    "wait_for",
]

__version__ = "0.1.0"
