"""hypercorn on a loop-mode loop: its ``serve()`` run under :func:`aiowheel.run`.

hypercorn's command line has no event loop option (``-k asyncio`` and ``-k uvloop`` make their
own loops), so this is the recipe: the few lines below in place of the ``hypercorn`` command.

    python -m examples.run_hypercorn --bind 127.0.0.1:8000 [--base uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import signal

from hypercorn.asyncio import serve
from hypercorn.config import Config

import aiowheel
from aiowheel.loops import BASES, base_class
from examples.served import asgi_app


async def main(bind: str) -> None:
    config = Config()
    config.bind = [bind]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await serve(asgi_app, config, shutdown_trigger=stop.wait)  # type: ignore[arg-type]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bind", default="127.0.0.1:8000")
    parser.add_argument("--base", choices=tuple(BASES), default="asyncio")
    args = parser.parse_args()
    aiowheel.run(main(args.bind), base=base_class(args.base))
