"""Shared plumbing of the database-backed CLI commands (db, worker, schedules, export).

Contract: a command that needs the database opens it with ``open_store``, which turns an
unreachable database or one not at the migration head into a one-line error and a non-zero
exit (4: infrastructure, 2: configuration), instead of a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, NoReturn, TypeVar

import typer

from evalsvc.db import StoreError

from ._exit import exit_code
from ._safe import plain

if TYPE_CHECKING:  # the store loads SQLAlchemy: only the commands that open one pay for it
    from evalsvc.db import Store

EXIT_CONFIG = 2

DatabaseUrlOption = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        help="SQLAlchemy URL of the database (default: $EVALSVC_DATABASE_URL or the embedded "
        "SQLite database).",
        show_default=False,
    ),
]


def fail(message: str, code: int) -> NoReturn:
    typer.echo(f"error: {plain(message)}", err=True)  # may quote a stored name or model id
    raise typer.Exit(code)


def fail_store(err: StoreError) -> NoReturn:
    """Exit with the one-line message of a store error and its exit code."""
    fail(str(err).splitlines()[0] if str(err) else type(err).__name__, exit_code(err))


def open_store(database_url: str | None, *, check_head: bool = True) -> Store:
    """Open the store and (by default) refuse a database that is not at the migration head."""
    from evalsvc.db import Store

    try:
        store = Store.from_url(database_url)
    except StoreError as err:  # a malformed URL or a missing driver
        fail_store(err)
    try:
        if check_head:
            store.check_at_head()
    except StoreError as err:
        store.close()
        fail_store(err)
    return store


T = TypeVar("T")


def with_store(database_url: str | None, action: Callable[[Store], T]) -> T:
    """Open the store, run ``action`` on it and close it; a store error exits with its message."""
    store = open_store(database_url)
    try:
        return action(store)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()


def with_store_or_exit(database_url: str | None, action: Callable[[Store], T]) -> T:
    """:func:`with_store`, where the service's refusals (``ValueError``, ``LookupError``) exit
    with their message and code (``_exit.exit_code``: 2) instead of a traceback."""
    try:
        return with_store(database_url, action)
    except (ValueError, LookupError) as err:
        fail(str(err), exit_code(err))


def fmt_time(value: datetime | None) -> str:
    """A timestamp for CLI tables (minutes, UTC as stored), ``-`` when unset."""
    return f"{value:%Y-%m-%d %H:%M}" if value is not None else "-"


def configure_logging(verbose: bool = False) -> None:
    """Log to stderr unless the application already configured logging."""
    if logging.getLogger().handlers:
        return
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    # Alembic logs its migration context at INFO on every head check; not news for a worker.
    logging.getLogger("alembic").setLevel(logging.WARNING)
