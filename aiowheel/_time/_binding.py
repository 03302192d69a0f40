"""Binding a wheel to its event loop: the loop check, which loop, open or closed, and the list
of wheels on each loop.

Why a room of its own. Every scheduling call first asks "is this thread running my loop?",
and most of the time the answer is one identity test; the rest (not bound yet: bind now;
closed; no loop running; another loop; another thread) is the slow path. That question, its
answers and their messages are one concern, apart from what the driver
(:mod:`aiowheel._time._driver`) does once the answer is yes. :class:`Binding` keeps the loop a
driver is bound to, whether it is closed and why, and the thread the loop runs in (a
:class:`~aiowheel._time._threads.LoopThread`). It binds lazily, to the loop running at first use,
through the driver's ``on_bind``; it knows nothing of wheels, clocks or reapers.

The list of wheels on each loop (:func:`listed_on`) is kept here, where binding happens: the
introspection functions (:mod:`aiowheel._time._view`) read it, and it warns once when a program
makes more than :data:`TOO_MANY_TIMERS` Timers on one loop (Netty's too-many-instances lesson).
It holds each driver weakly, through a listing the driver holds, so the list never keeps a
driver, or through it its loop, alive.
"""

from __future__ import annotations

import asyncio
import warnings
import weakref
from collections.abc import Callable
from typing import Any, Final

from .._common._build import mypyc_attr
from ._threads import (
    FORKS,
    FREE_THREADED,
    GETPID_IN_RUNNING_LOOP,
    LoopThread,
    get_ident,
    running_loop,
)

__all__ = ["TOO_MANY_TIMERS", "Binding", "listed_on"]

# asyncio's C accelerated lookup of the running loop: one identity check against it
# covers "not started", "closed", "another loop" and "another thread" on the hot path.
_get_running_loop: Final = asyncio._get_running_loop

TOO_MANY_TIMERS: Final = 64
"""Past this many live Timers on one loop, warn once."""


@mypyc_attr(native_class=False)
class _Listing:
    """A driver's place in its loop's list (a plain Python object, which can be weakly
    referenced in both builds); the driver holds it, and lets go when it closes."""

    def __init__(self, owner: object) -> None:
        self.owner: object | None = owner


_listed: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.WeakSet[_Listing]] = (
    weakref.WeakKeyDictionary()
)
_warned_loops: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def listed_on(loop: asyncio.AbstractEventLoop) -> list[Any]:
    """The open drivers bound to ``loop``, in no set order."""
    listed = _listed.get(loop)
    if listed is None:
        return []
    # The weak set's references, read directly (iterating the set itself guards against
    # changes with a context manager per pass: most of what time_left() paid here).
    owners: list[Any] = []
    refs: Any = listed.data  # type: ignore[attr-defined]
    for ref in tuple(refs):
        listing = ref()
        if listing is not None and (owner := listing.owner) is not None:
            owners.append(owner)
    return owners


