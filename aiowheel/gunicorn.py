"""gunicorn worker classes whose event loop is a loop-mode loop: one ``-k`` flag each::

    gunicorn app:app -k aiowheel.gunicorn.UvicornWorker        # ASGI, uvicorn-worker's worker
    gunicorn app:app -k aiowheel.gunicorn.AsgiWorker           # ASGI, gunicorn's own (27+)
    gunicorn app:make_app -k aiowheel.gunicorn.AiohttpWorker   # aiohttp, asyncio's loop
    gunicorn app:make_app -k aiowheel.gunicorn.AiohttpUVLoopWorker   # aiohttp, uvloop

Each is the server's own worker with one change: the loop it runs is a loop-mode loop (every
timer of the worker on the loop's wheel; :mod:`aiowheel.loops`). The workers make their loops
in ``init_process`` (gunicorn's public hook, run in the worker after the fork), so each class
overrides that and nothing private:

- ``UvicornWorker`` sets uvicorn's ``loop`` setting (``CONFIG_KWARGS``, the documented way to
  configure that worker) to ``aiowheel.loops:auto``; ``UvicornUVLoopWorker`` to uvloop's.
- ``AiohttpWorker`` / ``AiohttpUVLoopWorker`` and ``AsgiWorker`` make the loop-mode loop and
  set it as the thread's loop, where the original made its own, then run gunicorn's
  ``Worker.init_process``. aiohttp's uvloop worker installs uvloop's event loop *policy*,
  which 3.14 deprecates; this one does not.
- ``AiohttpWorker`` / ``AiohttpUVLoopWorker`` also cancel a handler whose client went away
  (``handler_cancellation=True``, aiohttp's own flag, False by default): a long poll whose
  client left ends at once, its wait leaving the purgatory, instead of waiting out its
  timeout for nobody (and holding the worker's graceful shutdown until then). aiohttp's
  worker takes no such setting, so ``load_wsgi`` (gunicorn's public hook that loads the
  app) hands it an app factory returning an ``AppRunner`` made with the flag and the
  worker's own settings (logger, keep-alive, access log and its format, shutdown timeout).
  An app factory that returns its own ``AppRunner`` is left as it is.

The servers are imported when a class is first used, so ``import aiowheel.gunicorn`` needs none
of them; a class whose server is missing raises ImportError naming what to install.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from . import loops
from ._common._aiohttp_worker import cancelling_load_wsgi

# class name -> (module and class of the server's worker, pip package, base loop's name: its
# factory is aiowheel.loops.factory's)
_WORKERS = {
    "UvicornWorker": ("uvicorn_worker", "UvicornWorker", "uvicorn-worker", "auto"),
    "UvicornUVLoopWorker": ("uvicorn_worker", "UvicornWorker", "uvicorn-worker", "uvloop"),
    "AiohttpWorker": ("aiohttp.worker", "GunicornWebWorker", "aiohttp", "asyncio"),
    "AiohttpUVLoopWorker": ("aiohttp.worker", "GunicornWebWorker", "aiohttp", "uvloop"),
    "AsgiWorker": ("gunicorn.workers.gasgi", "ASGIWorker", "gunicorn>=27", "auto"),
}
_made: dict[str, type[Any]] = {}

__all__ = sorted(_WORKERS)  # each made on first use, by the module's __getattr__


def _server_worker(module_name: str, class_name: str, package: str) -> type[Any]:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(
            f"this aiowheel worker needs {package}, which is not installed: "
            f"pip install '{package}' (or 'aiowheel[servers]')"
        ) from exc
    worker: type[Any] = getattr(module, class_name)
    return worker


def _make(name: str) -> type[Any]:
    module_name, class_name, package, base_name = _WORKERS[name]
    original = _server_worker(module_name, class_name, package)
    factory = loops.factory(base_name)
    factory_name = factory.__name__
    doc = f"{module_name}.{class_name} on a loop-mode loop (aiowheel.loops.{factory_name})."
    if module_name == "uvicorn_worker":
        config = {**original.CONFIG_KWARGS, "loop": f"aiowheel.loops:{factory_name}"}
        namespace: dict[str, Any] = {"CONFIG_KWARGS": config}
    else:

        def init_process(self: Any) -> None:
            # What the original does before gunicorn's own init_process, with our loop; the
            # ASGI worker's --asgi-loop (auto, asyncio, uvloop) picks the base.
            chosen = factory
            if module_name == "gunicorn.workers.gasgi":
                asked = getattr(self.cfg, "asgi_loop", "auto")
                chosen = loops.factory(asked)
            self.loop = chosen()
            asyncio.set_event_loop(self.loop)
            importlib.import_module("gunicorn.workers.base").Worker.init_process(self)

        init_process.__doc__ = "Make the worker's loop-mode loop, then start the worker."
        namespace = {"init_process": init_process}
        if module_name == "aiohttp.worker":
            namespace["load_wsgi"] = cancelling_load_wsgi(original)
    namespace.update(__doc__=doc, __module__=__name__, __qualname__=name)
    return type(name, (original,), namespace)


def __getattr__(name: str) -> type[Any]:
    if name not in _WORKERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    worker = _made.get(name)
    if worker is None:
        worker = _made[name] = _make(name)
    return worker
