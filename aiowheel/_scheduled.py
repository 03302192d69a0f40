"""``loop._scheduled`` on loop mode: the base loop's heap to the base, every timer to the rest.

Why. Code outside asyncio reads a loop's private timer heap. Home Assistant does, through
``get_scheduled_timer_handles(loop)``: ``hass.async_stop`` cancels every handle on it marked
``cancel_on_shutdown``, and in tests ``async_fire_time_changed`` runs the handles due by a time
and ``verify_cleanup`` fails a test that leaves one. So do drain loops (``while loop._ready or
loop._scheduled: loop._run_once()``), diagnostics (``len(loop._scheduled)``) and the helpers
copied from HA into many libraries' tests. On loop mode nearly every timer is on the wheel, and
a plain heap showed them none: shutdown missed timers, and in tests time "passed" with nothing
run (issue 49).

What. On a loop-mode loop whose base keeps its timers in ``_scheduled`` (asyncio's loops, and a
base class of theirs), ``_scheduled`` is a :class:`Heap`: a list that *is* the base's heap to
the base's own code (asyncio's ``_run_once`` and ``call_at`` push, pop, index, measure and
rebuild it exactly as before), while to any other code its length, truth, iteration and ``in``
are those of every pending timer, in deadline order: the heap's handles (cancelled ones too, as
on asyncio's heap) but the wheels' wake-ups, and loop mode's wheel handles, each an
``asyncio.TimerHandle`` with its exact ``when()``. Indexing is the heap's (``_scheduled[0]`` is
the next wake-up of the loop, which is what readers of it want). Who asks is told by the
globals of the calling frame: the code of asyncio's ``base_events`` (and of the module of a
base class's own ``_run_once``, registered by :func:`install`) sees the heap.

Designs weighed:

- **a property (or any data descriptor) on the loop class** returning the heap to the base and
  a snapshot to others: asyncio's ``_run_once`` reads ``self._scheduled`` six times per
  iteration, each then a call with a frame check: an empty iteration measured two to six
  times asyncio's own (the figures are on the performance page, docs/performance.md);
- **the heap moved and ``_run_once`` owned**: a copy of a private function that differs
  between 3.11 and 3.15, to keep in step with each;
- **this list subclass**: the base's reads stay plain attribute loads from the instance dict
  and heapq's C functions work on it as on any list; only ``len()`` and truth tests (three per
  empty iteration) go through a slot, which in the compiled build is C
  (``aiowheel/_native/scheduled.c``) comparing one pointer. The pure build's slots are Python
  methods below (slower, as that build is).

asyncio replaces its heap by a new list when cancelled handles pile up
(``self._scheduled = new_scheduled``); the loop-mode class's ``__setattr__``, which already
watches ``time``, makes that list a :class:`Heap` again (:func:`replaced`).

Never ``vars(loop)`` here: asking for an instance's ``__dict__`` makes CPython (3.11+) keep its
attributes in a real dict from then on, and every ``self._...`` read of the base loop slows
down (an empty asyncio iteration went from 2.37 to 2.70 us on 3.11, measured before it was
found: what the first version of this module did, once per loop).
"""

from __future__ import annotations

import asyncio
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from . import _store
from ._clock import STATE_ATTRIBUTE
from ._reaper import Reaper
from ._view import View

__all__ = ["Heap", "install", "is_wake_up", "replaced"]

_native: Any = _store.native

# The module globals whose code sees the real heap (asyncio's base_events from the start).
_base_globals: tuple[dict[str, Any], ...] = (vars(sys.modules["asyncio.base_events"]),)


def is_wake_up(handle: object) -> bool:
    """Whether ``handle`` on a base heap is a wheel's wake-up (no timer of the program's)."""
    callback = getattr(handle, "_callback", None)
    return isinstance(getattr(callback, "__self__", None), Reaper)


def _asked_by_base() -> bool:
    # The pure build's check: the frame of the code that called len(), iter() or `in`.
    globals_ = sys._getframe(2).f_globals
    return any(globals_ is known for known in _base_globals)


class _PyHeapBase(list):  # type: ignore[type-arg]
    """The pure build's base of :class:`Heap` (the compiled build's is ``_core.ScheduledHeap``)."""

    __slots__ = ()

    def __len__(self) -> int:
        if _asked_by_base():
            return list.__len__(self)
        return len(self._seen())

    def __iter__(self) -> Iterator[Any]:
        if _asked_by_base():
            return list.__iter__(self)
        return iter(self._seen())

    def __contains__(self, value: object) -> bool:
        if _asked_by_base():
            return list.__contains__(self, value)
        return value in self._seen()

    def _seen(self) -> list[Any]:
        raise NotImplementedError


_HeapBase: Any = _PyHeapBase if _native is None else _native.ScheduledHeap


def _when(handle: asyncio.TimerHandle) -> float:
    return handle.when()


class Heap(_HeapBase):  # type: ignore[misc]
    """``loop._scheduled`` on a loop-mode loop (see the module docstring)."""

    __slots__ = ("_loop",)

    def __init__(self, handles: list[asyncio.TimerHandle], loop: object) -> None:
        super().__init__(handles)
        self._loop = weakref.ref(loop)

    def _seen(self) -> list[asyncio.TimerHandle]:
        """What a reader sees: the heap's handles but wake-ups, and the wheel's, by deadline."""
        heap: list[asyncio.TimerHandle] = list(list.__iter__(self))
        seen = [handle for handle in heap if not is_wake_up(handle)]
        loop: Any = self._loop()
        # The loop's state (aiowheel._loopstate, above this room): its driver, once it drives.
        state = getattr(loop, STATE_ATTRIBUTE, None)
        if state is not None and state.driving and not loop.is_closed():
            seen += View(state.driver).handles()
        seen.sort(key=_when)
        return seen

    def __repr__(self) -> str:
        return repr(self._seen())

    def __reduce__(self) -> Any:  # a copy or a pickle is the list a reader sees
        return (list, (self._seen(),))


def install(loop: object) -> None:
    """Make ``loop._scheduled`` a :class:`Heap` if its base keeps one (asyncio's loops), and
    let the code of the base's own ``_run_once`` (if it has one of its own) see the heap."""
    global _base_globals
    heap = getattr(loop, "_scheduled", None)  # not vars(): see the module docstring
    if type(heap) is not list:
        return
    run_once = getattr(type(loop), "_run_once", None)
    globals_ = getattr(run_once, "__globals__", None)
    if isinstance(globals_, dict) and not any(globals_ is known for known in _base_globals):
        _base_globals += (globals_,)
        if _native is not None:
            _native.watch_scheduled(_base_globals, replaced)
    object.__setattr__(loop, "_scheduled", Heap(heap, loop))


def replaced(loop: object) -> None:
    """A plain list was set as ``loop._scheduled`` (asyncio's rebuild of its heap): a
    :class:`Heap` again, once the loop is set up (the first list, set by the base's
    ``__init__``, is made one by :func:`install`)."""
    heap = getattr(loop, "_scheduled", None)  # not vars(): see the module docstring
    if type(heap) is list and getattr(loop, STATE_ATTRIBUTE, None) is not None:
        object.__setattr__(loop, "_scheduled", Heap(heap, loop))


if _native is not None:
    _native.watch_scheduled(_base_globals, replaced)
