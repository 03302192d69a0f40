"""Running what came due: the batch, its order, and the backlog beyond ``max_batch``.

The due callbacks of one pass of the driver (:mod:`aiowheel._time._driver`) run in deadline order in
*one* loop callback, exactly like loop callbacks (no current task, the loop's exception
handler; SystemExit or KeyboardInterrupt leaves the loop and the rest of the batch runs on the
loop's next iteration), at the cost of one loop handle per batch instead of one per timer.
The driver's entries and the native core's handles come due in the same pass as two lists,
each in deadline order: :func:`merge` makes them one.

The backlog. With ``max_batch`` set, a pass with more due callbacks than that runs them
``max_batch`` per loop iteration (:class:`Backlog`), in deadline order, and the loop polls its
I/O in between. The pace keeps timers from starving on a loop saturated with I/O: each
iteration runs one chunk, and one more for every ``PACE`` (a quarter of a second) the
backlog's first callback is late, so the backlog runs faster only once it has truly fallen
behind, and then until it keeps up.

Why lateness, and why so slow a pace. Each design was measured on the hub benchmark's mass
expiry (5,000 idle timeouts closing their connections while 5,000 others talk); the figures are
on the performance page (docs/performance.md, "The pace"), kept there with their date and build
rather than here, where they would go stale. In short: a share of the loop's own time hands the
closes' cleanup back as backlog time; a pace of 20 ms buys iterations of a hundred
milliseconds again; one chunk per iteration and nothing more starves timers for seconds; a
quarter of a second kept every timer within a few tenths of a second with the closes done as
soon as on stock uvloop. Lateness is what the pace reads, not time: it grows only when
callbacks come due faster than they run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from math import inf
from typing import Any, Final

from . import _debug
from ._entry import Timed
from ._wheel import Entry

__all__ = [
    "DEFAULT_MAX_BATCH",
    "PACE",
    "Backlog",
    "Dispatch",
    "in_deadline_order",
    "merge",
    "run_batch",
]

DEFAULT_MAX_BATCH: Final[int | None] = None
"""The most due callbacks a wheel runs per loop iteration by default (``max_batch``): no bound,
as asyncio runs every timer due in one iteration. A server that expires thousands of timers at
once sets it (see docs/loop-mode.md); a bound costs a program that runs a big due batch of cheap
callbacks one loop iteration per chunk."""

PACE: Final = 0.25
"""For every this many seconds the backlog's first callback is late, one more chunk runs in an
iteration (one runs while it is less late than this; the module docstring says why so slow)."""


def _no_clock() -> float:
    """The backlog's clock before its first pass: nothing waits, so nothing reads it."""
    return 0.0


def deadline_of(entry: Entry) -> tuple[float, int]:
    """An entry's place in a due batch: its exact deadline, then its filing stamp."""
    assert isinstance(entry, Timed)
    return entry._when, entry._seq


def when_of(item: Any) -> float:
    """A due item's deadline (an entry's or a core handle's)."""
    when: float = item._when
    return when


def _cancelled(item: Any) -> bool:
    """Whether a due item (an entry, or a core handle) was cancelled after it came due: a
    callback entry's handle says, as a core handle does; other entries never wait cancelled
    (their cancel takes them out, or they run and do nothing)."""
    shown = getattr(item, "_handle", item)
    cancelled = getattr(shown, "cancelled", None)
    return cancelled is not None and bool(cancelled())


def in_deadline_order(due: list[Entry]) -> None:
    """Put a pass's due entries in deadline order, and timers of one deadline in the order
    they were filed (their stamps).

    The wheel hands back each bucket's entries in the order they entered it, and a coarse
    bucket holds many deadlines: when the loop comes back late, a 10 ms timer could run before
    a 9 ms one filed after it. The loop's own heap runs them in deadline order, and so does
    this. A bucket's order is not the filing order either: a timer filed far ahead enters its
    last bucket when it cascades, after one of the same deadline filed later, nearer. Nearly
    every pass is in order already: one scan, and a sort only when it is not.
    """
    last = -inf
    last_seq = 0
    for entry in due:
        assert isinstance(entry, Timed)
        when = entry._when
        if when < last or (when == last and entry._seq < last_seq):
            due.sort(key=deadline_of)
            return
        last = when
        last_seq = entry._seq


