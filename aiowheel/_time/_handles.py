"""The handles users hold: call_at's TimerHandle, and the entry behind schedule_at.

A handle is an :class:`asyncio.TimerHandle` (issue 37: libraries check
``isinstance(h, asyncio.Handle)``, and loop mode must not change the answer with the delay).
The wheel's entry cannot be one: asyncio's class and the wheel's ``Entry`` both lay out slots
of their own (CPython refuses such a pair of bases), and in the compiled build ``Entry`` is a
mypyc native class, which a Python class such as asyncio's cannot join. So a callback timer
here is two objects: the :class:`TimerHandle` the user holds (asyncio's slots: callback, args,
context, deadline) and the :class:`Call` entry the wheel links (its links, tick and owner),
each pointing at the other. This is the pure-Python build's path (and the compiled build's for
deadlines past the native core's grid); the compiled build's handles are the native core's
(``aiowheel/_time/_core.c``), one object that extends asyncio's layout in C.

An entry holds the driver that filed it as an :class:`~aiowheel._time._entry.Owner` and asks it,
never the wheel, to take it out (``_unfile``), to run it in the batch of due callbacks
(``_queue``) or to start a task (``_create_task``).
"""

from __future__ import annotations

import asyncio
import asyncio.events  # mypyc names TimerHandle's base by its module: it must be imported
import contextvars
import threading
import weakref
from asyncio import format_helpers
from collections.abc import Callable, Coroutine
from typing import Any, Final, Protocol

from .._common._build import mypyc_attr
from . import _awaiting
from ._entry import Owner, Timed

__all__ = [
    "EMPTY_CONTEXT",
    "Handle",
    "Scheduled",
    "TimerHandle",
    "callback_repr",
    "driven_by_hand",
    "handle_repr",
    "loop_of_callbacks",
]

# A snapshot of an empty context, shared by every callback scheduled from a context with no
# variables set (the common case): saves one Context object per pending timer. Each run gets a
# fresh empty Context, so a callback that sets a variable cannot leak it into another.
EMPTY_CONTEXT: Final = contextvars.Context()


class Handle(Protocol):
    """What ``call_at`` / ``call_later`` return, in either build: this module's
    :class:`TimerHandle`, or the native core's (``aiowheel._time._core.TimerHandle``, the same API).
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


@mypyc_attr(native_class=False)
class TimerHandle(asyncio.TimerHandle):
    """A callback scheduled with :meth:`Timer.call_at` or :meth:`Timer.call_later` (or a
    loop-mode loop's ``call_at`` / ``call_later``).

    An :class:`asyncio.TimerHandle`, but :meth:`cancel` is O(1), frees the timer at once and
    tells whether it did anything.
    """

    # _call: the wheel's entry while the timer is pending or queued to run, then None (the
    # two objects point at each other only while the wheel or the batch holds the entry, so
    # nothing is left for the cycle collector). asyncio's _scheduled reads True until the
    # callback runs or is cancelled.
    __slots__ = ("_call",)

    _call: Call | None

    def __init__(
        self,
        when: float,
        callback: Callable[..., object],
        args: tuple[object, ...],
        context: contextvars.Context,
        owner: Owner,
    ) -> None:
        # asyncio's __init__ is not called (it reads the loop's debug flag and keeps the loop):
        # only the slots its methods read are set.
        self._when = when
        self._callback = callback
        self._args = args
        self._context = context
        self._cancelled = False
        self._scheduled = True
        self._source_traceback = None
        self._repr = None
        self._call = Call(when, self, owner)

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

    def cancel(self) -> bool:  # type: ignore[override]  # asyncio's returns None
        """Cancel the callback. True if this call cancelled it; False if it had already run
        or been cancelled. A pending handle leaves the wheel at once (O(1))."""
        call = self._call
        if call is None:
            return False
        if call._prev is not None:
            call._owner._unfile(call)
        else:
            call._owner._check_cancel_of_due()  # queued to run: the batch skips it
        self._abandon(None)
        return True

    def cancelled(self) -> bool:
        """True if :meth:`cancel` cancelled this handle (or its timer closed before it ran)."""
        return self._cancelled

    def pending(self) -> bool:
        """True while the handle is in a wheel (neither cancelled nor handed over to run)."""
        call = self._call
        return call is not None and call._prev is not None

    def __repr__(self) -> str:
        return handle_repr(self)

    def _run(self) -> None:
        """Run the callback now, in its context, reporting an exception like the loop does.

        As on asyncio's handles, for code that runs a handle itself (Home Assistant's
        ``async_fire_time_changed``): a pending handle stays pending, for ``cancel()`` to
        cancel or its deadline to run again; one already handed to the wheel's batch still
        runs there when its turn comes (or not at all if ``cancel()`` follows, which then
        returns True), as a handle in asyncio's ``_ready`` does; one that already ran runs
        again. A cancelled one does nothing. The batch's own run is :meth:`Call._run_due`."""
        if self._cancelled:
            return
        self._run_callback()

    def _ran_from_batch(self) -> None:
        """The wheel's batch runs it: it leaves the batch, then its callback runs (nothing if
        it was cancelled after it was handed to the batch)."""
        if self._cancelled:
            return
        self._call = None
        self._scheduled = False
        self._run_callback()

    def _run_callback(self) -> None:
        callback = self._callback
        args = self._args
        context = self._context
        if context is EMPTY_CONTEXT:
            context = contextvars.Context()  # a fresh one per run: nothing leaks between runs
        try:
            context.run(callback, *args)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            loop_of_callbacks().call_exception_handler(
                {
                    "message": f"Exception in callback {callback_repr(callback)}",
                    "exception": exc,
                    "handle": self,
                }
            )

    def _describe(self) -> tuple[str, object, object]:
        return ("call", self._callback, self._args)

    def _abandon(self, exc: BaseException | None) -> None:
        self._call = None
        self._cancelled = True
        self._scheduled = False
        self._callback = None  # type: ignore[assignment]  # as asyncio's cancel() does
        self._args = None  # type: ignore[assignment]


