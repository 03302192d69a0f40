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
from bench import database
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
    """The database bench's app (``DeadlineMiddleware(timeout=DEADLINE)``; ``/slow``: 5 s in
    PostgreSQL, ``/quick``: ``select 1``)."""
    return database.app_of(query, 5.0, DEADLINE)


async def burst(app: Any, path: str) -> list[int]:
    return await database.burst(app, path, REQUESTS)


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


# The styles are the database bench's own (bench/database.py: the performance page's table),
# each with aiowheel's adapter set up where it has one; asyncpg's is its own timeout from the
# budget (below, with its pool's acquire too).
STOPPED_STYLES = [
    pytest.param(style, id=style.__name__)
    for _, style, stop in database.STYLES
    if stop or style is database.asyncpg_budget_timeout
]


@LOOPS
@pytest.mark.parametrize("style", STOPPED_STYLES)
async def test_every_style_stops_its_query_at_the_deadline(
    postgres: PostgresServer, style: Any
) -> None:
    async with style(postgres.dsn, REQUESTS, True) as (query, held):
        await check(postgres, query)
        for _ in range(100):  # a pool may take its connection back a moment later
            if held() == 0:
                break
            await asyncio.sleep(0.02)
        assert held() == 0, f"{held()} connections still held after the quick burst"


@LOOPS
async def test_asyncpg_acquire_with_a_timeout_from_the_budget(postgres: PostgresServer) -> None:
    # The careful developer's extra line: asyncpg's own timeout set from the budget. It
    # answered 500 (acquire) or left 18 of 20 queries running (fetch, a style above) on the
    # stock loop.
    import asyncpg

    pool = await asyncpg.create_pool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS)

    async def query(sql: str) -> None:
        async with pool.acquire(timeout=aiowheel.time_left()) as conn:
            await conn.fetch(sql)

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


@LOOPS
@pytest.mark.parametrize("how", ["stream", "copy"])
@pytest.mark.parametrize("where", ["sync, in threads", "async, in the task"])
async def test_a_stream_and_a_copy_stop_at_the_deadline_too(
    postgres: PostgresServer, how: str, where: str
) -> None:
    # Issue 61, 3: a cursor's stream() and copy() are statements too (the rows of one, the
    # block of the other). The slow query is the one every test runs: its rows come only
    # after its 5 s, so only the cancel ends it before.
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

    import aiowheel.psycopg

    def copied(sql: str) -> str:
        return f"copy ({sql}) to stdout"

    if where == "sync, in threads":
        pool: Any = ConnectionPool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS, open=True)

        def run(sql: str) -> None:
            with pool.connection() as conn, conn.cursor() as cur:
                if how == "stream":
                    assert list(cur.stream(sql))
                else:
                    with cur.copy(copied(sql)) as copy:
                        assert list(copy)

        async def query(sql: str) -> None:
            await asyncio.to_thread(run, sql)

    else:
        pool = AsyncConnectionPool(postgres.dsn, min_size=REQUESTS, max_size=REQUESTS, open=False)
        await pool.open()

        async def query(sql: str) -> None:
            async with pool.connection() as conn, conn.cursor() as cur:
                if how == "stream":
                    assert [row async for row in cur.stream(sql)]
                else:
                    async with cur.copy(copied(sql)) as copy:
                        assert [block async for block in copy]

    aiowheel.psycopg.stop_at_deadline(pool)
    try:
        await check(postgres, query)
    finally:
        closed = pool.close()
        if closed is not None:
            await closed
