"""The tick grid: how a deadline on the loop's clock becomes a tick, and a tick a time.

Why a room of its own. Every rule that keeps a timer from firing early is arithmetic on this
grid, and it is easier to check in one place than spread through the driver
(:mod:`aiowheel._time._driver`), which files on the grid, and the reaper, which wakes at a tick's
time.

- A deadline ``when`` (loop clock, seconds) becomes tick ``ceil((when - epoch) / tick)``,
  rounded **up**, so a bucket is never processed before every deadline in it can have passed;
  less a slack, so that float rounding does not put a deadline that is a tick's own time one
  tick up: 0.007 s is 7.000000000000001 ms, and a deadline ``k`` ticks ahead of a tick-aligned
  time on a clock far from zero (monotonic time after days of uptime, a virtual clock started
  at 1e9) is off by a few units in the last place of the clock's reading, which can be more
  than a millionth of a tick. The slack is an epsilon (a millionth of a tick) plus four float
  spacings (``ULPS``) of the epoch and of the distance (:attr:`Grid.slack` and ``SHRINK``), so
  every such deadline is filed on its own tick (a tick below the clock's own resolution, 1 us
  at 2e9 s, may land one low). A deadline truly within the slack past a boundary lands a tick
  low: the driver finds it not yet due and files it again from its exact deadline, so it is
  never early.
- A clock reading becomes the last tick it has reached, rounded **down**, plus the epsilon, so
  that a reading of 10.9999999 ticks on a clock that says tick 11 has begun counts as 11 (a
  clock in whole milliseconds, uvloop's, would otherwise spin for a millisecond). Entries are
  still checked against their exact deadline before they fire.
- The epoch is the clock's reading when the driver bound; a new clock moves it so that the
  ticks already processed stay processed (:meth:`Grid.rebase`).
- The pass floor is the start of the first tick the last pass left unprocessed: a timer due
  before it was filed later, already due, and its lateness counts from there.

The driver's hot path (``Driver._admit``) reads :attr:`Grid.epoch` and :attr:`Grid.inverse`
and does the rounding up inline; the rest is here.
"""

from __future__ import annotations

from math import ceil, floor, inf
from typing import Final

from ._wheel import NEVER

__all__ = ["EPSILON", "SHRINK", "ULPS", "Grid"]

EPSILON: Final = 1e-6
"""A clock reading within this fraction of a tick below a boundary counts as having reached it,
and a deadline within it above one is filed in that boundary's tick."""

ULPS: Final = 2.0**-50
"""Four float spacings (relative): the rounding error a deadline computed from a tick-aligned
time may carry, in the epoch (:attr:`Grid.slack`) and in the distance (``SHRINK``)."""

SHRINK: Final = 1.0 - ULPS
"""A deadline's distance in ticks is shrunk by this before rounding up (its own float error)."""


class Grid:
    """One driver's grid (see the module docstring): ``tick`` seconds per tick from ``epoch``."""

    __slots__ = ("epoch", "inverse", "pass_floor", "slack", "tick")

    def __init__(self, tick: float) -> None:
        self.tick: Final = tick
        self.inverse: Final = 1.0 / tick
        self.epoch = 0.0
        self.pass_floor = 0.0
        # What rounding up subtracts, in ticks (the module docstring): the native core's
        # `slack`, computed by the same float operations.
        self.slack = EPSILON

    def _set_epoch(self, epoch: float) -> None:
        self.epoch = epoch
        self.slack = EPSILON + ULPS * abs(epoch) * self.inverse

    def start(self, now: float) -> None:
        """The grid starts at the clock reading ``now``."""
        self._set_epoch(now)
        self.pass_floor = now

    def rebase(self, now: float, elapsed: int) -> None:
        """A new clock reads ``now``: the ``elapsed`` ticks processed stay processed."""
        self._set_epoch(now - elapsed * self.tick)
        self.pass_floor = now

    def tick_for(self, when: float, elapsed: int) -> int:
        """The tick of deadline ``when``, rounded up; NEVER for +inf, ``elapsed`` (already due)
        for -inf. ValueError for NaN."""
        try:
            return ceil((when - self.epoch) * self.inverse * SHRINK - self.slack)
        except OverflowError:
            return NEVER if when > 0 else elapsed
        except ValueError:
            pass
        # Raised outside the except clause, so that no internal error shows as its context
        # (in both builds: the compiled one ignores `from None`).
        raise ValueError("deadline must not be NaN")

    def time_of(self, tick: int) -> float:
        """When ``tick`` begins, on the clock."""
        return self.epoch + tick * self.tick

    def reached(self, now: float, wake_tick: int, wake_time: float | None = None) -> int:
        """The last tick the clock reading ``now`` has reached. ``wake_tick``: the tick the
        wake-up was filed for, and ``wake_time`` the time it was filed at (None: that tick's
        own time). Once the clock reads the wake-up's time, that tick counts as reached
        whatever the division says: far from the epoch the two disagree (a virtual clock at
        1e9 read 0.448 s past it as 447.99995 ticks, below the bucket's 448, and the wake-up
        was filed again at the same time forever), and an exact clock
        (:attr:`aiowheel._time._clock.Clock.exact`: the virtual one) is woken at the earliest exact
        deadline of the bucket, before the tick's own time. The pass then takes the whole
        bucket but fires only what is due; the rest is filed again, one tick on."""
        now_tick = floor((now - self.epoch) * self.inverse + EPSILON)
        if wake_time is None:
            wake_time = self.time_of(wake_tick) if wake_tick < NEVER else inf
        if now_tick < wake_tick < NEVER and wake_time <= now:
            return wake_tick
        return now_tick

    def late(self, now: float, when: float, lateness: float) -> float:
        """The max lateness with a timer of deadline ``when`` run at ``now``: a deadline
        already past when it was filed is late only from when the wheel could first run it."""
        floor_ = self.pass_floor
        late = now - when if when >= floor_ else now - floor_
        return late if late > lateness else lateness

    def lag(self, now: float, first_tick: int) -> float:
        """How long after the earliest fired timer's tick began (or, for a deadline filed
        already past, after the wheel could first see it) a pass at ``now`` ran."""
        could_run = self.time_of(first_tick)
        floor_ = self.pass_floor
        lag = now - (could_run if could_run > floor_ else floor_)
        # An exact clock runs a bucket before its tick's time (see reached): never a lag.
        return lag if lag > 0.0 else 0.0

    def passed(self, now_tick: int) -> None:
        """A pass processed every tick up to ``now_tick``."""
        self.pass_floor = self.time_of(now_tick)
