"""Which thread a wheel belongs to: the thread checks, the take-over, and forks.

Why a room of its own. asyncio's model is one loop per thread, and a wheel is touched only by
the thread running its loop. Everything else about threads is here: which thread that is
(a loop made in one thread may run in another, and set-up before ``run_forever`` is allowed
from any thread), what a call from another thread gets (RuntimeError before anything changes,
where it is checked), and the lock that keeps a loop about to run from being taken over
meanwhile. The driver (:mod:`aiowheel._time._driver`) asks :class:`LoopThread` for these answers and
keeps no thread state of its own.

When calls are checked. With the GIL, one thread's wheel operation is atomic to another's: a
handle's ``cancel()`` from a foreign thread is checked in debug mode only, as asyncio checks
its own. A free-threaded build (3.14t) has no such guarantee, so the calls another thread can
make by mistake (a handle's ``cancel()``, loop mode's ``call_at`` / ``call_later``) are checked
always there (``FREE_THREADED`` is a C static in the compiled build: a GIL build pays one test
of a constant).

Forks. On 3.11 asking asyncio for the running loop makes a ``getpid()`` system call, as much as
the rest of a ``call_later``; there the loop check asks an asyncio loop for its ``_thread_id``
instead (:mod:`aiowheel._time._binding`). A forked child has a copy of that loop that still says it
runs in this (copied) thread, so loops bound before a fork go back to asyncio's answer in the
child: :data:`FORKS` counts the forks this process is a child of (on every version: the request
deadlines' tables, :mod:`aiowheel._deadlines._deadline`, read it too, for the same reason: a forked
child still has its parent's thread id and its parent's current tasks). Every other loop (uvloop's,
rloop's...) keeps its thread where Python cannot read it: there the check asks
:data:`running_loop`, asyncio's own lookup minus the system call (the native core reads the
same holder asyncio does and compares its process id with one it caches and renews in a forked
child, inside ``fork()``).
"""

from __future__ import annotations

import asyncio
import os
import sys
import sysconfig
import threading
from collections.abc import Callable
from typing import Final

from .._common._build import mypyc_attr
from ._store import native_running_loop

__all__ = [
    "FOREIGN_CANCEL",
    "FOREIGN_THREAD",
    "FORKS",
    "FREE_THREADED",
    "GETPID_IN_RUNNING_LOOP",
    "LoopThread",
    "get_ident",
    "running_loop",
]

GETPID_IN_RUNNING_LOOP: Final = sys.version_info < (3, 12)
"""Whether asyncio's running-loop lookup checks the process id (a system call): 3.11."""

get_ident: Final = threading.get_ident
_get_running_loop: Final = asyncio._get_running_loop

FREE_THREADED: Final = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
"""A free-threaded build: foreign-thread calls are checked always, not in debug mode only."""

FOREIGN_THREAD: Final = (
    "Non-thread-safe operation invoked on an event loop other than the current one: "
    "a loop-mode loop's call_at / call_later must be called from the thread running it; "
    "from another thread use loop.call_soon_threadsafe()"
)
"""What a loop-mode ``call_at`` / ``call_later`` from another thread raises: asyncio's
debug-mode words, then what to do instead."""

FOREIGN_CANCEL: Final = (
    "a timer must be cancelled from the thread running its event loop; from another thread "
    "use loop.call_soon_threadsafe(handle.cancel)"
)
"""What a ``cancel()`` from another thread raises where it is checked."""


class _Forks:
    """How many times this process is a forked child: what a loop or a thread seen before the
    fork is checked against (the fast loop check, the request deadlines' tables)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


# A Final instance, not a module global: the compiled build reads it from a C static.
FORKS: Final = _Forks()


def _after_fork_in_child() -> None:
    FORKS.count += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _running_loop_lookup() -> Callable[[], asyncio.AbstractEventLoop | None]:
    """asyncio's ``_get_running_loop``, or on 3.11 the native core's twin without its
    ``getpid()`` (``aiowheel._time._core.running_loop``: the same holder read, the process id cached
    and renewed in a forked child by a ``pthread_atfork`` handler), where asyncio's is the C one
    and the build is compiled with the GIL."""
    if not GETPID_IN_RUNNING_LOOP or FREE_THREADED:
        return _get_running_loop
    try:
        import _asyncio
    except ImportError:  # pragma: no cover - an interpreter without asyncio's C module
        return _get_running_loop
    if _get_running_loop is not getattr(_asyncio, "_get_running_loop", None):
        return _get_running_loop  # pragma: no cover - asyncio's pure-Python lookup
    return native_running_loop() or _get_running_loop


running_loop: Final = _running_loop_lookup()
"""This thread's running loop or None, as ``asyncio._get_running_loop()`` answers, without a
system call on 3.11's compiled build (see the module docstring)."""


@mypyc_attr(allow_interpreted_subclasses=False)
class LoopThread:
    """The thread a wheel's loop runs in, and the rules for changing it.

    ``ident`` is that thread's id (-1: none, before binding and after closing); the hot paths
    compare it with ``get_ident()``, which is much cheaper on 3.11 than asking asyncio for the
    running loop. ``lock`` is held by every change of it together with the call that made it,
    and by a loop-mode loop's ``close()``. ``changed`` is called after every change (the
    native core keeps its own copy of the id).
    """

    __slots__ = ("_changed", "_in_run", "ident", "lock")

    def __init__(self, changed: Callable[[], None]) -> None:
        self.ident = -1
        self.lock: Final = threading.RLock()
        self._in_run = False
        self._changed: Final = changed

    def set(self, ident: int) -> None:
        """The loop runs (or will run) in thread ``ident`` now; -1 for none."""
        if ident != self.ident:
            self.ident = ident
            self._changed()

    def claim(self, refusal: str, loop: asyncio.AbstractEventLoop | None) -> None:
        """The calling thread is not the one last seen running ``loop`` (None: not bound, or
        closed). It becomes the loop's thread if it runs the loop now or if the loop is not
        running at all and no ``run_forever`` is about to start it; otherwise
        RuntimeError(``refusal``), before anything changes. Held under :attr:`lock`, so a
        loop about to run, or running, is never taken over."""
        with self.lock:
            if loop is None:
                return
            if _get_running_loop() is not loop and (self._in_run or loop.is_running()):
                raise RuntimeError(refusal)
            self.set(get_ident())

    def refuse_early(self, refusal: str, loop: asyncio.AbstractEventLoop | None) -> None:
        """RuntimeError(``refusal``) at once, without the lock, if ``loop`` runs or is about to
        run in another thread: a foreign thread calling in a tight loop must not keep the
        lock from :meth:`run_here` (a free-threaded lock is not fair). :meth:`claim`, under
        the lock, decides the rest."""
        if self._in_run and loop is not None and _get_running_loop() is not loop:
            raise RuntimeError(refusal)

    def run_here(self, closed: bool) -> None:
        """This thread is about to run the loop (loop mode's ``run_forever``): it answers the
        thread checks from now on, and no other thread can take the loop over until
        :meth:`run_ended`. Said before the lock is taken, so that foreign calls are refused
        without it (:meth:`refuse_early`) while this thread waits for it."""
        self._in_run = not closed
        with self.lock:
            if not closed:
                self.set(get_ident())
                self._in_run = True

    def run_ended(self) -> None:
        """``run_forever`` returned: a thread may take the loop over again."""
        self._in_run = False