class Binding:
    """Which loop a driver is bound to, and the check every call makes (module docstring).

    ``loop`` is what the hot path compares the running loop with: None until bound and again
    once closed, so that one identity check routes every odd case to :meth:`check_loop`.
    ``bound`` is the loop from binding until close. ``on_bind(loop)`` binds the driver.
    """

    __slots__ = (
        "_asyncio_loop",
        "_forks",
        "_listing",
        "_on_bind",
        "bound",
        "cause",
        "closed",
        "loop",
        "thread",
    )

    def __init__(
        self,
        owner: object,
        on_bind: Callable[[asyncio.AbstractEventLoop], None],
        thread_changed: Callable[[], None],
    ) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.bound: asyncio.AbstractEventLoop | None = None
        self.closed = False
        self.cause: str | None = None
        self.thread: Final = LoopThread(thread_changed)
        self._on_bind: Final = on_bind
        self._listing: Final = _Listing(owner)
        # The bound loop while it is open, if the hot path may ask it whether it is running in
        # this thread (3.11, asyncio's loops: see aiowheel._time._threads); None otherwise.
        self._asyncio_loop: Any = None
        self._forks = 0  # FORKS.count when _asyncio_loop was set

    def on_loop(self) -> bool:
        """Whether this thread's running loop is the bound one: the hot path's one check.

        False covers "not bound yet", "closed", "no loop running", "another loop" and
        "another thread": the caller then calls :meth:`check_loop`, which binds or explains.
        """
        fast = self._asyncio_loop
        if fast is not None:
            if self._forks == FORKS.count:
                return bool(fast._thread_id == get_ident())
            self._asyncio_loop = None  # a forked child: asyncio's answer from now on
        loop = self.loop
        return loop is not None and running_loop() is loop

    def check_loop(self) -> asyncio.AbstractEventLoop:
        """The slow path behind :meth:`on_loop`: bind (lazily, to the loop running now), or
        raise RuntimeError saying what is wrong."""
        running = _get_running_loop()
        if self.closed:
            raise RuntimeError(f"Timer is closed{self.cause or ''}")
        if running is None:
            raise RuntimeError(
                "Timer must be used from the thread running its event loop "
                "(no event loop is running in this thread)"
            )
        if self.bound is None:
            self._on_bind(running)
            return running
        if running is not self.bound:
            raise RuntimeError(f"Timer is bound to a different event loop ({self.bound!r})")
        self.thread.set(get_ident())  # a loop may be run from another thread later
        return running

    def running_loop(self) -> asyncio.AbstractEventLoop:
        """The bound loop, after the check (binds on first use; RuntimeError otherwise)."""
        loop = self.loop
        if loop is None or not self.on_loop():
            loop = self.check_loop()
        return loop

    def loop_here(self) -> asyncio.AbstractEventLoop | None:
        """This thread's running loop (the bound one, by the fast check), or None."""
        if self.on_loop():
            return self.loop
        return running_loop()

    def loop_time(self) -> float:
        """``loop.time()`` of the bound loop, or of the running one before binding."""
        loop = self.bound
        if loop is None:
            loop = asyncio.get_running_loop()
        return loop.time()

    def adopt(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``loop`` and this thread as the loop's; list the driver on it (warning once
        past :data:`TOO_MANY_TIMERS`)."""
        self.bound = loop
        self.thread.set(get_ident())
        listed = _listed.get(loop)
        if listed is None:
            listed = _listed[loop] = weakref.WeakSet()
        listed.add(self._listing)
        count = len(listed)
        if count > TOO_MANY_TIMERS and loop not in _warned_loops:
            _warned_loops.add(loop)
            warnings.warn(
                f"{count} aiowheel Timers are running on one event loop; a Timer is built to "
                "be shared: use aiowheel.get_timer() (or pass one Timer around) instead",
                RuntimeWarning,
                stacklevel=6,
            )

    def open(self, loop: asyncio.AbstractEventLoop) -> None:
        """The driver is ready on ``loop``: the hot path's check passes from now on. On 3.11
        it asks asyncio's loops for their thread where the native running-loop lookup is not
        there (the pure-Python build: see aiowheel._time._threads)."""
        self.loop = loop
        if (
            GETPID_IN_RUNNING_LOOP
            and running_loop is _get_running_loop  # else the native lookup: cheaper still
            and getattr(type(loop), "run_forever", None) is asyncio.BaseEventLoop.run_forever
        ):
            self._asyncio_loop = loop
            self._forks = FORKS.count

    def close(self, cause: str | None) -> None:
        """Closed (``cause`` ends the message later calls raise): let go of the loop, unlist."""
        self.closed = True
        self.cause = cause
        self.loop = None
        self._asyncio_loop = None
        self.thread.set(-1)
        loop = self.bound
        if loop is not None:
            listed = _listed.get(loop)
            if listed is not None:
                listed.discard(self._listing)
        # And out of the cycle it made with its listing: a closed driver is freed with its
        # loop in one collection, as it was before it was listed.
        self._listing.owner = None
        self.bound = None

    def claim(self, refusal: str) -> None:
        """The slow path of the thread checks: this thread takes the loop over, or
        RuntimeError(``refusal``) (:meth:`aiowheel._time._threads.LoopThread.claim`)."""
        with self.thread.lock:  # the bound loop read under it: closing holds it too
            self.thread.claim(refusal, self.bound)

    def refuse_early(self, refusal: str) -> None:
        """RuntimeError(``refusal``), without the lock, if the loop runs or is about to run
        in another thread (:meth:`aiowheel._time._threads.LoopThread.refuse_early`)."""
        self.thread.refuse_early(refusal, self.bound)

    def foreign_call(self, refusal: str, call: Callable[[], bool]) -> bool:
        """``call()`` from a thread that is not the loop's: refused (RuntimeError(``refusal``))
        if the loop runs or is about to, else made under the take-over lock, with this thread
        the loop's for that call only (:meth:`give_back`)."""
        self.refuse_early(refusal)
        with self.thread.lock:
            previous = self.thread.ident
            self.thread.claim(refusal, self.bound)
            try:
                return call()
            finally:
                self.give_back(previous)

    def give_back(self, previous: int) -> None:
        """A call that claimed the loop from another thread is done (the caller holds
        ``thread.lock``, taken before it read ``previous``, the loop's thread then). On a
        free-threaded build the take-over lasts for that one call: the loop is ``previous``'s
        again, unless this thread runs it now. Kept, it let this thread's next calls take the
        fast path, with no lock, and one of them could still be filing when the loop started
        running in its own thread: two threads arming one wake-up (issue 48, a lost
        wake-up under misuse). So every foreign call files under the lock, and ``run_forever``
        (which takes it) never starts while one is under way."""
        if FREE_THREADED and _get_running_loop() is not self.bound:
            self.thread.set(previous)
