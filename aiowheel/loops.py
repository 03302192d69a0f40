"""Zero-argument loop-mode loop factories, one per base loop, importable by name.

Servers that take an event loop as an import path call it with no arguments::

    uvicorn app:app --loop aiowheel.loops:uvloop --workers 4
    uvicorn app:app --loop aiowheel.loops:auto

Each function returns a new loop-mode loop (every ``call_at`` / ``call_later`` of the program
on the loop's wheel, see :func:`aiowheel.new_event_loop`) over one base loop. Being plain
module-level functions they pickle by name, so ``--workers`` and ``--reload`` carry them into
worker processes. A base library that is not installed raises ImportError naming the pip extra
that installs it; nothing else is changed. :func:`factory` gives the function of a base's name
(``factory("uvloop") is uvloop``), for programs told a name rather than an import path.

``auto`` picks the fastest base installed for timers, among those that keep asyncio's contract
as tested here: zuvloop (3.14+), then uvloop, then asyncio's own loop. rloop is never picked
by ``auto``: its base loop departs from asyncio's contract on its own (exception handlers
called with one argument, no debug mode); ask for it by name.

The first loop a process makes here is announced, once, at INFO: ``aiowheel: loop mode on,
base loop uvloop.Loop (aiowheel.loops:auto, pid 4242)``, on the ``aiowheel.loops`` logger, or,
where nothing handles that logger's records, on the server's own (uvicorn's, gunicorn's,
granian's), so that a server's startup says which loop its workers run.
"""

from ._loopmode._loops import (
    BASES,
    asyncio_loop,
    auto,
    auto_base,
    base_class,
    bracio,
    factory,
    installed,
    rloop,
    uvloop,
    veloxloop,
    zloop,
    zuvloop,
)

__all__ = [
    "BASES",
    "asyncio_loop",
    "auto",
    "auto_base",
    "base_class",
    "bracio",
    "factory",
    "installed",
    "rloop",
    "uvloop",
    "veloxloop",
    "zloop",
    "zuvloop",
]
