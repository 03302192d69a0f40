"""Request deadlines that stop the work, for aiohttp's web server: ``deadline_middleware``.

The same contract as :class:`aiowheel.asgi.DeadlineMiddleware` (read its module for the
why): aiohttp runs a request's middlewares and handler in one task, so the middleware awaits
the handler inside ``aiowheel.timeout_at(...)`` and the deadline's cancellation reaches the
handler wherever it waits; its ``finally`` blocks run, and nothing of the request is left
pending. aiohttp has no deadline of its own; nor does it cancel a handler whose client has
disconnected unless told to (``web.run_app(app, handler_cancellation=True)``, or
``AppRunner(app, handler_cancellation=True)``: the default is False since aiohttp 3.8.6).

Past the deadline, if the handler has not started its response, the client gets ``status``
(504) with ``body``. If it has (a ``StreamResponse`` prepared), the ``TimeoutError`` is
re-raised: aiohttp logs it and closes the connection, so the response is cut off, never passed
off as complete.

A route's own deadline: ``overrides={"/export": 120, "/items/{id}": 2, "/static/*": 30}``
(keys match the request's path, or its route's canonical form such as ``/items/{id}``, or a
prefix ending in ``*``), or :func:`aiowheel.asgi.set_deadline` in the handler. ``header=``
lets the caller cap it (see :mod:`aiowheel.asgi`). Inside the handler
:func:`aiowheel.time_left` and :func:`aiowheel.asgi.budget` read the deadline, as under ASGI.

An integration module, like :mod:`aiowheel.gunicorn`: it imports aiohttp (the absolute
``import aiohttp`` reaches the real package, not this module), and is not compiled.
"""

from ._deadlines._aiohttp import (
    deadline_middleware,
    propagate_deadline,
)

__all__ = [
    "deadline_middleware",
    "propagate_deadline",
]
