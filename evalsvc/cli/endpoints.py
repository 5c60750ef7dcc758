"""The endpoint registry commands: ``evalsvc endpoints add|list|remove`` (names usable in
``compare``).

Contract (docs/cli.md): a taken name is refused unless ``--replace`` (exit 2); a bad name, URL
or key variable is a usage error (exit 2); the database's errors exit 2 or 4
(``_exit.exit_code``). URLs are shown without credentials.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from evalsvc.cli._safe import term

from ._common import die, err, exit_for, open_store, store_errors
from ._exit import exit_code

app = typer.Typer(help="The endpoint registry (names usable in `compare`).", no_args_is_help=True)


@app.command("add")
def endpoints_add(
    name: str,
    url: str,
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: discovered).")
    ] = None,
    api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable that holds the API key (EVALSVC_ENDPOINT_KEY_*)."),
    ] = None,
    tokenizer: Annotated[
        str | None,
        typer.Option(
            help="The model's tokenizer.json (or its checkpoint directory), for an engine "
            "without a tokenize route: needle and longctx count tokens with it."
        ),
    ] = None,
    replace: Annotated[
        bool, typer.Option("--replace", help="Replace the endpoint if NAME is taken.")
    ] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """Register an endpoint under NAME (a taken name is refused unless --replace)."""
    from evalsvc.db import Conflict
    from evalsvc.endpoints import EgressPolicy, EgressRefused, redact_url
    from evalsvc.services import registry
    from evalsvc.services.runs import UsageError

    store = open_store(db)
    with store_errors():
        try:
            ref = registry.register_endpoint(
                store,
                name=name,
                url=url,
                model=model,
                api_key_env=api_key_env,
                tokenizer=tokenizer,
                replace=replace,
            )
        except (UsageError, Conflict) as exc:
            hint = " (use --replace to change it)" if isinstance(exc, Conflict) else ""
            raise die(f"{exc}{hint}", exit_code(exc)) from exc
    try:
        EgressPolicy.from_settings().check_key_env(api_key_env)
    except (EgressRefused, ValueError) as exc:
        err.print(
            f"warning: {exc}. Only in-process `evalsvc compare` will send it; workers refuse "
            "the endpoint's runs.",
            markup=False,
        )
    err.print(f"registered {term(ref.name)} → {term(redact_url(ref.url))}")


@app.command("list")
def endpoints_list(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """List registered endpoints."""
    from evalsvc.endpoints import redact_url

    with store_errors():
        refs = open_store(db).list_endpoints()
    # egress: registrations older than the userinfo rule never show their credentials
    refs = [r.model_copy(update={"url": redact_url(r.url)}) for r in refs]
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in refs], indent=2) + "\n")
        return
    table = Table(title="endpoints")
    for col in ("name", "url", "model", "api key env", "tokenizer"):
        table.add_column(col)
    for r in refs:
        table.add_row(
            *(term(v or "") for v in (r.name, r.url, r.model, r.api_key_env, r.tokenizer))
        )
    Console().print(table)


@app.command("remove")
def endpoints_remove(
    name: str,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """Remove a registered endpoint."""
    from evalsvc.services import registry

    try:
        with store_errors():
            registry.remove_endpoint(open_store(db), name)
    except registry.NotFound as exc:
        raise exit_for(exc) from exc
