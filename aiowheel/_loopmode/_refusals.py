"""The slow path's refusals: what loop mode says of a deadline or delay the router did not take.

Loop mode (:mod:`aiowheel._loopmode._loop`) makes two refusals the base loop lacks: a NaN deadline
(asyncio files it and corrupts its heap) raises ValueError, and a deadline that is not a number
(asyncio files a str, and its loop fails later; None too) raises TypeError. Each is named by
what the user called: ``call_at()`` / ``call_later()``, or ``asyncio.timeout()`` /
``asyncio.sleep()`` / ``asyncio.wait()`` where the callback shows that one of them filed it
(:func:`named`). A real number that is not a float (numpy scalars, Fraction, Decimal, huge ints)
is read as the float loop mode files, never earlier than asked (:func:`no_earlier_float`).

Why a room of its own. These are the words and the arithmetic of the slow path, asked only by
the base heap's ``slow_call_at`` / ``slow_call_later`` (:mod:`aiowheel._loopmode._baseheap`) for the
calls the router hands it: they know nothing of heaps, wheels or loops, only of asyncio's own
callbacks and of numbers, and they are read on no hot path.
"""

from __future__ import annotations

import asyncio
import math
import numbers
import sys
from decimal import Decimal
from math import inf, nan
from typing import Any, Final

__all__ = ["named", "no_earlier_float", "odd_number"]

# The callbacks by which a loop's call_at / call_later can tell what the user called: an
# asyncio.Timeout's (asyncio.timeout(), timeout_at(), wait_for() on 3.12+, reschedule()),
# asyncio.sleep's and asyncio.wait's. Read on the slow path only, to name a refused deadline.
_ASYNCIO_TIMEOUT: Final[type | None] = getattr(asyncio, "Timeout", None)
_ASYNCIO_SLEEP_CALLBACK: Final = getattr(asyncio.futures, "_set_result_unless_cancelled", None)
# asyncio.wait(timeout=) files loop.call_later(timeout, _release_waiter, waiter); so does
# asyncio.wait_for on 3.11 (3.12's goes through asyncio.timeout).
_ASYNCIO_WAIT_CALLBACK: Final = getattr(asyncio.tasks, "_release_waiter", None)
_TIMEOUT_NAMES: Final = (
    "asyncio.timeout() / timeout_at() / Timeout.reschedule(): deadline"
    if sys.version_info < (3, 12)
    else "asyncio.timeout() / timeout_at() / wait_for() / Timeout.reschedule(): deadline"
)
_WAIT_NAMES: Final = (
    "asyncio.wait_for() / asyncio.wait(): timeout"
    if sys.version_info < (3, 12)
    else "asyncio.wait(): timeout"
)


def named(method: str, callback: object) -> str:
    """What a refused deadline or delay of ``loop.<method>`` is called in its message: by the
    asyncio function that filed it where the callback says so, else the method's argument.

    asyncio's timeouts file their deadline with ``loop.call_at(when, self._on_timeout)``
    (``Timeout.reschedule``): a NaN given to ``asyncio.timeout()`` reaches the loop as a NaN
    deadline, so the message names the timeout, not ``call_at()``, which the user never called.
    """
    owner = getattr(callback, "__self__", None)
    if _ASYNCIO_TIMEOUT is not None and isinstance(owner, _ASYNCIO_TIMEOUT):
        return _TIMEOUT_NAMES
    if method == "call_later" and callback is not None:
        if callback is _ASYNCIO_SLEEP_CALLBACK:
            return "asyncio.sleep(): delay"
        if callback is _ASYNCIO_WAIT_CALLBACK:
            return _WAIT_NAMES
    return "call_at(): deadline" if method == "call_at" else "call_later(): delay"


def odd_number(value: object, what: str) -> float | None:
    """The slow path's reading of a deadline or delay the router did not take (``what`` names
    it: ``"call_at(): deadline"``): ValueError for NaN; TypeError for what is not a real
    number, None included (the base would file such a deadline and fail later, or fail on its
    own arithmetic: "unsupported operand type(s) for +: 'float' and 'str'", or say so without
    naming the function: asyncio's "when cannot be None"); for a real number that is not a
    float (numpy scalars, Fraction, Decimal, huge ints), the float the wheel files (on the
    base's real-time heap a virtual clock would never reach it); None for a float, which goes
    to the base as it is (the router found its callback or driver odd: the base answers, as
    it would without loop mode)."""
    if isinstance(value, float):
        if value != value:
            raise ValueError(f"{what} must not be NaN")
        return None
    if not isinstance(value, numbers.Real | Decimal):
        raise TypeError(f"{what} must be a real number of seconds, got {type(value).__name__}")
    return no_earlier_float(value, what)


def no_earlier_float(value: Any, what: str) -> float:
    """``value`` (a real number that is not a float) as the float loop mode files: the nearest
    one not below it, so that rounding never makes a timer early; ValueError for NaN, and the
    infinity of its sign past the float range."""
    try:
        result = float(value)
    except OverflowError:  # an int beyond 1e308
        result = inf if value > 0 else -inf
    except ValueError:  # Decimal('sNaN')
        result = nan
    if result != result:
        raise ValueError(f"{what} must not be NaN")
    if result < value:  # exact comparisons: Fraction, Decimal and int against a float
        result = math.nextafter(result, inf)
    return result
