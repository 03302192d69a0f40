"""A purgatory's book: which operations wait under which key, the states they go through, and
the loop the purgatory is bound to.

Both kinds of operation (the awaited wait, :mod:`aiowheel._purgatory._wait`, and the callback form,
:class:`aiowheel.DelayedOperation`, :mod:`aiowheel._purgatory._delayed`) change the purgatory's
books when they end: they count their outcome, leave their keys and the wheel, and (a wait made with
no loop running) bind the purgatory to the loop that steps them. This room is what they reach:
:class:`Operation`, the base both are (its keys, its timer handle, its state), and
:class:`Watchers`, the base :class:`aiowheel.Purgatory` is (the watchers, the counters, the
binding to a loop), with the states' exactly-once rule and the errors of a check that both
kinds raise. It is a room of its own so that the operations sit below the purgatory that makes
them and above the book they write, with no import circle: the purgatory's public calls
(``wait``, ``watch``, ``signal``) are in :mod:`aiowheel._purgatory._purgatory`, on top.

Compiled in the compiled build (mypyc): the operations and the purgatory reach these
attributes and methods natively (the state constants are ``Final`` literals, inlined where
they are read). :class:`Operation` allows interpreted subclasses because
:class:`~aiowheel.DelayedOperation`, one of its subclasses, does.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
from collections.abc import Callable, Coroutine, Hashable
from typing import Final

from .._common._build import mypyc_attr
from .._loopmode._default import get_timer
from .._time._handles import Handle
from .._time._timer import Timer
from ._signals import Signals

__all__ = ["Operation", "Watchers"]

_get_ident: Final = threading.get_ident
_get_running_loop: Final = asyncio._get_running_loop

# An operation's state. Only the loop's thread writes it; the first transition out of
# PENDING / CHECKING to a final state wins, and every other path finds it final and does
# nothing: that is the whole exactly-once rule.
NEW: Final = 0  # a DelayedOperation not yet watched
FIRST: Final = 1  # its first check, in watch(), before it is watched
PENDING: Final = 2  # watched under its keys
CHECKING: Final = 3  # watched, and its check is running (a re-entrant signal skips it)
COMPLETED: Final = 4  # the final states, from here on
EXPIRED: Final = 5
CANCELLED: Final = 6
FAILED: Final = 7
OUTCOMES: Final = {
    NEW: "new",
    FIRST: "pending",
    PENDING: "pending",
    CHECKING: "pending",
    COMPLETED: "completed",
    EXPIRED: "expired",
    CANCELLED: "cancelled",
    FAILED: "failed",
}

# The top-level watcher dict is rebuilt when it falls below a quarter of its peak, once the
# peak is above this (a smaller table is not worth the copy).
_SHRINK_FLOOR: Final = 64


@mypyc_attr(allow_interpreted_subclasses=True)
class Operation:
    """What every operation of a purgatory is to its book: the purgatory watching it, the keys
    it is watched under, its timer's handle and its state (the base of the awaited wait and of
    :class:`aiowheel.DelayedOperation`; not public)."""

    _purgatory: Watchers
    _keys: tuple[Hashable, ...]
    _handle: Handle | None
    _phase: int

    def __call__(self) -> None:
        """The timer's callback at its deadline (each kind expires in its own way). Declared
        here so that the compiled base has the call slot its subclasses' layouts begin with."""
        raise NotImplementedError

    def _abandoned(self) -> None:
        """It was left pending on a closed loop and has just ended as cancelled (its state and
        the count are set, its timer cancelled): what ending that way means for its kind."""
        raise NotImplementedError


