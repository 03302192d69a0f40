"""The psycopg 3 adapter of the request deadlines, :mod:`aiowheel.psycopg` (whose docstring is
the user's guide): ``stop_at_deadline`` over :mod:`._stop`.

Set up once on a connection or a pool, no query site changed: each connection's cursors (its
``cursor_factory`` and ``server_cursor_factory``, which ``conn.execute`` and ``conn.cursor()``
use) are replaced by subclasses of the ones it had, whose ``execute`` / ``executemany`` (and
``stream`` / ``copy``, for as long as the rows come or the block lasts) file the connection's
cancel at the current request's deadline for the statement's duration
(:func:`aiowheel._deadlines._stop.stop_statement`). A pool's connections get the same as the
pool hands them out (its ``getconn``, which ``pool.connection()`` calls). The cancel is
libpq's (``PQcancel``, made to be called from another thread), sent from a canceller thread:
PostgreSQL stops the query, the statement raises ``QueryCanceled`` in its own thread, and the
connection's context manager rolls the transaction back, so the connection goes back to its
pool usable.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager, nullcontext
from typing import Any, Final, TypeVar

import psycopg

from ._stop import stop_statement

__all__ = ["stop_at_deadline"]

_WHERE: Final = "aiowheel.psycopg"
T = TypeVar("T")


def _pools() -> tuple[type[Any], ...]:
    try:
        import psycopg_pool
    except ImportError:  # the pool is a package of its own (psycopg[pool])
        return ()
    return (psycopg_pool.ConnectionPool, psycopg_pool.AsyncConnectionPool)


def stop_at_deadline(target: T) -> T:
    """Cancel in PostgreSQL every statement ``target`` runs under a request's deadline when
    the deadline fires; returns ``target``. ``target``: a psycopg 3 ``Connection``,
    ``AsyncConnection``, ``psycopg_pool.ConnectionPool`` or ``AsyncConnectionPool``. Set up
    once; again is harmless. TypeError naming what it got for anything else."""
    if isinstance(target, psycopg.Connection | psycopg.AsyncConnection):
        _connection(target)
    elif isinstance(target, _pools()):
        _pool(target)
    else:
        raise TypeError(
            "aiowheel.psycopg.stop_at_deadline(): expected a psycopg Connection, "
            f"AsyncConnection, ConnectionPool or AsyncConnectionPool, got {target!r}"
        )
    return target


def _connection(conn: Any) -> None:
    """``conn``'s cursors replaced by ones that stop at the deadline (once)."""
    for attribute in ("cursor_factory", "server_cursor_factory"):
        factory = getattr(conn, attribute)
        if not getattr(factory, "_aiowheel_stops", False):
            setattr(conn, attribute, _stopping(factory))


@functools.cache
def _stopping(cursor: type[Any]) -> type[Any]:
    """A subclass of ``cursor`` (sync or async) whose statements stop at the deadline."""
    if issubclass(cursor, psycopg.AsyncCursor | psycopg.AsyncServerCursor):

        async def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _filed(self):
                return await super(made, self).execute(*args, **kwargs)

        async def executemany(self: Any, *args: Any, **kwargs: Any) -> Any:
            with _filed(self):
                return await super(made, self).executemany(*args, **kwargs)

        async def stream(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            with _filed(self):
                async for row in super(made, self).stream(*args, **kwargs):
                    yield row

        @asynccontextmanager
        async def copy(self: Any, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
            with _filed(self):
                async with super(made, self).copy(*args, **kwargs) as copying:
                    yield copying
    else:

        def execute(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            with _filed(self):
                return super(made, self).execute(*args, **kwargs)

        def executemany(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            with _filed(self):
                return super(made, self).executemany(*args, **kwargs)

        def stream(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[misc]
            with _filed(self):
                yield from super(made, self).stream(*args, **kwargs)

        @contextmanager
        def copy(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:  # type: ignore[misc]
            with _filed(self), super(made, self).copy(*args, **kwargs) as copying:
                yield copying

    # A stream's rows and a COPY's block are one statement each: filed for as long as the
    # rows come (the generator's end or close) or the block lasts.
    namespace = {
        "execute": execute,
        "executemany": executemany,
        "stream": stream,
        "copy": copy,
        "_aiowheel_stops": True,
    }
    made: type[Any] = type(f"Stopping{cursor.__name__}", (cursor,), namespace)
    made.__module__ = __name__
    return made


def _filed(cursor: Any) -> AbstractContextManager[object]:
    """The cursor's connection's cancel filed at the deadline for one statement (nothing
    outside a request)."""
    statement = stop_statement(cursor.connection.cancel, _WHERE)
    return nullcontext() if statement is None else statement


def _pool(pool: Any) -> None:
    """Every connection ``pool`` hands out stops at the deadline (its ``getconn`` wrapped on
    the instance, which ``pool.connection()`` calls; once)."""
    if getattr(pool.getconn, "_aiowheel_stops", False):
        return
    getconn = pool.getconn
    if isinstance(pool, _pools()[1]):

        async def agetconn(*args: Any, **kwargs: Any) -> Any:
            conn = await getconn(*args, **kwargs)
            _connection(conn)
            return conn

        wrapped: Any = agetconn
    else:

        def sgetconn(*args: Any, **kwargs: Any) -> Any:
            conn = getconn(*args, **kwargs)
            _connection(conn)
            return conn

        wrapped = sgetconn
    wrapped._aiowheel_stops = True
    pool.getconn = wrapped
