"""``evalsvc runs list|show|cancel|report|gate|resume``: the stored runs, from the CLI.

Contract: every command reads through ``evalsvc.services.history`` (the same functions the REST
routes call) and takes a run id or a unique id prefix (8+ characters, as ``runs list`` prints).
Exit codes follow the project table: an unknown or ambiguous id or a run that cannot do what was
asked is 2, an unreachable database 4; ``runs gate`` exits with the run's gate code (0 pass,
1 fail, 3 inconclusive, 4 error, 5 non-comparable), so a pipeline can gate on a run submitted earlier.
"""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from rich.console import Console
from rich.table import Table

from evalsvc.db import StoreError
from evalsvc.domain import EXIT_CODES, RunInfo, RunStatus, RunVerdict
from evalsvc.endpoints import redact_urls_in
from evalsvc.services import history

from ._dbcommon import EXIT_CONFIG, DatabaseUrlOption, fail, fail_store, fmt_time, open_store
from ._exit import exit_code
from ._policy import MaxReuseAgeOption, NoAllowedDifferencesOption, parse_age, refusals
from ._report import JsonOutOption, JunitOption, MarkdownOption
from ._safe import plain, term

if TYPE_CHECKING:
    from evalsvc.db import Store

app = typer.Typer(no_args_is_help=True)
_out = Console(highlight=False, soft_wrap=True)

