"""anyio's worker threads as a virtual clock's jobs: its entry point wrapped, once per process.

``anyio.to_thread.run_sync`` (and what is built on it: ``anyio.Path``, ``anyio.open_file``,
Starlette's ``run_in_threadpool``, FastAPI's ``def`` endpoints) runs in anyio's own worker
threads and hands its result back with ``call_soon_threadsafe``: the loop never sees it start
(see "Threads" in :mod:`aiowheel._virtual._jobs`). anyio's asyncio backend is reached through its
one entry point, ``AsyncIOBackend.run_sync_in_worker_thread`` (anyio's backend interface, the call
every ``to_thread.run_sync`` makes), wrapped once per process when that module is imported (a
finder on ``sys.meta_path`` waits for it if it is not imported yet); on a loop without a
virtual clock the wrapper calls anyio's own at once.

Why a room of its own. This is import machinery (a meta path finder, a wrapping loader, a
patch of another library's class), for the whole process rather than for one loop: apart from
the clock and from how jobs are counted (the wrapper asks the running loop's clock for its
:class:`aiowheel._virtual._jobs.Jobs`). It imports nothing of aiowheel's but the loop state's name.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import inspect
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Final

from .._time._clock import STATE_ATTRIBUTE

__all__ = ["watch_anyio"]

_ANYIO_BACKEND: Final = "anyio._backends._asyncio"
_anyio_lock: Final = threading.Lock()
_anyio_state: list[str] = []  # "hooked" once a finder waits for anyio's backend, "wrapped"


def watch_anyio() -> None:
    """Wrap anyio's worker-thread entry point now if its asyncio backend is imported, else as
    soon as it is (a finder on ``sys.meta_path``); once per process."""
    if "wrapped" in _anyio_state:
        return
    with _anyio_lock:
        module = sys.modules.get(_ANYIO_BACKEND)
        if module is not None:
            _wrap_anyio(module)
        elif "hooked" not in _anyio_state:
            _anyio_state.append("hooked")
            sys.meta_path.insert(0, _AnyioFinder())


def _wrap_anyio(module: ModuleType) -> None:
    """Count the work ``anyio.to_thread.run_sync`` hands to anyio's workers as the running
    virtual loop's jobs (the caller holds ``_anyio_lock``, or the import lock)."""
    if "wrapped" in _anyio_state:
        return
    _anyio_state.append("wrapped")
    backend = getattr(module, "AsyncIOBackend", None)
    original = getattr(backend, "run_sync_in_worker_thread", None)
    if backend is None or original is None or not inspect.iscoroutinefunction(original):
        return  # not an anyio 4 backend: left as it is (its threads stay invisible)

    async def run_sync_in_worker_thread(
        cls: Any, func: Callable[..., Any], args: Sequence[Any], *rest: Any, **kwargs: Any
    ) -> Any:
        state = getattr(asyncio.get_running_loop(), STATE_ATTRIBUTE, None)
        clock = None if state is None else state.virtual
        if clock is None:
            return await original(func, args, *rest, **kwargs)
        jobs = clock._jobs
        job = jobs.begin()
        try:
            return await original(job.wrap(func), args, *rest, **kwargs)
        finally:
            jobs.end(job)

    run_sync_in_worker_thread.__doc__ = original.__doc__
    run_sync_in_worker_thread.__wrapped__ = original  # type: ignore[attr-defined]
    backend.run_sync_in_worker_thread = classmethod(run_sync_in_worker_thread)


class _AnyioFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when anyio's asyncio backend is imported, it lets the other
    finders find it and wraps the loader so that the module is patched once executed."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        """None for every module but anyio's asyncio backend (found by the finders after it)."""
        if fullname != _ANYIO_BACKEND:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WrappingLoader(spec.loader)
                return spec
        return None


class _WrappingLoader(importlib.abc.Loader):
    """A loader that runs the real one, then wraps anyio's entry point in the new module."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: Any) -> ModuleType | None:
        """The real loader's module."""
        module: ModuleType | None = self._loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Run the module, then wrap its worker-thread entry point."""
        self._loader.exec_module(module)
        with _anyio_lock:
            _wrap_anyio(module)
            for finder in [f for f in sys.meta_path if isinstance(f, _AnyioFinder)]:
                sys.meta_path.remove(finder)  # its work is done

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)
