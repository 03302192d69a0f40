"""The callback form of a purgatory's operation: :class:`DelayedOperation` (Kafka's), for code
that does not await.

A user subclasses it and overrides ``try_complete`` and the outcome hooks; the purgatory
(:meth:`aiowheel.Purgatory.watch`) checks it now, watches it under its keys and files its
deadline, and each signal of one of its keys re-checks it. Exactly one outcome hook runs. Its
rules, and where they leave Kafka's, are in :mod:`aiowheel._purgatory._purgatory`'s docstring (the
callback form). What is here: the class users see, with ``force_complete`` / ``cancel`` /
the timer's expiry ending it, and ``attempt``, the run of ``try_complete`` that decides
whether it completed, failed or waits on (the purgatory's ``watch`` and a signal's re-check
both call it).

A room of its own, between the purgatory's book (:mod:`aiowheel._purgatory._watchers`, what it
changes when it ends) and the purgatory (:mod:`aiowheel._purgatory._purgatory`, which watches it),
so that neither the awaited wait's ~330 lines nor the purgatory's public calls share its room.
Compiled in the compiled build (mypyc) as a native class that allows interpreted subclasses
(that is how users write theirs).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Hashable
from typing import Final

from .._common._build import mypyc_attr
from ._watchers import (
    CANCELLED,
    CHECKING,
    COMPLETED,
    EXPIRED,
    FAILED,
    FIRST,
    NEW,
    OUTCOMES,
    PENDING,
    Operation,
    Watchers,
    awaitable_answer_error,
)

__all__ = ["DelayedOperation"]

_get_ident: Final = threading.get_ident


@mypyc_attr(allow_interpreted_subclasses=True)
class DelayedOperation(Operation):
    """An operation for :meth:`Purgatory.watch`, for code that does not await: subclass it
    and override :meth:`try_complete` and the outcome hooks (Kafka's ``DelayedOperation``).

    Exactly one outcome hook runs, once: :meth:`on_complete` (the condition held, or
    :meth:`force_complete`), :meth:`on_expiration` (the deadline passed first) or
    :meth:`on_cancel` (:meth:`cancel` first). If :meth:`try_complete` raises, the operation
    *fails*: it leaves its keys and the wheel, no hook runs, and the error goes to the loop's
    exception handler. So does an error from a hook. Hooks run in the loop's thread: a
    completion inside the :meth:`Purgatory.signal` call that caused it, an expiry in a loop
    callback.

    >>> class AcksOperation(aiowheel.DelayedOperation):
    ...     def __init__(self, acks, needed):
    ...         super().__init__()
    ...         self.acks, self.needed = acks, needed
    ...     def try_complete(self):
    ...         return len(self.acks) >= self.needed
    ...     def on_complete(self):
    ...         print("committed")
    ...     def on_expiration(self):
    ...         print("timed out")
    """

    def __init__(self) -> None:
        self._phase = NEW

    # -- to override -----------------------------------------------------------------------------

    def try_complete(self) -> bool:
        """Check the condition: a true value if it holds (the operation then completes, and
        :meth:`on_complete` runs); None, False or any false value if not yet. Called when
        watched and on each signal of its keys, and must answer at once: an ``async def``
        try_complete is refused (TypeError from :meth:`Purgatory.watch`). It may also call
        :meth:`force_complete` itself (Kafka's style) and return True."""
        return False

    def on_complete(self) -> None:
        """The operation completed (its condition held, or :meth:`force_complete`)."""

    def on_expiration(self) -> None:
        """The deadline passed before the operation completed."""

    def on_cancel(self) -> None:
        """:meth:`cancel` ended the operation first."""

    # -- to call ---------------------------------------------------------------------------------

    @property
    def keys(self) -> tuple[Hashable, ...]:
        """The keys it is watched under (empty before it is watched)."""
        return getattr(self, "_keys", ())

    @property
    def outcome(self) -> str:
        """``"new"`` (not watched yet), ``"pending"``, ``"completed"``, ``"expired"``,
        ``"cancelled"`` or ``"failed"``."""
        return OUTCOMES[getattr(self, "_phase", NEW)]

    def done(self) -> bool:
        """True once the operation has its outcome."""
        return getattr(self, "_phase", NEW) >= COMPLETED

    def force_complete(self) -> bool:
        """Complete the operation now, whatever its condition: it leaves its keys and the
        wheel and :meth:`on_complete` runs. True if this call completed it; False if it had
        an outcome already (Kafka's ``forceComplete``)."""
        return self._end(COMPLETED, "force_complete")

    def cancel(self) -> bool:
        """Cancel the operation: it leaves its keys and the wheel and :meth:`on_cancel`
        runs. True if this call cancelled it; False if it had an outcome already."""
        return self._end(CANCELLED, "cancel")

    def __call__(self) -> None:
        """The timer's callback (Kafka's ``TimerTask.run``): expire the operation if it is
        still pending. The purgatory calls it at the deadline."""
        if getattr(self, "_phase", NEW) == PENDING:
            self._handle = None  # it fired: nothing to cancel
            self._end(EXPIRED, "expire")

    def __repr__(self) -> str:
        return f"<{type(self).__qualname__} keys={list(self.keys)!r} {self.outcome}>"

    # -- internals -------------------------------------------------------------------------------

    def _end(self, outcome: int, method: str) -> bool:
        state = getattr(self, "_phase", NEW)
        if state == NEW:
            raise RuntimeError(f"{type(self).__qualname__}.{method}(): not watched yet")
        if state >= COMPLETED:
            return False
        purgatory = self._purgatory
        if purgatory._tid != _get_ident() and not purgatory._on_loop_thread():
            raise RuntimeError(
                f"{type(self).__qualname__}.{method}(): called from a thread that does not run "
                "the purgatory's loop: hand it over with loop.call_soon_threadsafe"
            )
        if self._phase >= COMPLETED:
            return False  # it was left on a closed loop, and ended when the purgatory moved
        self._phase = outcome
        if state != FIRST:  # watched under its keys
            purgatory._unwatch(self)
        if outcome == COMPLETED:
            purgatory._completed += 1
            purgatory._hook(self, self.on_complete)
        elif outcome == EXPIRED:
            purgatory._expired += 1
            purgatory._hook(self, self.on_expiration)
        else:
            purgatory._cancelled += 1
            purgatory._hook(self, self.on_cancel)
        return True

    def _try(self) -> bool:
        """A signal's re-check (the state is PENDING): True if it completed now."""
        self._phase = CHECKING
        completed = attempt(self._purgatory, self)
        if self._phase == CHECKING:
            self._phase = PENDING
        return completed

    def _waiter(self) -> object:
        """What pending_timers names it by: its class (no task waits on it)."""
        return None

    def _census_entry(self) -> tuple[object, object, object]:
        """For the census (aiowheel._seeing._census._operation): this operation, its class (what
        names it: no task waits on it), no task."""
        return self, type(self), None

    def _abandoned(self) -> None:
        """Left on a closed loop, it ended as cancelled: its on_cancel runs."""
        self._purgatory._hook(self, self.on_cancel)


def attempt(purgatory: Watchers, op: DelayedOperation) -> bool:
    """Run ``op.try_complete()`` for ``purgatory`` (its state is FIRST or CHECKING, as it
    is being watched or watched); complete it if it says so. True if it completed now. An exception
    fails it."""
    trying = op._phase
    # Through an object-typed callable: a subclass's try_complete may answer with any
    # value (None for "not yet", a count...), read by its truth in both builds (a call
    # typed bool would make the compiled build refuse all but bool).
    try_complete: Callable[[], object] = op.try_complete
    try:
        holds = try_complete()
    except (SystemExit, KeyboardInterrupt):
        if op._phase == trying:
            op._phase = NEW if trying == FIRST else PENDING
        raise
    except BaseException as exc:
        if op._phase != trying:
            return False  # it ended inside try_complete (cancelled, say)
        op._phase = FAILED
        purgatory._failed += 1
        if trying == CHECKING:
            purgatory._unwatch(op)
        purgatory._report(op, "try_complete", exc)
        return False
    if op._phase == COMPLETED:
        return True  # try_complete called force_complete itself
    if op._phase != trying:
        return False
    if isinstance(holds, Awaitable):
        refused = awaitable_answer_error("watch", "operation.try_complete", holds)
        if trying == FIRST:
            op._phase = NEW  # refused by watch(): nothing watched, nothing counted
            raise refused
        op._phase = FAILED
        purgatory._failed += 1
        purgatory._unwatch(op)
        purgatory._report(op, "try_complete", refused)
        return False
    if not holds:
        return False
    op._phase = COMPLETED
    if trying == CHECKING:
        purgatory._unwatch(op)
    purgatory._completed += 1
    purgatory._hook(op, op.on_complete)
    return True
