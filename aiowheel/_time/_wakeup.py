"""The wheel's wake-up as a base loop's heap holds it: :class:`WakeUp`, and :func:`is_wake_up`.

Loop mode files the reaper's one wake-up on the base loop's own heap (asyncio's: as a
:class:`WakeUp`; other bases: their own handle, whose callback is the reaper's). Two readers
must tell it from the program's timers: the census (:mod:`aiowheel._seeing._census`), which
reads any loop's heap, and ``loop._scheduled``'s view (:mod:`aiowheel._loopmode._scheduled`).
The handle and its test live here, beside the reaper, so that the census needs nothing of loop
mode's: what a wake-up is, is the driver's fact. Not compiled: :class:`WakeUp` subclasses
asyncio's Python ``TimerHandle``.
"""

from __future__ import annotations

import asyncio

from ._reaper import Reaper

__all__ = ["WakeUp", "is_wake_up"]


class WakeUp(asyncio.TimerHandle):
    """The wheel's wake-up on asyncio's heap: one handle for every timer on the wheel.

    Test suites check for lingering timers by reading ``loop._scheduled`` and skipping what
    ``handle.cancelled()`` says is cancelled (Home Assistant's ``verify_cleanup``, and the
    plugins that copy it). The wake-up is not a timer anyone set: it answers True there, so it
    is never reported in place of the user's timers, nor after the last of them is cancelled
    (it stays on the heap until its time, as a cancelled handle would). asyncio itself reads
    ``_cancelled``, which is the truth. The wheel's timers are seen with
    :func:`aiowheel.pending_timers` and ``pytest -p aiowheel.pytest --aiowheel-lingering``.
    """

    __slots__ = ()

    def cancelled(self) -> bool:
        """True: not a timer of the program's (see the class docstring)."""
        return True

    def __repr__(self) -> str:
        state = "cancelled" if self._cancelled else f"when={self.when()}"
        return f"<aiowheel wheel wake-up {state} (aiowheel.pending_timers() lists its timers)>"


def is_wake_up(handle: object) -> bool:
    """Whether ``handle`` on a base heap is a wheel's wake-up (no timer of the program's):
    asyncio's :class:`WakeUp`, cancelled or not (asyncio's ``cancel()``
    drops the callback), or another base's handle whose callback is a reaper's."""
    if isinstance(handle, WakeUp):
        return True
    callback = getattr(handle, "_callback", None)
    return isinstance(getattr(callback, "__self__", None), Reaper)
