"""The sans-IO hierarchical timing wheel: integer ticks in, due entries out.

Theory of operation
===================

This module knows nothing of asyncio, clocks or threads. Time is an integer *tick*; the caller
says what tick it is now (:meth:`Wheel.advance`) and gets back every entry whose deadline tick
has been reached. Everything that decides *where* an entry lives and *when* a bucket must be
looked at lives here, so that it can be tested deterministically, one tick at a time.

Why a wheel. The workload this library is built for arms a timer for nearly every request and
cancels nearly all of them before they fire. A binary heap (asyncio's ``TimerHandle`` heap)
pays O(log n) per arm and leaves every cancelled handle behind as a tombstone until it surfaces
or the heap is rebuilt. A wheel files an entry into a *bucket* by arithmetic on its deadline
(O(1)), and a cancelled entry unlinks itself from its bucket (O(1)) and is freed at once.

Levels. There are ``levels`` levels of ``slots`` buckets each (``slots`` a power of two, so a
slot index is a shift and a mask; 64 by default, as in tokio). A level-0 bucket holds the
entries of exactly one tick; a level-``k`` bucket covers ``slots**k`` ticks. Like tokio (and
unlike Kafka's overflow wheels created on demand) the number of levels is fixed when the wheel
is built: enough levels to span at least ``2**64`` ticks (11 levels of 64: 704 buckets), which
keeps the bucket array, the placement tables and the invariants static and small, makes a
deadline of 2**62 ticks reachable in at most one hop per level, and leaves the far-deadline
case one explicit branch instead of a chain of lazily created wheels.

Placement (Kafka's rule). An entry with deadline ``tick`` goes to the finest level whose
*window* holds it: level ``k``'s window starts at ``elapsed`` (the last tick advanced to)
rounded down to a level-``k`` slot and spans ``slots**(k+1)`` ticks. Within the level the slot
is the tick's digit at that level, and the bucket's *expiration* is ``tick`` with the lower
levels' digits cleared: the first tick at which any entry of that bucket can be due. All
entries of one bucket share that expiration (live expirations of a level lie within one
window, where each digit occurs once), so the bucket, not the entry, is what needs waking
for. Placing by distance rather than by the highest digit in which tick and elapsed differ
(tokio's ``level_for``) matters for steady loads: a timer 1 s out always lands in a 64-tick
level-1 bucket, instead of in one huge level-2 bucket whenever a 4,096-tick boundary happens
to lie before it, whose cascade would stall the loop for tens of milliseconds at 100k
timers per second. A one-entry cache remembers the last bucket and the tick range that maps
to it while ``elapsed`` stays: most timers are armed with the same timeout as the previous
one.

Bucket expirations. When a bucket becomes non-empty at expiration ``e``, :meth:`Wheel.add`
returns ``e`` and pushes one item for the bucket on ``_heap``: the priority structure has one
item per non-empty bucket, never one per entry. ``_queued[i]`` remembers the expiration the
bucket is queued under, so a bucket that empties (by cancellations) and refills before it is
due reuses its item instead of pushing a duplicate; an item whose bucket emptied is dropped when
it reaches the top (:meth:`next_expiration`) or is popped. The heap therefore never holds more
than one live item per bucket. A driver sleeps until :meth:`next_expiration`.

The cascade. :meth:`advance` pops every bucket whose expiration is ``<= now`` in expiration
order, moving ``elapsed`` to each expiration in turn (Kafka's ``advanceClock``). Each entry of
the bucket is either due (``tick <= now``: handed back) or re-filed relative to the new
``elapsed``, which puts it in a finer level (or a later slot); if that bucket is due too it is
popped in the same call. Re-filing into level 0, by far the common case, is inlined: a busy
wheel's coarse bucket holds thousands of entries, and that loop is the pause the event loop
sees when the bucket comes due.

Nothing can fire early, because an entry is handed back only when its own ``tick <= now``,
whatever bucket it was found in; nothing is lost, because every bucket's expiration is ``<=``
the ticks of its entries, so a due entry's bucket has always been popped.

Lazy re-file (tokio). Moving an entry's deadline *later* only rewrites ``entry._tick``: the
entry stays in a bucket that now expires before it, and when that bucket is processed the entry
is simply re-filed. That is O(1) with no heap or bucket work, so an idle timeout pushed back on
every read costs one attribute store. The price: an entry pushed back many times is re-filed
once per bucket it passes through (at most once per level, per pass), instead of never.

Far deadlines (the top level is a ring). A deadline whose digits differ from ``elapsed`` above
the top level does not fit any level's current rotation. Such an entry goes to the top level in
the slot of its own top digit, with the bucket's next occurrence of that slot as expiration
(the next rotation if the slot has already passed). When that bucket comes due the entry is
re-filed, and so travels around the ring once per ``slots**levels`` ticks until its deadline is
within reach. Any ``int`` deadline works, 2**62 ticks and beyond.

"Never" (``tick >= NEVER``, e.g. an infinite deadline) is held in a separate list outside the
buckets: counted in ``len()``, removable, never due.

Entries are intrusive: each :class:`Entry` carries the links of the circular, doubly linked
list of its bucket (Kafka's ``TimerTaskList``), so removal needs no search and no container
memory. An entry is in a wheel exactly when ``_prev is not None``.
"""

