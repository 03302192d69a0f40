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
  (``aiowheel/_time/_native/scheduled.c``) comparing one pointer. The pure build's slots are Python
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
import heapq
import sys
import weakref
from collections.abc import Iterator
from typing import Any

from .._time import _store
from .._time._clock import STATE_ATTRIBUTE
from .._time._view import View
from .._time._wakeup import WakeUp, is_wake_up

__all__ = ["Heap", "install", "replaced"]

_native: Any = _store.native

# The module globals whose code sees the real heap (asyncio's base_events from the start).
_base_globals: tuple[dict[str, Any], ...] = (vars(sys.modules["asyncio.base_events"]),)


def _asked_by_base(depth: int = 2) -> bool:
    # The frame of the code that called len(), iter(), `in`, [] (the pure build's slots), or
    # one of Heap's methods below (both builds): the base loop's code, or a reader.
    globals_ = sys._getframe(depth).f_globals
    return any(globals_ is known for known in _base_globals)


def _refused(method: str) -> RuntimeError:
    return RuntimeError(
        f"loop._scheduled.{method} on a loop-mode loop: its timers are not all on the base "
        "loop's heap, so it cannot be changed in place; cancel a handle to stop its timer "
        "(handle.cancel()), or clear() to drop every pending timer, as on asyncio"
    )


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

    def __getitem__(self, index: Any) -> Any:
        if _asked_by_base():
            return list.__getitem__(self, index)
        return self._seen()[index]

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
        """What a reader sees: the heap's handles but wake-ups, and the wheel's, by deadline
        (those due and waiting in the wheel's backlog included)."""
        heap: list[asyncio.TimerHandle] = list(list.__iter__(self))
        seen = [handle for handle in heap if not is_wake_up(handle)]
        driver = self._driver()
        if driver is not None:
            self._keep_woken(heap, driver)
            seen += View(driver).handles()
        seen.sort(key=_when)
        return seen

    def _driver(self) -> Any:
        """The loop's driver once it drives and while the loop is open, else None."""
        loop: Any = self._loop()
        # The loop's state (aiowheel._loopmode._loopstate, above this room): its driver, once it
        # drives.
        state = getattr(loop, STATE_ATTRIBUTE, None)
        if state is not None and state.driving and not loop.is_closed():
            return state.driver
        return None

    @staticmethod
    def _keep_woken(heap: list[Any], driver: Any) -> None:
        """File the wheel's wake-up again if code not the wheel's took it off the heap
        (``heapq.heappop`` by hand) or cancelled it: every read of the heap by a reader heals
        it, so a drain loop that reads ``loop._scheduled`` never waits on a lost wake-up.
        asyncio's ``_run_once`` pops a due wake-up into ``_ready`` and marks it unscheduled:
        that one is on its way, not lost."""
        wake = driver.wake_up()
        if not isinstance(wake, WakeUp):
            return  # nothing armed, a pass runs, or the clock keeps its wake-ups elsewhere
        if wake._cancelled or (
            wake._scheduled  # type: ignore[attr-defined]
            and not any(handle is wake for handle in heap)
        ):
            driver.rearm()

    def clear(self) -> None:
        """The base loop's ``close()``: the heap emptied. Any other code: every pending timer
        dropped, as ``clear()`` drops every timer of asyncio's heap (none of them runs): the
        heap's own emptied, the wheel's cancelled; the wheel's wake-up stays where it is, for
        the timers filed after."""
        if _asked_by_base():
            list.clear(self)
            return
        driver = self._driver()
        heap: list[Any] = list(list.__iter__(self))
        wakes = [handle for handle in heap if isinstance(handle, WakeUp) and not handle._cancelled]
        list.clear(self)
        list.extend(self, wakes)
        heapq.heapify(self)
        if driver is not None:
            for handle in View(driver).handles():
                handle.cancel()
            self._keep_woken(list(list.__iter__(self)), driver)

    def copy(self) -> list[Any]:
        """The list a reader sees (the base's code: the heap's)."""
        if _asked_by_base():
            return list.copy(self)
        return self._seen()

    def index(self, value: Any, *args: Any) -> int:
        """As ``list.index``, of the list a reader sees."""
        if _asked_by_base():
            return list.index(self, value, *args)
        return self._seen().index(value, *args)

    def count(self, value: Any) -> int:
        """As ``list.count``, of the list a reader sees."""
        if _asked_by_base():
            return list.count(self, value)
        return self._seen().count(value)

    def __reversed__(self) -> Iterator[Any]:
        if _asked_by_base():
            return list.__reversed__(self)
        return reversed(self._seen())

    def __eq__(self, other: object) -> bool:
        if _asked_by_base():
            return list.__eq__(self, other)
        return self._seen() == other

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]  # a list's

    # Changes in place that asyncio's heap survives only by luck (or not at all) are refused,
    # with nothing changed: the wheel's timers are not on the heap, and its wake-up is.

    def pop(self, *args: Any) -> Any:
        """Refused to code not the base loop's (see :func:`_refused`)."""
        if _asked_by_base():
            return list.pop(self, *args)
        raise _refused("pop()")

    def remove(self, value: Any) -> None:
        """Refused to code not the base loop's (see :func:`_refused`)."""
        if _asked_by_base():
            list.remove(self, value)
            return
        raise _refused("remove()")

    def reverse(self) -> None:
        """Refused to code not the base loop's (see :func:`_refused`)."""
        if _asked_by_base():
            list.reverse(self)
            return
        raise _refused("reverse()")

    def __delitem__(self, index: Any) -> None:
        if _asked_by_base():
            list.__delitem__(self, index)
            return
        raise _refused("__delitem__ (del loop._scheduled[...])")

    def __setitem__(self, index: Any, value: Any) -> None:
        if _asked_by_base():
            list.__setitem__(self, index, value)
            return
        raise _refused("__setitem__ (loop._scheduled[...] = ...)")

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
    # Every _run_once of the base's classes: an app's subclass of a framework's loop whose
    # _run_once calls super()._run_once() runs the framework's code too, which must see the
    # heap as well (only the nearest one's module was registered: its parent's then measured
    # the readers' list and popped the heap).
    for cls in type(loop).__mro__:
        run_once = vars(cls).get("_run_once")
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
