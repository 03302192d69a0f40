"""aiowheel: an asyncio-native hierarchical timing wheel.

O(1) timers, request timeouts and heartbeats for asyncio (and uvloop) that never fire early.
"""

from ._handles import TimerHandle
from ._timer import PendingLimitError, Timer, TimerClosedError, TimerStats

__all__ = [
    "PendingLimitError",
    "Timer",
    "TimerClosedError",
    "TimerHandle",
    "TimerStats",
]

__version__ = "0.1.0"
