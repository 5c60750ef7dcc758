"""``evalsvc calibrate ENDPOINT --suite ...``: the endpoint against itself (A/A), stored as its
noise floor (``evalsvc.services.calibration``; docs/cli.md, docs/statistics.md "Noise floor on
file").

Exit codes: 0 the figures are stored, 2 usage/configuration, 4 infrastructure (an endpoint down,
the error budget spent: the run is recorded as error and no floor is stored). With ``--server``
the calibration is queued on an evalsvc server (``POST /api/v1/calibrations``, the REST client
``evalsvc.cli.rest``) and the same figures are printed; its own exits are ``compare --server``'s.
"""

from __future__ import annotations

import json
import signal
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from evalsvc.cli._safe import term

from ._common import err, exit_for, open_store, raise_interrupt
from ._progress import progress_view


def calibrate(
    endpoint: Annotated[
        str, typer.Argument(help="Base URL (http://host:port/v1) or registered endpoint name.")
    ],
    suite: Annotated[
        list[str], typer.Option("--suite", "-s", help="Suite name, set or YAML path (repeatable).")
    ],
    runs: Annotated[
        int,
        typer.Option(
            min=1, max=16,
            help="A/A passes against the baseline pass, all under the same traffic (pooled).",
        ),
    ] = 1,
    samples: Annotated[int | None, typer.Option(min=1, help="Items per suite.")] = None,
    seed: Annotated[int | None, typer.Option(min=0)] = None,
    concurrency: Annotated[int, typer.Option(min=1)] = 8,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Per-request timeout (s).")
    ] = 300.0,
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the stored figures as JSON ('-': stdout).")
    ] = None,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(help="Queue it on an evalsvc server at URL (its workers run it) instead of "
                     "running here; token in $EVALSVC_TOKEN (submit scope)."),
    ] = None,
    wait_timeout: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="With --server: give up (cancel the calibration, exit 4) after this many "
            "seconds without its figures.",
        ),
    ] = None,
) -> None:
    """Run ENDPOINT against itself (A/A) and store its noise floor: per suite, the discordance
    and the batch instability that `plan` and the determinism gate use."""
    from pydantic import ValidationError

    from evalsvc.db import StoreError
    from evalsvc.domain import RunOptions
    from evalsvc.runner import CapabilityError, InfrastructureError
    from evalsvc.services import calibration
    from evalsvc.services import runs as run_service

    try:
        options = RunOptions(
            samples=samples, seed=seed, concurrency=concurrency, request_timeout_s=timeout
        )
    except ValidationError as exc:
        raise exit_for(exc) from exc
    if server:
        from .rest import calibrate_remote

        remote, code = calibrate_remote(server, endpoint, suite, runs, options, wait_timeout)
        if remote is None:
            raise typer.Exit(code)
        _finish(remote, json_out)
        return
    store = open_store(db)
    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        ref = run_service.resolve_endpoint(endpoint, store)
        spec = calibration.calibration_spec(ref, suite, runs=runs, options=options)
        run_service.load_suites(spec)  # usage errors before any request
        err.print(f"calibrating {term(ref.name or ref.url)}: itself as the baseline and "
                  f"{runs} candidate pass{'es' if runs > 1 else ''}", highlight=False)
        # Before: nothing for the minutes a calibration takes (150 s in a CI log).
        labels = {"baseline": "baseline pass",
                  **{f"candidate:{i}": f"pass {i + 2}" for i in range(runs)}}
        with progress_view(err, labels) as view:
            out = calibration.calibrate(ref, suite, store=store, runs=runs, options=options,
                                        progress=view)  # type: ignore[arg-type]
    except (
        run_service.UsageError, ValidationError, CapabilityError, InfrastructureError,
        KeyboardInterrupt, StoreError,
    ) as exc:
        raise exit_for(exc) from exc
    _finish(out, json_out)


def _finish(out: dict[str, Any], json_out: str | None) -> None:
    """Write and print the stored figures (``GET /calibrations/{id}``'s shape); exit 4 when the
    calibration ended without them."""
    if json_out == "-":
        sys.stdout.write(json.dumps(out, indent=2) + "\n")
    elif json_out:
        with open(json_out, "w", encoding="utf-8") as fh:
            json.dump(out, fh, indent=2)
    err.print(_table(out))
    if out["error"]:
        err.print(f"[bold magenta]error:[/] {term(out['error'])}")
        raise typer.Exit(4)
    where = term(out.get("identity") or out["endpoint"])
    if out.get("adopted", True):
        err.print(
            f"calibration {out['id']} stored for fingerprint {out['fingerprint']} on {where}: "
            "`evalsvc plan --endpoint` and the gates of runs whose baseline is this endpoint "
            "with this fingerprint use it",
            highlight=False,
        )
    else:
        err.print(
            f"calibration {out['id']} stored for fingerprint {out['fingerprint']} on {where}, "
            "not adopted: gates and `plan` use it once an admin adopts it (POST "
            f"/api/v1/calibrations/{out['id']}/adopt, or `evalsvc calibrations adopt "
            f"{out['id']}` on the server's database)",
            highlight=False,
        )


def _table(out: dict[str, Any]) -> Table:
    table = Table(title=f"noise floor of {term(out['endpoint'])} (calibration {term(out['id'])})")
    for col in ("suite", "discordance", "pairs", "batch instability", "prompts varying"):
        table.add_column(col)

    def pct(x: Any) -> str:
        return "—" if x is None else f"{100 * float(x):.1f}%"

    for name, f in out["floors"].items():
        table.add_row(
            term(name), pct(f["discordance"]), str(f["pairs"]), pct(f["instability"]),
            pct(f["varying_clusters"]) + (f" of {f['clusters']}" if f["clusters"] else ""),
        )
    return table
