"""Fuzzing time's settings and draws: what a seed makes a virtual clock do.

The schedules themselves (late jumps, stalls, what they never do) are argued in
:mod:`aiowheel._virtual._virtual`, where the clock applies them. This module holds what only a
fuzzed clock needs: :class:`Fuzz` (the seed and the bounds, checked, with errors naming the
parameter or pytest option) and :class:`Chance` (one ``random.Random(seed)``, drawn in the loop's
own order). It is a module of its own so that a program that never fuzzes never imports it: the
loop-mode loop imports :mod:`aiowheel._virtual._virtual` at start-up, and ``aiowheel`` pays nothing
at import for a feature of its test suites.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT_JITTER_TICKS", "DEFAULT_STALL", "Chance", "Fuzz", "fuzz_number", "fuzz_seed"]


DEFAULT_JITTER_TICKS: Final = 3
"""The overshoot bound when none is given: this many ticks of the loop's wheel."""

DEFAULT_STALL: Final = 0.1
"""The longest stall when none is given, in seconds (used only at a stall rate above 0)."""


def fuzz_number(name: str, value: object, *, at_most: float | None = None) -> float:
    """``value`` as a float >= 0 (and <= ``at_most``), or a ValueError / TypeError naming
    ``name`` (a parameter, or a pytest option)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    number = float(value)
    if math.isnan(number) or number < 0 or math.isinf(number):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if at_most is not None and number > at_most:
        raise ValueError(f"{name} must be at most {at_most}, got {value!r}")
    return number


def fuzz_seed(name: str, value: object) -> int:
    """``value`` as a seed (an int >= 0), or a ValueError / TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int >= 0, got {type(value).__name__} {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return int(value)


@dataclass(frozen=True, slots=True)
class Fuzz:
    """How a fuzzed virtual clock varies *when* things run (see the module docstring).

    Made by :func:`aiowheel.testing.virtual_loop_factory` and :func:`aiowheel.testing.run`
    (``seed=``, ``jitter=``, ``stall_rate=``, ``stall=``), which check the values.
    """

    seed: int
    """Picks the schedule; the same seed replays it."""
    jitter: float
    """Each jump to a wake-up lands up to this many seconds past it (uniform, seeded)."""
    stall_rate: float = 0.0
    """The chance, after each pass of timers, that the loop stalls (0: never, 1: every pass)."""
    stall: float = DEFAULT_STALL
    """A stall's longest length, in seconds (each one uniform in ``[0, stall]``)."""

    @classmethod
    def checked(
        cls, seed: object, jitter: object, stall_rate: object, stall: object, *, prefix: str = ""
    ) -> Fuzz:
        """A Fuzz from unchecked values; errors name ``prefix + parameter`` (``--aiowheel-``
        for the pytest options, ``"virtual_loop_factory(): "`` for a function's)."""
        option = prefix.startswith("--")
        return cls(
            fuzz_seed(f"{prefix}seed", seed),
            fuzz_number(f"{prefix}jitter", jitter),
            fuzz_number(
                f"{prefix}{'stall-rate' if option else 'stall_rate'}", stall_rate, at_most=1.0
            ),
            fuzz_number(f"{prefix}stall", stall),
        )


Fuzz.__module__ = "aiowheel.testing"  # pickled in a factory: the public path


class Chance:
    """A fuzzed clock's draws: one ``random.Random(seed)``, drawn in the loop's own order."""

    __slots__ = ("_random", "fuzz")

    def __init__(self, fuzz: Fuzz) -> None:
        self.fuzz = fuzz
        self._random = random.Random(fuzz.seed)

    def late(self) -> float:
        """How far past a wake-up a jump lands."""
        jitter = self.fuzz.jitter
        return self._random.uniform(0.0, jitter) if jitter else 0.0

    def stall(self) -> float:
        """How long the loop stalls after this pass (0.0: not at all)."""
        fuzz = self.fuzz
        if fuzz.stall_rate and fuzz.stall and self._random.random() < fuzz.stall_rate:
            return self._random.uniform(0.0, fuzz.stall)
        return 0.0
