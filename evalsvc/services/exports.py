"""A stored run, exported to where teams already look: MLflow tracking and Every Eval Ever.

Contract:
- :func:`export_mlflow` logs one MLflow run per (evalsvc run, candidate) to a tracking URI: the
  run's parameters (endpoints, suites with their seeds and versions, options, evalsvc version),
  per suite the gated metric on each side, Δ, the interval's bounds, p, margin, n and the verdict
  as its exit code (``<suite>.verdict_code``: 0 pass, 1 fail, 3 inconclusive, 4 error,
  5 non-comparable, ``evalsvc.services.runs.exit_code``), the verdicts as tags, and the run's JSON
  report as the artifact ``evalsvc-report.json``. One MLflow run per candidate, not per evalsvc
  run: MLflow compares runs by metric key, so the same candidate's nightly runs line up under
  the same keys (``needle-gpu.delta``), and a run with two candidates does not need the candidate
  in every key; the tag ``evalsvc.run_id`` groups the candidates of one evalsvc run. Exporting
  the same run again logs nothing new (the existing MLflow runs are found by those tags).
- :func:`export_eee` writes each endpoint's samples as Every Eval Ever instance-level records
  (``evalsvc.suites.eee``: the schema is the one the ``every-eval-ever`` package publishes),
  one JSON Lines file per endpoint, which ``evalsvc gate-logs`` reads back.

MLflow is an optional extra (``pip install 'evalsvc[mlflow]'``); without it
:class:`MissingExtra` (a usage error, exit 2) names that fix. Nothing here changes the store.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from evalsvc.db import Store
from evalsvc.domain import RunInfo, prompt_text
from evalsvc.endpoints._urls import redact_text, redact_url
from evalsvc.services.runs import exit_code
from evalsvc.suites import Suite, eee, suite_kinds

__all__ = [
    "EeeFile", "MissingExtra", "MlflowRefused", "MlflowRun", "MlflowUnreachable", "export_eee",
    "export_mlflow",
]

#: The report's artifact name in each MLflow run.
REPORT_ARTIFACT = "evalsvc-report.json"

#: The per-suite numbers of the JSON report (docs/report.md, "Suite result") logged as metrics.
_SUITE_METRICS = ("baseline", "candidate", "delta", "p_value", "margin", "alpha", "n", "n_planned",
                  "n_errors", "mde")


class MissingExtra(ValueError):
    """An optional dependency an export needs is not installed (exit 2, with the pip fix)."""


class MlflowRefused(ValueError):
    """MLflow refused the tracking URI or a value (a usage error, exit 2, with its message:
    e.g. a ``file:`` store, which MLflow 3 keeps only behind ``MLFLOW_ALLOW_FILE_STORE=true``)."""


class MlflowUnreachable(ConnectionError):
    """MLflow failed otherwise (a server that does not answer, a store it cannot open): exit 4."""


# MLflow's error codes (mlflow.protos.databricks_pb2) that mean "what was asked is wrong", not
# "the tracking server failed".
_REFUSALS = frozenset({
    "INVALID_PARAMETER_VALUE", "BAD_REQUEST", "INVALID_STATE", "RESOURCE_ALREADY_EXISTS",
    "RESOURCE_DOES_NOT_EXIST", "PERMISSION_DENIED", "UNAUTHENTICATED",
})


@dataclass(frozen=True)
class MlflowRun:
    """One candidate of the evalsvc run as an MLflow run."""

    candidate: str
    """The candidate's label, as every view names it."""
    mlflow_run_id: str
    experiment_id: str
    created: bool
    """False when an earlier export had logged it already (nothing was logged again)."""


@dataclass(frozen=True)
class EeeFile:
    """One endpoint's instance-level file."""

    endpoint: str
    path: Path
    records: int


def _finished_run(store: Store, run_id: str) -> tuple[RunInfo, dict[str, Any]]:
    run = store.get_run(run_id)
    if run is None:
        raise LookupError(f"no run {run_id}")
    report = store.get_report(run_id)
    if report is None:
        raise ValueError(
            f"run {run_id} has no report yet (status {run.status}); export it once it has finished "
            f"(evalsvc runs wait {run_id[:8]})"
        )
    return run, report


