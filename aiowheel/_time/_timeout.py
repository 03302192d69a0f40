"""Timeout: a drop-in for ``asyncio.timeout`` on a Timer (``wait_for`` is in _awaiting).

The semantics are CPython's ``Lib/asyncio/timeouts.py`` of the running interpreter, line for
line: the same state machine (CREATED, ENTERED, EXPIRING, EXPIRED, EXITED, with asyncio's state
values, so reprs read the same), the same error messages, the
same ``Task.uncancel()`` accounting (an outside ``task.cancel()`` is never swallowed, and of
nested timeouts expiring together only the outermost raises), the same exception chaining
(3.13 also threads the TimeoutError into a foreign exception's context), and a deadline that
has already passed is handed to ``loop.call_soon`` exactly as asyncio does, so it fires before
the block's first ``await`` resumes. Only the clock work differs: the Timeout object *is* its
wheel entry, so arming it allocates nothing more, leaving the block unlinks it in O(1), and
``reschedule()`` to a later deadline rewrites one integer (the wheel's lazy re-file) instead of
cancelling a heap handle and pushing another.

Why not subclass ``asyncio.Timeout``: it is ``@final``, keeps a ``__dict__`` and drives a loop
``TimerHandle``; the point here is to not have those on the path every request takes.
"""

from __future__ import annotations

import asyncio
import enum
import sys
from collections.abc import Awaitable
from types import TracebackType
from typing import Final, TypeVar, final

from .._common import _validate
from .._common._errors import chained
from .._common._validate import Seconds, seconds
from ._awaiting import DONE as _DONE
from ._entry import Owner, Timed
from ._tasks import current_task

__all__ = ["Timeout", "timeout_after"]

_T = TypeVar("_T")

# 3.13 also inserts the TimeoutError into the context chain of a foreign exception raised
# while the timeout was expiring (gh-113848); 3.11 and 3.12 only convert CancelledError.
_THREAD_TIMEOUT_INTO_FOREIGN_EXCEPTIONS: Final = sys.version_info >= (3, 13)


class _State(enum.Enum):
    # asyncio.timeouts._State, value for value (it is private and untyped, so not imported).
    CREATED = "created"
    ENTERED = "active"
    EXPIRING = "expiring"
    EXPIRED = "expired"
    EXITED = "finished"


_CREATED: Final = _State.CREATED
_ENTERED: Final = _State.ENTERED
_EXPIRING: Final = _State.EXPIRING
_EXPIRED: Final = _State.EXPIRED
_EXITED: Final = _State.EXITED


