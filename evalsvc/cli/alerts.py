"""``evalsvc alerts``: what finished runs raised (list, ack); ``evalsvc.services.alerts``.

Alerts are raised by the process that finished the run (``compare`` or a worker) and delivered
to ``EVALSVC_ALERT_WEBHOOKS``; this command only reads and acknowledges them.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from ._dbcommon import DatabaseUrlOption, fail, fmt_time, with_store
from ._exit import exit_code
from ._safe import term

app = typer.Typer(name="alerts", help="Alerts raised by finished runs: list, ack.",
                  no_args_is_help=True)


@app.command("list")
def list_(
    status: Annotated[str | None, typer.Option(help="open or acknowledged (default: both).")] = None,
    kind: Annotated[str | None, typer.Option(
        help="verdict_change, margin_trend, error_streak or stale_baseline.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500, help="At most this many, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """List alerts, newest first."""
    from evalsvc.services import alerts

    try:
        found = with_store(database_url, lambda store: alerts.list_alerts(
            store, status=status, kind=kind, limit=limit))
    except alerts.AlertConfigError as err:
        fail(str(err), exit_code(err))
    if as_json:
        typer.echo(json.dumps(found, default=str, indent=2))
        return
    table = Table("raised (UTC)", "severity", "kind", "status", "message", "run", "delivery", "id")
    for a in found:
        # Messages quote endpoint names and suite names: user-provided text, escaped for rich.
        table.add_row(fmt_time(a["created_at"]), a["severity"], a["kind"], a["status"],
                      term(a["message"]), (a["run_id"] or "-")[:8], a["delivery"], a["id"])
    Console().print(table)
    if not found:
        typer.echo("no alerts", err=True)


@app.command("ack")
def ack(
    alert_id: Annotated[str, typer.Argument(help="The alert's id (evalsvc alerts list).")],
    by: Annotated[str | None, typer.Option(help="Who acknowledges it (recorded).")] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Acknowledge an open alert (it stays listed; /metrics stops counting it as open)."""
    from evalsvc.services import alerts

    try:
        done = with_store(database_url, lambda store: alerts.acknowledge(store, alert_id, by=by))
    except (alerts.AlertNotFound, alerts.AlertNotOpen) as err:
        fail(f"{err} (list them: evalsvc alerts list --status open)", exit_code(err))
    typer.echo(f"acknowledged alert {done['id']}")