class Call(Timed):
    """The wheel entry behind a :class:`TimerHandle`: links, tick, deadline, owner.

    Everything else is the handle's; the driver reaches it through ``_handle`` (what
    ``pending_timers`` shows and what closing a timer hands back) or through the methods
    below, which the driver calls on every entry.
    """

    __slots__ = ("_handle", "_owner")

    _handle: TimerHandle
    _owner: Owner

    def __init__(self, when: float, handle: TimerHandle, owner: Owner) -> None:
        # _next and _tick are set by the wheel on insert; nothing reads them while _prev is
        # None (no super().__init__(): this runs once per call_later).
        self._prev = None
        self._when = when
        self._handle = handle
        self._owner = owner

    def _fire(self, owner: Owner) -> None:
        # Queued in the driver's batch, which runs in a loop callback, not inside the reaper
        # task: the callback runs exactly as a loop.call_at callback does (no current task,
        # the loop's exception handler, KeyboardInterrupt leaves the loop) and nothing it
        # does can hurt the reaper. One loop callback per batch, not one per timer.
        owner._queue(self)

    def __repr__(self) -> str:
        return handle_repr(self._handle)  # debug mode's slow-callback report names it

    def _run_due(self) -> None:
        self._handle._ran_from_batch()

    def _describe(self) -> tuple[str, object, object]:
        return self._handle._describe()

    def _abandon(self, exc: BaseException | None) -> None:
        self._handle._abandon(exc)


class Scheduled(Timed):
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
        owner._file(self, when)  # filed as it is made (refused at max_pending, as any entry)

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


# The loop whose wheel runs a pass in this thread with no loop running: a loop driven by hand
# (its _run_once called by a test helper or a drain loop, as Home Assistant's helpers do), where
# asyncio.get_running_loop() raises. A weak reference: a closed loop is not kept for it.
_by_hand: Final = threading.local()


def driven_by_hand(loop: asyncio.AbstractEventLoop) -> None:
    """A wheel's pass runs on ``loop`` with no loop running in this thread (the loop driven by
    hand): what its callbacks' errors and its batches' rests are handed to
    (:func:`loop_of_callbacks`)."""
    _by_hand.loop = weakref.ref(loop)


def loop_of_callbacks() -> asyncio.AbstractEventLoop:
    """The loop the wheel's due callbacks run on: the running loop, or with none running, the
    loop whose pass runs by hand (:func:`driven_by_hand`); RuntimeError if neither.

    Where a callback's exception is reported and where the rest of a batch goes after a
    KeyboardInterrupt: asyncio's handles use their own ``_loop``, which the wheel's handles
    do not keep (the native core's stores its links over it)."""
    loop = asyncio._get_running_loop()
    if loop is None:
        ref: Any = getattr(_by_hand, "loop", None)
        loop = None if ref is None else ref()
        if loop is None:
            raise RuntimeError("no running event loop")
    return loop


def callback_repr(callback: Callable[..., object]) -> str:
    """How a handle's repr and the loop's error report name its callback."""
    name = getattr(callback, "__qualname__", None) or getattr(callback, "__name__", None)
    return f"{name}()" if isinstance(name, str) else repr(callback)


def handle_repr(handle: Any) -> str:
    """asyncio's repr of a TimerHandle (``<TimerHandle when=5.0 cb() at f.py:3>``, with
    ``cancelled`` after :meth:`~TimerHandle.cancel`), for both builds' handles."""
    info = [type(handle).__name__]
    if handle.cancelled():
        info.append("cancelled")
    info.append(f"when={handle.when()}")
    callback = handle._callback
    if callback is not None:
        info.append(format_helpers._format_callback_source(callback, handle._args))
    return "<{}>".format(" ".join(info))
