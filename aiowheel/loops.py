"""Zero-argument loop-mode loop factories, one per base loop, importable by name.

Servers that take an event loop as an import path call it with no arguments::

    uvicorn app:app --loop aiowheel.loops:uvloop --workers 4
    uvicorn app:app --loop aiowheel.loops:auto

Each function returns a new loop-mode loop (every ``call_at`` / ``call_later`` of the program
on the loop's wheel, see :func:`aiowheel.new_event_loop`) over one base loop. Being plain
module-level functions they pickle by name, so ``--workers`` and ``--reload`` carry them into
worker processes. A base library that is not installed raises ImportError naming the pip extra
that installs it; nothing else is changed.

``auto`` picks the fastest base installed for timers, among those that keep asyncio's contract
as tested here: zuvloop (3.14+), then uvloop, then asyncio's own loop. rloop is never picked
by ``auto``: its base loop departs from asyncio's contract on its own (exception handlers
called with one argument, no debug mode); ask for it by name.

The first loop a process makes here is announced, once, at INFO: ``aiowheel: loop mode on,
base loop uvloop.Loop (aiowheel.loops:auto, pid 4242)``, on the ``aiowheel.loops`` logger, or,
where nothing handles that logger's records, on the server's own (uvicorn's, gunicorn's,
granian's), so that a server's startup says which loop its workers run.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import warnings
from typing import Final

from ._loop import new_event_loop

__all__ = [
    "BASES",
    "asyncio_loop",
    "auto",
    "auto_base",
    "base_class",
    "bracio",
    "installed",
    "rloop",
    "uvloop",
    "veloxloop",
    "zloop",
    "zuvloop",
]

#: The base loops by name, each with the pip extra that installs it. The loops of 2026
#: (veloxloop and bracio on Rust, zloop on Zig) come with the ``bench`` extra: each passed
#: CPython's timer tests under loop mode as on its own (tests/conformance). rsloop is not
#: here: its loop class does not derive from asyncio.AbstractEventLoop, which loop mode asks
#: of a base.
BASES: Final = {
    "asyncio": None, "uvloop": "uvloop", "rloop": "rloop", "zuvloop": "zuvloop",
    "veloxloop": "bench", "zloop": "bench", "bracio": "bench",
}  # fmt: skip
# Bases whose wheels are for newer Pythons only: the first one.
_NEEDS: Final = {"zuvloop": "3.14", "zloop": "3.12"}

# auto's order of preference (see the module docstring).
_AUTO: Final = ("zuvloop", "uvloop")

_classes: dict[str, type[asyncio.AbstractEventLoop]] = {}

_logger: Final = logging.getLogger("aiowheel.loops")
# The servers' own loggers, configured by the servers: where the line goes if nothing would
# show a record of aiowheel's (uvicorn and gunicorn leave the root logger alone).
_SERVER_LOGGERS: Final = ("uvicorn.error", "gunicorn.error", "_granian")
_announced: list[bool] = []


def _announce(factory: str, base: type[asyncio.AbstractEventLoop] | None) -> None:
    """Log, once per process, that loop mode is on and over which base loop."""
    if _announced:
        return
    _announced.append(True)
    logger = _logger
    if not logger.hasHandlers():
        for name in _SERVER_LOGGERS:
            if logging.getLogger(name).hasHandlers():
                logger = logging.getLogger(name)
                break
    named = "asyncio's default loop" if base is None else f"{base.__module__}.{base.__qualname__}"
    logger.info(
        "aiowheel: loop mode on, base loop %s (aiowheel.loops:%s, pid %d)",
        named, factory, os.getpid(),
    )  # fmt: skip


def base_class(name: str) -> type[asyncio.AbstractEventLoop] | None:
    """The event loop class of base ``name`` (None for asyncio's default loop).

    ValueError for a name not in :data:`BASES` (TypeError for what is not a str); ImportError,
    naming the pip extra, for a base library that is not installed.
    """
    if not isinstance(name, str):
        raise TypeError(
            f"base_class(): name must be a base loop's name ({', '.join(BASES)}), "
            f"got {type(name).__name__}"
        )
    if name not in BASES:
        raise ValueError(f"base_class(): unknown base loop {name!r}; known: {', '.join(BASES)}")
    if name == "asyncio":
        return None
    found = _classes.get(name)
    if found is not None:
        return found
    try:
        with warnings.catch_warnings():
            # veloxloop 0.2 subclasses asyncio.AbstractEventLoopPolicy at import, deprecated
            # from 3.14: its warning, not the program's (and an error under -W error).
            warnings.filterwarnings("ignore", "'asyncio.AbstractEventLoopPolicy' is deprecated",
                                    DeprecationWarning)  # fmt: skip
            module = importlib.import_module(name)
    except ImportError as exc:
        needs = f" (on Python {_NEEDS[name]}+)" if name in _NEEDS else ""
        raise ImportError(
            f"aiowheel.loops.{name} needs {name}, which is not installed here: "
            f"pip install 'aiowheel[{BASES[name]}]'{needs}"
        ) from exc
    # The class the library's own factory makes (uvloop.Loop, rloop's RLoop, zuvloop's
    # EventLoop): asked of a probe, since not every library exports it under one name. bracio
    # has no factory: its class is the one it exports.
    if hasattr(module, "new_event_loop"):
        probe = module.new_event_loop()
        probe.close()
        found = type(probe)
    else:
        found = module.BracioLoop
    _classes[name] = found
    return found


def installed() -> dict[str, type[asyncio.AbstractEventLoop] | None]:
    """Every base loop installed here, by name (in :data:`BASES`' order), with its class
    (None for asyncio's default loop): the loop matrix of the project's tests and benchmarks.

    >>> list(aiowheel.loops.installed())
    ['asyncio', 'uvloop', 'rloop']
    """
    found: dict[str, type[asyncio.AbstractEventLoop] | None] = {}
    for name in BASES:
        if name != "asyncio" and importlib.util.find_spec(name) is None:
            continue
        try:
            found[name] = base_class(name)
        except ImportError:  # found, but it does not import on this interpreter
            continue
    return found


# The bases whose factory files every deadline ahead on the wheel (threshold 0) instead of
# leaving near timers on the base's heap. bracio 0.0.1 runs a handle after it was cancelled,
# its timers' and its call_soon's alike: the callback does not run (asyncio's cancel cleared
# it), but each reports "Exception in callback None()" to the loop's exception handler (37,342
# reports for 50,000 cancelled 5 ms timers; 0 with every one on the wheel, where a cancel
# holds: python -m bench.cancels). Past deadlines and call_soon still go to bracio.
_ALL_ON_THE_WHEEL: Final = frozenset({"bracio"})


def _over(name: str) -> asyncio.AbstractEventLoop:
    """A loop-mode loop over base ``name``, announced as made by the factory of that name."""
    base = base_class(name)
    if name in _ALL_ON_THE_WHEEL:
        loop = new_event_loop(base, threshold=0.0)
    else:
        loop = new_event_loop(base)
    _announce(name, base)
    return loop


def asyncio_loop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over asyncio's default loop (``aiowheel.loops:asyncio_loop``)."""
    loop = new_event_loop(None)
    _announce("asyncio_loop", None)
    return loop


def uvloop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over uvloop (``aiowheel.loops:uvloop``)."""
    return _over("uvloop")


def rloop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over rloop (``aiowheel.loops:rloop``)."""
    return _over("rloop")


def zuvloop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over zuvloop, Python 3.14+ (``aiowheel.loops:zuvloop``)."""
    return _over("zuvloop")


def veloxloop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over veloxloop (``aiowheel.loops:veloxloop``)."""
    return _over("veloxloop")


def zloop() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over zloop, Python 3.12+ (``aiowheel.loops:zloop``)."""
    return _over("zloop")


def bracio() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over bracio (``aiowheel.loops:bracio``), with ``threshold=0``: every
    deadline ahead on the wheel, since bracio 0.0.1 runs handles after they are cancelled."""
    return _over("bracio")


def auto_base() -> type[asyncio.AbstractEventLoop] | None:
    """The base class :func:`auto` uses here (None: asyncio's default loop)."""
    for name in _AUTO:
        if importlib.util.find_spec(name) is not None:
            return base_class(name)
    return None


def auto() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over the fastest base installed (``aiowheel.loops:auto``)."""
    base = auto_base()
    loop = new_event_loop(base)
    _announce("auto", base)
    return loop
