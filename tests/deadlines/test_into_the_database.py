"""Into the database (issue 61, 2 and 3), against a real PostgreSQL (``tests/postgres.py``):
10 concurrent requests whose query sleeps 5 s in PostgreSQL, under a 0.5 s deadline, in each
style (psycopg sync in worker threads, connections and a pool; SQLAlchemy sync in threads;
psycopg async, SQLAlchemy async over asyncpg, asyncpg with a timeout from the budget, in the
request's task). Every request answers 504, every query ends in PostgreSQL soon after (none
runs its 5 s), no connection is leaked, and the next burst of quick requests all answer 200.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest

import aiowheel
import aiowheel.loops
from aiowheel.asgi import DeadlineMiddleware
from tests.postgres import PostgresServer, need_postgres

pytestmark = pytest.mark.anyio
LOOPS = pytest.mark.parametrize(
    "anyio_backend",
    [
        pytest.param(("asyncio", {"use_uvloop": False}), id="asyncio"),
        pytest.param(("asyncio", {"loop_factory": aiowheel.loops.asyncio_loop}), id="loop-mode"),
    ],
)
REQUESTS = 10
DEADLINE = 0.5
SLEEP = "select pg_sleep(5)"
SLACK = 1.5  # seconds: a loaded 2-core machine; the point is 5 s of query never running


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    server = PostgresServer(need_postgres())
    server.start()
    try:
        yield server
    finally:
        server.stop()


Query = Callable[[str], Awaitable[Any]]


def app_of(query: Query) -> Any:
    """An ASGI app under ``DeadlineMiddleware(timeout=DEADLINE)`` whose endpoint runs the
    query its path names (``/slow``: 5 s in PostgreSQL, ``/quick``: ``select 1``)."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await query(SLEEP if scope["path"] == "/slow" else "select 1")
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return DeadlineMiddleware(app, timeout=DEADLINE)


async def burst(app: Any, path: str) -> list[int]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        responses = await asyncio.gather(*(client.get(path) for _ in range(REQUESTS)))
    return [response.status_code for response in responses]


async def check(postgres: PostgresServer, query: Query) -> None:
    """The measure every style must meet (see the module)."""
    app = app_of(query)
    start = time.monotonic()
    assert await burst(app, "/slow") == [504] * REQUESTS
    answered = time.monotonic()
    assert answered - start < DEADLINE + SLACK
    while postgres.running_queries("pg_sleep") and time.monotonic() < answered + SLACK:
        await asyncio.sleep(0.02)
    assert postgres.running_queries("pg_sleep") == 0, (
        f"a query ran on after its 504 (answered {time.monotonic() - answered:.2f} s ago): "
        f"{postgres.activity('pg_sleep')} (pid, state, s since it started, s since its state)"
    )
    assert await burst(app, "/quick") == [200] * REQUESTS


@LOOPS
async def test_psycopg_sync_connections_in_threads(postgres: PostgresServer) -> None:
    import psycopg

    import aiowheel.psycopg

    connections = [
        aiowheel.psycopg.stop_at_deadline(psycopg.connect(postgres.dsn, autocommit=True))
        for _ in range(REQUESTS)
    ]
    free: asyncio.Queue[psycopg.Connection[Any]] = asyncio.Queue()
    for conn in connections:
        free.put_nowait(conn)

    async def query(sql: str) -> None:
        conn = await free.get()
        try:
            await asyncio.to_thread(lambda: conn.execute(sql).fetchall())
        finally:
            free.put_nowait(conn)

    try:
        await check(postgres, query)
    finally:
        for conn in connections:
            conn.close()


@LOOPS
async def test_psycopg_sync_pool_in_threads(postgres: PostgresServer) -> None:
    from psycopg_pool import ConnectionPool

    import aiowheel.psycopg

    pool = ConnectionPool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS, open=True)
    aiowheel.psycopg.stop_at_deadline(pool)

    def run(sql: str) -> None:
        with pool.connection() as conn:
            conn.execute(sql).fetchall()

    async def query(sql: str) -> None:
        await asyncio.to_thread(run, sql)

    try:
        await check(postgres, query)
        stats = pool.get_stats()
        assert stats["pool_size"] == REQUESTS and stats.get("connections_lost", 0) == 0, stats
    finally:
        pool.close()


@LOOPS
async def test_sqlalchemy_sync_engine_in_threads(postgres: PostgresServer) -> None:
    import sqlalchemy

    import aiowheel.sqlalchemy

    url = postgres.dsn.replace("postgresql://", "postgresql+psycopg://")
    engine = sqlalchemy.create_engine(url, pool_size=REQUESTS, max_overflow=0)
    aiowheel.sqlalchemy.stop_at_deadline(engine)

    def run(sql: str) -> None:
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text(sql)).fetchall()

    async def query(sql: str) -> None:
        await asyncio.to_thread(run, sql)

    try:
        await check(postgres, query)
        assert engine.pool.checkedout() == 0  # type: ignore[attr-defined]
    finally:
        engine.dispose()


