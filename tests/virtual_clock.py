"""An asyncio loop whose clock the test controls: idle time passes instantly.

Whenever the loop would block waiting for its next timer, the virtual clock jumps to that
timer instead, so a schedule of 10,000 ticks runs in well under a second and the results do
not depend on how loaded the machine is. ``advance(seconds)`` simulates a callback that
blocks the loop.
"""

from __future__ import annotations

import asyncio
import selectors
from typing import Any


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop on a virtual clock (default asyncio loop only)."""

    def __init__(self) -> None:
        super().__init__()
        self._virtual_now = 1000.0
        selector = self._selector  # type: ignore[attr-defined]
        real_select = selector.select

        def select(timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
            events: list[Any] = real_select(0)
            if not events and timeout is not None and timeout > 0:
                self._virtual_now += timeout
            elif not events and timeout is None:
                events = real_select(0.01)  # nothing scheduled: wait a little for real
            return events

        selector.select = select

    def time(self) -> float:
        """The virtual clock."""
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        """Move the clock forward as if the loop had been blocked for ``seconds``."""
        self._virtual_now += seconds


def run_virtual(coro: Any) -> Any:
    """Run a coroutine to completion on a fresh VirtualClockLoop."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
