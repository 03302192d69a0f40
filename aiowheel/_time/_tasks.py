"""Which task a loop is running now, asked as cheaply as the interpreter allows.

Why a room of its own. Entering a timeout (:mod:`aiowheel._time._timeout`) and starting a request's
deadline (:mod:`aiowheel._deadlines._deadline`), and the budget a client adapter reads
(:mod:`aiowheel._deadlines._budget`), each ask a loop for its current task on every call. On 3.12+
that is asyncio's C function ``_asyncio.current_task``; on 3.11 ``asyncio.current_task`` is Python
(a third of a timeout's cost), so the question is put straight to the registry it reads, the C
accelerator's dict of each loop's task. One fact of the interpreter, written once here: the
compiled build compiles this room with the others, so the compiled callers reach it by a
native call. It imports nothing of aiowheel's.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, Final

__all__ = ["current_task"]

if sys.version_info >= (3, 12):
    from _asyncio import current_task  # the C function
else:
    # 3.11's asyncio.current_task is Python; the registry it reads is the C accelerator's
    # dict.
    _current_tasks: Final[dict[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = (
        asyncio.tasks._current_tasks  # type: ignore[attr-defined]
    )

    def current_task(loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any] | None:
        """The task ``loop`` is running now (in its current step), or None."""
        return _current_tasks.get(loop)