@final
class Timeout(Timed):
    """Asynchronous context manager that cancels the block it guards at a deadline.

    Use :meth:`Timer.timeout` / :meth:`Timer.timeout_at` (or the module-level
    :func:`aiowheel.timeout`) rather than instantiating it. Behaves exactly like
    :class:`asyncio.Timeout`::

        async with timer.timeout(10) as cm:
            await long_running()
            cm.reschedule(timer.time() + 10)   # push it back: O(1)
    """

    __slots__ = ("_cancelling", "_deadline", "_owner", "_soon", "_state", "_task")

    _deadline: float | None
    _state: _State
    _task: asyncio.Task[object] | None
    _owner: Owner
    _cancelling: int
    _soon: asyncio.Handle | None

    def __init__(self, when: float | None, owner: Owner) -> None:
        """Create a timeout for loop time ``when`` (None: never) on ``owner`` (a Timer)."""
        # _next, _tick and _when are set when the wheel takes it: one store each saved on
        # the path every request takes (nothing reads them while _prev is None).
        self._prev = None
        self._deadline = when
        self._state = _CREATED
        self._task = None
        self._owner = owner
        self._cancelling = 0
        self._soon = None

    def when(self) -> float | None:
        """Return the current deadline (None if disabled)."""
        return self._deadline

    def reschedule(self, when: Seconds | None) -> None:
        """Move the deadline to loop time ``when`` (None disables it).

        Moving it later is O(1) and does no heap or bucket work.
        """
        if self._state is not _ENTERED:
            if self._state is _CREATED:
                raise RuntimeError("Timeout has not been entered")
            raise RuntimeError(f"Cannot change state of {self._state.value} Timeout")
        # The idle-timeout pattern calls this on every read: a later deadline is the
        # driver's lazy push-back (a thread check, a clock read, two comparisons, one store;
        # the entry keeps its bucket and is re-filed from `_when` when that bucket comes due).
        # While filed in the wheel, _soon is None (the two never coexist).
        if when is not None and not isinstance(when, float):
            when = seconds("reschedule(): deadline", when)  # a bad deadline changes nothing
        owner = self._owner
        if when is not None:
            if owner._push_back(self, when):  # never for NaN: its comparisons are False
                self._deadline = when
                return
            if when != when:  # off the hot path: refused before anything changes
                raise ValueError("reschedule(): deadline must not be NaN")
        # Checked (loop, NaN, max_pending) before anything of this timeout changes.
        passed = owner._set_deadline(self, when)
        self._deadline = when
        owner._guard(self._task, self)  # the index may have started since it was entered
        soon = self._soon
        if soon is not None:
            soon.cancel()
            self._soon = None
        if passed is not None:
            self._soon = passed.call_soon(self._on_timeout)

    def expired(self) -> bool:
        """Is timeout expired during execution?"""
        return self._state is _EXPIRING or self._state is _EXPIRED

    def __repr__(self) -> str:
        info = [""]
        if self._state is _ENTERED:
            when = round(self._deadline, 3) if self._deadline is not None else None
            info.append(f"when={when}")
        info_str = " ".join(info)
        return f"<Timeout [{self._state.value}]{info_str}>"

    async def __aenter__(self) -> Timeout:
        """Arm the timeout around the block."""
        if self._state is not _CREATED:
            raise RuntimeError("Timeout has already been entered")
        owner = self._owner
        loop = owner._loop_here()
        task = None if loop is None else current_task(loop)
        if loop is None or task is None:
            raise RuntimeError("Timeout should be used inside a task")
        when = self._deadline
        # Filed before the state changes, so that a refusal (another loop, max_pending) leaves
        # the timeout not entered; a deadline already passed is handed to loop.call_soon, as
        # asyncio does. (_arm_at, not _set_deadline: the loop was just found, so its check is
        # one identity test instead of the whole loop check, a sizeable share of a timeout.)
        if when is not None and owner._arm_at(self, when, loop):
            self._soon = loop.call_soon(self._on_timeout)
        self._state = _ENTERED
        self._task = task
        self._cancelling = task.cancelling()
        owner._guard(task, self)
        return self

    def _guard_when(self) -> float | None:
        """The deadline while this timeout guards its task (entered, not yet fired), else None
        (for :class:`aiowheel._time._observe.Guards`): in the wheel, due and waiting its turn
        (``max_batch``), or passed and handed to ``call_soon``."""
        return self._deadline if self._state is _ENTERED else None

    def _guarding(self) -> bool:
        """Whether this timeout is entered and not done (a reschedule may file it again)."""
        return self._state is _ENTERED

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> Awaitable[bool | None]:
        """Disarm; turn this timeout's own cancellation into TimeoutError.

        The work is done here and an awaitable already finished is returned (see
        :mod:`aiowheel._time._awaiting`): ``async with`` awaits it at once, and an exception raised
        here propagates from the block exactly as one raised by an awaited coroutine."""
        assert self._state in (_ENTERED, _EXPIRING)
        if self._prev is not None:
            self._owner._unfile(self)
        soon = self._soon
        if soon is not None:
            soon.cancel()
            self._soon = None

        if self._state is _EXPIRING:
            self._state = _EXPIRED
            task = self._task
            assert task is not None
            if _THREAD_TIMEOUT_INTO_FOREIGN_EXCEPTIONS:
                if task.uncancel() <= self._cancelling and exc_type is not None:
                    # Since there are no new cancel requests, we're handling this.
                    if issubclass(exc_type, asyncio.CancelledError):
                        raise chained(TimeoutError(), exc_val)
                    elif exc_val is not None:
                        _insert_timeout_error(exc_val)
                        if isinstance(exc_val, ExceptionGroup):
                            for exc in exc_val.exceptions:
                                _insert_timeout_error(exc)
            elif task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
                # Since there are no new cancel requests, we're handling this.
                raise chained(TimeoutError(), exc_val)
        elif self._state is _ENTERED:
            self._state = _EXITED

        return _DONE

    def _on_timeout(self) -> None:
        if self._state is not _ENTERED:
            return  # the block was left (or the deadline moved) after the firing was queued
        task = self._task
        assert task is not None
        task.cancel()
        self._state = _EXPIRING
        self._soon = None

    def _describe(self) -> tuple[str, object, object]:
        return ("timeout", None, self._task)

    def _fire(self, owner: Owner) -> None:
        self._on_timeout()

    def _abandon(self, exc: BaseException | None) -> None:
        # The timer closed under an active block: its deadline can no longer be enforced, and
        # running on without one would be worse than stopping, so the task is cancelled.
        task = self._task
        if self._state is _ENTERED and task is not None:
            task.cancel()


def timeout_after(delay: float, owner: Owner) -> Timeout:
    """A :class:`Timeout` ``delay`` seconds from now by ``owner``'s clock (the loop checked by
    the caller); ValueError, naming ``timeout()``, if the deadline is NaN."""
    return Timeout(_validate.not_nan(owner._now() + delay, "timeout(): delay"), owner)


def _insert_timeout_error(exc_val: BaseException) -> None:
    # CPython 3.13's Timeout._insert_timeout_error.
    while exc_val.__context__ is not None:
        if isinstance(exc_val.__context__, asyncio.CancelledError):
            te = TimeoutError()
            te.__context__ = te.__cause__ = exc_val.__context__
            exc_val.__context__ = te
            break
        exc_val = exc_val.__context__
