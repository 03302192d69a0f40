"""What :mod:`aiowheel.gunicorn`'s aiohttp workers add to aiohttp's own: the app served with
``handler_cancellation=True``, so that a handler whose client went away is cancelled (a long
poll's wait leaves its purgatory at once instead of waiting out its timeout for nobody).

aiohttp's ``GunicornWebWorker`` takes no such setting and makes its ``AppRunner`` in a private
method; but it also accepts an app factory that returns an ``AppRunner`` of its own. So the
worker's ``load_wsgi`` (gunicorn's public hook that loads the app) is wrapped: once the app is
loaded, the worker is handed a factory returning an ``AppRunner`` made with the flag and the
settings aiohttp's worker gives its own (logger, keep-alive, access log and its format,
shutdown timeout). A factory that returns its own ``AppRunner`` is left as it is. A room of
its own so that the face stays a face; it imports aiohttp only when a worker class is made.
Pure Python in both builds.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["cancelling_load_wsgi"]


def cancelling_load_wsgi(original: type[Any]) -> Any:
    """An aiohttp worker's ``load_wsgi``: the app loaded, then served with
    ``handler_cancellation=True`` (see the module's docstring)."""
    from aiohttp import web

    def load_wsgi(self: Any) -> None:
        original.load_wsgi(self)
        loaded = self.wsgi
        if not (isinstance(loaded, web.Application) or inspect.iscoroutinefunction(loaded)):
            return  # aiohttp's worker refuses it, with its own message

        async def runner() -> web.AppRunner:
            app = loaded if isinstance(loaded, web.Application) else await loaded()
            if isinstance(app, web.AppRunner):
                return app
            # The settings aiohttp's worker gives its own AppRunner, and the flag.
            return web.AppRunner(
                app,
                logger=self.log,
                keepalive_timeout=self.cfg.keepalive,
                access_log=self.log.access_log if self.cfg.accesslog else None,
                access_log_format=self._get_valid_log_format(self.cfg.access_log_format),
                shutdown_timeout=self.cfg.graceful_timeout / 100 * 95,
                handler_cancellation=True,
            )

        self.wsgi = runner

    load_wsgi.__doc__ = "Load the app, to be served with handler_cancellation=True."
    return load_wsgi