def merge(
    first: list[Any],
    first_whens: list[float],
    second: list[Any],
    second_whens: list[float],
    stamps: tuple[list[int], list[int]] | None = None,
) -> tuple[list[Any], list[float]]:
    """Two lists in deadline order as one, with its deadlines: in a tie, ``first``'s ahead,
    or with ``stamps`` (each list's filing stamps) the one filed first."""
    merged: list[Any] = []
    merged_whens: list[float] = []
    i = j = 0
    while i < len(first) and j < len(second):
        if second_whens[j] < first_whens[i] or (
            stamps is not None and second_whens[j] == first_whens[i] and stamps[1][j] < stamps[0][i]
        ):
            merged.append(second[j])
            merged_whens.append(second_whens[j])
            j += 1
        else:
            merged.append(first[i])
            merged_whens.append(first_whens[i])
            i += 1
    merged.extend(first[i:])
    merged_whens.extend(first_whens[i:])
    merged.extend(second[j:])
    merged_whens.extend(second_whens[j:])
    return merged, merged_whens


def run_batch(batch: list[Any], loop: asyncio.AbstractEventLoop) -> None:
    """Run a batch of due callbacks (entries, core handles or both), in order, as one callback
    of ``loop``: SystemExit or KeyboardInterrupt leaves the loop, as from any loop callback,
    and the rest of the batch runs on the loop's next iteration (the loop named, not the
    running one: a loop driven by hand, its ``_run_once`` called with none running, has
    none)."""
    for index, item in enumerate(batch):
        try:
            item._run_due()
        except BaseException:
            rest = batch[index + 1 :]
            if rest:
                loop.call_soon(run_batch, rest, loop)
            raise


