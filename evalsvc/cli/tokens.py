"""``evalsvc tokens``: bearer tokens of the REST API (create, list, revoke).

A token is printed once, on stdout, when it is created; only its hash is stored. Scopes:
``read`` (GETs), ``submit`` (queue and cancel runs, implies read), ``admin`` (endpoint and
schedule writes, implies submit).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from evalsvc.db import StoreError

from ._dbcommon import (
    EXIT_CONFIG,
    DatabaseUrlOption,
    fail,
    fail_store,
    fmt_time,
    open_store,
    with_store,
)
from ._exit import exit_code
from ._safe import term

app = typer.Typer(name="tokens", help="Bearer tokens of the REST API.", no_args_is_help=True)


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="Unique token name (who or what uses it).")],
    scope: Annotated[
        list[str],
        # The names are the store's API_SCOPES, spelled out so that --help loads no database.
        typer.Option(help="Scope (admin, read, submit); repeatable."),
    ],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Create a token and print it once (stdout); store only its hash."""
    from evalsvc.services import tokens as token_service
    from evalsvc.services.tokens import API_SCOPES

    unknown = token_service.unknown_scopes(scope)
    if unknown:
        fail(f"unknown scope(s) {unknown}; choose from {sorted(API_SCOPES)}", EXIT_CONFIG)
    store = open_store(database_url)
    try:
        token, info = token_service.create(store, name=name, scopes=scope)
    except ValueError as err:  # duplicate name (Conflict), empty scopes
        fail(str(err), exit_code(err))
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    typer.echo(f"token {info.name} ({', '.join(info.scopes)}); shown only now:", err=True)
    typer.echo(token)


@app.command("list")
def list_(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """List tokens (names, scopes, last use; never the tokens themselves)."""
    from evalsvc.services import tokens as token_service

    store = open_store(database_url)
    try:
        tokens = token_service.list_tokens(store)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if as_json:
        typer.echo(json.dumps([t.model_dump() for t in tokens], default=str, indent=2))
        return
    table = Table("name", "scopes", "created", "last used", "revoked")
    for t in tokens:
        table.add_row(
            term(t.name),
            term(", ".join(t.scopes)),
            fmt_time(t.created_at),
            fmt_time(t.last_used_at),
            fmt_time(t.revoked_at),
        )
    Console().print(table)


@app.command()
def revoke(
    name: Annotated[str, typer.Argument(help="Token name.")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Revoke a token: requests with it get 401 from now on."""
    from evalsvc.services import tokens as token_service

    revoked = with_store(database_url, lambda store: token_service.revoke(store, name))
    if not revoked:
        fail(f"no active token named {name!r}", EXIT_CONFIG)  # an unknown name: exit 2
    typer.echo(f"revoked token {name}", err=True)


if __name__ == "__main__":
    app()
