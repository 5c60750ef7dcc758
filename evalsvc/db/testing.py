"""Helpers for tests against real databases (used by evalsvc's own tests and benchmarks).

``temporary_postgres_database`` creates a uniquely named database on the server of an admin
URL and drops it afterwards, so test sessions never share or clobber state.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import sqlalchemy as sa

from ._orm import Base
from ._store import Store


@contextmanager
def temporary_postgres_database(admin_url: str, *, prefix: str = "evalsvc_test") -> Iterator[str]:
    """Yield the URL of a new, empty PostgreSQL database; drop it on exit."""
    url = sa.make_url(admin_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                # WITH (FORCE): worker subprocesses killed by a test may leave sessions behind.
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()


@contextmanager
def temporary_postgres_schema(database_url: str, *, prefix: str = "evalsvc_test") -> Iterator[str]:
    """Yield a URL whose connections use a new, empty schema (``search_path``); drop it on exit.

    Much cheaper than a database per test (DROP DATABASE forces a checkpoint).
    """
    url = sa.make_url(database_url)
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA "{name}"')
        try:
            scoped = url.update_query_dict({"options": f"-csearch_path={name}"})
            yield scoped.render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    finally:
        admin.dispose()


def clear_all_tables(store: Store) -> None:
    """Delete every row of every evalsvc table (keeps the schema and alembic_version)."""
    with store._db.session() as session:
        if store.dialect == "postgresql":
            names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
            session.execute(sa.text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))
        else:
            for table in reversed(Base.metadata.sorted_tables):
                session.execute(table.delete())
