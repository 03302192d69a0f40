"""granian on loop mode: ``python -m aiowheel.granian`` in place of ``granian``::

    python -m aiowheel.granian --interface asgi app:app --loop uvloop

granian's ``--loop`` is a fixed list (asyncio, auto, rloop, uvloop, winloop); its public
registry, ``granian.loops``, says how each is built. Importing this module registers a
loop-mode builder under ``asyncio``, ``uvloop``, ``rloop`` and ``auto`` (aiowheel's ``auto``:
zuvloop, else uvloop, else asyncio's loop), so that each of those choices makes a loop-mode loop
of that base. The registration must happen in every worker process before granian builds its
loop, which is before it imports the app: run as ``python -m aiowheel.granian``, this module is
the workers' main module too (multiprocessing's spawn re-imports it; fork inherits it). Then
everything else is granian's own command line, unchanged.

Only the app's timers move to the wheel: granian serves HTTP in Rust, so its keep-alive and
other connection timers are not asyncio timers at all.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from . import loops
from ._common import _bases

__all__ = ["register"]


def _choices() -> dict[str, tuple[list[str], Callable[[], asyncio.AbstractEventLoop]]]:
    """granian's ``--loop`` name -> (the packages granian checks for it, aiowheel's factory):
    every base whose record says granian offers it (:mod:`aiowheel._common._bases`), then
    ``auto``."""
    choices = {
        record.name: ([] if record.module is None else [record.module], loops.factory(record.name))
        for record in _bases.RECORDS
        if record.granian
    }
    choices["auto"] = ([], loops.auto)
    return choices


def _builder(factory: Callable[[], asyncio.AbstractEventLoop]) -> Callable[..., Any]:
    def build(**_packages: Any) -> asyncio.AbstractEventLoop:
        loop = factory()
        asyncio.set_event_loop(loop)  # as granian's own builders do
        return loop

    return build


def register() -> None:
    """Register loop-mode builders for granian's ``--loop`` choices (idempotent).

    ImportError, naming what to install, if granian is missing.
    """
    try:
        import granian
    except ImportError as exc:
        raise ImportError(
            "aiowheel.granian needs granian, which is not installed: pip install granian"
        ) from exc
    registry = getattr(granian, "loops", None)
    if registry is None:
        raise ImportError(
            f"aiowheel.granian needs granian's loop registry (granian.loops), which granian "
            f"{getattr(granian, '__version__', '?')} lacks: pip install -U 'granian>=2.8'"
        )
    for name, (packages, factory) in _choices().items():
        registry.register(name, packages=packages)(_builder(factory))


register()

if __name__ == "__main__":
    from granian.cli import entrypoint

    sys.argv[0] = "granian"
    entrypoint()  # type: ignore[no-untyped-call]
