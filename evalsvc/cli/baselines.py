"""``evalsvc baselines``: blessed baselines (bless, list, show, revoke).

``bless RUN [RUN2 RUN3]`` marks a completed run's baseline samples as the reference later runs
with the same baseline fingerprint reuse instead of sending those items again
(``evalsvc.services.baselines``; docs/cli.md, "Blessed baselines"). Several runs (at least
three) also measure the baseline's noise floor between runs; the first run's samples are the
ones reused. Exit 0 done, 2 a blessing that cannot be made (with the fix) or an unknown run or
blessing, 4 a database error.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._dbcommon import DatabaseUrlOption, fmt_time, with_store_or_exit
from ._safe import term

app = typer.Typer(name="baselines", help="Blessed baselines: bless, list, show, revoke.",
                  no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _call(database_url: str | None, action: Any) -> Any:
    return with_store_or_exit(database_url, action)


def _floor(noise: dict[str, Any] | None) -> str:
    if not noise or noise.get("sd") is None:
        return "-"
    return f"SD {noise['sd']:.4f}, discordance {noise['discordance']:.3f} ({noise['runs']} runs)"


@app.command()
def bless(
    runs: Annotated[list[str], typer.Argument(
        help="Completed run(s): one, or at least three of the same baseline and suites (the "
        "first's samples are reused, all of them measure the noise floor).")],
    suite: Annotated[list[str] | None, typer.Option(
        "--suite", help="Bless only this suite of the run(s); repeatable. Default: every suite "
        "whose baseline can be reused (determinism and speed always run both sides).")] = None,
    note: Annotated[str | None, typer.Option(help="Why this baseline is the reference.")] = None,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Bless a finished run's baseline samples as the reference later runs reuse."""
    from evalsvc.services import baselines

    made = _call(database_url, lambda s: [baselines.view(b) for b in baselines.bless(
        s, runs, suites=suite, note=note)])
    if as_json:
        typer.echo(json.dumps(made, indent=2, default=str))
        return
    for b in made:
        typer.echo(f"blessed {b['id']}: {term(b['suite'])} of run {b['run_id']} "
                   f"({b['items']} items; noise floor {_floor(b.get('noise'))})", err=True)


@app.command("list")
def list_(
    suite: Annotated[str | None, typer.Option(help="Only this suite's blessings.")] = None,
    revoked: Annotated[bool, typer.Option("--revoked", help="Include revoked ones.")] = False,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Blessed baselines, newest first, with their age (stale past EVALSVC_BASELINE_MAX_AGE)."""
    from evalsvc.reports import human_age
    from evalsvc.services import baselines

    rows = _call(database_url, lambda s: [baselines.view(b) for b in s.blessed.list_all(
        include_revoked=revoked, suite=suite)])
    if as_json:
        typer.echo(json.dumps(rows, indent=2, default=str))
        return
    table = Table("id", "suite", "baseline", "run", "runs", "items", "age", "noise floor", "state")
    for b in rows:
        state = "revoked" if b["revoked_at"] else ("stale" if b["stale"] else "in use")
        table.add_row(b["id"], term(b["suite"]), term(b.get("endpoint") or b["endpoint_url"]),
                      b["run_id"],
                      str(len(b["run_ids"])), str(b["items"]), human_age(b["age_s"]),
                      _floor(b.get("noise")), state)
    Console().print(table)


@app.command()
def show(
    blessing: Annotated[str, typer.Argument(help="A blessing id (evalsvc baselines list).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """One blessing as JSON: its key (what it is reused for), runs and noise floor."""
    from evalsvc.services import baselines

    found = _call(database_url, lambda s: baselines.view(baselines.get(s, blessing)))
    typer.echo(json.dumps(found, indent=2, default=str))


@app.command()
def revoke(
    blessing: Annotated[str, typer.Argument(help="A blessing id (evalsvc baselines list).")],
    database_url: DatabaseUrlOption = None,
) -> None:
    """Stop reusing a blessing (kept, so reports that reused it still resolve)."""
    from evalsvc.services import baselines

    found = _call(database_url, lambda s: baselines.revoke(s, blessing))
    typer.echo(f"revoked {found['id']} ({term(found['suite'])}) at {fmt_time(found['revoked_at'])}",
               err=True)
