"""The chain's last hop: a ``grpc.aio`` server that "queries a database".

    python -m examples.chain.backend --port 50051 [--mode propagated|stock|none] [--loop-mode]

No protoc: the methods are generic handlers with JSON bytes for messages.

- ``/chain.Backend/Work`` (unary): ``{"id": ..., "seconds": S}``: awaits ``asyncio.sleep(S)``
  (the database query) and answers ``{"hop": "backend", "budget": ..., "slept": S}``;
- ``/chain.Backend/Stream`` (server streaming): ``{"id": ..., "count": N, "interval": S}``:
  N messages ``{"i": i}``, one every S seconds;
- ``/chain.Backend/Stats`` (unary): ``{"ids": [...]}`` (optional): the records (when each
  handler started, when its ``finally`` ran, the budget it saw: see ``examples.chain``) and
  the process's CPU seconds.

``propagated`` serves with ``aiowheel.grpc.DeadlineInterceptor(timeout=10)``: the caller's
``grpc-timeout`` caps it, and at the deadline the handler's task is cancelled and the call
ends ``DEADLINE_EXCEEDED``. ``stock``: each handler under its own ``asyncio.timeout(6)``,
whatever the caller's deadline. ``none``: no deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import grpc

from examples.chain import (
    MODES,
    SERVICE,
    STOCK_TIMEOUTS,
    TIMEOUT,
    Records,
    budget_seen,
    run,
    serve_metrics,
    until_signalled,
)


def dumps(message: Any) -> bytes:
    """A message as JSON bytes."""
    return json.dumps(message).encode()


def loads(data: bytes) -> Any:
    """JSON bytes as a message."""
    return json.loads(data)


class Backend:
    """The three methods, recording into ``records``."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.records = Records()

    async def work(self, request: dict[str, Any], context: Any) -> dict[str, Any]:
        """The database query: sleep ``seconds``."""
        record = self.records.start(str(request.get("id", "")), "Work")
        exc: BaseException | None = None
        try:
            seconds = float(request.get("seconds", 0.0))
            if self.mode == "stock":
                async with asyncio.timeout(STOCK_TIMEOUTS["backend"]):
                    record["budget"] = budget_seen(self.mode)
                    await asyncio.sleep(seconds)
            else:
                record["budget"] = budget_seen(self.mode)
                await asyncio.sleep(seconds)
            return {"hop": "backend", "budget": record["budget"], "slept": seconds}
        except BaseException as error:
            exc = error
            raise
        finally:
            Records.end(record, exc)

    async def stream(self, request: dict[str, Any], context: Any) -> AsyncIterator[dict[str, Any]]:
        """``count`` messages, one every ``interval`` seconds."""
        record = self.records.start(str(request.get("id", "")), "Stream")
        record["sent"] = 0
        exc: BaseException | None = None
        try:
            count = int(request.get("count", 10))
            interval = float(request.get("interval", 0.1))
            if self.mode == "stock":
                async with asyncio.timeout(STOCK_TIMEOUTS["backend"]):
                    record["budget"] = budget_seen(self.mode)
                    for i in range(count):
                        await asyncio.sleep(interval)
                        yield {"i": i}
                        record["sent"] += 1
            else:
                record["budget"] = budget_seen(self.mode)
                for i in range(count):
                    await asyncio.sleep(interval)
                    yield {"i": i}
                    record["sent"] += 1
        except BaseException as error:
            exc = error
            raise
        finally:
            Records.end(record, exc)

    async def stats(self, request: dict[str, Any], context: Any) -> dict[str, Any]:
        """The records of ``ids`` (all if none are named) and the process's CPU seconds."""
        ids = request.get("ids")
        return self.records.stats(None if ids is None else set(ids))


def handler(backend: Backend) -> grpc.GenericRpcHandler:
    """The service's generic handler: JSON in, JSON out."""
    codec: dict[str, Any] = {"request_deserializer": loads, "response_serializer": dumps}
    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Work": grpc.unary_unary_rpc_method_handler(backend.work, **codec),
            "Stream": grpc.unary_stream_rpc_method_handler(backend.stream, **codec),
            "Stats": grpc.unary_unary_rpc_method_handler(backend.stats, **codec),
        },
    )


async def serve(port: int, mode: str) -> None:
    """Serve on 127.0.0.1:``port`` until SIGTERM or SIGINT."""
    interceptors: list[Any] = []
    if mode == "propagated":
        import aiowheel.grpc

        interceptors.append(aiowheel.grpc.DeadlineInterceptor(timeout=TIMEOUT))
    elif mode == "layers":
        interceptors.append(_PassThrough())
    server = grpc.aio.server(interceptors=interceptors)
    server.add_generic_rpc_handlers((handler(Backend(mode)),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    print(f"backend: grpc on 127.0.0.1:{port} ({mode})", flush=True)
    await until_signalled()
    await server.stop(grace=1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.chain.backend", description=__doc__)
    parser.add_argument("--port", type=int, default=50051)
    parser.add_argument("--mode", choices=MODES, default="propagated")
    parser.add_argument("--loop-mode", action="store_true", help="run on aiowheel's loop mode")
    args = parser.parse_args(argv)
    serve_metrics("backend")
    run(lambda: serve(args.port, args.mode), args.loop_mode)
    return 0


class _PassThrough(grpc.aio.ServerInterceptor):
    """``layers``: a server interceptor that does nothing, where DeadlineInterceptor sits."""

    async def intercept_service(self, continuation: Any, details: Any) -> Any:
        return await continuation(details)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
