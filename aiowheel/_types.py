"""The types of the public API's arguments, and the validation that keeps both builds alike.

Why this module exists. The compiled build (mypyc) checks every annotated argument at the
boundary of a compiled function, with its own words: ``call_later("5", cb)`` would raise
``TypeError: float object expected; got str`` before aiowheel's own check could say
``delay must be a real number of seconds, got str``, and ``Timer(slots=64.0)`` would be a
TypeError instead of the documented ValueError. The bad-input contract must not depend on the
build, so every public parameter that takes a number or a name is annotated ``T | Unchecked``:

- to a type checker that is ``T``, since no value has the type :class:`Unchecked` (a protocol
  with a method nothing defines); users keep exactly asyncio's annotations (``float`` for
  times, so ints pass too);
- to mypyc a union with a protocol is ``object``: no check of its own, so the value reaches
  aiowheel's validation, and after an ``isinstance`` test mypyc knows the type again and does
  native arithmetic (a ``float`` takes the fast path with no call at all).

:func:`seconds` is the slow path for anything but a float.
"""

from __future__ import annotations

import numbers
from typing import NoReturn, Protocol, TypeAlias

__all__ = ["Count", "Name", "Seconds", "Unchecked", "seconds"]


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
    ``TypeError`` naming ``name`` and the type. NaN is the caller's to refuse."""
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
