"""Validation: the types of the public API's arguments and every check made of them.

One module, so that each kind of value (a number of seconds, a deadline, a period, a tick, a
threshold, a limit, a policy name) is checked one way, with one message, at every entry point:
the Timer's API, the timeouts, the heartbeats, the driver and loop mode all call these.
NaN is refused one way too: ``value != value`` (the only test that holds in both builds and
costs no call), by :func:`not_nan`.

One voice (#37): a wrong type is a TypeError, a wrong value a ValueError, and every message
starts with the function the user called and the argument, ``"call_later(): delay must not be
NaN"``. The checks here take that name from their callers (``name`` is the whole
``"function(): argument"``; ``where`` the function alone), as string constants: no cost.

Why the types. The compiled build (mypyc) checks every annotated argument at the
boundary of a compiled function, with its own words: ``call_later("5", cb)`` would raise
``TypeError: float object expected; got str`` before aiowheel's own check could say
``call_later(): delay must be a real number of seconds, got str``, and ``Timer(slots=64.0)``
mypyc's ``int object expected; got float`` instead of aiowheel's message naming ``Timer()``.
The bad-input contract must not depend on the build, so every public parameter that takes a
number or a name is annotated ``T | Unchecked``:

- to a type checker that is ``T``, since no value has the type :class:`Unchecked` (a protocol
  with a method nothing defines); users keep exactly asyncio's annotations (``float`` for
  times, so ints pass too);
- to mypyc a union with a protocol is ``object``: no check of its own, so the value reaches
  aiowheel's validation, and after an ``isinstance`` test mypyc knows the type again and does
  native arithmetic (a ``float`` takes the fast path with no call at all).

:func:`seconds` is the slow path for anything but a float.
"""

from __future__ import annotations

import asyncio
import contextvars
import math
import numbers
from typing import Final, NoReturn, Protocol, TypeAlias

__all__ = [
    "MAX_SLOTS",
    "MISSED_TICK_POLICIES",
    "advance",
    "autojump",
    "call",
    "coroutine",
    "Count",
    "DEFAULT_THRESHOLD",
    "DEFAULT_TICK",
    "debug",
    "flag",
    "Name",
    "Seconds",
    "Unchecked",
    "max_batch",
    "max_pending",
    "missed",
    "not_nan",
    "period",
    "seconds",
    "slots",
    "start",
    "threshold",
    "tick",
]

#: The names ``missed=`` takes (see :mod:`aiowheel._time._periodic`).
MISSED_TICK_POLICIES: Final = ("burst", "delay", "skip")


class Unchecked(Protocol):
    """No value has this type: ``T | Unchecked`` reads as ``T`` to a type checker and as
    ``object`` to mypyc, which then leaves argument checking to aiowheel (see the module)."""

    def __aiowheel_unchecked__(self) -> NoReturn: ...


#: A duration or a deadline on the loop's clock, in seconds: ``float`` (an ``int`` passes too).
Seconds: TypeAlias = "float | Unchecked"
#: A whole number (wheel ticks, slots, limits).
Count: TypeAlias = "int | Unchecked"
#: A choice among named options (``missed=``).
Name: TypeAlias = "str | Unchecked"


def seconds(name: str, value: object) -> float:
    """``value`` as a float number of seconds, for anything but a float (which callers pass
    through untouched): ints (a huge one is +-inf, as float arithmetic would overflow to) and
    other real numbers (``fractions.Fraction``, NumPy scalars) convert; anything else is a
    ``TypeError`` naming ``name`` (the function and the argument: ``"call_later(): delay"``)
    and the type. NaN is the caller's to refuse."""
    if isinstance(value, float):
        return value
    if isinstance(value, int):
        try:
            return float(value)
        except OverflowError:
            return float("inf") if value > 0 else float("-inf")
    if isinstance(value, numbers.Real):
        return float(value)
    raise TypeError(f"{name} must be a real number of seconds, got {type(value).__name__}")


def not_nan(when: float, name: str) -> float:
    """``when``, unless it is NaN: then ValueError ("<name> must not be NaN"). ``name`` is the
    function and the argument the user gave: ``"timeout(): delay"`` where a NaN delay made the
    deadline NaN."""
    if when != when:
        raise ValueError(f"{name} must not be NaN")
    return when


def period(name: str, value: object) -> float:
    """``value`` as a float if it is a positive, finite number of seconds; else raise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, got {type(value).__name__}")
    if not 0 < value < math.inf:
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value!r}")
    return float(value)


def tick(value: object, where: str) -> float:
    """A wheel's tick: a positive, finite number of seconds (the period check, named tick);
    ``where`` names the function (``"Timer()"``)."""
    return period(f"{where}: tick", value)


def threshold(value: object, where: str) -> float:
    """Loop mode's threshold: a non-negative, finite number of seconds."""
    name = f"{where}: threshold"
    if isinstance(value, bool):  # a flag passed by mistake, not a number of seconds
        raise TypeError(f"{name} must be a real number of seconds, got bool")
    result = seconds(name, value)
    if not 0 <= result < math.inf:
        raise ValueError(f"{name} must be a non-negative, finite number of seconds, got {value!r}")
    return result


