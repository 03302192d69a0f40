"""Debug mode: each due callback runs as a loop callback of its own, named as asyncio names it.

Outside debug mode a Timer runs the callbacks that came due together as one batch, in one loop
callback: that is where a storm of due timers is cheap. In debug mode the loop watches each
callback it runs (``loop.slow_callback_duration``, the current handle), and it can only watch
what it runs itself, so each due callback is handed to it with ``loop.call_soon``. The object
handed over is a :class:`DueCallback`: calling it runs the timer's callback (or nothing, if the
timer was cancelled after it came due), and it answers asyncio's formatting helpers with the
*user's* callback (``__qualname__``, ``__wrapped__``), so the loop's reports read
``Executing <Handle on_timeout() at app.py:12> took 0.250 seconds``, as they do for a timer
on the loop's own heap, and not the name of an aiowheel internal.

Plain Python in both builds (mypyc classes cannot answer ``__getattr__``); debug mode only, so
its cost does not matter. So is :func:`filed_at`, which origin tracking (debug mode, or
:func:`aiowheel.track_origins`) calls once per timer filed.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import site
import sys
import sysconfig
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._entry import Timed

__all__ = ["DueCallback", "Origins", "check_not_coroutine_function", "filed_at"]

# Frames in these directories are the machinery between a user's line and the wheel: the
# whole package (this room's folder's parent: loop mode's calls are in another folder), asyncio.
_MACHINERY: Final = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    os.path.dirname(os.path.abspath(asyncio.__file__)) + os.sep,
)


# Installed libraries: a helper there that files a timer for its caller (Home Assistant's
# async_call_later, a client library's retry) is not where the timer comes from.
_SITES: Final = (
    *site.getsitepackages(),
    site.getusersitepackages(),
    *sysconfig.get_paths().values(),
)
_LIBRARIES: Final = tuple(
    {
        os.path.abspath(path) + os.sep
        for path in _SITES
        if path.endswith(("site-packages", "dist-packages"))
    }
)


def filed_at() -> str:
    """Where the timer being filed now was filed from: ``file:line in function`` of the
    nearest frame of the program's own code: outside aiowheel and asyncio, and outside the
    installed libraries if any frame is (a library's helper that files a timer for its
    caller, such as Home Assistant's ``async_call_later``, names the caller's line); else the
    nearest outside aiowheel and asyncio (origin tracking; see
    :func:`aiowheel.track_origins`). The compiled build's functions have no frames, so the
    walk starts at the nearest Python one either way."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_MACHINERY):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    found = frame
    while frame is not None and frame.f_code.co_filename.startswith(_LIBRARIES):
        frame = frame.f_back
    if frame is not None and not frame.f_code.co_filename.startswith(_MACHINERY):
        found = frame
    code = found.f_code
    return f"{code.co_filename}:{found.f_lineno} in {code.co_qualname}"


class DueCallback:
    """A due timer, as one loop callback: ``loop.call_soon(DueCallback(handle))``."""

    __slots__ = ("_handle",)

    def __init__(self, handle: Timed) -> None:
        self._handle = handle

    def __call__(self) -> None:
        """Run the timer's callback, unless it was cancelled after it came due."""
        self._handle._run_due()

    def __getattr__(self, name: str) -> object:
        # asyncio.format_helpers reads __qualname__ (or __name__) for the name, and follows
        # __wrapped__ (inspect.unwrap) to the source file and line.
        if name in ("__qualname__", "__name__", "__wrapped__"):
            callback = getattr(self._handle, "_callback", None)
            if callback is not None:
                return callback if name == "__wrapped__" else getattr(callback, name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        return f"<DueCallback {self._handle!r}>"


def check_not_coroutine_function(callback: object, where: str = "call_at()") -> None:
    """TypeError for a coroutine function given as a callback (debug mode only, as asyncio
    makes this check, for its cost); ``where`` names the function called."""
    if inspect.iscoroutinefunction(callback):
        raise TypeError(
            f"{where}: callback must not be a coroutine function (use schedule_at() to run one)"
        )


class Origins:
    """Where each pending timer was filed from (debug mode, or aiowheel.track_origins): the
    line :func:`filed_at` names and the task that filed it, noted the first time a timer is
    filed. Timers that left the wheel are forgotten here, when the notes outgrow the pending
    timers, not on the paths they leave by (which then cost nothing more with tracking on): at
    most half the notes are stale."""

    __slots__ = ("_notes",)

    def __init__(self) -> None:
        self._notes: dict[object, tuple[str, object]] = {}

    def note(self, timer: object, pending: int, loop: asyncio.AbstractEventLoop | None) -> None:
        """Note where ``timer`` is filed from (``pending``: how many timers are pending)."""
        notes = self._notes
        if timer in notes:
            return
        if len(notes) > 2 * pending + 1024:
            for stale in [noted for noted in notes if not _pending(noted)]:
                del notes[stale]
        task = asyncio.current_task(loop) if loop is not None else None
        notes[timer] = (filed_at(), task)

    def get(self, timer: object) -> tuple[str, object] | None:
        """Where ``timer`` was filed from, if noted."""
        return self._notes.get(timer)


def _pending(timer: Any) -> bool:
    return bool(timer.pending())
