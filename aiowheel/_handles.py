"""The handles users hold: call_at's TimerHandle, and the entry behind schedule_at.

Every timer is exactly one object: the handle *is* the wheel entry (it subclasses
:class:`aiowheel._entry._Timed`, a wheel ``Entry`` with an exact deadline), so
arming a timer allocates one object and cancelling it unlinks that object from its bucket.
A handle holds the engine that filed it as an :class:`~aiowheel._entry.Owner` and asks it,
never the wheel, to take it out (``_unfile``), to run it in the batch of due callbacks
(``_queue``) or to start a task (``_create_task``).

Plain classes with ``__slots__`` and full annotations, no dynamic attributes: the planned
compiled build (mypyc) must be able to take this module unchanged.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from . import _awaiting
from ._entry import Owner, _Timed

__all__ = ["EMPTY_CONTEXT", "Handle", "Scheduled", "TimerHandle", "callback_repr"]

# A snapshot of an empty context, shared by every callback scheduled from a context with no
# variables set (the common case): saves one Context object per pending timer. Each run gets a
# fresh empty Context, so a callback that sets a variable cannot leak it into another.
EMPTY_CONTEXT: Final = contextvars.Context()

# A TimerHandle is pending while it is linked in the wheel. Once it is out, the wheel no longer
# reads its `_tick`, and the handle records its fate there instead of in a slot of its own
# (8 bytes on every pending timer): one of these three values.
_DISPATCHED: Final = -1  # due; its run is queued with loop.call_soon
_RAN: Final = -2
_CANCELLED: Final = -3
_FATES: Final = {_DISPATCHED: "dispatched", _RAN: "ran", _CANCELLED: "cancelled"}


class Handle(Protocol):
    """What ``call_at`` / ``call_later`` return, in either build: this module's
    :class:`TimerHandle`, or the native core's (``aiowheel._core.TimerHandle``, the same API).
    ``aiowheel.TimerHandle`` is the one the running build makes."""

    def when(self) -> float:
        """The deadline, in the loop's clock, exactly as scheduled."""
        ...

    def cancel(self) -> bool:
        """Cancel the callback; True if this call cancelled it."""
        ...

    def cancelled(self) -> bool:
        """True if :meth:`cancel` cancelled this handle (or its timer closed first)."""
        ...

    def get_context(self) -> contextvars.Context:
        """The context the callback runs in."""
        ...


class TimerHandle(_Timed):
    """A callback scheduled with :meth:`Timer.call_at` or :meth:`Timer.call_later`.

    Like :class:`asyncio.TimerHandle`, but :meth:`cancel` is O(1), frees the timer at once and
    tells whether it did anything.
    """

    __slots__ = ("_args", "_callback", "_context", "_owner")

    _callback: Callable[..., object] | None
    _args: tuple[object, ...] | None
    _context: contextvars.Context
    _owner: Owner

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context,
        owner: Owner,
    ) -> None:
        # Every slot is set here with no super().__init__() call (this runs once per
        # call_later, where one Python-level call is ~10% of the cost), except _next and
        # _tick, which the wheel sets on insert and nothing reads while _prev is None.
        self._prev = None
        self._when = when
        self._callback = callback
        self._args = args
        self._context = context
        self._owner = owner

    def when(self) -> float:
        """The deadline, in the loop's clock, exactly as scheduled."""
        return self._when

    def get_context(self) -> contextvars.Context:
        """The context the callback runs in (as ``asyncio.Handle.get_context``).

        A callback scheduled from an empty context runs in a fresh empty context each time;
        for it this returns a new empty Context.
        """
        context = self._context
        if context is EMPTY_CONTEXT:
            return contextvars.Context()
        return context

    def cancel(self) -> bool:
        """Cancel the callback. True if this call cancelled it; False if it had already run
        or been cancelled. A pending handle leaves the wheel at once (O(1))."""
        if self._prev is not None:
            self._owner._unfile(self)
        elif self._tick != _DISPATCHED:
            return False
        else:
            self._owner._check_cancel_of_due()
        self._tick = _CANCELLED
        self._callback = None
        self._args = None
        return True

    def cancelled(self) -> bool:
        """True if :meth:`cancel` cancelled this handle (or its timer closed before it ran)."""
        return self._prev is None and self._tick == _CANCELLED

    def __repr__(self) -> str:
        state = "pending" if self._prev is not None else _FATES.get(self._tick, "due")
        callback = "" if self._callback is None else f" {callback_repr(self._callback)}"
        return f"<TimerHandle when={self._when!r}{callback} {state}>"

    def _fire(self, owner: Owner) -> None:
        # Queued in the engine's batch, which runs in a loop callback, not inside the reaper
        # task: the callback runs exactly as a loop.call_at callback does (no current task,
        # the loop's exception handler, KeyboardInterrupt leaves the loop) and nothing it
        # does can hurt the reaper. One loop callback per batch, not one per timer.
        self._tick = _DISPATCHED
        owner._queue(self)

    def _run(self) -> None:
        """Run the callback now, in its context, reporting an exception like the loop does."""
        if self._tick != _DISPATCHED:
            return  # cancelled after it was dispatched
        self._tick = _RAN
        callback = self._callback
        args = self._args
        assert callback is not None and args is not None
        context = self._context
        if context is EMPTY_CONTEXT:
            context = contextvars.Context()  # a fresh one per run: nothing leaks between runs
        try:
            context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            asyncio.get_running_loop().call_exception_handler(
                {
                    "message": f"Exception in callback {callback_repr(callback)}",
                    "exception": exc,
                    "handle": self,
                }
            )

    def _describe(self) -> tuple[str, object, object]:
        return ("call", self._callback, self._args)

    def _abandon(self, exc: BaseException | None) -> None:
        self._tick = _CANCELLED
        self._callback = None
        self._args = None


