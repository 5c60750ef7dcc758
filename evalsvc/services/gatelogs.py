"""Gate evaluations that already ran: ``evalsvc gate-logs`` and ``POST /api/v1/gate-logs``.

Contract: :func:`gate_logs` (the CLI, in-process) takes two logs (baseline, candidate; see
``evalsvc.suites.logs`` for the formats and the reading budgets), pairs their documents by id
per task, and gates every task with the same machinery as ``evalsvc compare``
(``evalsvc.runner.gate_samples``: the paired gate or recovery floor, slices, Holm, the error
budget), then stores the run like any other (its samples, suite and "endpoint" snapshots, gates
and report: it appears in ``runs list`` and the dashboard) and returns the JSON report.

Uploads (REST) are runs like any other: :func:`submit_upload` only checks what is cheap to check
(file names and counts, the format each name implies, a zip's member count, the options) and
stores the files with a queued run (``store.log_uploads``, one transaction); a worker claims the
run and :func:`execute_upload_run` gates it (reading the files back from the database, under the
run's lease, cancellable, with progress in the run's row), then drops the stored files. So the
API never parses or gates a log. A submitter may have ``limits.MAX_PENDING_UPLOADS`` uploads
waiting at once (:class:`UploadsPending`, HTTP 429).

Refused (``UsageError``, exit 2 / HTTP 422, or the run ends ``error`` with that reason when a
worker finds it), before anything is gated: an unreadable log (malformed, not UTF-8, or over a
reading budget), logs of different tasks, logs whose shared document ids hold different
documents (lm-eval ``doc_hash`` / Inspect input / promptfoo test variables), a promptfoo file of
several providers with none named, no document in common, a metric, filter or slice column the
records lack, a gate option out of bounds. Messages name the file as its user knows it (the
path given to the CLI; the upload's own file name, never a server path) and the option as its
user sets it (a CLI flag, or a form field over HTTP). Documents present on one side only (or
errored, in Inspect and promptfoo) are *counted and reported* per task (``details.log_pairs``)
and count against the error budget, as missing samples of a live run do; they are never
dropped silently.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

from evalsvc import limits
from evalsvc.db import IN_PROCESS_PREFIX, PendingUploadsFull, SampleWriter, Store
from evalsvc.domain import (
    EndpointRef,
    Item,
    Provenance,
    RunInfo,
    RunOptions,
    RunSpec,
    RunStatus,
    Sample,
)
from evalsvc.gates import GatePolicyError
from evalsvc.reports import basis_of, build_report
from evalsvc.runner import CancelledRun, gate_samples
from evalsvc.services.runs import UsageError, check_server_limits, gate_limits
from evalsvc.settings import Settings
from evalsvc.suites import GatePolicy, SuiteSpec
from evalsvc.suites.logs import (
    EvalLogSide,
    LogError,
    LoggedTask,
    LogRecord,
    check_upload_name,
    default_metric,
    read_eval_log,
    score_records,
)

__all__ = [
    "UploadsPending",
    "execute_upload_run",
    "for_form",
    "gate_logs",
    "gate_overrides",
    "pair_logs",
    "submit_upload",
]

_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
_T = TypeVar("_T")
_UNSAFE = re.compile(r"[^A-Za-z0-9_.@+-]+")

#: The suite name a queued upload's spec carries until a worker has read its tasks (the report
#: names the tasks; this is no catalog name, so ``POST /runs`` cannot queue one).
UPLOAD_SUITE = "gate-logs"


class UploadsPending(UsageError):
    """The submitter already has ``limits.MAX_PENDING_UPLOADS`` uploads waiting (HTTP 429)."""


# The CLI's flags and the REST form fields that set the same option (N7: a refusal tells each
# user the name they can act on).
_FORM_FIELDS = {
    "--metric": "metric",
    "--slice": "slice",
    "--filter": "filter",
    "--baseline-provider": "baseline_provider",
    "--candidate-provider": "candidate_provider",
    "--margin": "margin",
    "--alpha": "alpha",
    "--recovery-min": "recovery_min",
    "--baseline-floor": "baseline_floor",
    "--max-error-rate": "max_error_rate",
}
_FLAG = re.compile(r"--[a-z][a-z-]*")


def for_form(message: str) -> str:
    """A refusal as an HTTP client reads it: each CLI flag named as its form field (lm-eval's
    own flags, ``--log_samples``, stay as they are)."""
    return _FLAG.sub(
        lambda m: f"the form field {_FORM_FIELDS[m[0]]}" if m[0] in _FORM_FIELDS else m[0], message
    )


def gate_overrides(
    margin: float | None = None,
    alpha: float | None = None,
    recovery_min: float | None = None,
    baseline_floor: float | None = None,
) -> dict[str, float]:
    """The gate options a caller set (CLI flags or REST form fields), unset ones left out, so
    the suite's own policy decides them."""
    given = {"margin": margin, "alpha": alpha, "recovery_min": recovery_min,
             "baseline_floor": baseline_floor}
    return {k: v for k, v in given.items() if v is not None}