#: The most buckets per level of a timing wheel (2**20).
MAX_SLOTS: Final = 1 << 20


def slots(value: object, where: str) -> int:
    """A wheel's ``slots``: an int that is a power of two from 2 to :data:`MAX_SLOTS`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{where}: slots must be a power of two from 2 to {MAX_SLOTS} (2**20), "
            f"got {type(value).__name__}"
        )
    if value < 2 or value > MAX_SLOTS or value & (value - 1):
        raise ValueError(
            f"{where}: slots must be a power of two from 2 to {MAX_SLOTS} (2**20), got {value!r}"
        )
    return value


def max_pending(value: object, where: str) -> int | None:
    """A Timer's ``max_pending``: a positive int, or None for no limit."""
    return _positive_or_none(value, where, "max_pending")


def max_batch(value: object, where: str) -> int | None:
    """The most due callbacks a wheel runs per loop iteration (``max_batch``): a positive int,
    or None for no bound (every due callback of a pass in one go)."""
    return _positive_or_none(value, where, "max_batch")


def _positive_or_none(value: object, where: str, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(
            f"{where}: {name} must be a positive int or None, got {type(value).__name__}"
        )
    if value < 1:
        raise ValueError(f"{where}: {name} must be a positive int or None, got {value!r}")
    return value


def missed(value: object, where: str) -> str:
    """``missed`` if it names a policy; else ValueError listing the valid ones (TypeError for
    what is not a str)."""
    names = ", ".join(map(repr, MISSED_TICK_POLICIES))
    if not isinstance(value, str):
        raise TypeError(f"{where}: missed must be one of {names}, got {type(value).__name__}")
    if value not in MISSED_TICK_POLICIES:
        raise ValueError(f"{where}: missed must be one of {names}, got {value!r}")
    return value


def advance(value: object, where: str) -> float:
    """How far to move a virtual clock: a real number of seconds, not negative, finite."""
    name = f"{where}: seconds"
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number of seconds, got bool")
    result = not_nan(seconds(name, value), name)
    if not 0 <= result < math.inf:
        raise ValueError(f"{name} must be a non-negative, finite number, got {value!r}")
    return result


def autojump(value: object, where: str) -> bool | float:
    """A virtual clock's ``autojump``: True, False, or a non-negative, finite number of
    seconds of real idle time."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, numbers.Real):
        raise TypeError(
            f"{where}: autojump must be True, False or a number of seconds, "
            f"got {type(value).__name__}"
        )
    result = float(value)
    if not 0 <= result < math.inf:
        raise ValueError(
            f"{where}: autojump must be True, False or a non-negative, finite number of "
            f"seconds, got {value!r}"
        )
    return result


def start(value: object, where: str) -> float:
    """Where a virtual clock starts: a non-negative, finite real number of seconds (a loop's
    clock never reads below zero: asyncio's is monotonic time, from boot)."""
    name = f"{where}: start"
    if isinstance(value, bool):
        raise TypeError(f"{name} must be a real number of seconds, got bool")
    result = seconds(name, value)
    if not 0 <= result < math.inf:
        raise ValueError(f"{name} must be a non-negative, finite number of seconds, got {value!r}")
    return result


def flag(value: object, name: str) -> bool:
    """``value`` if it is a bool; else TypeError naming ``name`` (``"loop_lag(): reset"``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return value


def debug(value: object, where: str) -> bool | None:
    """``run()``'s ``debug``: True, False, or None (the loop's default, as ``asyncio.run``)."""
    if value is not None and not isinstance(value, bool):
        raise TypeError(f"{where}: debug must be True, False or None, got {type(value).__name__}")
    return value


def coroutine(value: object, where: str) -> None:
    """A ``run()``'s ``main``: a coroutine object, else TypeError (``asyncio.run`` says
    ValueError; a wrong type is a TypeError here, as everywhere in aiowheel)."""
    if not asyncio.iscoroutine(value):
        raise TypeError(f"{where}: main must be a coroutine, got {type(value).__name__}")


_callable: Final = callable

DEFAULT_TICK: Final = 0.001
"""The wheel's resolution unless one is given: a Timer's, and a loop-mode loop's
(:class:`aiowheel.LoopConfig`'s default), in seconds."""

DEFAULT_THRESHOLD: Final = 0.01
"""Deadlines at least this many seconds ahead go to a loop-mode loop's wheel unless another
threshold is given (:class:`aiowheel.LoopConfig`'s default; 10 ticks of the default tick)."""


def call(callback: object, context: object, where: str) -> None:
    """A ``call_at`` / ``call_later``'s callback and context: a callable, and a
    ``contextvars.Context`` or None; TypeError otherwise (``where`` names the function)."""
    if not _callable(callback):
        raise TypeError(f"{where}: callback must be callable, got {type(callback).__name__}")
    if context is not None and type(context) is not contextvars.Context:
        raise TypeError(
            f"{where}: context must be a contextvars.Context or None, got {type(context).__name__}"
        )