from __future__ import annotations

from heapq import heappop, heappush
from typing import Final

from .._common._build import mypyc_attr
from .._common._validate import MAX_SLOTS as _MAX_SLOTS
from .._common._validate import Count

__all__ = ["MAX_SLOTS", "NEVER", "UNQUEUED", "Entry", "Wheel", "entries_at"]

#: A deadline tick at or beyond this is "never": held outside the buckets, never due.
#: ``2**1024`` exceeds the ceiling of every finite float, so no finite clock reading maps to it.
NEVER: Final[int] = 1 << 1024

#: What :meth:`Wheel.add` (and ``insert``, ``move``) return when the call queued no bucket. A
#: driver re-arms its wake-up when the returned tick is earlier than the one it is armed for,
#: so this must be at least any armed tick that matters: it is the largest int the compiled
#: build holds unboxed (a tagged int), which keeps that comparison, made for nearly every timer
#: filed, a machine compare (a boxed int would go through PyObject_RichCompare). A
#: driver armed beyond it (only by deadlines 2**62 ticks away) re-arms once more than it must,
#: which is harmless.
UNQUEUED: Final[int] = (1 << 62) - 1

#: The most buckets a level may have: the native core's limit too (a level of 2**20 buckets
#: is 24 MiB of lists already; more buys nothing a second level does not).
MAX_SLOTS: Final = _MAX_SLOTS

# Levels are added until the wheel spans at least 2**_SPAN_BITS ticks. Fewer levels would make a
# deadline of 2**62 ticks ring around the top level 2**26 times; each level costs `slots` buckets.
_SPAN_BITS: Final = 64


@mypyc_attr(allow_interpreted_subclasses=True)
class Entry:
    """A timer as the wheel sees it: bucket links and a deadline tick.

    Subclass it to attach a payload; the wheel only touches these three slots. (In the
    compiled build a subclass may be plain Python: the sans-IO core is usable on its own.)
    """

    __slots__ = ("_next", "_prev", "_tick")

    _prev: Entry | None
    _next: Entry | None
    _tick: int

    def __init__(self) -> None:
        self._prev = None
        self._next = None
        self._tick = 0

    @property
    def tick(self) -> int:
        """The deadline tick this entry was last filed or moved to."""
        return self._tick

    def pending(self) -> bool:
        """True while the entry is in a wheel (neither removed nor handed back as due)."""
        return self._prev is not None


class _Bucket(Entry):
    """The sentinel of one bucket's circular list (its ``_tick`` is unused)."""

    __slots__ = ()

    def __init__(self) -> None:
        self._prev = self
        self._next = self
        self._tick = 0


def _tick_of(entry: Entry) -> int:
    return entry._tick


