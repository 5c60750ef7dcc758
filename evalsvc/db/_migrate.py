"""Alembic, configured in code so that it works from any working directory.

Contract: one migration tree, ``evalsvc/db/migrations`` (package data found through
``importlib.resources``, so a wheel install migrates as well as a checkout); no ``alembic.ini``
is read. ``env.py`` takes the connection from ``config.attributes`` when called
from here, so the caller's engine settings (SQLite pragmas, BEGIN mode) apply to migrations.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory


def _migrations_dir() -> Path:
    root = resources.files("evalsvc.db") / "migrations"
    # Alembic loads env.py and the revisions by file path: the tree must be on the file system
    # (any wheel or editable install; a zipapp is not supported).
    if not isinstance(root, Path):
        raise RuntimeError(f"evalsvc's migrations are not on the file system: {root}")
    return root


MIGRATIONS_DIR = _migrations_dir()


def alembic_config(connection: sa.Connection | None = None) -> Config:
    """An Alembic Config pointing at the migration tree, optionally bound to ``connection``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    """The single head of the tree (a test guarantees there is only one)."""
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migration tree has {len(heads)} heads: {heads}")
    return heads[0]


def is_known(revision: str) -> bool:
    """Whether ``revision`` is in this code's migration tree (a newer evalsvc's is not)."""
    try:
        return ScriptDirectory.from_config(alembic_config()).get_revision(revision) is not None
    except Exception:  # noqa: BLE001 - alembic raises several kinds for an unknown id
        return False


def current_revision(connection: sa.Connection) -> str | None:
    """The revision recorded in the database, or None for a database never migrated."""
    return MigrationContext.configure(connection).get_current_revision()


def upgrade(connection: sa.Connection, revision: str = "head") -> None:
    command.upgrade(alembic_config(connection), revision)


def downgrade(connection: sa.Connection, revision: str) -> None:
    command.downgrade(alembic_config(connection), revision)


def new_revision(connection: sa.Connection, message: str, *, autogenerate: bool) -> str:
    """Write a new revision file (developer command); returns its path."""
    script = command.revision(
        alembic_config(connection), message=message, autogenerate=autogenerate
    )
    scripts = script if isinstance(script, list) else [script]
    return ", ".join(s.path for s in scripts if s is not None)
