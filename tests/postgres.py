"""A real PostgreSQL for the tests (issue 61): Debian's ``postgresql`` package, started on a
free port in a temporary directory, as an unprivileged user (PostgreSQL refuses to run as
root: under root the server runs as the package's ``postgres`` user, or ``nobody``).

``need_postgres()`` finds the server's binaries and the drivers (asyncpg, psycopg 3,
SQLAlchemy: the ``postgres`` extra); where one is missing it skips the test, or fails it with
``AIOWHEEL_REQUIRE_POSTGRES=1`` (CI sets it), saying how to get it. ``PostgresServer`` is one
server: ``start()``, ``dsn``, ``stop()``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.support import free_port

REQUIRE_POSTGRES = "AIOWHEEL_REQUIRE_POSTGRES"
"""Set to 1 (CI does) to make a missing PostgreSQL or driver fail the tests, not skip."""


def _binaries() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: Debian's newest, or the ones on PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return None if initdb is None else Path(initdb).resolve().parent


def _version(path: str) -> int:
    try:
        return int(Path(path).parent.parent.name)
    except ValueError:
        return 0


def need_postgres() -> Path:
    """The server's binaries; skips the test (fails it with ``AIOWHEEL_REQUIRE_POSTGRES=1``)
    where there is no server or no driver."""
    problem = ""
    binaries = _binaries()
    if binaries is None:
        problem = "no PostgreSQL server: apt-get install postgresql (Debian/Ubuntu)"
    else:
        try:
            import asyncpg  # noqa: F401
            import psycopg  # noqa: F401
            import psycopg_pool  # noqa: F401
            import sqlalchemy  # noqa: F401
        except ImportError as exc:
            problem = f"no PostgreSQL driver ({exc}): pip install -e '.[dev]' (aiowheel[postgres])"
    if problem:
        if os.environ.get(REQUIRE_POSTGRES, "") not in ("", "0"):
            pytest.fail(f"{problem} ({REQUIRE_POSTGRES} is set)")
        pytest.skip(problem)
    assert binaries is not None
    return binaries


def _unprivileged() -> tuple[int, int] | None:
    """The (uid, gid) the server runs as when this process is root, else None (as we are)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            entry = pwd.getpwnam(name)
            return entry.pw_uid, entry.pw_gid
    raise RuntimeError("running as root, and no postgres or nobody user to run PostgreSQL as")


class PostgresServer:
    """A PostgreSQL server on 127.0.0.1:``port``, in a temporary directory, trusting local
    connections (user ``aiowheel``, database ``postgres``), durability off (fsync)."""

    def __init__(self, binaries: Path) -> None:
        self.binaries = binaries
        self.port = free_port()
        self.dsn = f"postgresql://aiowheel@127.0.0.1:{self.port}/postgres"
        self.directory = Path(tempfile.mkdtemp(prefix="aiowheel-pg-"))
        self.process: subprocess.Popen[bytes] | None = None
        self.user = _unprivileged()

    def _run_as(self) -> dict[str, object]:
        if self.user is None:
            return {}
        uid, gid = self.user
        return {"user": uid, "group": gid, "extra_groups": []}

    def start(self, timeout: float = 60.0) -> None:
        """initdb, start the server, and wait until it accepts a connection."""
        data = self.directory / "data"
        if self.user is not None:
            os.chown(self.directory, *self.user)
        subprocess.run(
            [
                str(self.binaries / "initdb"),
                *("-D", str(data), "-U", "aiowheel", "-A", "trust", "--no-sync"),
                *("-E", "UTF8", "--locale", "C"),
            ],
            check=True,
            capture_output=True,
            cwd=self.directory,
            **self._run_as(),  # type: ignore[call-overload]
        )
        self.process = subprocess.Popen(
            [
                str(self.binaries / "postgres"),
                *("-D", str(data), "-p", str(self.port), "-k", str(self.directory)),
                *("-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"),
                *("-c", "max_connections=100", "-c", "log_min_messages=fatal"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.directory,
            **self._run_as(),  # type: ignore[call-overload]
        )
        import psycopg

        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.dsn, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"PostgreSQL did not start on port {self.port}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and remove its directory."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def activity(self, like: str) -> list[tuple[object, ...]]:
        """The backends whose query contains ``like``: pid, state, seconds since the query
        started and since its state changed (for a failure's message)."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "select pid, state, extract(epoch from now() - query_start)::float, "
                "extract(epoch from now() - state_change)::float from pg_stat_activity "
                "where query like %s and pid <> pg_backend_pid()",
                (f"%{like}%",),
            ).fetchall()
        return [tuple(row) for row in rows]

    def running_queries(self, like: str) -> int:
        """How many backends run a query containing ``like`` now (pg_stat_activity)."""
        return sum(state == "active" for _, state, *_ in self.activity(like))
