"""Running a coroutine on a new loop-mode loop: what ``aiowheel.run`` and ``testing.run`` share.

Each refuses before it makes a loop: called from a running loop, ``main`` not a coroutine, a
bad ``debug``, or a bad argument of the loop it would make (its factory's checks). A refused
coroutine is closed, so that it never warns that it "was never awaited" (it will never run).
The rest is ``asyncio.run``'s: an ``asyncio.Runner`` on the factory's loops.

Why a room of its own. One shim per fact: :func:`aiowheel.run` (:mod:`aiowheel._loopmode._loop`) and
:func:`aiowheel.testing.run` differ only in their name and in the loops they make; written
twice, the refusals and the close could drift apart. This room knows no loop mode: it is
handed the function that checks the rest and makes the factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from .._common import _validate

__all__ = ["run_refusing"]

_T = TypeVar("_T")

LoopMaker = Callable[[], asyncio.AbstractEventLoop]


def run_refusing(
    where: str,
    main: Coroutine[Any, Any, _T],
    debug: bool | None,
    factory_for: Callable[[], LoopMaker],
) -> _T:
    """Run ``main`` on a loop of the factory ``factory_for()`` makes (and checks), in an
    ``asyncio.Runner``; ``where`` (``"run()"``, ``"testing.run()"``) names the function in the
    errors, and a refused ``main`` is closed."""
    try:
        if asyncio._get_running_loop() is not None:
            raise RuntimeError(f"aiowheel.{where} cannot be called from a running event loop")
        _validate.coroutine(main, where)
        _validate.debug(debug, where)
        factory = factory_for()
    except BaseException:
        if asyncio.iscoroutine(main):
            main.close()  # refused: it will never run, so no "never awaited" warning either
        raise
    with asyncio.Runner(debug=debug, loop_factory=factory) as runner:
        return runner.run(main)