RunArg = Annotated[str, typer.Argument(help="Run id or a unique prefix of it (8+ characters).")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class ReportFormat(StrEnum):
    json = "json"
    junit = "junit"
    markdown = "markdown"


def _with_run(database_url: str | None, ref: str) -> tuple[Store, RunInfo]:
    store = open_store(database_url)
    try:
        return store, history.find_run(store, ref)
    except (history.RunNotFound, history.AmbiguousRunId) as err:
        store.close()
        fail(str(err), exit_code(err))
    except StoreError as err:
        store.close()
        fail_store(err)


def _summary(run: RunInfo) -> dict[str, Any]:
    spec = run.spec
    return {
        "id": run.id,
        "status": run.status.value,
        "verdict": run.verdict,
        "baseline": spec.baseline.name or spec.baseline.url,
        "candidates": [c.name or c.url for c in spec.candidates],
        "suites": list(spec.suites),
        "labels": dict(spec.labels),
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "error": run.error,
    }


def _emit_json(value: Any) -> None:
    # Stored URLs and errors may predate the userinfo rule: never print their credentials.
    sys.stdout.write(json.dumps(redact_urls_in(value), indent=2, default=str) + "\n")


@app.command("list")
def list_runs(
    status: Annotated[RunStatus | None, typer.Option(help="Only runs in this status.")] = None,
    verdict: Annotated[
        str | None, typer.Option(help="Only runs with this verdict (pass, fail, ...).")
    ] = None,
    endpoint: Annotated[
        str | None, typer.Option(help="Only runs using this base URL (baseline or candidate).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many, newest first.")] = 20,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Runs, newest first."""
    if verdict is not None and verdict not in get_args(RunVerdict):
        fail(f"--verdict must be pass, fail, inconclusive, error or non-comparable, not "
             f"{verdict!r}", EXIT_CONFIG)
    store = open_store(database_url)
    try:
        runs = store.list_runs(limit=limit, status=status, verdict=verdict, endpoint_url=endpoint)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if as_json:
        _emit_json([_summary(r) for r in runs])
        return
    table = Table(show_lines=False)
    # The id, time, status and verdict whole at any width (an 80-column terminal read
    # "complete", "inconclus"); the endpoints and suites wrap in what is left.
    for col in ("id", "created", "status", "verdict"):
        table.add_column(col, no_wrap=True)
    for col in ("baseline", "candidates", "suites"):
        table.add_column(col, overflow="fold")
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    def label(ref: Any) -> str:
        # The reports' and dashboard's name for an endpoint (name, else host:port); --json and
        # `runs show` keep the URL.
        return endpoint_label({"name": ref.name, "url": redact_url(ref.url), "model": ref.model})

    for r in runs:
        s = redact_urls_in(_summary(r))
        # Names, URLs and suites come from submitters: escaped for rich (markup, controls).
        table.add_row(
            r.id[: history.MIN_PREFIX],
            fmt_time(r.created_at),
            s["status"],
            term(s["verdict"] or "-"),
            term(label(r.spec.baseline)),
            term(", ".join(label(c) for c in r.spec.candidates)),
            term(", ".join(s["suites"])),
        )
    _out.print(table)


@app.command("show")
def show(run: RunArg, as_json: JsonOption = False, database_url: DatabaseUrlOption = None) -> None:
    """Status, verdict, progress and error of one run."""
    store, info = _with_run(database_url, run)
    store.close()
    if as_json:
        _emit_json(info.model_dump(mode="json", exclude={"lease_owner", "lease_expires_at"}))
        return
    s = redact_urls_in(_summary(info))
    for key in ("id", "status", "verdict", "baseline", "candidates", "suites", "labels"):
        value = s[key]
        if isinstance(value, list):
            value = ", ".join(value)
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        _out.print(f"{key:>11}: {term(value) if value is not None else '-'}")
    _out.print(f"{'created':>11}: {fmt_time(info.created_at)}")
    _out.print(f"{'finished':>11}: {fmt_time(info.finished_at)}")
    for p in history.progress(info):
        planned = "?" if p.planned is None else p.planned
        side = "baseline" if p.role == "baseline" else "candidate"
        _out.print(f"{'progress':>11}: {term(p.suite)} · {side} {term(p.label)}: "
                   f"{p.done}/{planned}")
    if info.error:
        _out.print(f"{'error':>11}: {term(s['error'])}")


@app.command("cancel")
def cancel(
    run: RunArg, as_json: JsonOption = False, database_url: DatabaseUrlOption = None
) -> None:
    """Cancel a queued or running run (its worker stops at the next heartbeat)."""
    store, info = _with_run(database_url, run)
    try:
        cancelled = history.cancel(store, info)
    except history.RunAlreadyFinished as err:
        fail(str(err), exit_code(err))
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if as_json:
        _emit_json(_summary(cancelled))
    else:
        typer.echo(f"cancelled run {cancelled.id}", err=True)


@app.command("report")
def report(
    run: RunArg,
    format: Annotated[ReportFormat, typer.Option("--format", "-f")] = ReportFormat.json,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write to this file instead of stdout.")
    ] = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """The run's report as JSON (the contract), JUnit XML or Markdown."""
    from evalsvc.reports import to_junit, to_markdown

    store, info = _with_run(database_url, run)
    try:
        stored = store.get_report(info.id)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    if stored is None:
        ended = f": {info.error}" if info.error else ""
        fail(f"run {info.id} is {info.status.value}; no report{ended}", EXIT_CONFIG)
    text = {
        ReportFormat.json: lambda: json.dumps(redact_urls_in(stored), indent=2) + "\n",
        ReportFormat.junit: lambda: to_junit(stored),
        ReportFormat.markdown: lambda: to_markdown(stored),
    }[format]()
    if out is None:
        sys.stdout.write(text)
    else:
        out.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {format.value} report of run {info.id} to {out}", err=True)


@app.command("gate")
def gate(
    run: RunArg,
    as_json: JsonOption = False,
    database_url: DatabaseUrlOption = None,
    max_reuse_age: MaxReuseAgeOption = None,
    no_allowed_differences: NoAllowedDifferencesOption = False,
) -> None:
    """Print the run's verdict and exit with its code (0 pass, 1 fail, 3 inconclusive, 4 error,
    5 non-comparable); a pass whose basis the policy options refuse exits 1."""
    try:
        parse_age(max_reuse_age)
    except typer.BadParameter as exc:
        fail(f"--max-reuse-age: {exc}", EXIT_CONFIG)
    store, info = _with_run(database_url, run)
    try:
        report = store.get_report(info.id)
    except StoreError as err:
        fail_store(err)
    finally:
        store.close()
    try:
        g = history.gate(info, report)
    except history.RunNotFinished as err:
        fail(str(err), exit_code(err))
    why_not = refusals(report, max_reuse_age, no_allowed_differences)
    code = EXIT_CODES["fail"] if why_not and g.exit_code == 0 else g.exit_code
    if as_json:
        _emit_json(
            {
                "run_id": g.run_id,
                "status": g.status.value,
                "verdict": g.verdict,
                "exit_code": code,
                "reasons": list(g.reasons),
                "basis": g.basis,
                "refused_by_policy": why_not,
            }
        )
    else:
        typer.echo(f"run {g.run_id}: {g.verdict} (exit {g.exit_code})", err=True)
        # The same reasons `compare` prints under its table (the report's run-level reasons).
        for r in g.reasons:
            name = r.get("candidate_label") or r.get("candidate")
            who = f"{name} · " if name else ""
            where = f"{r['suite']} · " if r.get("suite") else ""
            typer.echo(f"  - {plain(who + where)}{plain(r['code'])}: {plain(r['message'])}",
                       err=True)
        from evalsvc.reports import basis_lines

        for line in basis_lines(g.basis or {}):
            typer.echo(f"  basis: {plain(line)}", err=True)
        for line in why_not:
            typer.echo(f"  refused by policy: {plain(line)}", err=True)
        if code != g.exit_code:
            typer.echo(f"run {g.run_id}: {g.verdict}, refused by policy (exit {code})", err=True)
    raise typer.Exit(code)


@app.command("resume")
def resume(
    run: RunArg,
    json_out: JsonOutOption = None,
    junit: JunitOption = None,
    markdown: MarkdownOption = None,
    database_url: DatabaseUrlOption = None,
) -> None:
    """Resume a finished run in this process: send again only what errored or never ran (a
    suite that ended in error, an errored request), keep every sample stored without error, and
    gate the run anew. Exits with the new verdict's code (0 pass, 1 fail, 3 inconclusive,
    4 error, 5 non-comparable); 2 for a run that is queued or running."""
    import signal

    from evalsvc.runner import CapabilityError, InfrastructureError
    from evalsvc.services import runs as run_service

    from ._common import describe, die, err, raise_interrupt
    from ._progress import progress_view
    from ._report import print_headlines, print_verdict, verdict_table, write_outputs

    store, info = _with_run(database_url, run)
    signal.signal(signal.SIGTERM, raise_interrupt)  # recorded as error, as `compare` does
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    def label(ref: Any) -> str:  # the reports' label, as `compare` names its bars
        return endpoint_label({"name": ref.name, "url": redact_url(ref.url), "model": ref.model})

    labels = {"baseline": f"baseline {label(info.spec.baseline)}"}
    labels.update({f"candidate:{i}": f"candidate {label(c)}"
                   for i, c in enumerate(info.spec.candidates)})
    try:
        with progress_view(err, labels) as bars:
            report = run_service.resume(info.id, store=store, progress=bars)  # type: ignore[arg-type]
    except (run_service.UsageError, CapabilityError, InfrastructureError, KeyboardInterrupt,
            StoreError) as exc:
        raise die(describe(exc), exit_code(exc)) from exc
    finally:
        store.close()
    write_outputs(report, json_out, junit, markdown)
    err.print(verdict_table(report))
    print_headlines(report)
    if report.get("error"):
        err.print(f"[bold magenta]error:[/] {term(report['error'])}")
    print_verdict(report["verdict"], report["run_id"])
    raise typer.Exit(run_service.exit_code(report["verdict"]))
