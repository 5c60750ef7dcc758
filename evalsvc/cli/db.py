"""``evalsvc db``: schema migrations (upgrade, downgrade, current, revision)."""

from __future__ import annotations

from typing import Annotated

import typer

from evalsvc.db import StoreError

from ._dbcommon import DatabaseUrlOption, fail_store, open_store

app = typer.Typer(name="db", help="Database schema migrations.", no_args_is_help=True)


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    database_url: DatabaseUrlOption = None,
) -> None:
    """Migrate the database schema to REVISION (default: the latest)."""
    store = open_store(database_url, check_head=False)
    try:
        before = store.current_revision()
        store.upgrade(revision)
        after = store.current_revision()
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(f"{store.display_url}: {before or 'empty'} -> {after}")


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base' drops everything).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Migrate the database schema down to REVISION."""
    store = open_store(database_url, check_head=False)
    try:
        store.downgrade(revision)
        after = store.current_revision()
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(f"{store.display_url}: now at {after or 'base (empty)'}")


@app.command()
def current(database_url: DatabaseUrlOption = None) -> None:
    """Show the database's revision and the head; exit 1 when it is behind, 2 when it is
    newer than this evalsvc."""
    store = open_store(database_url, check_head=False)
    try:
        revision, head = store.current_revision(), store.head_revision()
        store.check_known_revision()  # a database migrated by a newer evalsvc: exit 2
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    state = "up to date" if revision == head else "behind: run `evalsvc db upgrade`"
    typer.echo(f"{store.display_url}: at {revision or 'nothing (empty)'}, head {head} ({state})")
    if revision != head:
        raise typer.Exit(1)


@app.command(hidden=True)
def revision(
    message: Annotated[str, typer.Option("-m", "--message", help="Revision message.")],
    autogenerate: Annotated[bool, typer.Option(help="Diff the ORM against the database.")] = True,
    database_url: DatabaseUrlOption = None,
) -> None:
    """(Developers) write a new migration under evalsvc/db/migrations/versions."""
    store = open_store(database_url, check_head=False)
    try:
        path = store.new_revision(message, autogenerate=autogenerate)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(path)


if __name__ == "__main__":
    app()
