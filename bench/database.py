"""Into the database: does a request's deadline stop its query in PostgreSQL?

``python -m bench.database [--requests 10] [--work 5] [--deadline 0.5] [--out DIR]`` starts a
real PostgreSQL (Debian's server, as the tests do: ``tests/postgres.py``, an unprivileged user)
and, for each style of reaching it and each loop (asyncio's own, loop mode over it), sends
``--requests`` concurrent requests to an ASGI app under ``DeadlineMiddleware(timeout=
--deadline)`` whose endpoint runs ``select pg_sleep(--work)``; then a burst of quick requests
(``select 1``) on the same connections.

Styles: psycopg 3 sync (a connection per request, and a ``ConnectionPool``) and SQLAlchemy sync
in worker threads (a plain ``def`` endpoint's way), each with ``aiowheel.psycopg`` /
``aiowheel.sqlalchemy.stop_at_deadline`` and without it; psycopg async (pool) and SQLAlchemy
async over asyncpg in the request's task, and asyncpg with a timeout set from the budget
(``fetch(..., timeout=aiowheel.time_left())``).

Figures per row: the statuses of the slow burst; the seconds the last query ran on in
PostgreSQL after the last 504 (``pg_stat_activity`` polled every 5 ms; goal: 0.05 s at most);
the connections leaked (held after the burst); the statuses of the quick burst. Writes
``database.md`` and ``database.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx

import aiowheel
from aiowheel.asgi import DeadlineMiddleware
from tests.postgres import PostgresServer, need_postgres

Query = Callable[[str], Awaitable[Any]]
Style = Callable[[str, int], Any]  # (dsn, size) -> an async context manager of (query, held)


def _statuses(codes: list[int]) -> str:
    return ", ".join(f"{count} x {code}" for code, count in sorted(Counter(codes).items()))


@asynccontextmanager
async def psycopg_connections(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    import psycopg

    import aiowheel.psycopg

    conns = [psycopg.connect(dsn, autocommit=True) for _ in range(size)]
    if stop:
        for conn in conns:
            aiowheel.psycopg.stop_at_deadline(conn)
    free: asyncio.Queue[Any] = asyncio.Queue()
    for conn in conns:
        free.put_nowait(conn)

    async def query(sql: str) -> None:
        conn = await free.get()
        try:
            await asyncio.to_thread(lambda: conn.execute(sql).fetchall())
        finally:
            free.put_nowait(conn)

    try:
        yield query, lambda: size - free.qsize()
    finally:
        for conn in conns:
            conn.close()


@asynccontextmanager
async def psycopg_pool(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    from psycopg_pool import ConnectionPool

    import aiowheel.psycopg

    pool = ConnectionPool(dsn, min_size=size, max_size=size, open=True)
    if stop:
        aiowheel.psycopg.stop_at_deadline(pool)

    def run(sql: str) -> None:
        with pool.connection() as conn:
            conn.execute(sql).fetchall()

    async def query(sql: str) -> None:
        await asyncio.to_thread(run, sql)

    try:
        yield query, lambda: size - pool.get_stats().get("pool_available", size)
    finally:
        pool.close()


@asynccontextmanager
async def sqlalchemy_sync(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    import sqlalchemy

    import aiowheel.sqlalchemy

    engine = sqlalchemy.create_engine(
        dsn.replace("postgresql://", "postgresql+psycopg://"), pool_size=size, max_overflow=0
    )
    if stop:
        aiowheel.sqlalchemy.stop_at_deadline(engine)

    def run(sql: str) -> None:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(sql)).fetchall()

    async def query(sql: str) -> None:
        await asyncio.to_thread(run, sql)

    try:
        yield query, lambda: engine.pool.checkedout()  # type: ignore[attr-defined]
    finally:
        engine.dispose()


@asynccontextmanager
async def psycopg_async_pool(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    from psycopg_pool import AsyncConnectionPool

    import aiowheel.psycopg

    pool = AsyncConnectionPool(dsn, min_size=size, max_size=size, open=False)
    await pool.open()
    if stop:
        aiowheel.psycopg.stop_at_deadline(pool)

    async def query(sql: str) -> None:
        async with pool.connection() as conn:
            await (await conn.execute(sql)).fetchall()

    try:
        yield query, lambda: size - pool.get_stats().get("pool_available", size)
    finally:
        await pool.close()


@asynccontextmanager
async def sqlalchemy_asyncpg(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine

    import aiowheel.sqlalchemy

    engine = create_async_engine(
        dsn.replace("postgresql://", "postgresql+asyncpg://"), pool_size=size, max_overflow=0
    )
    if stop:
        aiowheel.sqlalchemy.stop_at_deadline(engine)

    async def query(sql: str) -> None:
        async with engine.connect() as conn:
            (await conn.execute(sqlalchemy.text(sql))).fetchall()

    try:
        yield query, lambda: engine.pool.checkedout()  # type: ignore[attr-defined]
    finally:
        await engine.dispose()


@asynccontextmanager
async def asyncpg_budget_timeout(dsn: str, size: int, stop: bool) -> AsyncIterator[Any]:
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=size, max_size=size)

    async def query(sql: str) -> None:
        async with pool.acquire() as conn:
            await conn.fetch(sql, timeout=aiowheel.time_left())

    try:
        yield query, lambda: size - pool.get_idle_size()
    finally:
        await pool.close()


# (name, its context, stop_at_deadline or not)
STYLES: list[tuple[str, Any, bool]] = [
    ("psycopg sync, connections, in threads", psycopg_connections, True),
    ("the same without stop_at_deadline", psycopg_connections, False),
    ("psycopg sync, ConnectionPool, in threads", psycopg_pool, True),
    ("the same without stop_at_deadline", psycopg_pool, False),
    ("SQLAlchemy sync (psycopg), in threads", sqlalchemy_sync, True),
    ("the same without stop_at_deadline", sqlalchemy_sync, False),
    ("psycopg async, AsyncConnectionPool", psycopg_async_pool, True),
    ("SQLAlchemy async (asyncpg)", sqlalchemy_asyncpg, True),
    ("asyncpg, fetch(timeout=time_left())", asyncpg_budget_timeout, False),
]


def app_of(query: Query, work: float, deadline: float) -> Any:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await query(f"select pg_sleep({work})" if scope["path"] == "/slow" else "select 1")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return DeadlineMiddleware(app, timeout=deadline)


async def burst(app: Any, path: str, count: int) -> list[int]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        answers = await asyncio.gather(*(client.get(path) for _ in range(count)))
    return [answer.status_code for answer in answers]


async def one(
    server: PostgresServer, context: Any, stop: bool, requests: int, work: float, deadline: float
) -> dict[str, Any]:
    async with context(server.dsn, requests, stop) as (query, held):
        app = app_of(query, work, deadline)
        slow = await burst(app, "/slow", requests)
        answered = time.monotonic()
        while await asyncio.to_thread(server.running_queries, "pg_sleep"):
            if time.monotonic() > answered + work + 5:
                break
            await asyncio.sleep(0.005)
        ran_on = time.monotonic() - answered
        await asyncio.sleep(0.2)  # connections on their way back to their pools
        leaked = held()
        quick = await burst(app, "/quick", requests)
    return {"slow": slow, "ran_on": ran_on, "leaked": leaked, "quick": quick}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.database", description=__doc__)
    parser.add_argument("--requests", type=int, default=10)
    parser.add_argument("--work", type=float, default=5.0)
    parser.add_argument("--deadline", type=float, default=0.5)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    args = parser.parse_args(argv)
    server = PostgresServer(need_postgres())
    server.start()
    rows: list[dict[str, Any]] = []
    try:
        for loop_name, factory in (("asyncio", None), ("loop mode", aiowheel.loop_factory())):
            for name, context, stop in STYLES:
                with asyncio.Runner(loop_factory=factory) as runner:
                    figures = runner.run(
                        one(server, context, stop, args.requests, args.work, args.deadline)
                    )
                rows.append({"style": name, "loop": loop_name, **figures})
                print(f"{loop_name:9} {name:42} {figures['ran_on']:.3f} s", flush=True)
    finally:
        server.stop()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "database.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "| style | loop | slow burst | query ran on after the 504s, s | connections leaked "
        "| next burst |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['style']} | {row['loop']} | {_statuses(row['slow'])} | "
            f"{row['ran_on']:.3f} | {row['leaked']} | {_statuses(row['quick'])} |"
        )
    (args.out / "database.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