# MLflow's key rule (mlflow.utils.validation: alphanumerics, _ - . space : /); anything else in a
# suite name or option becomes "_", so a plugin suite's name never makes the export fail.
_KEY_CHARS = re.compile(r"[^\w\-. :/]")


def _key(*parts: str) -> str:
    return _KEY_CHARS.sub("_", ".".join(parts))[:250]


def _param(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:6000]  # MLflow's limit on a parameter value (MAX_PARAM_VAL_LENGTH)


def _millis(moment: datetime | None) -> int | None:
    return int(moment.timestamp() * 1000) if moment is not None else None


def _params(run: RunInfo, report: dict[str, Any], candidate: dict[str, Any],
            snapshots: list[dict[str, Any]]) -> dict[str, str]:
    base = report.get("baseline") or {}
    params = {
        "evalsvc.run_id": run.id,
        "evalsvc.version": str(report.get("evalsvc_version")),
        "baseline.url": redact_url(str(base.get("url") or "")),
        "baseline.model": str(base.get("model")),
        "candidate.url": redact_url(str(candidate.get("url") or "")),
        "candidate.model": str(candidate.get("model")),
        "candidate.role": str(candidate.get("role")),
        "suites": ",".join(s["suite"] for s in candidate.get("suites") or []),
    }
    for snap in snapshots:
        spec = snap.get("spec") or {}
        params[_key("suite", snap["name"], "version")] = str(snap.get("version"))
        if spec.get("seed") is not None:
            params[_key("suite", snap["name"], "seed")] = str(spec["seed"])
    for name, value in sorted((report.get("options") or {}).items()):
        if value is not None:
            params[_key("options", name)] = _param(value)
    return {k: v for k, v in params.items() if v not in ("", "None")}


def _metrics(candidate: dict[str, Any]) -> dict[str, float]:
    metrics: dict[str, float] = {"verdict_code": float(exit_code(candidate.get("verdict")))}
    for s in candidate.get("suites") or []:
        name = s["suite"]
        for field in _SUITE_METRICS:
            value = s.get(field)
            if isinstance(value, int | float) and not isinstance(value, bool):
                metrics[_key(name, field)] = float(value)
        ci = s.get("ci") or [None, None]
        for end, value in zip(("ci_low", "ci_high"), ci, strict=False):
            if value is not None:  # an unbounded end is null in the report: no metric
                metrics[_key(name, end)] = float(value)
        recovery = s.get("recovery") or {}
        if isinstance(recovery.get("estimate"), int | float):
            metrics[_key(name, "recovery")] = float(recovery["estimate"])
        metrics[_key(name, "verdict_code")] = float(exit_code(s.get("verdict")))
    return metrics


def _tags(run: RunInfo, report: dict[str, Any], candidate: dict[str, Any]) -> dict[str, str]:
    tags = {
        "evalsvc.run_id": run.id,
        "evalsvc.candidate_role": str(candidate.get("role")),
        "evalsvc.candidate": str(candidate.get("label")),
        "evalsvc.baseline": str((report.get("baseline") or {}).get("label")),
        "evalsvc.verdict": str(candidate.get("verdict")),
        "evalsvc.run_verdict": str(report.get("verdict")),
    }
    for s in candidate.get("suites") or []:
        tags[_key("verdict", s["suite"])] = str(s.get("verdict"))
        if s.get("metric"):
            tags[_key("metric", s["suite"])] = str(s["metric"])
    return tags


def _mlflow_client_class() -> Any:
    try:
        from mlflow import MlflowClient
    except ImportError as err:
        raise MissingExtra(
            "the MLflow export needs MLflow, which is not installed: pip install 'evalsvc[mlflow]'"
        ) from err
    return MlflowClient


