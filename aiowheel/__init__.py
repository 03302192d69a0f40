"""aiowheel: an asyncio-native hierarchical timing wheel.

O(1) timers, request timeouts and heartbeats for asyncio (and uvloop) that never fire early.
Loop mode (:func:`run`, :func:`loop_factory`, :func:`new_event_loop`) puts every timer of a
program on the wheel: ``aiowheel.run(main())``.

Two builds of the same sources: where the install could compile them (mypyc), the hot modules
run as C extensions; elsewhere, or with ``AIOWHEEL_NO_EXTENSIONS=1`` in the environment when
aiowheel is first imported, the pure-Python modules run. :data:`COMPILED` says which; the
compiled build also has a native core written in C (:data:`NATIVE`).
"""

import os as _os
from typing import TYPE_CHECKING

from ._common._build import COMPILED_MODULES as _COMPILED_MODULES
from ._common._build import prefer_sources as _prefer_sources

if _os.environ.get("AIOWHEEL_NO_EXTENSIONS", "") not in ("", "0"):
    _prefer_sources(__name__, __path__)

from ._common._build import is_compiled as _is_compiled
from ._common._errors import PendingLimitError, TimerClosedError
from ._common._lingering import LingeringTimerWarning
from ._deadlines._stop import AtDeadline, at_deadline
from ._loopmode._default import (
    call_at,
    call_later,
    get_timer,
    sleep,
    sleep_until,
    timeout,
    timeout_at,
    wait_for,
)
from ._loopmode._loop import (
    LoopConfig,
    LoopFactory,
    config_of,
    loop_factory,
    new_event_loop,
    run,
    timer_of,
)
from ._purgatory._purgatory import DelayedOperation, Purgatory, PurgatoryStats
from ._seeing._census import (
    LoopLag,
    PendingTimer,
    current_deadline,
    loop_lag,
    pending_timers,
    time_left,
    timer_census,
    track_origins,
)
from ._time._periodic import Interval, PeriodicHandle, Watchdog
from ._time._store import native as _native
from ._time._timeout import Timeout
from ._time._timer import Timer, TimerStats

COMPILED: bool = _is_compiled(__name__, _COMPILED_MODULES)
"""True if the compiled (mypyc) build of aiowheel's hot modules is running."""

NATIVE: bool = _native is not None
"""True if the native core (C: the callback handles, their wheel and loop mode's
``call_at`` / ``call_later``) runs: the compiled build has it, the pure-Python one does not."""

if TYPE_CHECKING:
    from ._time._handles import TimerHandle
else:  # the class the running build's handles are (the same API)
    from ._time._handles import TimerHandle

    if _native is not None:
        TimerHandle = _native.TimerHandle
del TYPE_CHECKING

__all__ = [
    "COMPILED",
    "DelayedOperation",
    "Interval",
    "LingeringTimerWarning",
    "LoopConfig",
    "LoopFactory",
    "LoopLag",
    "NATIVE",
    "AtDeadline",
    "PendingLimitError",
    "PendingTimer",
    "PeriodicHandle",
    "Purgatory",
    "PurgatoryStats",
    "Timeout",
    "Timer",
    "TimerClosedError",
    "TimerHandle",
    "TimerStats",
    "Watchdog",
    "at_deadline",
    "call_at",
    "call_later",
    "config_of",
    "current_deadline",
    "get_timer",
    "loop_factory",
    "loop_lag",
    "new_event_loop",
    "pending_timers",
    "run",
    "sleep",
    "sleep_until",
    "time_left",
    "timeout",
    "timeout_at",
    "timer_census",
    "timer_of",
    "track_origins",
    "wait_for",
]

__version__ = "0.5.0.dev0"