@LOOPS
async def test_psycopg_async_pool_in_the_task(postgres: PostgresServer) -> None:
    from psycopg_pool import AsyncConnectionPool

    import aiowheel.psycopg

    pool = AsyncConnectionPool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS, open=False)
    await pool.open()
    aiowheel.psycopg.stop_at_deadline(pool)

    async def query(sql: str) -> None:
        async with pool.connection() as conn:
            await (await conn.execute(sql)).fetchall()

    try:
        await check(postgres, query)
    finally:
        await pool.close()


@LOOPS
async def test_sqlalchemy_async_engine_over_asyncpg(postgres: PostgresServer) -> None:
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine

    import aiowheel.sqlalchemy

    url = postgres.dsn.replace("postgresql://", "postgresql+asyncpg://")
    engine = create_async_engine(url, pool_size=REQUESTS, max_overflow=0)
    aiowheel.sqlalchemy.stop_at_deadline(engine)

    async def query(sql: str) -> None:
        async with engine.connect() as conn:
            (await conn.execute(sqlalchemy.text(sql))).fetchall()

    try:
        await check(postgres, query)
    finally:
        await engine.dispose()


@LOOPS
@pytest.mark.parametrize("where", ["fetch", "acquire"])
async def test_asyncpg_with_a_timeout_from_the_budget(postgres: PostgresServer, where: str) -> None:
    # The careful developer's extra line: asyncpg's own timeout set from the budget. It
    # answered 500 (acquire) or left 18 of 20 queries running (fetch) on the stock loop.
    import asyncpg

    pool = await asyncpg.create_pool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS)

    async def query(sql: str) -> None:
        if where == "acquire":
            async with pool.acquire(timeout=aiowheel.time_left()) as conn:
                await conn.fetch(sql)
        else:
            async with pool.acquire() as conn:
                await conn.fetch(sql, timeout=aiowheel.time_left())

    try:
        await check(postgres, query)
    finally:
        await pool.close()


def test_bad_input_names_what_it_got() -> None:
    need_postgres()
    import aiowheel.psycopg
    import aiowheel.sqlalchemy

    with pytest.raises(TypeError, match=r"psycopg.stop_at_deadline\(\): expected .* got 'dsn'"):
        aiowheel.psycopg.stop_at_deadline("dsn")
    with pytest.raises(TypeError, match=r"sqlalchemy.stop_at_deadline\(\): expected .* got 42"):
        aiowheel.sqlalchemy.stop_at_deadline(42)


@LOOPS
async def test_outside_a_request_nothing_changes_and_after_the_deadline_nothing_is_sent(
    postgres: PostgresServer,
) -> None:
    import psycopg

    import aiowheel.psycopg
    from aiowheel.asgi import BudgetExhausted

    conn = aiowheel.psycopg.stop_at_deadline(psycopg.connect(postgres.dsn, autocommit=True))
    assert aiowheel.psycopg.stop_at_deadline(conn) is conn  # again: harmless
    refused: list[BaseException] = []

    async def late(sql: str) -> None:
        try:
            await asyncio.sleep(5)
        finally:  # past the deadline: a statement here is not sent
            try:
                conn.execute("select 'never sent'")
            except BudgetExhausted as exc:
                refused.append(exc)

    try:
        assert conn.execute("select 1").fetchone() == (1,)  # no request: as without aiowheel
        transport = httpx.ASGITransport(app=app_of(late))
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            assert (await client.get("/quick")).status_code == 504
        assert len(refused) == 1 and "not sent" in str(refused[0])
        assert conn.execute("select 2").fetchone() == (2,)  # the connection is usable
    finally:
        conn.close()


@LOOPS
async def test_a_statement_timeout_set_from_the_budget(postgres: PostgresServer) -> None:
    # Issue 61, 2: `SET LOCAL statement_timeout` from `time_left()`, no adapter set up. The
    # server's own timer and the request's deadline end at the same moment: whichever notices
    # first, the request answers 504 (not a 500 for the server's QueryCanceled), and the
    # query has ended in PostgreSQL, since its own timeout ended it.
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS, open=False)
    await pool.open()

    async def query(sql: str) -> None:
        async with pool.connection() as conn, conn.transaction():
            left_ms = max(1, int(aiowheel.time_left() * 1000))
            await conn.execute(f"set local statement_timeout = {left_ms}")
            await (await conn.execute(sql)).fetchall()

    try:
        await check(postgres, query)
    finally:
        await pool.close()