def export_mlflow(
    store: Store, run_id: str, *, tracking_uri: str, experiment: str = "evalsvc"
) -> list[MlflowRun]:
    """Log each candidate of ``run_id`` as an MLflow run in ``experiment`` (created if missing)
    at ``tracking_uri``; see the module docstring. Raises LookupError (no such run), ValueError
    (no report yet; :class:`MissingExtra`) and MLflow's own ``MlflowException`` (a tracking URI it
    refuses or cannot reach: the caller reports its message)."""
    run, report = _finished_run(store, run_id)
    snapshots = store.get_suite_snapshots(run_id)
    client_class = _mlflow_client_class()
    from mlflow.exceptions import MlflowException

    try:  # the client opens its store when built: a refused URI raises here
        client = client_class(tracking_uri=tracking_uri)
        return _log_candidates(client, run, report, snapshots, experiment)
    except MlflowException as err:
        message = f"MLflow at {redact_url(tracking_uri)}: {str(err).splitlines()[0][:1000]}"
        if err.error_code in _REFUSALS:
            raise MlflowRefused(message) from err
        raise MlflowUnreachable(message) from err


def _log_candidates(client: Any, run: RunInfo, report: dict[str, Any],
                    snapshots: list[dict[str, Any]], experiment: str) -> list[MlflowRun]:
    from mlflow.entities import Metric, Param, RunTag

    found = client.get_experiment_by_name(experiment)
    experiment_id = found.experiment_id if found is not None else client.create_experiment(experiment)
    finished = _millis(run.finished_at) or _millis(run.created_at)
    out: list[MlflowRun] = []
    with tempfile.TemporaryDirectory(prefix="evalsvc-mlflow-") as tmp:
        artifact = Path(tmp) / REPORT_ARTIFACT
        artifact.write_text(json.dumps(report, indent=2, allow_nan=False), encoding="utf-8")
        for candidate in report.get("candidates") or []:
            role = str(candidate.get("role"))
            label = str(candidate.get("label"))
            earlier = client.search_runs(
                [experiment_id],
                filter_string=(
                    f"tags.`evalsvc.run_id` = '{run.id}' and tags.`evalsvc.candidate_role` = '{role}'"
                ),
                max_results=1,
            )
            if earlier:
                out.append(MlflowRun(label, earlier[0].info.run_id, experiment_id, created=False))
                continue
            mlrun = client.create_run(
                experiment_id,
                start_time=_millis(run.started_at) or _millis(run.created_at),
                run_name=f"{run.id[:8]} {label}"[:250],
            )
            rid = mlrun.info.run_id
            metrics = _metrics(candidate)
            client.log_batch(
                rid,
                metrics=[Metric(k, v, finished or 0, 0) for k, v in metrics.items()],
                params=[Param(k, v) for k, v in _params(run, report, candidate, snapshots).items()],
                tags=[RunTag(k, v) for k, v in _tags(run, report, candidate).items()],
            )
            client.log_artifact(rid, str(artifact))
            client.set_terminated(rid, status="FINISHED", end_time=finished)
            out.append(MlflowRun(label, rid, experiment_id, created=True))
    return out


def _references(reference: Any) -> list[str]:
    """A kind's expected answer as the record's reference list: a list of acceptable answers
    stays a list, one value is a list of one, none is empty."""
    if reference is None:
        return []
    if isinstance(reference, (list, tuple)):
        return [str(r) for r in reference if r is not None]
    return [str(reference)]