class Backlog:
    """Due callbacks beyond ``max_batch``, in deadline order, run a chunk at a time.

    ``run_native`` runs a chunk of the core's handles alone (in C); a chunk with any of the
    driver's entries runs through :func:`run_batch`.
    """

    __slots__ = (
        "_at",
        "_items",
        "_loop",
        "_native",
        "_now",
        "_queued",
        "_run_native",
        "_whens",
        "max_batch",
        "pace",
    )

    def __init__(self, max_batch: int, run_native: Callable[[list[Any]], None]) -> None:
        self.max_batch: Final = max_batch
        self._run_native: Final = run_native
        # Those before _at have run; _native: every one is a core handle; _queued: run() is
        # queued on the loop (call_soon); _now: the clock the deadlines are on (the driver's,
        # handed over with each pass: a loop's clock can be replaced).
        self._items: list[Any] = []
        self._whens: list[float] = []
        self._at = 0
        self._native = True
        self._queued = False
        self._now: Callable[[], float] = _no_clock
        # The loop it runs on, given with each pass (never asked of asyncio: a loop driven by
        # hand has none running, and a backlog that asked could never queue itself again).
        self._loop: asyncio.AbstractEventLoop | None = None
        # PACE; a test sets inf to see one chunk per iteration whatever the lateness.
        self.pace = PACE

    def waiting(self) -> bool:
        """Whether callbacks wait in the backlog."""
        return self._at < len(self._items)

    def unrun(self) -> list[Any]:
        """The callbacks waiting that have neither run nor been cancelled, in deadline order
        (pending timers to :func:`aiowheel.pending_timers` and ``loop._scheduled``'s
        readers: due, not yet run, and ``cancel()`` still stops them)."""
        return [item for item in self._items[self._at :] if not _cancelled(item)]

    def add(self, items: list[Any], whens: list[float], native: bool) -> None:
        """Add a pass's due callbacks (in deadline order; ``native``: all core handles),
        keeping the backlog in deadline order (ahead of a new one within a deadline: it came
        due first)."""
        waiting = self.waiting()
        self._native = native and (self._native or not waiting)
        at = self._at
        backlog = self._items
        backlog_when = self._whens
        if not waiting:
            self._items = items
            self._whens = whens
            self._at = 0
        elif not whens or whens[0] >= backlog_when[-1]:
            backlog.extend(items)  # nearly always: later than every one still waiting
            backlog_when.extend(whens)
        else:  # a deadline filed already past, earlier than some still waiting
            self._items, self._whens = merge(backlog[at:], backlog_when[at:], items, whens)
            self._at = 0

    def schedule(
        self, loop: asyncio.AbstractEventLoop, inline: bool, now: Callable[[], float]
    ) -> None:
        """Start running the backlog: now (``inline``: loop mode's reaper runs in a loop
        callback already) or as a loop callback, unless one is queued. ``now`` reads the clock
        the deadlines are on."""
        self._now = now
        self._loop = loop
        if self._queued:
            return
        if inline:
            self.run()
        else:
            loop.call_soon(self.run)
            self._queued = True

    def run(self) -> None:
        """Run the next ``max_batch`` callbacks (a loop callback, or inline in loop mode's
        reaper); if more wait, queue itself on the loop again, so that the loop polls its I/O
        and runs what that woke before the next chunk. SystemExit or KeyboardInterrupt leaves
        the loop as from any loop callback; the rest of the chunk and of the backlog run on the
        loop's next iteration, in order. One more chunk for every ``PACE`` seconds the first is
        late (the module docstring).
        """
        self._queued = False
        loop = self._loop
        assert loop is not None  # set by schedule(), which queues or calls run()
        chunks = 1
        if self._at < len(self._whens):
            late = self._now() - self._whens[self._at]
            pace = self.pace
            if late >= pace:
                chunks += int(late / pace)
        try:
            while True:
                backlog = self._items
                at = self._at
                if at >= len(backlog):
                    return  # drained, or debug mode handed it to the loop (to_loop)
                native = self._native
                end = at + self.max_batch
                if end >= len(backlog):
                    chunk = backlog[at:] if at else backlog
                    # Drained before it runs: a pass the chunk's callbacks start begins anew.
                    self._clear()
                else:
                    chunk = backlog[at:end]
                    self._at = end
                if native:
                    self._run_native(chunk)
                else:
                    run_batch(chunk, loop)
                chunks -= 1
                if chunks <= 0:
                    return
        finally:
            if self.waiting() and not self._queued:
                loop.call_soon(self.run)  # if it raises (a closed loop), nothing is queued
                self._queued = True

    def to_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Debug mode: every callback of the backlog a loop callback of its own, in order."""
        backlog = self._items
        at = self._at
        self._clear()
        for index in range(at, len(backlog)):
            loop.call_soon(_debug.DueCallback(backlog[index]))

    def _clear(self) -> None:
        self._items = []
        self._whens = []
        self._at = 0
        self._native = True


class Dispatch:
    """One pass's due callbacks, handed to the loop when the pass ends.

    The driver's entries queue themselves as they fire (:meth:`queue`, from the ``Owner``
    API); the native core's due handles come as one list (:meth:`take_handles`).
    :meth:`dispatch` hands them to the loop: one batch in deadline order (one loop callback,
    or run inline by loop mode's reaper); in debug mode each its own loop callback, so asyncio's
    debug machinery (the slow-callback report, the current handle) sees and names each one;
    more than ``max_batch``, or any while earlier ones still wait, through the :class:`Backlog`.
    ``run_handles`` runs a batch of the core's handles alone (in C).
    """

    __slots__ = ("_backlog", "_handles", "_ready", "_ready_seq", "_ready_when", "_run_handles")

    def __init__(self, max_batch: int, run_handles: Callable[[list[Any]], None]) -> None:
        self._run_handles: Final = run_handles
        self._backlog: Final = Backlog(max_batch, run_handles)
        # The deadline each entry came due at: a heartbeat re-files itself before the batch
        # runs, and the merge must order it by the deadline it fired for.
        # Their stamps too, for the same reason (a re-filed heartbeat is stamped again).
        self._ready: list[Timed] = []
        self._ready_when: list[float] = []
        self._ready_seq: list[int] = []
        self._handles: Any = None

    def waiting(self) -> list[Any]:
        """The due callbacks waiting in the backlog, neither run nor cancelled (see
        :meth:`Backlog.unrun`)."""
        return self._backlog.unrun()

    def queue(self, entry: Timed) -> None:
        """Run ``entry._run_due()`` in this pass's batch."""
        self._ready.append(entry)
        self._ready_when.append(entry._when)
        self._ready_seq.append(entry._seq)

    def take_handles(self, handles: list[Any]) -> None:
        """The native core's due handles of this pass, in deadline order."""
        self._handles = handles

    def dispatch(
        self,
        loop: asyncio.AbstractEventLoop,
        inline: bool,
        debug: bool,
        now: Callable[[], float],
    ) -> None:
        """Hand this pass's due callbacks, if any, to ``loop`` (see the class docstring);
        ``now`` reads the clock their deadlines are on (the backlog's pace)."""
        batch: list[Any] = self._ready
        handles = self._handles
        if not batch and handles is None:
            return
        whens = self._ready_when
        seqs = self._ready_seq
        self._ready = []
        self._ready_when = []
        self._ready_seq = []
        self._handles = None
        handles_only = not batch
        if handles is not None:
            if handles_only:
                batch = handles
            else:  # the driver's entries and the core's handles: by deadline, then stamp
                batch, whens = merge(
                    batch,
                    whens,
                    handles,
                    [when_of(item) for item in handles],
                    (seqs, [item._seq for item in handles]),
                )
        backlog = self._backlog
        if len(batch) > backlog.max_batch or backlog.waiting():
            if handles_only:
                whens = [when_of(item) for item in batch]
            backlog.add(batch, whens, handles_only)
            if debug:
                backlog.to_loop(loop)
            else:
                backlog.schedule(loop, inline, now)
        elif debug:
            for due in batch:
                loop.call_soon(_debug.DueCallback(due))
        elif handles_only:
            if inline:
                self._run_handles(batch)
            else:
                loop.call_soon(self._run_handles, batch)
        elif inline:
            run_batch(batch, loop)
        else:
            loop.call_soon(run_batch, batch, loop)
