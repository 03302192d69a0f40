"""The loop-mode factories of :mod:`aiowheel.loops` (whose docstring is the user's guide): one
zero-argument factory per base loop, read from the records of :mod:`aiowheel._common._bases`,
``factory(name)``, ``installed()`` and ``auto``'s choice.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import logging
import os
import warnings
from collections.abc import Callable
from typing import Final, cast

from .._common import _bases
from ._loop import new_event_loop

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

#: The base loops by name, each with the pip extra that installs it (None where none is
#: needed), in the order of their records (:mod:`aiowheel._common._bases`, where each base's facts
#: are). The loops of 2026 (veloxloop and bracio on Rust, zloop on Zig) come with the ``bench``
#: extra: each passed CPython's timer tests under loop mode as on its own (tests/conformance).
#: rsloop is not here: its loop class does not derive from asyncio.AbstractEventLoop, which
#: loop mode asks of a base.
BASES: Final = {record.name: record.extra for record in _bases.RECORDS}

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
    record = _bases.by_name(name)
    if record is None:
        raise ValueError(f"base_class(): unknown base loop {name!r}; known: {', '.join(BASES)}")
    if record.module is None:  # asyncio's default loop
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
            module = importlib.import_module(record.module)
    except ImportError as exc:
        needs = f" (on Python {record.python}+)" if record.python is not None else ""
        raise ImportError(
            f"aiowheel.loops.{record.factory} needs {record.module}, which is not installed "
            f"here: pip install 'aiowheel[{record.extra}]'{needs}"
        ) from exc
    # The class the library's own factory makes (uvloop.Loop, rloop's RLoop, zuvloop's
    # EventLoop): asked of a probe, since not every library exports it under one name. A
    # library with no factory (bracio) names its class in its record.
    if record.class_name is None:
        probe = module.new_event_loop()
        probe.close()
        found = type(probe)
    else:
        found = getattr(module, record.class_name)
    _classes[name] = found
    return found


def installed() -> dict[str, type[asyncio.AbstractEventLoop] | None]:
    """Every base loop installed here, by name (in :data:`BASES`' order), with its class
    (None for asyncio's default loop): the loop matrix of the project's tests and benchmarks.

    >>> list(aiowheel.loops.installed())
    ['asyncio', 'uvloop', 'rloop']
    """
    found: dict[str, type[asyncio.AbstractEventLoop] | None] = {}
    for record in _bases.RECORDS:
        name = record.name
        if record.module is not None and importlib.util.find_spec(record.module) is None:
            continue
        try:
            found[name] = base_class(name)
        except ImportError:  # found, but it does not import on this interpreter
            continue
    return found


def _over(name: str) -> asyncio.AbstractEventLoop:
    """A loop-mode loop over base ``name``, announced as made by the factory of that name.

    A base whose record says ``all_on_the_wheel`` (bracio: it runs handles after they are
    cancelled) gets ``threshold=0``: every deadline ahead on the wheel, where a cancel holds.
    """
    base = base_class(name)
    record = _bases.by_name(name)
    if record is not None and record.all_on_the_wheel:
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
    for record in _bases.AUTO:  # zuvloop, then uvloop (the module docstring)
        if record.module is not None and importlib.util.find_spec(record.module) is not None:
            return base_class(record.name)
    return None


def auto() -> asyncio.AbstractEventLoop:
    """A loop-mode loop over the fastest base installed (``aiowheel.loops:auto``)."""
    base = auto_base()
    loop = new_event_loop(base)
    _announce("auto", base)
    return loop


def factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """The zero-argument loop factory of base ``name`` (a name of :data:`BASES`, or ``"auto"``):
    the function of this module that makes its loops, so ``factory("uvloop") is uvloop``,
    ``factory("asyncio") is asyncio_loop`` and ``factory("auto") is auto``. For a program or a
    server that is told a base's name (``--base uvloop``) and wants its loop-mode loops.

    >>> asyncio.run(main(), loop_factory=aiowheel.loops.factory("uvloop"))

    Nothing is imported until the factory is called (then ImportError, naming the pip extra, for
    a base library that is not installed). ValueError for an unknown name, naming it and the
    known ones (TypeError for what is not a str).
    """
    if not isinstance(name, str):
        raise TypeError(
            f"factory(): name must be a base loop's name ({', '.join(BASES)}, auto), "
            f"got {type(name).__name__}"
        )
    if name == "auto":
        return auto
    record = _bases.by_name(name)
    if record is None:
        raise ValueError(f"factory(): unknown base loop {name!r}; known: {', '.join(BASES)}, auto")
    return cast("Callable[[], asyncio.AbstractEventLoop]", globals()[record.factory])
