"""The timer store: where the driver keeps pending timers, behind one interface.

Why a seam. The compiled build keeps timers in two wheels on one tick grid: the mypyc
:class:`~aiowheel._time._wheel.Wheel` for aiowheel's own entries (timeouts, heartbeats, sleepers,
scheduled starts: mypyc classes whose methods the driver calls natively) and the native core's
wheel (:mod:`aiowheel._time._core`, in C) for every *callback* handle, whose whole life (filed by
loop mode's ``call_later``, cancelled, run in a due batch) then stays in C. The pure-Python
build, and a compiled one without a C compiler, has one wheel for both, and is the core's
executable reference (``tests/time/test_native.py`` feeds both the same operations). The driver
(:mod:`aiowheel._time._driver`) must not care which: it talks to a :class:`Store`, and the choice is
made once, when the driver binds (:func:`store_for`). Kafka's ``SystemTimer`` has its
``TimingWheel`` the same way, through one choke point.

The interface (every method is the driver's; nothing else writes a store):

- ``insert`` / ``move`` / ``remove`` an entry of the driver's (the wheel's operations: they
  return the expiration of a bucket that was queued, ``UNQUEUED`` otherwise);
- ``file_call`` a callback handle (the core's hot path; ``NotImplemented`` where the wheel
  takes it as an entry: no core, or a deadline beyond the core's grid);
- ``next_expiration`` over both wheels; ``advance`` the wheel to a tick (its due entries, which
  the driver fires) and ``take_handles`` of the core (its due handles, fired in C, which the
  driver merges with its own batch by deadline); ``run`` a batch of the core's handles;
- ``entries`` / ``handles`` (introspection), ``len``, the counters, ``close``.

The core is told what decides its fast lane and which thread may cancel (``sync``), the
expiration the driver's wake-up is armed for (``set_armed``: the core calls the driver's arm
only when it queues an earlier bucket), and a new clock (``set_clock``).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from math import inf
from typing import Any, Final

from .._common import _build
from ._entry import Timed
from ._handles import EMPTY_CONTEXT, callback_repr, loop_of_callbacks
from ._observe import ASYNCIO_ON_TIMEOUT, WAIT_FOR_TIMER
from ._wheel import Entry, Wheel, entries_at

__all__ = ["CORE_TICKS", "NativeStore", "Store", "load_native", "native", "store_for"]

CORE_TICKS: Final = 1 << 62
"""The native core's grid: its ticks are int64 and it files no finite deadline at or past this
tick (``NEVER_TICK`` in the C core: the wheel takes those), so a clock that has gone further is,
to the core, at its last tick."""


def load_native() -> Any:
    """The native core (aiowheel/_time/_core.c) if this is the compiled build and it was built with
    it; None for the pure-Python build (the executable reference) or without a compiler."""
    if _build.sources_preferred("aiowheel"):
        return None  # the pure-Python build runs: all of it, the core's reference included
    try:
        from . import _core  # type: ignore[attr-defined,unused-ignore]
    except ImportError:  # pragma: no cover - setup.py builds it with the mypyc modules
        return None
    # What loop mode's native calls hand to the slow path, whose driver notes it in its index
    # of the timeouts guarding each task (_observe.Guards): asyncio's Timeout expiry, 3.11's
    # wait_for timer.
    _core.setup(callback_repr, EMPTY_CONTEXT, loop_of_callbacks, ASYNCIO_ON_TIMEOUT, WAIT_FOR_TIMER)
    return _core


def native_running_loop() -> Callable[[], asyncio.AbstractEventLoop | None] | None:
    """The native core's ``running_loop`` (``asyncio._get_running_loop()`` without 3.11's
    ``getpid()``: :mod:`aiowheel._time._threads` decides where it applies), or None for the
    pure-Python build."""
    native = load_native()
    return None if native is None else native.running_loop  # type: ignore[no-any-return,unused-ignore]


# The native core module, or None. Drivers bound while it is None keep their callback handles in
# the (compiled or pure) wheel: tests set it to None to compare both.
native: Any = load_native()


class Store:
    """The wheel alone: every timer, callback handles included, is an entry of it."""

    __slots__ = ("_stamped", "wheel")

    def __init__(self, slots: int) -> None:
        self.wheel: Final = Wheel(slots)
        self._stamped = 0

    # -- the driver's entries --------------------------------------------------------------------

    def stamp(self) -> int:
        """The next filing stamp: timers of one deadline run in the order of theirs (the order
        they were filed in, whatever buckets they came through)."""
        self._stamped += 1
        return self._stamped

    def insert(self, entry: Entry, tick: int) -> int:
        """File ``entry`` at ``tick`` (see :meth:`aiowheel._time._wheel.Wheel.insert`)."""
        return self.wheel.insert(entry, tick)

    def move(self, entry: Entry, tick: int) -> int:
        """Re-file a pending ``entry`` at ``tick``."""
        return self.wheel.move(entry, tick)

    def remove(self, entry: Entry) -> bool:
        """Take ``entry`` out; True if it was in."""
        return self.wheel.remove(entry)

    def advance(self, tick: int) -> list[Entry]:
        """Advance the wheel to ``tick``: its entries now due (the driver fires them)."""
        return self.wheel.advance(tick)

    def entries(self) -> list[Entry]:
        """The wheel's pending entries."""
        return self.wheel.entries()

    def drain(self) -> list[Entry]:
        """Take every entry out of the wheel (a new clock files them again)."""
        return self.wheel.drain()

    @property
    def elapsed(self) -> int:
        """The tick the wheel has processed up to."""
        return self.wheel.elapsed

    @property
    def count(self) -> int:
        """The wheel's pending entries (the store's own, without the core's handles)."""
        return len(self.wheel)

    # -- both wheels -----------------------------------------------------------------------------

    def __len__(self) -> int:
        """Every pending timer."""
        return len(self.wheel)

    def next_expiration(self) -> int | None:
        """The earliest queued bucket's expiration, or None."""
        return self.wheel.next_expiration()

    def earliest(self, expiration: int) -> float:
        """The earliest exact deadline in the buckets queued under ``expiration`` (inf if
        none): where an exact clock wakes (:meth:`aiowheel._time._reaper.Reaper.arm`)."""
        earliest = inf
        for entry in entries_at(self.wheel, expiration):
            assert isinstance(entry, Timed)
            when = entry._when
            if when < earliest:
                earliest = when
        return earliest

    @property
    def removed(self) -> int:
        """Timers taken out before they were due."""
        return self.wheel.removed

    @property
    def queued(self) -> int:
        """Items in the delay queue (at most one per bucket)."""
        return self.wheel.queued

    # -- callback handles (the core's; here: none) -----------------------------------------------

    def attach(
        self,
        arm: Callable[[], None],
        tick: float,
        epoch: float,
        clock: Callable[[], float],
        claim: Callable[[], None],
    ) -> None:
        """Bind to a loop: the wheel needs nothing (the core is made here)."""

    def file_call(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> Any:
        """File a callback handle; ``NotImplemented``: the driver files it in the wheel."""
        return NotImplemented

    def take_handles(
        self, tick: int, now: float, floor: float, lateness: float
    ) -> tuple[Any, int, int, float]:
        """The core's due handles at ``tick``: (batch or None, how many fired, the first one's
        tick, the max lateness so far)."""
        return None, 0, 0, lateness

    def run(self, batch: list[Any]) -> None:
        """Run a batch of the core's handles."""

    def handles(self) -> list[Any]:
        """The core's pending handles."""
        return []

    def set_armed(self, expiration: int, exact_at: float) -> None:
        """The expiration the driver's wake-up is armed for, and on an exact clock its time
        (a deadline filed before it must re-arm; -inf otherwise)."""

    def sync(self, fast: bool, debug: bool, thread: int) -> None:
        """What decides the core's fast lane, and whose thread may cancel."""

    def set_clock(self, clock: Callable[[], float], epoch: float) -> None:
        """The driver reads a new clock; its grid starts at ``epoch``."""

    def native_calls(
        self,
        threshold: float,
        near_pad: float,
        near_call_at: Callable[..., object],
        near_call_later: Callable[..., object] | None,
        slow_call_at: Callable[..., object],
        slow_call_later: Callable[..., object],
    ) -> tuple[Callable[..., object], Callable[..., object]] | None:
        """Loop mode's ``call_at`` / ``call_later`` in native code; None: none here."""
        return None

    def note_guards(self, note: Callable[[object], None]) -> None:
        """From now on, tell ``note`` of each ``asyncio.Timeout`` whose expiry the native
        core's ``call_at`` files (no core here: loop mode's calls note their own)."""

    def close(self) -> list[Any]:
        """Out of the fast lane, and drained: the core's unfired handles."""
        return []


class NativeStore(Store):
    """The wheel for the driver's entries, the native core for callback handles (made when
    the driver binds: :meth:`attach`; the read side answers for an empty core before)."""

    __slots__ = ("_core", "_file")

    def __init__(self, slots: int) -> None:
        super().__init__(slots)
        self._core: Any = None
        self._file: Callable[..., Any] = _unbound

    def attach(
        self,
        arm: Callable[[], None],
        tick: float,
        epoch: float,
        clock: Callable[[], float],
        claim: Callable[[], None],
    ) -> None:
        """Make the core, on the wheel's grid; it calls ``arm`` when it queues a bucket earlier
        than the armed wake-up, and ``claim`` for the thread check of a foreign cancel."""
        old = self._core
        if old is not None:
            self._stamped = old.seq
        self._core = core = native.Core(
            arm, tick, self.wheel.slots, epoch, _native_clock(clock), claim=claim
        )
        # One count of stamps for the entries and the core's handles: the entries stamped
        # before (by this store) stay ahead of every handle the core files.
        core.seq = self._stamped
        # Bound once: the hot path calls it without looking the method up by name each time.
        self._file = core.file

    def stamp(self) -> int:
        """See :meth:`Store.stamp` (the core's count, which its handles take theirs from)."""
        core = self._core
        if core is None:
            return super().stamp()
        seq: int = core.stamp()
        return seq

    def file_call(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context | None,
    ) -> Any:
        """The core files it (``NotImplemented`` past its grid: the wheel takes it)."""
        return self._file(when, callback, args, context)

    def take_handles(
        self, tick: int, now: float, floor: float, lateness: float
    ) -> tuple[Any, int, int, float]:
        """See :meth:`Store.take_handles`."""
        batch, fired, first, lateness = self._core.advance(
            tick if tick < CORE_TICKS else CORE_TICKS - 1, now, floor, lateness
        )
        return (batch if fired else None), fired, first, lateness

    def run(self, batch: list[Any]) -> None:
        """The core runs the batch (in C)."""
        self._core.run(batch)

    def handles(self) -> list[Any]:
        """See :meth:`Store.handles`."""
        core = self._core
        return [] if core is None else list(core.entries())

    def __len__(self) -> int:
        """Every pending timer: the wheel's and the core's."""
        core = self._core
        return len(self.wheel) + (0 if core is None else len(core))

    def next_expiration(self) -> int | None:
        """The earlier of the two wheels' next expirations."""
        mine = self.wheel.next_expiration()
        core = self._core
        theirs: int | None = None if core is None else core.next_expiration()
        if theirs is not None and (mine is None or theirs < mine):
            return theirs
        return mine

    @property
    def removed(self) -> int:
        """See :attr:`Store.removed`."""
        removed: int = 0 if self._core is None else self._core.removed
        return self.wheel.removed + removed

    @property
    def queued(self) -> int:
        """See :attr:`Store.queued`."""
        queued: int = 0 if self._core is None else self._core.queued
        return self.wheel.queued + queued

    def set_armed(self, expiration: int, exact_at: float) -> None:
        """See :meth:`Store.set_armed`."""
        self._core.set_armed(expiration, exact_at)

    def earliest(self, expiration: int) -> float:
        """See :meth:`Store.earliest`: both wheels."""
        mine = super().earliest(expiration)
        core = self._core
        theirs: float = inf if core is None else core.earliest(expiration)
        return theirs if theirs < mine else mine

    def sync(self, fast: bool, debug: bool, thread: int) -> None:
        """See :meth:`Store.sync` (before :meth:`attach`: nothing to tell yet)."""
        core = self._core
        if core is not None:
            core.update(fast, debug, thread)

    def set_clock(self, clock: Callable[[], float], epoch: float) -> None:
        """See :meth:`Store.set_clock`."""
        self._core.set_clock(_native_clock(clock))
        self._core.rebase(epoch)

    def native_calls(
        self,
        threshold: float,
        near_pad: float,
        near_call_at: Callable[..., object],
        near_call_later: Callable[..., object] | None,
        slow_call_at: Callable[..., object],
        slow_call_later: Callable[..., object],
    ) -> tuple[Callable[..., object], Callable[..., object]] | None:
        """The core's ``call_at`` / ``call_later``, routing as
        :class:`~aiowheel._loopmode._loopcalls.LoopCalls` does (whose methods are the slow path it
        hands every other call to). ``near_call_later`` None: the base's is asyncio's,
        ``call_at(time() + delay)``, which the core does itself."""
        core = self._core
        core.route(
            threshold, near_pad, near_call_at, near_call_later, slow_call_at, slow_call_later
        )
        return core.call_at, core.call_later

    def note_guards(self, note: Callable[[object], None]) -> None:
        """See :meth:`Store.note_guards`: the core's ``call_at`` tells ``note``."""
        self._core.note_guards(note)

    def close(self) -> list[Any]:
        """See :meth:`Store.close`."""
        core = self._core
        return [] if core is None else list(core.close())


def _unbound(*_: object) -> Any:
    """A NativeStore's file_call before it is attached: the wheel takes the timer."""
    return NotImplemented


def _native_clock(clock: Callable[[], float]) -> Callable[[], float] | None:
    """The clock as the core takes it: None for ``time.monotonic``, which it reads itself."""
    return None if clock is time.monotonic else clock


def store_for(slots: int) -> Store:
    """The store a driver binds with: the core's where there is one."""
    return Store(slots) if native is None else NativeStore(slots)
