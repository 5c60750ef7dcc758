"""``evalsvc calibrations``: stored noise-floor calibrations (list, show, adopt).

A calibration (``evalsvc calibrate``, ``POST /api/v1/calibrations``) is used by gates and
``plan --endpoint`` only once adopted (``evalsvc.services.calibration``; docs/cli.md,
"`evalsvc calibrate`"): an in-process ``evalsvc calibrate`` and an admin token's are adopted at
once; ``adopt ID`` (the local operator, who owns the database) adopts one a ``submit`` token
queued. Exit 0 done, 2 an unknown calibration or one that cannot be adopted, 4 a database error.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._dbcommon import DatabaseUrlOption, with_store_or_exit
from ._safe import term

app = typer.Typer(name="calibrations", help="Noise-floor calibrations: list, show, adopt.",
                  no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _call(database_url: str | None, action: Any) -> Any:
    return with_store_or_exit(database_url, action)


@app.command("list")
def list_(
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many.")] = 50,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Completed calibrations, newest first: the endpoint they belong to and who adopted them."""
    from evalsvc.services import calibration

    rows = _call(database_url, lambda s: calibration.list_calibrations(s, limit=limit))
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    table = Table("id", "endpoint", "fingerprint", "suites", "submitted by", "adopted by",
                  "finished")
    for c in rows:
        table.add_row(c["id"], term(c["identity"] or c["endpoint"] or "-"), c["fingerprint"],
                      term(", ".join(c["suites"])), term(c["submitted_by"] or "local"),
                      term(c["adopted_by"]) if c["adopted"] else "not adopted",
                      c["finished_at"] or "-")
    Console().print(table)


@app.command()
def show(
    calibration_id: Annotated[str, typer.Argument(
        metavar="ID", help="A calibration id (evalsvc calibrations list).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """One calibration as JSON (as ``GET /api/v1/calibrations/{id}``)."""
    from evalsvc.services import calibration

    typer.echo(json.dumps(_call(database_url, lambda s: calibration.get(s, calibration_id)),
                          indent=2, default=str))


@app.command()
def adopt(
    calibration_id: Annotated[str, typer.Argument(
        metavar="ID", help="A calibration id (evalsvc calibrations list).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Adopt a calibration: its noise floor is attached to the gates of runs on its endpoint
    (same identity and fingerprint) and sizes `plan --endpoint`."""
    from evalsvc.services import calibration

    out = _call(database_url, lambda s: calibration.adopt(
        s, calibration_id, by=calibration.LOCAL_OPERATOR))
    typer.echo(f"calibration {out['id']} adopted (by {term(out['adopted_by'] or '-')}): gates "
               f"and plan of {term(out['identity'] or out['endpoint'])} use its floors", err=True)