class Watchers:
    """A purgatory's book (the base of :class:`aiowheel.Purgatory`, which sets every attribute
    in its ``__init__``): the operations watched under each key, the outcome counters, and the
    loop, thread and timer it is bound to. The operations change it through these methods."""

    __slots__ = (
        "_cancelled",
        "_completed",
        "_context",
        "_expired",
        "_failed",
        "_given",
        "_live",
        "_loop",
        "_peak",
        "_signals",
        "_tid",
        "_timer",
        "_watchers",
    )

    _signals: Signals | None
    _timer: Timer | None
    _given: bool  # its timer (and so its loop) was given: it never moves
    _loop: asyncio.AbstractEventLoop | None
    _tid: int
    # key -> {id(operation): operation}: operations are themselves, whatever __eq__ and
    # __hash__ a DelayedOperation subclass defines (a dataclass's, say).
    _watchers: dict[Hashable, dict[int, Operation]]
    _peak: int
    _live: int
    _completed: int
    _expired: int
    _cancelled: int
    _failed: int
    # The context a wait's timer runs in: all it does is fail a future, which reads no
    # context variable, so one empty context serves every wait (no copy per operation).
    _context: contextvars.Context

    def _bind(
        self, method: str, running: asyncio.AbstractEventLoop | None
    ) -> asyncio.AbstractEventLoop:
        """The running loop ``running``, which becomes this purgatory's: bound on first use, and
        again once its earlier loop is closed or it has no live operation there (a module-level
        purgatory serves each ``asyncio.run`` in turn). Refused while operations live on an
        open loop, and for a purgatory given a timer (the timer's loop is its loop)."""
        loop = self._loop
        if running is None:
            raise RuntimeError(f"Purgatory.{method}(): needs a running event loop")
        if running is loop:
            self._tid = _get_ident()  # the loop may run in another thread than it did
            return running
        if loop is not None:
            if self._given:
                raise RuntimeError(
                    f"Purgatory.{method}(): this purgatory belongs to another event loop (the "
                    "loop of the timer it was given)"
                )
            if self._live and not loop.is_closed():
                raise RuntimeError(
                    f"Purgatory.{method}(): this purgatory belongs to another event loop, where "
                    f"{self._live} operation(s) still wait (it moves to a new loop once that "
                    "loop is closed or has none left)"
                )
            _abandon(self)
            self._timer = None
        timer = self._timer if self._timer is not None else get_timer()
        self._timer = timer
        self._loop = running
        self._tid = _get_ident()
        if self._signals is not None:
            self._signals._attach(self, running)  # listen for other processes' signals here
        return running

    def _on_loop_thread(self) -> bool:
        """The slow path of the thread check (this thread did not use the purgatory last):
        True if this thread runs the purgatory's loop now (a loop may run in another thread
        than before), or a new loop the purgatory may move to (then it has moved)."""
        running = _get_running_loop()
        if running is None:
            return False
        if running is not self._loop:
            loop = self._loop
            if self._given or (loop is not None and self._live and not loop.is_closed()):
                return False
        self._bind("signal", running)
        return True

    def _watch(self, op: Operation, keys: tuple[Hashable, ...]) -> None:
        """Watch ``op`` under ``keys`` (its timer is filed: that is what can refuse)."""
        watchers = self._watchers
        ident = id(op)
        for key in keys:
            ops = watchers.get(key)
            if ops is None:
                watchers[key] = {ident: op}
                if len(watchers) > self._peak:
                    self._peak = len(watchers)
            else:
                ops[ident] = op
        self._live += 1

    def _unwatch(self, op: Operation) -> None:
        """Take a finished ``op`` out of its keys and off the wheel: O(its keys)."""
        handle = op._handle
        if handle is not None:
            op._handle = None
            handle.cancel()
        watchers = self._watchers
        ident = id(op)
        for key in op._keys:
            ops = watchers[key]
            if len(ops) == 1:
                del watchers[key]
                peak = self._peak
                if peak > _SHRINK_FLOOR and len(watchers) < peak >> 2:
                    # Dicts keep their peak's table: copy to a right-sized one.
                    self._watchers = watchers = dict(watchers)
                    self._peak = len(watchers)
            else:
                del ops[ident]
        self._live -= 1

    def _hook(self, op: object, hook: Callable[[], object]) -> None:
        """Run one of ``op``'s outcome hooks; an exception goes to the loop's handler."""
        try:
            hook()
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            self._report(op, hook.__name__, exc)

    def _report(self, op: object, where: str, exc: BaseException) -> None:
        loop = self._loop
        assert loop is not None
        loop.call_exception_handler(
            {
                "message": f"Exception in {type(op).__qualname__}.{where}()",
                "exception": exc,
                "operation": op,
            }
        )


def _abandon(purgatory: Watchers) -> None:
    """End the operations ``purgatory`` left on a closed loop (nothing can await them any
    more) as cancelled, each once: a DelayedOperation's on_cancel runs."""
    left: dict[int, Operation] = {}
    for ops in purgatory._watchers.values():
        left.update(ops)
    purgatory._watchers = {}
    purgatory._peak = 0
    purgatory._live = 0
    for op in left.values():
        if op._phase >= COMPLETED:
            continue
        op._phase = CANCELLED
        purgatory._cancelled += 1
        handle = op._handle
        op._handle = None
        if handle is not None:
            with contextlib.suppress(Exception):  # a closed loop's timer: it never runs
                handle.cancel()
        op._abandoned()


def raised_from_check(exc: BaseException) -> BaseException:
    """What a wait raises for an error from its check: the error itself, but a StopIteration
    as a RuntimeError from it (raised into a task's coroutine, it would end the coroutine as
    if it returned; asyncio.Future refuses it for that reason)."""
    if isinstance(exc, StopIteration | StopAsyncIteration):
        error = RuntimeError(f"Purgatory.wait(): check raised {type(exc).__name__}")
        error.__cause__ = exc
        return error
    return exc


def awaitable_answer_error(method: str, name: str, value: object) -> TypeError:
    """The error for a check that answered with an awaitable (an ``async def`` check): a
    check must answer at once, inside the signal that runs it. A coroutine is closed, so
    that it does not warn it was never awaited."""
    if isinstance(value, Coroutine):
        value.close()
    return TypeError(
        f"Purgatory.{method}(): {name} must answer at once, got an awaitable "
        f"({type(value).__name__}): use a plain function (a signal runs it synchronously)"
    )
