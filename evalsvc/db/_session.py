"""Engines and the one managed-session helper.

Contract: ``Database.session()`` commits on success, rolls back on any exception, and turns
SQLAlchemy/driver errors into ``evalsvc.db`` domain errors: integrity → ``Conflict``; a
read-only database or a full disk → ``DatabaseWriteRefused`` (never retried); a value the
database cannot store (too long, out of range, NUL) → ``InvalidData``; unreachable or busy →
``DatabaseUnavailable``. A malformed URL or a missing driver is ``DatabaseConfigError`` when
the engine is built. SQLite gets WAL (readers never block
the writer), foreign keys, a busy timeout, and ``BEGIN IMMEDIATE`` for write sessions so that the
writer lock is taken up front: a deferred transaction that reads and then writes can fail with
"database is locked" without waiting, which would break the claim's compare-and-set.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from evalsvc.endpoints._urls import redact_text
from evalsvc.endpoints._urls import redact_url as _redact_any_url

from ._errors import (
    Conflict,
    DatabaseConfigError,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    InvalidData,
    StoreError,
)

SQLITE_BUSY_TIMEOUT_MS = 30_000
_BEGIN_OPTION = "evalsvc_sqlite_begin"


def redact_url(url: str | sa.URL) -> str:
    """The URL without credentials, for messages, logs and ``/healthz``: the one redaction of
    ``evalsvc.endpoints`` (userinfo and ``?password=``-like parameters, any case)."""
    if isinstance(url, sa.URL):
        url = url.render_as_string(hide_password=False)
    return _redact_any_url(url)


#: PostgreSQL SQLSTATEs of a database that refuses writes: read_only_sql_transaction, disk_full,
#: insufficient_resources / out_of_memory are left to DatabaseUnavailable.
_PG_WRITE_REFUSED = {"25006", "53100"}
#: SQLite result codes (``sqlite3.Error.sqlite_errorname``) of the same.
_SQLITE_WRITE_REFUSED = {"SQLITE_READONLY", "SQLITE_FULL"}
_SQLITE_WRITE_REFUSED_PREFIXES = ("SQLITE_READONLY_", "SQLITE_FULL_", "SQLITE_IOERR")


def _sqlite_file(url: sa.URL) -> Path | None:
    database = url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return Path(database).expanduser()


def create_engine(url: str) -> Engine:
    """An engine for ``url``: SQLite file (WAL, foreign keys, busy timeout) or PostgreSQL.

    Raises ``DatabaseConfigError`` for a malformed URL or one whose driver is not installed
    (``postgres://`` instead of ``postgresql://``, ``notaurl``)."""
    try:
        return _create_engine(url)
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as err:
        shown = redact_url(url)
        raise DatabaseConfigError(
            f"invalid database URL {shown}: {redact_text(str(err).splitlines()[0])} (expected e.g. "
            "sqlite:///path/to/evalsvc.db or postgresql+psycopg://user@host:5432/dbname)"
        ) from err


def _create_engine(url: str) -> Engine:
    parsed = sa.make_url(url)
    if parsed.get_backend_name() == "sqlite":
        engine = sa.create_engine(
            parsed,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False},
        )
        _install_sqlite_hooks(engine, _sqlite_file(parsed))
        return engine
    # pre_ping: after a database restart, pooled connections are dead; replace them silently
    # instead of failing the first statement of every pooled connection.
    # Bounded connects and TCP keepalives: behind a network partition a connect or a read
    # would otherwise hang for minutes, and a hung heartbeat cannot notice its lease is gone.
    # Values given in the URL's query win.
    libpq_defaults = {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }
    connect_args = {k: v for k, v in libpq_defaults.items() if k not in parsed.query}
    return sa.create_engine(
        parsed, pool_pre_ping=True, pool_size=5, max_overflow=10, connect_args=connect_args
    )


def _install_sqlite_hooks(engine: Engine, path: Path | None) -> None:
    @event.listens_for(engine, "do_connect")
    def _create_directory(*_args: Any) -> None:
        # Created on first connect, not when the store is built: building a store never fails.
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                # A DBAPI error, so that SQLAlchemy wraps it like any failed connect.
                raise sqlite3.OperationalError(f"cannot create {path.parent}: {err}") from err

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy (not the sqlite3 module) emit BEGIN, so we choose IMMEDIATE or DEFERRED.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
            # NORMAL is durable across application crashes in WAL mode (only an OS crash can
            # lose the last commits), and it avoids an fsync per sample batch.
            cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        mode = connection.get_execution_options().get(_BEGIN_OPTION, "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


def translate_error(err: exc.SQLAlchemyError, url: str | sa.URL) -> StoreError:
    """Map a SQLAlchemy error to the domain error a caller can act on."""
    orig = getattr(err, "orig", None)
    detail = str(orig if orig is not None else err).strip().splitlines()
    # Driver messages may quote a connection string; never show its credentials.
    first = redact_text(detail[0]) if detail else type(err).__name__
    if isinstance(err, exc.IntegrityError):
        return Conflict(first)
    sqlstate = getattr(orig, "sqlstate", None)
    sqlite_name = str(getattr(orig, "sqlite_errorname", "") or "")
    if (
        sqlstate in _PG_WRITE_REFUSED
        or sqlite_name in _SQLITE_WRITE_REFUSED
        or sqlite_name.startswith(_SQLITE_WRITE_REFUSED_PREFIXES)
    ):
        return DatabaseWriteRefused(f"database {redact_url(url)} refuses writes: {first}")
    if isinstance(err, exc.DataError):
        return InvalidData(f"value refused by the database: {first}")
    if isinstance(err, exc.OperationalError | exc.ProgrammingError) and (
        "no such table" in first or ("relation" in first and "does not exist" in first)
    ):
        return DatabaseNotAtHead(
            f"database {redact_url(url)} is not initialised ({first}): run `evalsvc db upgrade`"
        )
    if isinstance(err, exc.OperationalError | exc.InterfaceError) or (
        isinstance(err, exc.DBAPIError) and err.connection_invalidated
    ):
        return DatabaseUnavailable(f"cannot use database {redact_url(url)}: {first}")
    return StoreError(f"{type(err).__name__}: {first}")


class Database:
    """An engine plus the session factories of one store."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = create_engine(url)
        self.dialect = self.engine.dialect.name
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        write_bind = (
            self.engine.execution_options(**{_BEGIN_OPTION: "IMMEDIATE"})
            if self.dialect == "sqlite"
            else self.engine
        )
        self._write = sessionmaker(write_bind, expire_on_commit=False)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """One transaction: commit on success, roll back on error, domain errors out."""
        session = (self._write if write else self._read)()
        try:
            yield session
            session.commit()
        except exc.SQLAlchemyError as err:
            session.rollback()
            raise translate_error(err, self.url) from err
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def connection(self) -> Iterator[sa.Connection]:
        """A raw connection (migrations); connection errors become DatabaseUnavailable."""
        try:
            with self.engine.connect() as conn:
                yield conn
        except exc.SQLAlchemyError as err:
            raise translate_error(err, self.url) from err

    def dispose(self) -> None:
        self.engine.dispose()