class Wheel:
    """A hierarchical timing wheel over integer ticks.

    >>> w = Wheel(slots=64)
    >>> e = Entry()
    >>> w.add(e, 100)          # a bucket became non-empty: it must be processed at tick 64
    64
    >>> w.advance(99)
    []
    >>> w.advance(100) == [e]
    True
    """

    __slots__ = (
        "_bits",
        "_buckets",
        "_cache_expiration",
        "_cache_high",
        "_cache_index",
        "_cache_low",
        "_count",
        "_elapsed",
        "_heap",
        "_horizon",
        "_key_bits",
        "_key_mask",
        "_level_of",
        "_levels",
        "_mask",
        "_never",
        "_queued",
        "_removed",
        "_span_bits",
    )

    def __init__(self, slots: Count = 64, *, start: Count = 0) -> None:
        """Build an empty wheel with ``slots`` buckets per level, whose clock reads ``start``.

        Raises ValueError if ``slots`` is not a power of two from 2 to :data:`MAX_SLOTS`,
        TypeError if ``start`` is not an int.
        """
        if type(slots) is not int or slots < 2 or slots > MAX_SLOTS or slots & (slots - 1):
            raise ValueError(
                f"slots must be a power of two from 2 to {MAX_SLOTS} (2**20), got {slots!r}"
            )
        if type(start) is not int:
            raise TypeError(f"start must be an int tick, got {type(start).__name__}")
        bits = slots.bit_length() - 1
        levels = -(-_SPAN_BITS // bits)
        self._bits: Final = bits
        self._mask: Final = slots - 1
        self._levels: Final = levels
        # (tick ^ elapsed) | mask below the horizon fits a level's current rotation.
        self._horizon: Final = 1 << (levels * bits)
        # Indexed by the bit length of (tick - elapsed): the smallest level whose span covers
        # that distance. One lookup instead of a division on the hot path.
        self._level_of: Final = tuple(max(n - 1, 0) // bits for n in range(levels * bits + 1))
        self._span_bits: Final = levels * bits
        self._buckets: Final = [_Bucket() for _ in range(levels * slots)]
        # The expiration each bucket is queued under on _heap, NEVER if none.
        self._queued: Final = [NEVER] * (levels * slots)
        # Heap items are ints: expiration << key_bits | bucket index. Ints compare faster than
        # tuples and cost no tuple allocation.
        self._heap: Final[list[int]] = []
        self._key_bits: Final = (levels * slots - 1).bit_length()
        self._key_mask: Final = (1 << self._key_bits) - 1
        self._never: Final = _Bucket()
        self._elapsed = start
        self._count = 0
        self._removed = 0
        self._cache_low = 0
        self._cache_high = 0  # empty range: no placement cached
        self._cache_index = 0
        self._cache_expiration = 0

    # -- introspection -------------------------------------------------------------------------

    def __len__(self) -> int:
        """The exact number of pending entries (including "never" ones)."""
        return self._count

    def __repr__(self) -> str:
        return (
            f"<Wheel slots={self._mask + 1} levels={self._levels} elapsed={self._elapsed} "
            f"pending={self._count} queued_buckets={len(self._heap)}>"
        )

    @property
    def slots(self) -> int:
        """Buckets per level."""
        return self._mask + 1

    @property
    def levels(self) -> int:
        """Number of levels."""
        return self._levels

    @property
    def elapsed(self) -> int:
        """The tick the wheel was last advanced to."""
        return self._elapsed

    @property
    def removed(self) -> int:
        """How many entries :meth:`remove` has taken out (cancellations) so far."""
        return self._removed

    # -- the hot paths -------------------------------------------------------------------------

    def add(self, entry: Entry, tick: Count) -> int:
        """File ``entry`` to become due at ``tick``.

        Returns the expiration tick of the bucket if this call queued it (the driver must make
        sure it wakes by then), else UNQUEUED. A tick at or before ``elapsed`` is due at the next
        :meth:`advance`. Raises TypeError if ``tick`` is not an int, ValueError if the entry is
        already in a wheel.
        """
        if type(tick) is not int:
            raise TypeError(f"tick must be an int, got {type(tick).__name__}")
        if entry._prev is not None:
            raise ValueError("entry is already pending in a wheel")
        return self.insert(entry, tick)

    def remove(self, entry: Entry) -> bool:
        """Take ``entry`` out. Returns False (and changes nothing) if it is not pending."""
        prev = entry._prev
        if prev is None:
            return False
        nxt = entry._next
        prev._next = nxt
        if nxt is not None:
            nxt._prev = prev
        entry._prev = entry._next = None
        self._count -= 1
        self._removed += 1
        return True

    def move(self, entry: Entry, tick: Count) -> int:
        """Change a pending entry's deadline to ``tick``; returns like :meth:`add`.

        Moving later (or to the same tick) is O(1) and touches no bucket: the entry is
        re-filed when its current bucket comes due. Moving earlier unlinks and re-files it.
        Raises TypeError for a non-int tick, ValueError if the entry is not pending.
        """
        if type(tick) is not int:
            raise TypeError(f"tick must be an int, got {type(tick).__name__}")
        if entry._prev is None:
            raise ValueError("entry is not pending")
        if tick >= entry._tick:
            entry._tick = tick
            return UNQUEUED
        self.remove(entry)
        self._removed -= 1  # a move, not a cancellation
        return self.insert(entry, tick)

    def insert(self, entry: Entry, tick: int) -> int:
        """:meth:`add` without its checks, for drivers that guarantee an int tick and an
        entry that is not pending (a wrong call corrupts the wheel)."""
        entry._tick = tick
        self._count += 1
        if self._cache_low <= tick < self._cache_high:
            # Same bucket as the previous insert (same elapsed, same slot range): the common
            # case of many timers armed with one timeout value.
            index = self._cache_index
            expiration = self._cache_expiration
        else:
            elapsed = self._elapsed
            if tick >= elapsed:
                # The smallest level whose window [elapsed rounded down to the level's slot,
                # + the level's span) holds the tick (Kafka's rule: by distance, not by the
                # highest differing digit, so a timer 1 s out never lands in a coarse bucket
                # because a digit boundary happens to lie in between). The distance's bit
                # length gives the candidate; rounding elapsed down may push it one up.
                length = (tick - elapsed).bit_length()
                if length > self._span_bits:
                    return self._insert_far(entry, tick)
                level = self._level_of[length]
                shift = level * self._bits
                window = elapsed & -(1 << shift)
                if tick >= window + (self._mask + 1 << shift):
                    level += 1
                    if level == self._levels:
                        return self._insert_far(entry, tick)
                    shift += self._bits
                    window = elapsed & -(1 << shift)
                index = (level << self._bits) + ((tick >> shift) & self._mask)
                expiration = tick & -(1 << shift)
                # The ticks that share this bucket while elapsed stays: the rest of its slot,
                # less those that fit the level below.
                low = expiration
                if level:
                    low = max(low, (elapsed & -(1 << (shift - self._bits))) + (1 << shift))
                self._cache_low = low
                self._cache_high = expiration + (1 << shift)
                self._cache_index = index
                self._cache_expiration = expiration
            else:
                # Already due: the level-0 bucket of `elapsed` holds only entries due now.
                index = elapsed & self._mask
                expiration = elapsed
        bucket = self._buckets[index]
        tail = bucket._prev
        entry._prev = tail
        entry._next = bucket
        bucket._prev = entry
        if tail is not None:
            tail._next = entry
        if expiration < self._queued[index]:
            self._queued[index] = expiration
            heappush(self._heap, (expiration << self._key_bits) | index)
            return expiration
        return UNQUEUED

    def _insert_far(self, entry: Entry, tick: int) -> int:
        """Insert an entry beyond the top level's current rotation (see "Far deadlines")."""
        if tick >= NEVER:
            bucket = self._never
            index = -1
            expiration = NEVER
        else:
            # The top level's slot of the tick's digit, at its one occurrence in the top
            # level's window; the window's current slot (which holds no other entry: those
            # fit a finer level) stands for its next occurrence.
            level = self._levels - 1
            shift = level * self._bits
            window = self._elapsed & -(1 << shift)
            expiration = window + (((tick - window) & (self._horizon - 1)) & -(1 << shift))
            if expiration <= self._elapsed:
                expiration += self._horizon
            index = (level << self._bits) + ((expiration >> shift) & self._mask)
            bucket = self._buckets[index]
        tail = bucket._prev
        entry._prev = tail
        entry._next = bucket
        bucket._prev = entry
        if tail is not None:
            tail._next = entry
        if index >= 0 and expiration < self._queued[index]:
            self._queued[index] = expiration
            heappush(self._heap, (expiration << self._key_bits) | index)
            return expiration
        return UNQUEUED

    # -- time ----------------------------------------------------------------------------------

    def next_expiration(self) -> int | None:
        """The earliest tick at which a non-empty bucket must be processed, or None.

        Items of buckets that were emptied by removals are dropped on the way.
        """
        heap = self._heap
        key_bits = self._key_bits
        key_mask = self._key_mask
        queued = self._queued
        buckets = self._buckets
        while heap:
            key = heap[0]
            expiration = key >> key_bits
            index = key & key_mask
            if queued[index] == expiration:
                bucket = buckets[index]
                if bucket._next is not bucket:
                    return expiration
                queued[index] = NEVER
            heappop(heap)
        return None

    def advance(self, now: Count) -> list[Entry]:
        """Move the clock to ``now`` and return every entry whose tick is ``<= now``.

        Entries come back in tick order and are no longer pending. Entries found in a due
        coarse bucket but not due yet are re-filed into finer buckets (the cascade). Raises
        TypeError for a non-int ``now``, ValueError if ``now`` is before ``elapsed``.
        """
        if type(now) is not int:
            raise TypeError(f"now must be an int tick, got {type(now).__name__}")
        if now < self._elapsed:
            raise ValueError(f"time cannot go backwards: now={now} < elapsed={self._elapsed}")
        due: list[Entry] = []
        mask = self._mask
        heap = self._heap
        key_bits = self._key_bits
        key_mask = self._key_mask
        queued = self._queued
        buckets = self._buckets
        in_order = True
        while heap and heap[0] >> key_bits <= now:
            key = heappop(heap)
            expiration = key >> key_bits
            index = key & key_mask
            if queued[index] != expiration:
                continue  # superseded by an earlier expiration of the same bucket
            queued[index] = NEVER
            bucket = buckets[index]
            entry = bucket._next
            if entry is bucket:
                continue  # emptied by removals
            # Detach the whole chain, then hand back or re-file each entry.
            last = bucket._prev
            if last is not None:
                last._next = None
            bucket._next = bucket._prev = bucket
            if expiration > self._elapsed:
                self._set_elapsed(expiration)
            # Past this tick an entry no longer fits level 0 (whose window starts at elapsed).
            level0_end = self._elapsed + mask + 1
            while entry is not None:
                nxt = entry._next
                tick = entry._tick
                if tick <= now:
                    entry._prev = entry._next = None
                    if tick != expiration:
                        in_order = False
                    due.append(entry)
                elif tick < level0_end:
                    # The common cascade, into level 0, inlined: a coarse bucket of a busy
                    # wheel holds thousands of entries, and this loop is the whole pause the
                    # loop sees when it comes due (insert() would cost three times as much).
                    index = tick & mask
                    bucket = buckets[index]
                    tail = bucket._prev
                    entry._prev = tail
                    entry._next = bucket
                    bucket._prev = entry
                    if tail is not None:
                        tail._next = entry
                    if tick < queued[index]:
                        queued[index] = tick
                        heappush(heap, (tick << key_bits) | index)
                else:
                    entry._prev = entry._next = None
                    self._count -= 1
                    self.insert(entry, tick)
                entry = nxt
        self._set_elapsed(now)
        self._count -= len(due)
        if not in_order:
            due.sort(key=_tick_of)
        return due

    def _set_elapsed(self, tick: int) -> None:
        self._elapsed = tick
        self._cache_high = self._cache_low  # placements depend on elapsed

    def entries(self) -> list[Entry]:
        """Every pending entry (including "never" ones), in no set order, the wheel unchanged.
        O(pending + queued buckets): the delay queue names every non-empty bucket (as
        :meth:`check` asserts). What :func:`aiowheel.time_left` pays, per call."""
        out: list[Entry] = []
        queued = self._queued
        for key in self._heap:
            index = key & self._key_mask
            if queued[index] == key >> self._key_bits:  # else stale: fired, or queued earlier
                _chain_into(self._buckets[index], out)
        _chain_into(self._never, out)
        return out

    def drain(self) -> list[Entry]:
        """Remove and return every pending entry (including "never" ones), in no set order."""
        out: list[Entry] = []
        for bucket in (*self._buckets, self._never):
            entry = bucket._next
            while entry is not bucket and entry is not None:
                nxt = entry._next
                entry._prev = entry._next = None
                out.append(entry)
                entry = nxt
            bucket._next = bucket._prev = bucket
        self._heap.clear()
        for index in range(len(self._queued)):
            self._queued[index] = NEVER
        self._count = 0
        return out

    # -- invariants ----------------------------------------------------------------------------

    def check(self) -> None:
        """Verify every structural invariant; raise AssertionError with the whole state if not.

        O(pending + buckets): for tests and debugging, not for hot paths.
        """
        problems: list[str] = []
        counted = 0
        live_keys = set()
        for index, bucket in enumerate((*self._buckets, self._never)):
            is_never = index == len(self._buckets)
            prev: Entry = bucket
            entry = bucket._next
            length = 0
            while entry is not bucket:
                if entry is None:
                    problems.append(f"bucket {index}: chain broken after {length} entries")
                    break
                if entry._prev is not prev:
                    problems.append(f"bucket {index}: back link broken at {entry!r}")
                length += 1
                if not is_never:
                    queued = self._queued[index]
                    if queued > entry._tick and entry._tick >= self._elapsed:
                        problems.append(
                            f"bucket {index} queued at {queued} holds tick {entry._tick}"
                        )
                    if queued == NEVER:
                        problems.append(f"bucket {index} holds entries but is not queued")
                elif entry._tick < NEVER:
                    problems.append(f"never-list holds finite tick {entry._tick}")
                prev = entry
                entry = entry._next
            if bucket._prev is not prev:
                problems.append(f"bucket {index}: tail link broken")
            counted += length
            if length and not is_never:
                live_keys.add((self._queued[index] << self._key_bits) | index)
        if counted != self._count:
            problems.append(f"count {self._count} but {counted} entries linked")
        missing = live_keys - set(self._heap)
        if missing:
            problems.append(f"queued buckets missing from heap: {sorted(missing)}")
        if len(self._heap) > len(self._buckets):
            problems.append(f"heap holds {len(self._heap)} items for {len(self._buckets)} buckets")
        if problems:
            raise AssertionError("; ".join(problems) + f"\nstate: {self._dump()}")

    @property
    def queued(self) -> int:
        """Items in the delay queue now: at most one per bucket (a bucket that emptied keeps
        its item until it surfaces)."""
        return len(self._heap)

    def live_queue_items(self) -> int:
        """How many heap items belong to non-empty buckets (for tests of the delay queue)."""
        live = 0
        for key in self._heap:
            index = key & self._key_mask
            bucket = self._buckets[index]
            if self._queued[index] == key >> self._key_bits and bucket._next is not bucket:
                live += 1
        return live

    def _dump(self) -> str:
        rows = [repr(self), f"heap={sorted(self._heap)}"]
        for index, bucket in enumerate(self._buckets):
            ticks: list[int] = []
            entry = bucket._next
            while entry is not bucket and entry is not None and len(ticks) < 50:
                ticks.append(entry._tick)
                entry = entry._next
            if ticks or self._queued[index] != NEVER:
                rows.append(f"  bucket {index} queued={self._queued[index]} ticks={ticks}")
        return "\n".join(rows)


def _chain_into(bucket: Entry, out: list[Entry]) -> None:
    """Append ``bucket``'s entries to ``out``, in their order."""
    entry = bucket._next
    while entry is not bucket and entry is not None:
        out.append(entry)
        entry = entry._next


def entries_at(wheel: Wheel, expiration: int) -> list[Entry]:
    """The entries of ``wheel``'s buckets queued under ``expiration`` (at most one per level),
    in no set order; the wheel is not changed. For a driver on an exact clock, which wakes at
    the earliest deadline among them rather than at the tick."""
    out: list[Entry] = []
    queued = wheel._queued
    buckets = wheel._buckets
    bits = wheel._bits
    mask = wheel._mask
    for level in range(wheel._levels):
        index = (level << bits) + ((expiration >> (level * bits)) & mask)
        if queued[index] != expiration:
            continue
        bucket = buckets[index]
        entry = bucket._next
        while entry is not bucket and entry is not None:
            out.append(entry)
            entry = entry._next
    return out