def _suite_name(task: str) -> str:
    name = _NAME.sub("_", task).strip("_.-") or "task"
    return name if name[0].isalnum() else f"t{name}"


def _read(
    path: str | Path,
    role: str,
    provider: str | None = None,
    shown: Callable[[Path], str] | None = None,
) -> EvalLogSide:
    where = shown(Path(path)) if shown else str(path)
    try:
        return read_eval_log(path, provider=provider, shown=shown)
    except LogError as exc:
        raise UsageError(f"{role} log: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{role} log: {where}: {exc.strerror or type(exc).__name__}") from None
    except (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # The readers check every field they use; a shape they still miss is the log's fault
        # (a data error, exit 2), never a traceback.
        raise UsageError(
            f"{role} log: {where}: malformed ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def _side_call(role: str, task: str, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``call(*args, **kwargs)`` on one side's records, its refusal a ``UsageError`` naming the
    side (both sides' files often have the same name)."""
    try:
        return call(*args, **kwargs)
    except LogError as exc:
        raise UsageError(f"{role} log: {exc}") from None
    except (RecursionError, ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise UsageError(
            f"{role} log: task {task}: malformed records ({type(exc).__name__}: {str(exc)[:200]})"
        ) from None


def pair_logs(
    base: EvalLogSide,
    cand: EvalLogSide,
    *,
    metric: str | None = None,
    slices: list[str] | None = None,
    filter_name: str | None = None,
) -> list[tuple[str, str, dict[str, LogRecord], dict[str, LogRecord], dict[str, Any]]]:
    """Per task: (task, metric, baseline records, candidate records, notes). Raises
    ``UsageError`` for logs that cannot be paired (see the module docstring)."""
    if set(base.tasks) != set(cand.tasks):
        only_b = sorted(set(base.tasks) - set(cand.tasks))
        only_c = sorted(set(cand.tasks) - set(base.tasks))
        raise UsageError(
            "the logs are of different tasks: "
            + "; ".join(
                part
                for part in (
                    f"only the baseline has {', '.join(only_b)}" if only_b else "",
                    f"only the candidate has {', '.join(only_c)}" if only_c else "",
                )
                if part
            )
        )
    out = []
    for task in sorted(base.tasks):
        m = metric or _side_call("baseline", task, default_metric, base, task)
        kwargs = {"slice_fields": slices or [], "filter_name": filter_name}
        brec, bnotes = _side_call("baseline", task, score_records, base, task, metric=m, **kwargs)
        crec, cnotes = _side_call("candidate", task, score_records, cand, task, metric=m, **kwargs)
        if bnotes.get("filter") != cnotes.get("filter"):
            raise UsageError(
                f"task {task}: the logs were scored with different lm-eval filters "
                f"({bnotes.get('filter')} vs {cnotes.get('filter')}); name one with --filter"
            )
        common = sorted(set(brec) & set(crec))
        if not common:
            raise UsageError(
                f"task {task}: the logs share no document id (baseline {len(brec)}, candidate "
                f"{len(crec)} documents): they are not runs of the same documents"
            )
        differ = [
            k
            for k in common
            if brec[k].fingerprint and crec[k].fingerprint and brec[k].fingerprint != crec[k].fingerprint
        ]
        if differ:
            raise UsageError(
                f"task {task}: {len(differ)} of {len(common)} shared document ids hold different "
                f"documents (first: {', '.join(differ[:5])}); the logs were written from "
                "different data or a different document order, so their scores cannot be paired"
            )
        out.append((task, m, brec, crec, {**bnotes, "base_format": base.format}))
    return out


@dataclass
class _Prepared:
    """Two read logs made into what a run stores: suites, plans, samples, snapshots, spec."""

    suites: list[LoggedTask]
    plans: dict[str, Sequence[Item]]
    samples: list[Sample]
    pair_counts: dict[str, dict[str, Any]]
    refs: list[EndpointRef]
    provs: list[Provenance]
    spec: RunSpec
    items: dict[str, int] = field(default_factory=dict)


def _prepare(
    base: EvalLogSide,
    cand: EvalLogSide,
    *,
    metric: str | None,
    slices: list[str] | None,
    filter_name: str | None,
    gate: dict[str, Any] | None,
    options: RunOptions,
    labels: dict[str, str] | None,
    names: tuple[str, str],
    uploaded: bool,
    urls: tuple[str, str] | None = None,
    checkpoint: Callable[[], None] = lambda: None,
) -> _Prepared:
    paired = pair_logs(base, cand, metric=metric, slices=slices, filter_name=filter_name)
    if uploaded:
        # A worker's job like any run's: the server's item and suite bounds (EVALSVC_MAX_ITEMS
        # documents per task, limits.MAX_SUITES tasks), which the CLI's in-process gate skips.
        check_server_limits(
            "an upload",
            samples_field="documents",
            suite_items={task: len(set(brec) | set(crec)) for task, _, brec, crec, _ in paired},
            suites=len(paired),
            in_process="`evalsvc gate-logs`",
        )
    try:
        policy = GatePolicy(**(gate or {}))
    except ValueError as exc:
        raise UsageError(f"gate options refused: {exc}") from None
    limits_ = gate_limits()
    suites: list[LoggedTask] = []
    plans: dict[str, Sequence[Item]] = {}
    samples: list[Sample] = []
    pair_counts: dict[str, dict[str, Any]] = {}
    items: dict[str, int] = {}
    used_names: set[str] = set()
    for task, m, brec, crec, notes in paired:
        checkpoint()
        scores = [r.score for r in (*brec.values(), *crec.values()) if r.score is not None]
        binary = all(s in (0.0, 1.0) for s in scores)
        name = _suite_name(task)
        while name in used_names:
            name += "_"
        used_names.add(name)
        spec = SuiteSpec(
            name=name,
            kind="logs",
            seed=options.seed or 0,
            params={
                "task": task,
                "metric": m,
                "score_kind": "binary" if binary else "continuous",
                "slices": list(slices or []),
                "filter": notes.get("filter"),
                "format": base.format,
                "files": {
                    "baseline": base.files.get(task, base.source),
                    "candidate": cand.files.get(task, cand.source),
                },
            },
            gate=policy,
        )
        suite = LoggedTask(spec)
        try:
            suite.bind_gate(options, limits=limits_)
        except GatePolicyError as exc:
            raise UsageError(f"gate options refused: {exc}") from None
        suites.append(suite)
        keys = sorted(set(brec) | set(crec), key=_natural)
        if len(keys) > limits.MAX_ITEMS:
            raise UsageError(
                f"task {task}: {len(keys):,} documents; a task is gated up to "
                f"{limits.MAX_ITEMS:,} documents"
            )
        plans[name] = [Item(id=k) for k in keys]
        items[name] = len(keys)
        for role, recs in (("baseline", brec), ("candidate:0", crec)):
            for rec in recs.values():
                samples.append(
                    Sample(
                        suite=name,
                        item_id=rec.key,
                        endpoint=role,
                        output=rec.output,
                        score=None if rec.error else rec.score,
                        error=rec.error,
                        data={"slices": rec.slices, "target": rec.target, "metrics": rec.metrics},
                    )
                )
        only_b = sorted(set(brec) - set(crec), key=_natural)
        only_c = sorted(set(crec) - set(brec), key=_natural)
        errored = sorted(
            (k for k in set(brec) & set(crec) if brec[k].error or crec[k].error), key=_natural
        )
        pair_counts[name] = {
            "task": task,
            "documents": {"baseline": len(brec), "candidate": len(crec)},
            "paired": len(set(brec) & set(crec)) - len(errored),
            "only_baseline": len(only_b),
            "only_candidate": len(only_c),
            "errored": len(errored),
            "examples": {
                "only_baseline": only_b[:5],
                "only_candidate": only_c[:5],
                "errored": errored[:5],
            },
            "metric": m,
            **({"filter": notes["filter"]} if "filter" in notes else {}),
            **({"other_filters": notes["other_filters"][:20]} if "other_filters" in notes else {}),
        }
    refs = [_log_ref(base, names[0], uploaded), _log_ref(cand, names[1], uploaded)]
    if urls is not None:  # an upload: the URLs its queued run was stored with
        refs = [r.model_copy(update={"url": u}) for r, u in zip(refs, urls, strict=True)]
    provs = [_log_provenance(base), _log_provenance(cand)]
    run_spec = RunSpec(
        baseline=refs[0],
        candidates=[refs[1]],
        suites=[s.name for s in suites],
        options=options,
        labels={"source": "gate-logs", "log_format": base.format, **(labels or {})},
    )
    return _Prepared(suites, plans, samples, pair_counts, refs, provs, run_spec, items)


def _gate_and_store(
    store: Store, run_id: str, p: _Prepared, options: RunOptions, worker_id: str | None
) -> dict[str, Any]:
    """Store the snapshots and samples of a prepared pair, gate it, store the gates and the
    report and finish the run (``worker_id``: only while that worker holds its lease)."""
    for suite in p.suites:
        store.save_suite_snapshot(
            run_id,
            name=suite.name,
            kind=suite.kind,
            version=suite.version,
            spec={**suite.spec.model_dump(mode="json"), "resolved_gate": suite.gate.to_dict()},
        )
    for role, ref, prov in zip(("baseline", "candidate:0"), p.refs, p.provs, strict=True):
        store.save_endpoint_snapshot(run_id, role=role, endpoint=ref, provenance=prov)
    writer = SampleWriter(store, run_id)
    for sample in p.samples:
        writer.add(sample)
    writer.flush()
    result = gate_samples(run_id, p.refs[0], [p.refs[1]], p.provs, p.suites, p.plans, p.samples, options)
    for cres in result.candidates:
        for sres in cres.suites:
            sres.details["log_pairs"] = p.pair_counts[sres.suite]
    report = build_report(result)
    report["basis"] = basis_of(report)  # the logs' samples, and what else the verdict rests on
    store.save_gate_results(
        run_id,
        [
            {**s, "candidate_value": s["candidate"], "candidate": c["role"], "candidate_url": c["url"]}
            for c in report["candidates"]
            for s in c["suites"]
        ],
    )
    store.save_report(run_id, report)
    store.finish_run(
        run_id,
        status=RunStatus.completed,
        verdict=result.verdict,
        error=result.error,
        worker_id=worker_id,
    )
    return report


def gate_logs(
    baseline: str | Path,
    candidate: str | Path,
    *,
    store: Store,
    metric: str | None = None,
    slices: list[str] | None = None,
    filter_name: str | None = None,
    gate: dict[str, Any] | None = None,
    options: RunOptions | None = None,
    labels: dict[str, str] | None = None,
    names: tuple[str, str] | None = None,
    providers: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """Pair, gate and store two existing logs in this process; return the JSON report (module
    docstring). The CLI's path; uploads go through :func:`submit_upload` and a worker.

    ``gate`` is the gate policy for every task (``margin``, ``alpha``, ``recovery_min``,
    ``baseline_floor``, ``slice_min_items``: the keys of a suite's ``gate:`` block), bounded by
    the server's limits; ``options`` carries ``max_error_rate`` and ``seed`` (the bootstrap's).
    ``names`` labels the two sides in the report (default: the paths). ``providers`` picks each
    side's provider in a promptfoo results file (one file holding both sides can be given twice).
    """
    options = options or RunOptions()
    base = _read(baseline, "baseline", providers[0])
    cand = _read(candidate, "candidate", providers[1])
    prepared = _prepare(
        base,
        cand,
        metric=metric,
        slices=slices,
        filter_name=filter_name,
        gate=gate,
        options=options,
        labels=labels,
        names=names or (str(baseline), str(candidate)),
        uploaded=False,
    )
    settings = Settings()
    owner = f"{IN_PROCESS_PREFIX}{socket.gethostname()}:{os.getpid()}"
    run = store.create_run(
        prepared.spec,
        status=RunStatus.running,
        lease_owner=owner,
        lease_seconds=settings.lease_seconds,
    )
    try:
        return _gate_and_store(store, run.id, prepared, options, None)
    except BaseException as exc:
        with contextlib.suppress(Exception):
            store.finish_run(
                run.id, status=RunStatus.error, verdict="error", error=f"{type(exc).__name__}: {exc}"
            )
        raise


# ---- uploads (REST): stored by the API, gated by a worker --------------------------------


def _upload_name(raw: str | None, role: str) -> str:
    # Never a path from the client: the base name, with anything unusual replaced.
    name = _UNSAFE.sub("_", Path(raw or "").name).lstrip(".")[:200]
    if not name:
        raise UsageError(f"{role}: a file without a usable name")
    return name


def _label(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{names[0]}+{len(names) - 1}"


def submit_upload(
    store: Store,
    *,
    baseline: Sequence[tuple[str | None, IO[bytes]]],
    candidate: Sequence[tuple[str | None, IO[bytes]]],
    metric: str | None = None,
    slices: list[str] | None = None,
    filter_name: str | None = None,
    gate: dict[str, Any] | None = None,
    max_error_rate: float = 0.05,
    providers: tuple[str | None, str | None] = (None, None),
    submitted_by: str | None = None,
) -> RunInfo:
    """Check what is cheap to check and queue the uploaded logs as a run (module docstring).

    ``baseline``/``candidate``: each side's files as ``(client file name, readable)``; the
    readables are read once, a chunk at a time, into the database. Raises ``UsageError`` (422)
    with a message in the form fields' words, or :class:`UploadsPending` (429).
    """
    files: list[tuple[str, str, IO[bytes]]] = []
    labels: list[str] = []
    for role, given, provider in (
        ("baseline", baseline, providers[0]),
        ("candidate", candidate, providers[1]),
    ):
        if not given:
            raise UsageError(f"no {role} log uploaded")
        if len(given) > limits.MAX_UPLOAD_FILES:
            raise UsageError(
                f"{role}: {len(given)} files; at most {limits.MAX_UPLOAD_FILES} per side"
            )
        names = [_upload_name(raw, role) for raw, _ in given]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise UsageError(f"{role}: two files named {dup!r}")
        try:
            for name, (_, stream) in zip(names, given, strict=True):
                check_upload_name(name, stream, several=len(names) > 1, provider=provider)
                stream.seek(0)
        except LogError as exc:
            raise UsageError(for_form(f"{role} log: {exc}")) from None
        if len(names) > 1 and not any(n.startswith("samples_") for n in names):
            raise UsageError(
                f"{role}: {len(names)} files but no samples_<task>_<timestamp>.jsonl among them; "
                "several files are the files of an lm-eval --output_path directory"
            )
        files += [(role, n, stream) for n, (_, stream) in zip(names, given, strict=True)]
        labels.append(_label(names))
    options = RunOptions(max_error_rate=max_error_rate)
    try:
        policy = GatePolicy(**(gate or {}))
        probe = LoggedTask(SuiteSpec(name="probe", kind="logs", params={"task": "t", "metric": "m"},
                                     gate=policy))
        probe.bind_gate(options, limits=gate_limits())
    except (ValueError, GatePolicyError) as exc:
        raise UsageError(for_form(f"gate options refused: {exc}")) from None
    store.log_uploads.purge_ended()  # ended before this fix dropped files as they end
    pending_full = UploadsPending(
        f"{limits.MAX_PENDING_UPLOADS} uploads of this token are waiting for a worker; "
        "submit more once they have finished (GET /runs/{id})"
    )
    if store.log_uploads.pending(submitted_by) >= limits.MAX_PENDING_UPLOADS:
        raise pending_full  # cheap refusal before reading any file; the store counts again
    nonce = uuid.uuid4().hex[:12]
    refs = [
        EndpointRef(
            url=f"upload:{nonce}/{label}"[: limits.MAX_URL],
            model=f"uploaded log: {label}"[:200],
            name=_NAME.sub("_", label)[:60] or "log",
        )
        for label in labels
    ]
    spec = RunSpec(
        baseline=refs[0],
        candidates=[refs[1]],
        suites=[UPLOAD_SUITE],
        options=options,
        labels={"source": "gate-logs", **({"submitted_by": submitted_by[:200]} if submitted_by else {})},
    )
    params = {
        "metric": metric,
        "slices": list(slices or []),
        "filter": filter_name,
        "gate": dict(gate or {}),
        "providers": list(providers),
        "names": labels,
        "nonce": nonce,
    }
    try:
        return store.log_uploads.create_run(
            spec, files=files, params=params, submitted_by=submitted_by,
            max_pending=limits.MAX_PENDING_UPLOADS,
        )
    except PendingUploadsFull:
        raise pending_full from None


class _TimedOut(Exception):
    pass


def _side_names(root: Path, label: str) -> Callable[[Path], str]:
    """How a stored upload's files are named in messages: by their own names (a side of
    several files, an lm-eval directory, by ``label``); never by the worker's temporary path."""

    def shown(path: Path) -> str:
        if path == root:
            return label
        try:
            return str(path.relative_to(root))
        except ValueError:
            return path.name

    return shown


def execute_upload_run(
    store: Store,
    run: RunInfo,
    *,
    cancel: threading.Event,
    worker_id: str,
) -> None:
    """Gate a claimed upload run (the worker's executor for runs with stored uploads).

    Contract with the worker (``evalsvc.scheduler``): a refused log ends the run ``error`` with
    the reason (in the form fields' words); ``cancel`` is checked between the stages (reading
    each side, each task, the gate) and makes it return without finishing the run; a run that
    takes longer than ``limits.MAX_GATE_LOGS_SECONDS`` ends ``error``. The stored files are
    dropped once the run has ended (kept when it goes back to the queue).
    """
    manifest = store.log_uploads.manifest(run.id)
    if manifest is None:
        store.finish_run(
            run.id, status=RunStatus.error, verdict="error", worker_id=worker_id,
            error="the uploaded logs of this run are gone (deleted, or already gated)",
        )
        return
    params = manifest["params"]
    deadline = time.monotonic() + limits.MAX_GATE_LOGS_SECONDS
    stage = {"stage": ""}

    def progress(text: str, items: dict[str, int] | None = None, done: bool = False) -> None:
        stage["stage"] = text
        counts = items or {}
        with contextlib.suppress(Exception):  # progress is advisory
            store.update_progress(
                run.id,
                {
                    "suites": list(counts),
                    "items": counts,
                    "done": {
                        s: {"baseline": n if done else 0, "candidate:0": n if done else 0}
                        for s, n in counts.items()
                    },
                    "stage": text,
                },
            )

    def checkpoint() -> None:
        if cancel.is_set():
            raise CancelledRun(run.id)
        if time.monotonic() > deadline:
            raise _TimedOut

    def end(error: str) -> None:
        # Text from the logs may reach the message: no NUL (PostgreSQL text), bounded.
        text = error.replace("\x00", "\\x00")[:4000]
        store.finish_run(
            run.id, status=RunStatus.error, verdict="error", error=text, worker_id=worker_id
        )
        store.log_uploads.delete(run.id)

    names = tuple(params.get("names") or ("baseline", "candidate"))
    providers = tuple(params.get("providers") or (None, None))
    options = run.spec.options
    try:
        progress("reading the uploaded logs")
        with tempfile.TemporaryDirectory(prefix="evalsvc-gate-logs-") as tmp:
            written = store.log_uploads.write_files(run.id, Path(tmp))
            sides: list[EvalLogSide] = []
            for i, role in enumerate(("baseline", "candidate")):
                checkpoint()
                paths = [p for r, p in written if r == role]
                root = Path(tmp) / role
                path = paths[0] if len(paths) == 1 else root
                progress(f"reading the {role} log")
                sides.append(_read(path, role, providers[i], _side_names(root, str(names[i]))))
        checkpoint()
        progress("pairing the documents")
        prepared = _prepare(
            sides[0],
            sides[1],
            metric=params.get("metric"),
            slices=list(params.get("slices") or []),
            filter_name=params.get("filter"),
            gate=params.get("gate") or {},
            options=options,
            labels=dict(run.spec.labels),
            names=(str(names[0]), str(names[1])),
            uploaded=True,
            urls=(run.spec.baseline.url, run.spec.candidates[0].url),
            checkpoint=checkpoint,
        )
        del sides
        checkpoint()
        progress("gating", prepared.items)
        _gate_and_store(store, run.id, prepared, options, worker_id)
        progress("done", prepared.items, done=True)
        store.log_uploads.delete(run.id)
    except UsageError as exc:
        end(for_form(f"uploaded logs refused: {exc}"))
    except _TimedOut:
        end(
            f"gating the uploaded logs took longer than {limits.MAX_GATE_LOGS_SECONDS:.0f} s "
            f"(stopped while {stage['stage']}); upload smaller logs, or gate them with "
            "`evalsvc gate-logs`"
        )
    except CancelledRun:
        current = store.get_run(run.id)
        if current is not None and current.status == RunStatus.cancelled:
            store.log_uploads.delete(run.id)
        # otherwise (worker shutdown, lost lease) the worker settles it; the files stay for
        # the next attempt
    except Exception as exc:
        end(f"{type(exc).__name__}: {str(exc)[:500]}")
        raise


def _natural(key: str) -> tuple[Any, ...]:
    """doc2 before doc10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


def _log_ref(side: EvalLogSide, name: str, uploaded: bool = False) -> EndpointRef:
    source = Path(side.source)
    url = source.resolve().as_uri() if not uploaded and source.exists() else f"upload:{name}"
    label = _NAME.sub("_", Path(name).name)[:60] or "log"
    model = (side.model or f"{side.format} log: {Path(name).name}")[:200]
    return EndpointRef(url=url, model=model, name=label)


def _log_provenance(side: EvalLogSide) -> Provenance:
    return Provenance(
        engine=f"{side.format} log",
        model=side.model,
        capabilities={},
        # extra="allow": where the scores came from (as shown: an upload's own file names)
        log_source=side.source,
        log_files=dict(side.files),
    )
