"""Request deadlines into the database through SQLAlchemy, set up once: ``stop_at_deadline``.

Sync SQLAlchemy in plain ``def`` FastAPI endpoints (run in worker threads) is how many apps
reach their database, and a request's deadline does not stop a thread: its query runs on
after the 504. Set up once on the engine, no query site changed::

    engine = aiowheel.sqlalchemy.stop_at_deadline(create_engine("postgresql+psycopg://..."))

Every statement an ``Engine`` or ``AsyncEngine`` executes under a request's deadline is
cancelled in the database when the deadline fires (SQLAlchemy's cursor events file the driver
connection's cancel for the statement's duration): psycopg 3 (sync and async) and psycopg2
through the connection's ``cancel()``; asyncpg through the request task's cancellation, which
asyncpg turns into a cancel in the server; drivers without a cancel (pg8000, sqlite3): not
stopped. The statement raises the driver's error in its thread, the session rolls back, and
the connection goes back to the pool usable. Built on :func:`aiowheel.at_deadline`.

An integration module, like :mod:`aiowheel.httpx`: it imports SQLAlchemy (the ``postgres``
extra), and is not compiled.
"""

from ._deadlines._sqlalchemy import (
    stop_at_deadline,
)

__all__ = [
    "stop_at_deadline",
]