class Scheduled(_Timed):
    """The entry behind :meth:`Timer.schedule_at`: starts a task at the deadline.

    The future handed to the user is wired both ways: cancelling it before the deadline takes
    the entry out of the wheel (and closes a coroutine object that never started); cancelling
    it after dispatch cancels the running task. The task's outcome resolves the future.
    """

    __slots__ = ("_args", "_context", "_future", "_owner", "_target", "_task")

    _future: asyncio.Future[Any]
    _target: Coroutine[Any, Any, Any] | Callable[..., Any] | None
    _args: tuple[object, ...]
    _context: contextvars.Context
    _task: asyncio.Task[Any] | None
    _owner: Owner

    def __init__(
        self,
        when: float,
        future: asyncio.Future[Any],
        target: Coroutine[Any, Any, Any] | Callable[..., Any],
        args: tuple[object, ...],
        context: contextvars.Context,
        owner: Owner,
    ) -> None:
        self._prev = None
        self._next = None
        self._tick = 0
        self._when = when
        self._future = future
        self._target = target
        self._args = args
        self._context = context
        self._task = None
        self._owner = owner
        future.add_done_callback(self._on_future_done)

    def _fire(self, owner: Owner) -> None:
        target = self._target
        self._target = None
        if target is None or self._future.done():
            return
        coro = target if asyncio.iscoroutine(target) else _awaiting.call(target, self._args)
        task = owner._create_task(coro, self._context)
        self._task = task
        task.add_done_callback(self._on_task_done)

    def _on_future_done(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled():
            return
        if self._owner._unfile(self):
            self._close_target()
        elif self._task is not None:
            self._task.cancel()

    def _on_task_done(self, task: asyncio.Task[Any]) -> None:
        future = self._future
        if future.done():
            return
        if task.cancelled():
            future.cancel()
            return
        exc = task.exception()
        if exc is not None:
            future.set_exception(exc)
        else:
            future.set_result(task.result())

    def _close_target(self) -> None:
        target = self._target
        self._target = None
        if asyncio.iscoroutine(target):
            target.close()  # never started: no "coroutine was never awaited" warning

    def _describe(self) -> tuple[str, object, object]:
        return ("scheduled", self._target, self._task)

    def _abandon(self, exc: BaseException | None) -> None:
        self._close_target()
        future = self._future
        if not future.done():
            if exc is None:
                future.cancel()
            else:
                future.set_exception(exc)


def callback_repr(callback: Callable[..., object]) -> str:
    """How a handle's repr and the loop's error report name its callback."""
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    return f"{name}()" if isinstance(name, str) else repr(callback)
