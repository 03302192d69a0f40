"""The pytest plugin's lingering-timer check (``--aiowheel-lingering warn`` or ``error``): which
timers a test left pending on its loop-mode loops, and the failure or warning that names them.

:mod:`aiowheel.pytest` makes one :class:`Lingering` at configure when the option asks for it,
and its setup, call and teardown hooks tell it where the test is (:meth:`Lingering.begin`,
:meth:`Lingering.set_up`, :meth:`Lingering.check`). A room of its own: the check watches every
loop-mode loop the run makes and keeps its own notes of what each holds, state that no other
part of the plugin reads; and it is the only part that reads timers (``aiowheel._seeing._census``).
"""

from __future__ import annotations

import asyncio
import warnings
import weakref
from typing import Any

import pytest

from .._common._lingering import LingeringTimerWarning
from .._loopmode._loop import watch_loops
from .._seeing._census import PendingTimer, callback_name, pending
from .._time import _view

__all__ = ["LINGERING_CHECK", "Lingering", "lingering_message", "warn_lingering"]


class Lingering:
    """The lingering-timer check: watches every loop-mode loop made during the run, notes
    what each holds when a test starts, and what the test left when its teardown is done.

    A loop closed meanwhile (the test's own) answers with what it held as it closed: all of it
    is the test's. A loop that outlives the test is shared with fixtures of a wider scope,
    which may file timers while this test is set up and keep them for the next tests (a
    module's server and its heartbeats): there what was pending once the test's fixtures
    were set up is taken as theirs, and only what the test's call and teardown left counts.
    """

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._live: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()
        self._before: dict[asyncio.AbstractEventLoop, set[int]] = {}  # as set-up began
        self._set_up: dict[asyncio.AbstractEventLoop, set[int]] = {}  # as the call began
        self._keep: list[object] = []  # the objects behind those ids, kept alive
        self._left: list[PendingTimer] = []
        self.unwatch = watch_loops(self._watch)

    def _watch(self, event: str, loop: asyncio.AbstractEventLoop) -> None:
        if event == "made":
            self._live.add(loop)
            _view.track_loop(loop, True)  # name each timer by the line that filed it
        else:
            self._live.discard(loop)
            self._left.extend(self._new(loop, self._before))

    def _new(
        self, loop: asyncio.AbstractEventLoop, *notes: dict[Any, set[int]]
    ) -> list[PendingTimer]:
        known = set().union(*(note.get(loop, set()) for note in notes))
        return [timer for obj, timer in pending(loop) if id(obj) not in known]

    def _note(self) -> dict[asyncio.AbstractEventLoop, set[int]]:
        """What every live loop holds now."""
        held = {}
        for loop in list(self._live):
            objects = [obj for obj, _ in pending(loop)]
            self._keep.extend(objects)
            held[loop] = {id(obj) for obj in objects}
        return held

    def begin(self) -> None:
        """A test is about to be set up."""
        self._left, self._keep, self._set_up = [], [], {}
        self._before = self._note()

    def set_up(self) -> None:
        """The test's fixtures are set up; its call begins."""
        self._set_up = self._note()

    def end(self) -> list[PendingTimer]:
        """The test is torn down: the timers it left."""
        left = self._left
        for loop in list(self._live):
            if not loop.is_closed():
                left.extend(self._new(loop, self._before, self._set_up))
        self._left, self._before, self._set_up, self._keep = [], {}, {}, []
        return sorted(left, key=lambda timer: timer.when)

    def check(self, item: pytest.Item) -> None:
        """``item`` is torn down: fail it (``error``) or warn (``warn``) if it left timers."""
        left = self.end()
        if left:
            message = lingering_message(item.nodeid, left)
            if self.mode == "error":
                pytest.fail(message, pytrace=False)
            # Attributed to the test itself, not to the hook.
            path, line, _ = item.location
            warn_lingering(LingeringTimerWarning(message), path, (line or 0) + 1)


LINGERING_CHECK: pytest.StashKey[Lingering] = pytest.StashKey()
"""The run's :class:`Lingering`, under ``--aiowheel-lingering warn`` or ``error``."""


def lingering_message(nodeid: str, left: list[PendingTimer]) -> str:
    """The failure's (or warning's) text: the test, and each timer it left, by kind and origin."""
    lines = [f"{nodeid} left {len(left)} timer{'s' if len(left) > 1 else ''} pending:"]
    for timer in left:
        what = f" {callback_name(timer.callback)}," if timer.callback is not None else ""
        lines.append(f"  {timer.kind}{what} {timer.origin} (due at loop time {timer.when:.3f})")
    return "\n".join(lines)


def warn_lingering(warning: LingeringTimerWarning, path: str, line: int) -> None:
    """Issue ``warning`` as filed at ``path:line``, as the filters say, except that no filter
    makes it an exception: ``warn`` never fails a test (``error`` is the mode that does).

    A filter whose action is ``error`` (``filterwarnings = error``, ``-W error``, one naming
    the class) would raise it in the test's teardown, and pytest would report the test as an
    error; there it is issued again under an ``always`` filter for this class alone, so pytest
    records it and lists it in the warnings summary. Every other action stands (``ignore``
    silences it, ``default`` and ``once`` dedupe it)."""
    try:
        warnings.warn_explicit(warning, LingeringTimerWarning, path, line)
    except LingeringTimerWarning:
        with warnings.catch_warnings():
            warnings.simplefilter("always", LingeringTimerWarning)
            warnings.warn_explicit(warning, LingeringTimerWarning, path, line)
