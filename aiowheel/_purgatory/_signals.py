"""What a Purgatory's ``signals=`` is: the seam between the purgatory and a transport that
carries its signals to other processes (:class:`aiowheel.redis.RedisSignals`).

The purgatory knows three calls and nothing of the transport: :meth:`Signals._adopt` when it
is made with it, :meth:`Signals._attach` when it binds to a running loop (the first wait or
watch in that loop, never on the hot path), and :meth:`Signals._signal` for each
:meth:`Purgatory.signal <aiowheel.Purgatory.signal>`. A purgatory made without ``signals``
makes none of them: a local purgatory pays one ``is None`` test per signal. This module is
never compiled and imports nothing of aiowheel's, so that the compiled purgatory does not
import a transport (and redis-py) to check its argument's type.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

__all__ = ["Signals"]


class Signals:
    """The base of a purgatory's signal transport (not public: subclass is
    :class:`aiowheel.redis.RedisSignals`)."""

    def _adopt(self, purgatory: Any) -> None:
        """``purgatory`` was made with these signals (a transport serves one purgatory)."""
        raise NotImplementedError

    def _attach(self, purgatory: Any, loop: asyncio.AbstractEventLoop) -> None:
        """``purgatory`` bound to ``loop`` (running now): listen there for other processes'
        signals."""
        raise NotImplementedError

    def _signal(self, purgatory: Any, key: Hashable, data: Any) -> int:
        """``purgatory.signal(key)``: re-check ``key``'s local operations
        (``purgatory._recheck(key)``, whose count is returned) and send ``key`` on. Checks
        ``key`` before anything happens; never raises for a transport failure."""
        raise NotImplementedError
