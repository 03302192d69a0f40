"""Request deadlines into PostgreSQL through psycopg 3, set up once: ``stop_at_deadline``.

A request's deadline cancels its task, and an ``async def`` endpoint's query with it (psycopg's
async connections cancel the query in the server when their task is cancelled). A query run
in a worker thread (a plain ``def`` FastAPI endpoint, ``asyncio.to_thread``) is not: without
this it runs on after the 504, holding its thread and its connection::

    pool = aiowheel.psycopg.stop_at_deadline(psycopg_pool.ConnectionPool(dsn))

    def report(request):                      # a def endpoint, under DeadlineMiddleware
        with pool.connection() as conn:
            return conn.execute(query).fetchall()   # cancelled in PostgreSQL at the deadline

Every statement a ``Connection``, ``AsyncConnection``, ``ConnectionPool`` or
``AsyncConnectionPool`` runs under a request's deadline (``execute``, ``executemany``, a
cursor's ``stream`` and ``copy``, through the connection or its cursors) is cancelled in
PostgreSQL when the deadline fires: the statement raises ``psycopg.errors.QueryCanceled`` in
its thread, the connection's context manager rolls back, and the connection goes back to its
pool usable. A statement started after the deadline is not sent
(:class:`aiowheel.asgi.BudgetExhausted`). Outside a request nothing changes. Built on
:func:`aiowheel.at_deadline`.

An integration module, like :mod:`aiowheel.httpx`: it imports psycopg (the ``postgres`` extra),
and is not compiled.
"""

from ._deadlines._psycopg import (
    stop_at_deadline,
)

__all__ = [
    "stop_at_deadline",
]
