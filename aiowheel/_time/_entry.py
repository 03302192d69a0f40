"""The contract between the driver and what it files: ``Timed`` entries and their ``Owner``.

Why a module of its own. The driver (:mod:`aiowheel._time._driver`) calls its entries (an entry's
``_fire`` when it comes due, ``_abandon`` when the driver closes under it), and the entries call
the driver back (a handle's ``cancel`` unfiles it, a timeout files itself when its block is
entered, a heartbeat re-files itself after each run). Written directly, that is an import cycle
between the driver and every kind of entry. Here both sides meet on the lowest floor they
share: :class:`Owner` is the driver's *protected API*, the few named operations an entry may
ask of whoever filed it, and :class:`aiowheel._time._driver.Driver` implements it. Entries
(:mod:`aiowheel._time._handles`, :mod:`aiowheel._time._timeout`, :mod:`aiowheel._time._periodic`)
import this module, never the driver or the Timer, so the rooms form a stack with no arrow running
back up.

The operations are tokio's (``Handle::reregister``, ``clear_entry``) and Kafka's
(``SystemTimer.addTimerTaskEntry``): *file* (admit, insert, and wake the reaper earlier if this
is now the first bucket), *move* (lazily when later: only the exact deadline is rewritten and
the entry is re-filed when its old bucket comes due; eagerly, with a re-arm, when earlier),
*unfile*, *queue* a due callback in the current batch, and the loop check. Each is decided in
exactly one place, the driver: nothing else writes the wheel or the wake-up.

Compiled build. ``Owner`` is a native class with no state; the driver subclasses it, so an
entry's call through it is a direct (vtable) call in C, as cheap as a call on the driver itself.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine
from typing import Any

from .._common import _validate
from .._common._validate import Seconds
from . import _wheel

__all__ = ["Owner", "Sleeper", "Timed"]


class Timed(_wheel.Entry):
    """A wheel entry with an exact float deadline, fired and abandoned by its owner.

    ``_when`` is the deadline exactly as the user gave it (the wheel only knows the rounded-up
    tick); the owner compares it with the loop's clock before it fires the entry.
    """

    __slots__ = ("_seq", "_when")

    _when: float
    _seq: int  # the filing stamp (Driver._insert): the order among timers of one deadline

    def _fire(self, owner: Owner) -> None:
        """The deadline has passed (by the loop's clock): do what this timer is for."""
        raise NotImplementedError

    def _abandon(self, exc: BaseException | None) -> None:
        """The owner closed with this entry pending: cancel it, or fail it with ``exc``."""
        raise NotImplementedError

    def _run_due(self) -> None:
        """Run a callback that ``_fire`` queued with :meth:`Owner._queue`."""
        raise NotImplementedError

    def _describe(self) -> tuple[str, object, object]:
        """What this timer is, for :func:`aiowheel.pending_timers`: its kind, what it runs (a
        callback or coroutine, or None) and what it serves (a task, a future a task awaits, a
        call's arguments, or None). Read only when someone asks: nothing on the hot path."""
        raise NotImplementedError


class Sleeper(Timed):
    """The entry behind ``await timer.sleep_until()``: resolves a future at the deadline."""

    __slots__ = ("_future", "_result")

    _future: asyncio.Future[Any]
    _result: object

    def __init__(self, when: float, future: asyncio.Future[Any], result: object) -> None:
        self._prev = None
        self._next = None
        self._tick = 0
        self._when = when
        self._future = future
        self._result = result

    def _fire(self, owner: Owner) -> None:
        future = self._future
        if not future.done():
            future.set_result(self._result)

    def _abandon(self, exc: BaseException | None) -> None:
        future = self._future
        if not future.done():
            if exc is None:
                future.cancel()
            else:
                future.set_exception(exc)

    def _describe(self) -> tuple[str, object, object]:
        return ("sleep", None, self._future)


class Owner:
    """What an entry may ask of the driver that files it (implemented by the driver).

    Every method but :meth:`_running_loop`, :meth:`_loop_here` and :meth:`_loop_time` expects
    the caller to have checked the loop (it runs in the owner's loop's thread).
    """

    __slots__ = ()

    # -- the loop check and the clock ----------------------------------------------------------

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        """The owner's loop, running in this thread: bound on first use, or RuntimeError
        saying what is wrong (closed, no loop running, another loop)."""
        raise NotImplementedError

    def _loop_here(self) -> asyncio.AbstractEventLoop | None:
        """This thread's running loop (the owner's, by its fast check, else asyncio's answer),
        or None; binds nothing and raises nothing."""
        raise NotImplementedError

    def _now(self) -> float:
        """The bound loop's clock now (the owner is bound: the caller checked the loop)."""
        raise NotImplementedError

    def _loop_time(self) -> float:
        """``loop.time()`` of the bound loop, or of the running one before binding."""
        raise NotImplementedError

    # -- file, move, unfile ---------------------------------------------------------------------

    def _file(self, entry: Timed, when: float) -> None:
        """Put an unlinked entry in the wheel for deadline ``when``, waking the reaper earlier
        if it is now first. ValueError (NaN) or PendingLimitError before anything changes."""
        raise NotImplementedError

    def _move(self, entry: Timed, when: float) -> None:
        """Give a pending entry the deadline ``when`` (tokio's reregister): later, lazily;
        earlier, re-filed at once with a re-arm. An unlinked entry is filed."""
        raise NotImplementedError

    def _push_back(self, entry: Timed, when: float) -> bool:
        """The lazy half of :meth:`_move`, for hot paths that have not checked the loop: if
        ``entry`` is pending, ``when`` is no earlier than its deadline and still ahead of the
        clock, and this is the owner's thread, rewrite the deadline and return True (one
        store: the entry is re-filed when its bucket comes due). Otherwise change nothing and
        return False: the caller takes its checked path."""
        raise NotImplementedError

    def _push_back_by(self, entry: Timed, delay: float) -> bool:
        """:meth:`_push_back` to ``delay`` (> 0) seconds from now: the clock is read once."""
        raise NotImplementedError

    def _arm_at(self, entry: Timed, when: float, loop: asyncio.AbstractEventLoop) -> bool:
        """File an unlinked ``entry`` for ``when`` for a caller that found ``loop`` running
        here by :meth:`_loop_here` (the loop check is then one identity test); True, with
        nothing filed, if ``when`` has already passed."""
        raise NotImplementedError

    def _set_deadline(self, entry: Timed, when: float | None) -> asyncio.AbstractEventLoop | None:
        """A timeout's deadline set to ``when``, after the loop check: None unfiles it; a
        deadline already passed unfiles it and returns the loop, for the caller to hand the
        firing to ``loop.call_soon`` as asyncio does; any other is :meth:`_move`. Returns None
        but in that one case. NaN and the loop's errors are raised before anything changes."""
        raise NotImplementedError

    def _unfile(self, entry: Timed) -> bool:
        """Take ``entry`` out of the wheel; True if it was in it."""
        raise NotImplementedError

    def _guard(self, task: object, timeout: object) -> None:
        """Note that ``timeout`` (entered in ``task``) guards ``task``: what
        :func:`aiowheel.current_deadline` reads (:class:`aiowheel._time._observe.Guards`)."""
        raise NotImplementedError

    def _check_cancel_of_due(self) -> None:
        """Before a due entry (out of the wheel, its run queued) is cancelled: on a
        free-threaded build, RuntimeError from a thread that is not its loop's while the loop
        runs (its batch may be running it at this moment), before anything changes."""
        raise NotImplementedError

    # -- dispatch ------------------------------------------------------------------------------

    def _queue(self, entry: Timed) -> None:
        """From ``_fire``: run ``entry._run_due()`` in this pass's batch of due callbacks."""
        raise NotImplementedError

    def _create_task(
        self, coro: Coroutine[Any, Any, Any], context: contextvars.Context
    ) -> asyncio.Task[Any]:
        """From ``_fire``: start ``coro`` as a task of the owner's loop, in ``context``."""
        raise NotImplementedError

    # -- the synchronous halves of the sleeping coroutines (aiowheel._time._awaiting)
    # ----------------- Written here once, from the operations above: a sleeper is an entry like any
    # other.

    def _sleeper_at(self, deadline: Seconds, result: object) -> Sleeper | None:
        """Check the loop and ``deadline``, and file a sleeper for it; None if it has passed
        (the coroutine then yields once, as ``asyncio.sleep(0)`` does)."""
        loop = self._running_loop()
        if not isinstance(deadline, float):
            deadline = _validate.seconds("sleep_until(): deadline", deadline)
        if deadline != deadline:
            raise ValueError("sleep_until(): deadline must not be NaN")
        return self._sleeper(loop, deadline, result)

    def _sleeper_after(self, delay: Seconds, result: object) -> Sleeper | None:
        """:meth:`_sleeper_at` for ``delay`` seconds from now."""
        loop = self._running_loop()
        if not isinstance(delay, float):
            delay = _validate.seconds("sleep(): delay", delay)
        if delay != delay:
            raise ValueError("sleep(): delay must not be NaN")
        return self._sleeper(loop, self._now() + delay, result)

    def _sleeper(
        self, loop: asyncio.AbstractEventLoop, deadline: float, result: object
    ) -> Sleeper | None:
        """File a sleeper for ``deadline``; None if it has passed (nothing is filed then)."""
        if deadline <= self._now():
            return None
        entry = Sleeper(deadline, loop.create_future(), result)
        self._file(entry, deadline)
        return entry
