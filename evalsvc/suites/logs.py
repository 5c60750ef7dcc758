"""Existing evaluation logs as paired suites: lm-eval ``--log_samples`` output, Inspect logs and
promptfoo results.

Contract:
- :func:`read_eval_log` reads one side: an lm-eval ``--output_path`` directory (its
  ``samples_<task>_<timestamp>.jsonl`` files, written with ``--log_samples``), one such samples
  file, an Inspect eval log (the JSON log format, ``.json``; or the ``.eval`` zip of
  ``header.json`` + ``samples/*.json``), or a promptfoo results file (``promptfoo eval -o
  results.json``; one provider of it). Anything else raises :class:`LogError` with the reason.
- :func:`score_records` turns one task of one side into per-document records keyed by the
  document id — lm-eval's ``doc_id`` (``doc<N>``), Inspect's sample ``id`` and ``epoch``
  (``<id>#<epoch>``), promptfoo's ``testIdx`` (``test<N>``; a task is one of its prompts) —
  with the chosen metric as the score, a fingerprint of the document (lm-eval's ``doc_hash``,
  Inspect's input text, promptfoo's test variables) so that two logs of different documents
  under the same ids are refused, and the requested slice columns. A metric or slice column that a
  record lacks raises :class:`LogError` naming it and the columns that exist.
- :class:`LoggedTask` is the suite a gated log task becomes: a paired score with recovery,
  gated like an lm-eval task (3-point margin by default) or by a recovery floor; it sends no
  request (its samples come from the logs).

Reading files is all this module does: no sockets, no database (the service layer stores).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsvc.domain import Item, Provenance, Sample
from evalsvc.endpoints import EndpointClient
from evalsvc.gates import KURTIC_SOURCE, VLLM_CI_SOURCE, GateDefaults
from evalsvc.suites._base import Suite, SuiteSpec

__all__ = [
    "EvalLogSide",
    "LogError",
    "LogRecord",
    "LoggedTask",
    "read_eval_log",
    "score_records",
    "score_value",
]

#: Bytes read from one log file: a samples file of 100k documents with long generations is
#: tens of MB; beyond this the input is refused rather than exhausting memory.
MAX_LOG_BYTES = 512 * 1024 * 1024

# samples_<task>_<timestamp>.jsonl; lm-eval 0.4 timestamps look like 2025-01-31T12-00-00.123456
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d.\-:]+)\.jsonl$")


class LogError(ValueError):
    """A log cannot be read or paired as given (a usage error: exit 2, HTTP 422)."""


@dataclass
class EvalLogSide:
    """One side's log: per task, the raw per-document records in file order."""

    source: str
    format: Literal["lm-eval", "inspect", "promptfoo"]
    model: str | None
    tasks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Per task, the file its records came from."""


@dataclass
class LogRecord:
    """One document of one side, as the gate sees it."""

    key: str
    score: float | None
    error: str | None
    output: str
    target: Any
    fingerprint: str | None
    slices: dict[str, str]
    metrics: dict[str, Any]


def _read_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_LOG_BYTES:
        raise LogError(f"{path}: {size} bytes is above the {MAX_LOG_BYTES} byte limit for a log")
    return path.read_text(encoding="utf-8")


def _jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    for i, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as exc:
            raise LogError(f"{path}:{i}: not JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or "doc_id" not in rec:
            raise LogError(
                f"{path}:{i}: not an lm-eval sample record (no doc_id); write the log with "
                "lm_eval --log_samples"
            )
        out.append(rec)
    return out


def _lmeval_task(path: Path) -> str:
    m = _SAMPLES.match(path.name)
    if m is None:
        raise LogError(
            f"{path.name}: not an lm-eval samples file name (samples_<task>_<timestamp>.jsonl)"
        )
    return m.group("task")


def _lmeval_model(directory: Path) -> str | None:
    for results in sorted(directory.rglob("results_*.json"), reverse=True):
        try:
            data = json.loads(_read_text(results))
        except (OSError, json.JSONDecodeError):
            continue
        name = data.get("model_name") or (data.get("config") or {}).get("model_args")
        if isinstance(name, str):
            return name
    return None


def _read_lmeval_dir(path: Path) -> EvalLogSide:
    files = sorted(path.rglob("samples_*.jsonl"))
    if not files:
        raise LogError(
            f"{path}: no samples_<task>_*.jsonl under this directory; run lm_eval with "
            "--output_path and --log_samples"
        )
    side = EvalLogSide(source=str(path), format="lm-eval", model=_lmeval_model(path))
    by_task: dict[str, list[Path]] = {}
    for f in files:
        by_task.setdefault(_lmeval_task(f), []).append(f)
    for task, paths in sorted(by_task.items()):
        if len(paths) > 1:
            # Several runs of one task in one directory: which one is meant is ambiguous.
            raise LogError(
                f"{path}: {len(paths)} samples files for task {task!r} "
                f"({', '.join(p.name for p in paths[:3])}); point at one file or a directory "
                "holding one run"
            )
        side.tasks[task] = _jsonl(paths[0])
        side.files[task] = str(paths[0])
    return side


def _inspect_side(source: str, header: dict[str, Any], samples: list[Any]) -> EvalLogSide:
    spec = header.get("eval")
    if not isinstance(spec, dict) or "task" not in spec:
        raise LogError(f"{source}: not an Inspect eval log (no eval.task)")
    if header.get("status") not in (None, "success"):
        raise LogError(
            f"{source}: the Inspect log's status is {header.get('status')!r}, not 'success'; "
            "gate only complete evaluations"
        )
    recs = [s for s in samples if isinstance(s, dict)]
    if not recs:
        raise LogError(f"{source}: the Inspect log has no samples (was it written with log_samples?)")
    model = spec.get("model")
    side = EvalLogSide(
        source=source, format="inspect", model=model if isinstance(model, str) else None
    )
    task = str(spec["task"]).rsplit("/", 1)[-1]
    side.tasks[task] = recs
    side.files[task] = source
    return side


def _read_inspect_zip(path: Path) -> EvalLogSide:
    # Registers Zstandard (zip method 93) with the standard zipfile: Inspect compresses the
    # members of its .eval logs with it (Inspect reads them through the same package).
    import zipfile_zstd  # noqa: F401

    try:
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
            total = sum(i.file_size for i in z.infolist())
            if total > MAX_LOG_BYTES:
                raise LogError(f"{path}: {total} bytes uncompressed is above the log limit")
            if "header.json" not in names:
                raise LogError(f"{path}: not an Inspect .eval log (no header.json)")
            header = json.loads(z.read("header.json"))
            samples = [
                json.loads(z.read(n))
                for n in sorted(names)
                if n.startswith("samples/") and n.endswith(".json")
            ]
    except zipfile.BadZipFile:
        raise LogError(f"{path}: not a zip file (an Inspect .eval log is one)") from None
    except NotImplementedError as exc:  # a compression method zipfile cannot decode
        raise LogError(f"{path}: cannot decompress a member of this log ({exc})") from None
    except json.JSONDecodeError as exc:
        raise LogError(f"{path}: a member is not JSON ({exc.msg})") from None
    return _inspect_side(str(path), header, samples)


# promptfoo's ResultFailureReason (src/types: NONE 0, ASSERT 1, ERROR 2): only ERROR means the
# provider call itself failed; ASSERT is a scored failure (score 0 or partial), not an error.
_PROMPTFOO_ERROR = 2


def _promptfoo_provider(rec: dict[str, Any]) -> str:
    prov = rec.get("provider")
    if isinstance(prov, dict):
        return str(prov.get("label") or prov.get("id") or "")
    return str(prov or "")


def _promptfoo_prompt(rec: dict[str, Any]) -> str:
    prompt = _mapping(rec.get("prompt"))
    label = prompt.get("label") or prompt.get("raw") or f"prompt{rec.get('promptIdx', 0)}"
    return " ".join(str(label).split())[:80]


def _read_promptfoo(source: str, data: dict[str, Any], provider: str | None) -> EvalLogSide:
    """A promptfoo results file: ``promptfoo eval -o results.json`` (or ``promptfoo export``).

    One file often holds several providers (the usual way to compare two endpoints in promptfoo):
    ``provider`` picks this side's by label or id; a file of several providers without one is
    refused with their names. Every prompt of the eval is a task (its label), every test case a
    document (``test<testIdx>``).
    """
    body = data["results"]
    recs = [r for r in body.get("results") or [] if isinstance(r, dict)]
    if not recs:
        raise LogError(f"{source}: the promptfoo results file has no results")
    names: dict[str, set[str]] = {}
    for r in recs:
        prov = _mapping(r.get("provider"))
        label = _promptfoo_provider(r)
        names.setdefault(label, set()).update(
            str(v) for v in (prov.get("id"), prov.get("label"), label) if v
        )
    if provider is None:
        if len(names) > 1:
            raise LogError(
                f"{source}: the promptfoo results hold {len(names)} providers "
                f"({', '.join(sorted(names))}); name this side's with --baseline-provider / "
                "--candidate-provider"
            )
        chosen = next(iter(names))
    else:
        hits = [label for label, ids in names.items() if provider in ids]
        if not hits:
            raise LogError(
                f"{source}: no provider {provider!r} in the promptfoo results (providers: "
                f"{', '.join(sorted(names))})"
            )
        if len(hits) > 1:
            # Two endpoints serving the same model name share a provider id: only the labels
            # tell them apart, and guessing would gate one endpoint against itself.
            raise LogError(
                f"{source}: {provider!r} names {len(hits)} providers ({', '.join(sorted(hits))}); "
                "name one by its label"
            )
        chosen = hits[0]
    side = EvalLogSide(source=source, format="promptfoo", model=chosen or None)
    for r in recs:
        if _promptfoo_provider(r) != chosen:
            continue
        task = _promptfoo_prompt(r)
        side.tasks.setdefault(task, []).append(r)
        side.files[task] = source
    return side


def read_eval_log(path: str | Path, *, provider: str | None = None) -> EvalLogSide:
    """Read one side (see the module docstring). Raises :class:`LogError` with the reason.

    ``provider`` picks one provider of a promptfoo results file; other formats refuse it.
    """
    p = Path(path)
    if not p.exists():
        raise LogError(f"{p}: no such file or directory")
    if provider is not None and not (p.is_file() and p.suffix == ".json"):
        raise LogError(f"{p}: a provider is named, but only a promptfoo results file has providers")
    if p.is_dir():
        return _read_lmeval_dir(p)
    if p.suffix == ".jsonl":
        side = EvalLogSide(source=str(p), format="lm-eval", model=_lmeval_model(p.parent))
        task = _lmeval_task(p)
        side.tasks[task] = _jsonl(p)
        side.files[task] = str(p)
        return side
    if p.suffix == ".eval":
        return _read_inspect_zip(p)
    if p.suffix == ".json":
        try:
            data = json.loads(_read_text(p))
        except json.JSONDecodeError as exc:
            raise LogError(f"{p}: not JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise LogError(f"{p}: not an Inspect eval log (not a JSON object)")
        body = data.get("results")
        if isinstance(body, dict) and isinstance(body.get("results"), list):
            return _read_promptfoo(str(p), data, provider)
        if provider is not None:
            raise LogError(
                f"{p}: a provider is named, but this is not a promptfoo results file"
            )
        if "samples" not in data and "results" in data and "configs" in data:
            raise LogError(
                f"{p}: this is lm-eval's aggregate results file, which has no per-document "
                "scores; pass the samples_<task>_*.jsonl file (or its directory) written with "
                "--log_samples"
            )
        return _inspect_side(str(p), data, data.get("samples") or [])
    raise LogError(
        f"{p}: unknown log format; expected an lm-eval --output_path directory, a "
        "samples_<task>_*.jsonl file, an Inspect log (.json or .eval) or a promptfoo results "
        "file (.json)"
    )


# Inspect's score values (inspect_ai.scorer: CORRECT "C", INCORRECT "I", PARTIAL "P", NOANSWER
# "N") mapped as its value_to_float() does.
_INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0, "yes": 1.0, "no": 0.0,
                   "true": 1.0, "false": 0.0}


def score_value(value: Any, *, what: str) -> float:
    """A per-document metric value as a float (bools, numbers, Inspect's letter grades)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        v = float(value)
        if not math.isfinite(v):
            raise LogError(f"{what}: the score {value!r} is not finite")
        return v
    if isinstance(value, str):
        if value in _INSPECT_VALUES or value.lower() in _INSPECT_VALUES:
            return _INSPECT_VALUES.get(value, _INSPECT_VALUES.get(value.lower(), 0.0))
        try:
            return score_value(float(value), what=what)
        except ValueError:
            pass
    raise LogError(
        f"{what}: the score {value!r} is not a number, a boolean or a grade (C/I/P/N); pick a "
        "scalar metric"
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _label(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:80]


def _slices(
    fields: Sequence[str], values: dict[str, Any], record: str, where: str, nouns: tuple[str, str]
) -> dict[str, str]:
    """The slice labels of one record: ``values[field]`` for each requested field, or a
    ``LogError`` naming the missing field and the ones the record has."""
    out = {}
    for col in fields:
        if col not in values:
            raise LogError(
                f"{where}: no {nouns[0]} {col!r} in {record} to slice by "
                f"({nouns[1]}: {', '.join(sorted(values)[:20]) or 'none'})"
            )
        out[col] = _label(values[col])
    return out


def _pick_filter(records: list[dict[str, Any]], wanted: str | None, where: str) -> str | None:
    filters = list(dict.fromkeys(str(r.get("filter")) for r in records if "filter" in r))
    if not filters:
        return None
    if wanted is None:
        return filters[0]
    if wanted not in filters:
        raise LogError(f"{where}: no filter {wanted!r} in the log (filters: {', '.join(filters)})")
    return wanted


def default_metric(side: EvalLogSide, task: str) -> str:
    """The metric gated when none is named: lm-eval's first listed per-document metric, or the
    first Inspect scorer."""
    records = side.tasks[task]
    first = records[0] if records else {}
    if side.format == "lm-eval":
        names = first.get("metrics")
        if isinstance(names, list) and names:
            return str(names[0])
        return "acc"
    if side.format == "promptfoo":
        return "pass"
    scores = first.get("scores") or {}
    if isinstance(scores, dict) and scores:
        return str(next(iter(scores)))
    raise LogError(f"{side.source}: the first sample of task {task!r} has no scores")


def score_records(
    side: EvalLogSide,
    task: str,
    *,
    metric: str,
    slice_fields: Sequence[str] = (),
    filter_name: str | None = None,
) -> tuple[dict[str, LogRecord], dict[str, Any]]:
    """Per-document records of ``task`` keyed by document id, and notes (the filter used).

    Raises :class:`LogError` for a metric or slice column the records lack, a non-scalar
    metric, or a document id that appears twice.
    """
    records = side.tasks[task]
    where = f"{side.files.get(task, side.source)} (task {task})"
    out: dict[str, LogRecord] = {}
    notes: dict[str, Any] = {}
    if side.format == "lm-eval":
        chosen = _pick_filter(records, filter_name, where)
        if chosen is not None:
            notes["filter"] = chosen
            others = sorted({str(r.get("filter")) for r in records} - {chosen})
            if others:
                notes["other_filters"] = others
        for rec in records:
            if chosen is not None and str(rec.get("filter")) != chosen:
                continue
            key = f"doc{int(rec['doc_id'])}"
            if key in out:
                raise LogError(f"{where}: document id {rec['doc_id']} appears twice")
            if metric not in rec:
                have = [m for m in rec.get("metrics", []) if m in rec] or sorted(
                    k for k, v in rec.items() if isinstance(v, (int, float, bool))
                )
                raise LogError(
                    f"{where}: no metric {metric!r} in document {rec['doc_id']} "
                    f"(per-document metrics: {', '.join(map(str, have)) or 'none'})"
                )
            doc = _mapping(rec.get("doc"))
            slices = _slices(
                slice_fields, doc, f"document {rec['doc_id']}", where, ("column", "columns")
            )
            out[key] = LogRecord(
                key=key,
                score=score_value(rec[metric], what=f"{where}, document {rec['doc_id']}, {metric}"),
                error=None,
                output=json.dumps(rec.get("filtered_resps"), default=str)[:300],
                target=rec.get("target"),
                fingerprint=str(rec.get("doc_hash") or _hash(rec.get("doc"))),
                slices=slices,
                metrics={m: rec[m] for m in rec.get("metrics", []) if m in rec},
            )
        return out, notes
    if side.format == "promptfoo":
        return _promptfoo_records(records, where, metric, slice_fields), notes
    for rec in records:
        sid, epoch = rec.get("id"), rec.get("epoch", 1)
        if sid is None:
            raise LogError(f"{where}: a sample has no id")
        key = f"{sid}#{epoch}"
        if key in out:
            raise LogError(f"{where}: sample {sid} epoch {epoch} appears twice")
        meta = _mapping(rec.get("metadata"))
        slices = _slices(slice_fields, meta, f"sample {sid}", where, ("metadata field", "fields"))
        error = rec.get("error")
        scores = _mapping(rec.get("scores"))
        score: float | None = None
        err_text: str | None = None
        if error:
            err_text = str(error.get("message") if isinstance(error, dict) else error)[:1000]
        elif metric not in scores:
            raise LogError(
                f"{where}: no scorer {metric!r} in sample {sid} "
                f"(scorers: {', '.join(sorted(scores)) or 'none'})"
            )
        else:
            entry = scores[metric]
            value = entry.get("value") if isinstance(entry, dict) else entry
            score = score_value(value, what=f"{where}, sample {sid}, {metric}")
        output = _mapping(rec.get("output"))
        completion = output.get("completion")
        if completion is None:
            choices = output.get("choices") or []
            message = (choices[0] or {}).get("message", {}) if choices else {}
            completion = message.get("content") if isinstance(message, dict) else None
        out[key] = LogRecord(
            key=key,
            score=score,
            error=err_text,
            output=str(completion or "")[:300] if not isinstance(completion, list) else "",
            target=rec.get("target"),
            fingerprint=_hash(rec.get("input")),
            slices=slices,
            metrics={k: (v.get("value") if isinstance(v, dict) else v) for k, v in scores.items()},
        )
    return out, notes


def _promptfoo_records(
    records: list[dict[str, Any]], where: str, metric: str, slice_fields: Sequence[str]
) -> dict[str, LogRecord]:
    """promptfoo results as records: ``pass`` is the test's ``success`` (all assertions
    passed), ``score`` its weighted assertion score, any other name a ``namedScores`` metric."""
    out: dict[str, LogRecord] = {}
    for rec in records:
        idx = rec.get("testIdx")
        if not isinstance(idx, int):
            raise LogError(f"{where}: a result has no testIdx")
        key = f"test{idx}"
        if key in out:
            raise LogError(f"{where}: test {idx} appears twice for this provider and prompt")
        case = _mapping(rec.get("testCase"))
        variables = _mapping(rec.get("vars")) or _mapping(case.get("vars"))
        meta = {**_mapping(case.get("metadata")), **variables}
        slices = _slices(
            slice_fields, meta, f"test {idx}", where, ("variable or metadata field", "fields")
        )
        response = _mapping(rec.get("response"))
        named = _mapping(rec.get("namedScores"))
        err_text: str | None = None
        score: float | None = None
        failure = rec.get("failureReason")
        if failure == _PROMPTFOO_ERROR or (failure is None and response.get("error")):
            err_text = str(rec.get("error") or response.get("error") or "provider error")[:1000]
        elif metric == "pass":
            score = score_value(bool(rec.get("success")), what=f"{where}, test {idx}, pass")
        elif metric == "score":
            score = score_value(rec.get("score"), what=f"{where}, test {idx}, score")
        elif metric in named:
            score = score_value(named[metric], what=f"{where}, test {idx}, {metric}")
        else:
            raise LogError(
                f"{where}: no metric {metric!r} in test {idx} (metrics: pass, score"
                + "".join(f", {k}" for k in sorted(named))
                + ")"
            )
        output = response.get("output")
        asserts = case.get("assert")
        first = asserts[0] if isinstance(asserts, list) and asserts else {}
        out[key] = LogRecord(
            key=key,
            score=score,
            error=err_text,
            output=(output if isinstance(output, str) else json.dumps(output, default=str))[:300]
            if output is not None
            else "",
            target=_mapping(first).get("value"),
            fingerprint=_hash(variables),
            slices=slices,
            metrics={"pass": bool(rec.get("success")), "score": rec.get("score"), **named},
        )
    return out


class LoggedTaskParams(BaseModel):
    """What a logged task records about its logs (the suite snapshot keeps it)."""

    model_config = ConfigDict(extra="forbid")

    task: str
    metric: str
    score_kind: Literal["binary", "continuous"] = "binary"
    slices: list[str] = Field(default_factory=list)
    filter: str | None = None
    format: str = ""
    files: dict[str, str] = Field(default_factory=dict)


class LoggedTask(Suite):
    """One task of a pair of logs, gated like an lm-eval suite. Not in the catalog: built by
    ``evalsvc gate-logs`` (``evalsvc.services.gatelogs``) from the logs it is given."""

    kind = "logs"
    version = "1"
    requires = frozenset()
    reports_recovery = True
    sequential_ok = False
    description = (
        "Per-document scores from existing lm-eval, Inspect or promptfoo logs, paired by "
        "document id."
    )

    Params = LoggedTaskParams
    params: LoggedTaskParams

    def __init__(self, spec: SuiteSpec) -> None:
        super().__init__(spec)
        self.metric_name: str = self.params.metric
        self.score_kind: Literal["binary", "continuous"] = self.params.score_kind

    def default_gate(self) -> GateDefaults:
        return GateDefaults.paired_noninferiority(
            "logs",
            metric=self.metric_name,
            margin=0.03,
            kind=self.score_kind,
            rationale=(
                "as the lmeval kind: standard benchmarks have large item counts, so a 3-point "
                "margin is affordable and matches the 1-3% degradation reported for well-tuned "
                "INT8"
            ),
            sources=(VLLM_CI_SOURCE, KURTIC_SOURCE),
        )

    def slice_of(self, sample: Sample) -> dict[str, str]:
        raw = sample.data.get("slices")
        return {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}

    async def plan(self, client: EndpointClient, provenance: Provenance) -> list[Item]:
        raise NotImplementedError("a logged task sends nothing: its samples come from the logs")
