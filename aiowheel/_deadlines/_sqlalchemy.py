"""The SQLAlchemy adapter of the request deadlines, :mod:`aiowheel.sqlalchemy` (whose
docstring is the user's guide): ``stop_at_deadline`` over :mod:`._stop`.

Set up once on an engine, no query site changed: SQLAlchemy's own events
(``before_cursor_execute`` / ``after_cursor_execute`` / ``handle_error``, on the
``AsyncEngine``'s ``sync_engine`` for an async one) file the driver connection's cancel at the
current request's deadline for each statement's duration
(:func:`aiowheel._deadlines._stop.stop_statement`). Which drivers hold:

- psycopg 3 (``postgresql+psycopg``, sync and async) and psycopg2: the driver connection's
  ``cancel()`` (libpq's ``PQcancel``), sent from a canceller thread;
- asyncpg (``postgresql+asyncpg``): the statement runs in the request's task, and asyncpg
  cancels the query in the server when that task is cancelled; nothing is filed;
- any other driver whose connection has a ``cancel()`` method, the same as psycopg's; one
  without (pg8000, sqlite3): nothing is filed, and its statements run to their end.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ._stop import stop_statement

__all__ = ["stop_at_deadline"]

_WHERE: Final = "aiowheel.sqlalchemy"
_KEY: Final = "aiowheel_at_deadline"  # the statement's handle, in its execution context
T = TypeVar("T")


def stop_at_deadline(engine: T) -> T:
    """Cancel in the database every statement ``engine`` executes under a request's deadline
    when the deadline fires; returns ``engine``. ``engine``: a SQLAlchemy ``Engine`` or
    ``AsyncEngine``. Set up once; again is harmless. TypeError naming what it got for
    anything else."""
    if isinstance(engine, AsyncEngine):
        target: Engine = engine.sync_engine
    elif isinstance(engine, Engine):
        target = engine
    else:
        raise TypeError(
            f"aiowheel.sqlalchemy.stop_at_deadline(): expected an Engine or AsyncEngine, "
            f"got {engine!r}"
        )
    if not event.contains(target, "before_cursor_execute", _before):
        event.listen(target, "before_cursor_execute", _before)
        event.listen(target, "after_cursor_execute", _after)
        event.listen(target, "handle_error", _failed)
    return engine


def _before(
    conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool
) -> None:
    driver = conn.connection.driver_connection
    cancel = getattr(driver, "cancel", None)
    if not callable(cancel) or type(driver).__module__.startswith("asyncpg"):
        return  # asyncpg: the task's cancellation cancels the query; others: nothing to call
    statement = stop_statement(cancel, _WHERE)
    if statement is not None:
        if context is None:
            statement.__exit__()  # nowhere to keep it until the statement ends
        else:
            setattr(context, _KEY, statement)


def _after(
    conn: Any, cursor: Any, statement: Any, parameters: Any, context: Any, executemany: bool
) -> None:
    _withdraw(context)


def _failed(exception_context: Any) -> None:
    _withdraw(exception_context.execution_context)


def _withdraw(context: Any) -> None:
    statement = getattr(context, _KEY, None)
    if statement is not None:
        setattr(context, _KEY, None)
        statement.__exit__()
