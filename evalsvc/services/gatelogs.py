"""Gate evaluations that already ran: ``evalsvc gate-logs`` and ``POST /api/v1/gate-logs``.

Contract: :func:`gate_logs` takes two logs (baseline, candidate; see ``evalsvc.suites.logs`` for
the formats), pairs their documents by id per task, and gates every task with the same machinery
as ``evalsvc compare`` (``evalsvc.runner.gate_samples``: the paired gate or recovery floor,
slices, Holm, the error budget), then stores the run like any other (its samples, suite and
"endpoint" snapshots, gates and report: it appears in ``runs list`` and the dashboard) and
returns the JSON report.

Refused up front (``UsageError``, exit 2 / HTTP 422) with the reason, before anything is stored:
an unreadable log, logs of different tasks, logs whose shared document ids hold different
documents (lm-eval ``doc_hash`` / Inspect input / promptfoo test variables), a promptfoo file of
several providers with none named, no document in common, a metric, filter or
slice column the records lack, a gate option out of bounds. Documents present on one side only
(or errored, in Inspect and promptfoo) are *counted and reported* per task (``details.log_pairs``) and count
against the error budget, as missing samples of a live run do; they are never dropped silently.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalsvc.db import IN_PROCESS_PREFIX, SampleWriter, Store
from evalsvc.domain import EndpointRef, Item, Provenance, RunOptions, RunSpec, RunStatus, Sample
from evalsvc.gates import GatePolicyError
from evalsvc.reports import build_report
from evalsvc.runner import gate_samples
from evalsvc.services.runs import UsageError, gate_limits
from evalsvc.settings import Settings
from evalsvc.suites import GatePolicy, SuiteSpec
from evalsvc.suites.logs import (
    EvalLogSide,
    LogError,
    LoggedTask,
    LogRecord,
    default_metric,
    read_eval_log,
    score_records,
)

__all__ = ["gate_logs", "gate_overrides", "pair_logs"]

_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


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


def _read(path: str | Path, role: str, provider: str | None = None) -> EvalLogSide:
    try:
        return read_eval_log(path, provider=provider)
    except LogError as exc:
        raise UsageError(f"{role} log: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{role} log: {exc}") from None


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
        try:
            m = metric or default_metric(base, task)
            brec, bnotes = score_records(
                base, task, metric=m, slice_fields=slices or [], filter_name=filter_name
            )
            crec, cnotes = score_records(
                cand, task, metric=m, slice_fields=slices or [], filter_name=filter_name
            )
        except LogError as exc:
            raise UsageError(str(exc)) from None
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
    uploaded: bool = False,
    providers: tuple[str | None, str | None] = (None, None),
) -> dict[str, Any]:
    """Pair, gate and store two existing logs; return the JSON report (module docstring).

    ``gate`` is the gate policy for every task (``margin``, ``alpha``, ``recovery_min``,
    ``baseline_floor``, ``slice_min_items``: the keys of a suite's ``gate:`` block), bounded by
    the server's limits; ``options`` carries ``max_error_rate`` and ``seed`` (the bootstrap's).
    ``names`` labels the two sides in the report (default: the paths). ``uploaded`` (REST): the
    logs are in a temporary directory that is gone after the call, so the stored run names them
    ``upload:<name>`` and records file names relative to each side's upload, never the server's
    temporary paths. ``providers`` picks each side's provider in a promptfoo results file (one
    file holding both sides can be given twice).
    """
    options = options or RunOptions()
    base = _read(baseline, "baseline", providers[0])
    cand = _read(candidate, "candidate", providers[1])
    paired = pair_logs(base, cand, metric=metric, slices=slices, filter_name=filter_name)
    try:
        policy = GatePolicy(**(gate or {}))
    except ValueError as exc:
        raise UsageError(f"gate options refused: {exc}") from None
    limits = gate_limits()
    suites: list[LoggedTask] = []
    plans: dict[str, Sequence[Item]] = {}
    samples: list[Sample] = []
    pair_counts: dict[str, dict[str, Any]] = {}
    used_names: set[str] = set()
    for task, m, brec, crec, notes in paired:
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
                    "baseline": _shown(base.files.get(task, base.source), baseline, uploaded),
                    "candidate": _shown(cand.files.get(task, cand.source), candidate, uploaded),
                },
            },
            gate=policy,
        )
        suite = LoggedTask(spec)
        try:
            suite.bind_gate(options, limits=limits)
        except GatePolicyError as exc:
            raise UsageError(f"gate options refused: {exc}") from None
        suites.append(suite)
        keys = sorted(set(brec) | set(crec), key=_natural)
        plans[name] = [Item(id=k) for k in keys]
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
                        data={
                            "slices": rec.slices,
                            "target": rec.target
                            if isinstance(rec.target, (str, int, float))
                            else str(rec.target)[:300],
                            "metrics": rec.metrics,
                        },
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
            **({"other_filters": notes["other_filters"]} if "other_filters" in notes else {}),
        }
    b_name, c_name = names or (str(baseline), str(candidate))
    refs = [_log_ref(base, b_name, uploaded), _log_ref(cand, c_name, uploaded)]
    provs = [_log_provenance(base, baseline, uploaded), _log_provenance(cand, candidate, uploaded)]
    run_spec = RunSpec(
        baseline=refs[0],
        candidates=[refs[1]],
        suites=[s.name for s in suites],
        options=options,
        labels={"source": "gate-logs", "log_format": base.format, **(labels or {})},
    )
    settings = Settings()
    owner = f"{IN_PROCESS_PREFIX}{socket.gethostname()}:{os.getpid()}"
    run = store.create_run(
        run_spec, status=RunStatus.running, lease_owner=owner, lease_seconds=settings.lease_seconds
    )
    try:
        for suite in suites:
            store.save_suite_snapshot(
                run.id,
                name=suite.name,
                kind=suite.kind,
                version=suite.version,
                spec={
                    **suite.spec.model_dump(mode="json"),
                    "resolved_gate": suite.gate.to_dict(),
                },
            )
        for role, ref, prov in zip(("baseline", "candidate:0"), refs, provs, strict=True):
            store.save_endpoint_snapshot(run.id, role=role, endpoint=ref, provenance=prov)
        writer = SampleWriter(store, run.id)
        for sample in samples:
            writer.add(sample)
        writer.flush()
        result = gate_samples(
            run.id, refs[0], [refs[1]], provs, suites, plans, samples, options
        )
        for cres in result.candidates:
            for sres in cres.suites:
                sres.details["log_pairs"] = pair_counts[sres.suite]
        report = build_report(result)
        store.save_gate_results(
            run.id,
            [
                {**s, "candidate_value": s["candidate"], "candidate": c["role"], "candidate_url": c["url"]}
                for c in report["candidates"]
                for s in c["suites"]
            ],
        )
        store.save_report(run.id, report)
        store.finish_run(
            run.id, status=RunStatus.completed, verdict=result.verdict, error=result.error
        )
    except BaseException as exc:
        with contextlib.suppress(Exception):
            store.finish_run(
                run.id, status=RunStatus.error, verdict="error", error=f"{type(exc).__name__}: {exc}"
            )
        raise
    return report


def _natural(key: str) -> tuple[Any, ...]:
    """doc2 before doc10."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


def _shown(path: Any, root: str | Path, uploaded: bool) -> Any:
    """A log file's path as the stored run records it: relative to the upload when uploaded."""
    if not uploaded or not isinstance(path, str):
        return path
    base = Path(root) if Path(root).is_dir() else Path(root).parent
    try:
        return str(Path(path).relative_to(base))
    except ValueError:
        return Path(path).name


def _log_ref(side: EvalLogSide, name: str, uploaded: bool = False) -> EndpointRef:
    source = Path(side.source)
    url = source.resolve().as_uri() if source.exists() and not uploaded else f"upload:{name}"
    label = _NAME.sub("_", Path(name).name)[:60] or "log"
    model = (side.model or f"{side.format} log: {Path(name).name}")[:200]
    return EndpointRef(url=url, model=model, name=label)


def _log_provenance(side: EvalLogSide, root: str | Path = "", uploaded: bool = False) -> Provenance:
    return Provenance(
        engine=f"{side.format} log",
        model=side.model,
        capabilities={},
        # extra="allow": where the scores came from
        log_source=_shown(side.source, root, uploaded) if uploaded else side.source,
        log_files={k: _shown(v, root, uploaded) for k, v in side.files.items()},
    )