def _sample_record(run: RunInfo, role: str, model: str, metric: dict[str, str],
                   sample: Any, prompt: str | None, kind: type[Suite] | None = None
                   ) -> dict[str, Any]:
    """One sample as an instance-level record (``evalsvc.suites.eee`` validates it). The
    reference is the kind's own ``expected_answer`` of the sample (a ``dataset`` suite keeps it
    as ``data["reference"]``: reading ``expected`` wrote ``"reference": []`` for rows that had
    one); an lm-eval sample's ``target`` where the kind is unknown."""
    sample_id = sample.item_id if sample.repeat == 0 else f"{sample.item_id}#{sample.repeat}"
    reference = (kind.expected_answer(sample.data) if kind is not None
                 else sample.data.get("expected", sample.data.get("target")))
    if reference is None:
        reference = sample.data.get("target")
    references = _references(reference)
    record: dict[str, Any] = {
        "schema_version": eee.SCHEMA_VERSION,
        "evaluation_id": f"evalsvc/{run.id}/{role}",
        "model_id": model,
        "evaluation_name": sample.suite,
        "evaluation_result_id": metric.get(sample.suite),
        "sample_id": sample_id,
        "sample_hash": eee.sample_hash(prompt or "", reference),
        "interaction_type": "single_turn",
        "input": {"raw": prompt or "", "reference": references},
        "output": {"raw": [sample.output or ""]},
        "answer_attribution": [],
        "evaluation": {
            # An errored sample has no score: 0 with the error set, which the reader turns back
            # into an error (the schema requires a number).
            "score": 0.0 if sample.score is None else float(sample.score),
            "is_correct": sample.score == 1.0,
        },
        # The schema's metadata values are strings.
        "metadata": {"evalsvc_run_id": run.id, "endpoint": role, "repeat": str(sample.repeat)},
    }
    if sample.error:
        record["error"] = redact_text(sample.error)
    if sample.prompt_tokens is not None and sample.completion_tokens is not None:
        record["token_usage"] = {
            "input_tokens": sample.prompt_tokens,
            "output_tokens": sample.completion_tokens,
            "total_tokens": sample.prompt_tokens + sample.completion_tokens,
        }
    performance = {
        "latency_ms": None if sample.latency_s is None else sample.latency_s * 1000,
        "time_to_first_token_ms": None if sample.ttft_s is None else sample.ttft_s * 1000,
    }
    if any(v is not None for v in performance.values()):
        record["performance"] = {k: v for k, v in performance.items() if v is not None}
    return record


def export_eee(store: Store, run_id: str, *, out_dir: Path) -> list[EeeFile]:
    """Write ``<out_dir>/<run id>_<role>.jsonl`` per endpoint of ``run_id`` (``candidate:0`` as
    ``candidate-0``): every sample as an Every Eval Ever instance-level record, each validated
    against the package's schema before it is written. ``evaluation_name`` is the suite,
    ``evaluation_result_id`` its gated metric, ``sample_id`` the item id (``#<repeat>`` after
    it for repeats), ``model_id`` the served model. Raises LookupError / ValueError as
    :func:`export_mlflow`."""
    run, report = _finished_run(store, run_id)
    metric = {
        s["suite"]: str(s["metric"])
        for c in report.get("candidates") or [] for s in c.get("suites") or [] if s.get("metric")
    }
    models = {role: snap[0].model for role, snap in store.get_endpoint_snapshots(run_id).items()}
    known = suite_kinds()
    kinds = {str(snap.get("name")): known.get(str(snap.get("kind")))
             for snap in store.get_suite_snapshots(run_id)}
    samples = store.get_samples(run_id)
    prompts: dict[tuple[str, str], str] = {}
    for s in samples:  # the item's prompt, where a kind stored it (with the baseline's answer)
        text = prompt_text(s.data.get("prompt"))
        if text is not None:
            prompts[(s.suite, s.item_id)] = text
    by_role: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        rec = _sample_record(run, s.endpoint, models.get(s.endpoint) or s.endpoint, metric, s,
                             prompts.get((s.suite, s.item_id)), kinds.get(s.suite))
        eee.validate(rec, where=f"run {run_id}, {s.endpoint}, {s.suite} item {s.item_id}")
        by_role.setdefault(s.endpoint, []).append(rec)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = []
    for role, records in by_role.items():
        path = out_dir / f"{run.id}_{role.replace(':', '-')}.jsonl"
        with path.open("w", encoding="utf-8") as fh:
            for rec in records:
                fh.write(json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n")
        files.append(EeeFile(role, path, len(records)))
    return files
