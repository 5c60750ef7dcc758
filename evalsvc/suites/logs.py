"""Existing evaluation logs as paired suites: lm-eval ``--log_samples`` output, Inspect logs and
promptfoo results.

Contract:
- :func:`read_eval_log` reads one side: an lm-eval ``--output_path`` directory (its
  ``samples_<task>_<timestamp>.jsonl`` files, written with ``--log_samples``), one such samples
  file, an Inspect eval log (the JSON log format, ``.json``; or the ``.eval`` zip of
  ``header.json`` + ``samples/*.json``), a promptfoo results file (``promptfoo eval -o
  results.json``; one provider of it), or an Every Eval Ever instance-level file (JSON Lines,
  ``evalsvc.suites.eee``; told from an lm-eval samples file by its first record). Anything else
  raises :class:`LogError` with the reason.
- :func:`score_records` turns one task of one side into per-document records keyed by the
  document id — lm-eval's ``doc_id`` (``doc<N>``), Inspect's sample ``id`` and ``epoch``
  (``<id>#<epoch>``), promptfoo's ``testIdx`` (``test<N>``; a task is one of its prompts),
  Every Eval Ever's ``sample_id`` (a task is an ``evaluation_name``, a metric an
  ``evaluation_result_id``; its fingerprint the ``sample_hash``) —
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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalsvc import limits
from evalsvc.domain import Item, Provenance, Sample
from evalsvc.gates import KURTIC_SOURCE, VLLM_CI_SOURCE, GateDefaults
from evalsvc.suites import eee
from evalsvc.suites._base import Suite, SuiteSpec
from evalsvc.suites._logread import (
    LogError,
    ZipBudget,
    check_zip_directory,
    load_json,
    read_capped,
    read_member,
    zip_members,
)

if TYPE_CHECKING:  # annotations only: the client (aiohttp) loads when a run starts
    from evalsvc.endpoints import EndpointClient

__all__ = [
    "EvalLogSide",
    "check_upload_name",
    "LogError",
    "LogRecord",
    "LoggedTask",
    "read_eval_log",
    "score_records",
    "score_value",
]

#: Bytes read from one log file (``evalsvc.limits``; the other budgets are there too).
MAX_LOG_BYTES = limits.MAX_LOG_BYTES

# samples_<task>_<timestamp>.jsonl; lm-eval 0.4 timestamps look like 2025-01-31T12-00-00.123456
_SAMPLES = re.compile(r"^samples_(?P<task>.+)_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d.\-:]+)\.jsonl$")

#: How a file is named in messages: the path as given (CLI), or the upload's own file name.
Shown = Callable[[Path], str]


def _as_given(path: Path) -> str:
    return str(path)


@dataclass
class EvalLogSide:
    """One side's log: per task, the per-document records in file order (Inspect samples are
    kept slim: the fields the gate reads, the input as a fingerprint)."""

    source: str
    format: Literal["lm-eval", "inspect", "promptfoo", "eee"]
    model: str | None
    tasks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    """Per task, the file its records came from (as shown)."""


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


#: A lone UTF-16 surrogate: a Python str decoded from JSON holds a pair as one code point, so
#: any code point in this range stands alone and cannot be encoded as UTF-8.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _name(value: Any, what: str, where: str) -> str:
    """An identifier from a log (task, metric, filter, model): text without NUL, bounded."""
    text = value if isinstance(value, str) else str(value)
    if "\x00" in text:
        raise LogError(f"{where}: the {what} contains a NUL character")
    lone = _SURROGATE.search(text)
    if lone is not None:  # JSON's "\ud800" decodes to it; no database or report can store it
        raise LogError(
            f"{where}: the {what} is not valid Unicode text (a lone surrogate "
            f"U+{ord(lone.group()):04X} at character {lone.start() + 1}); fix it in the log"
        )
    if len(text) > limits.MAX_LOG_NAME:
        raise LogError(
            f"{where}: the {what} is {len(text):,} characters long; at most "
            f"{limits.MAX_LOG_NAME} are accepted"
        )
    return text


def _text(value: Any, limit: int) -> str:
    """Content from a log kept with a sample (outputs, labels, errors): bounded, and without
    NUL (PostgreSQL cannot store it; U+FFFD marks where one was)."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return _SURROGATE.sub("\ufffd", text[:limit].replace("\x00", "\ufffd"))


def _scalar(value: Any) -> Any:
    """A value kept in a sample's JSON: finite numbers, booleans and short text only (NaN and
    infinities are not JSON, and PostgreSQL refuses them)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if abs(value) < 2**63 else str(value)[:40]
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return _text(value, 300)


def _read_json_file(path: Path, shown: Shown) -> Any:
    return load_json(read_capped(path, shown(path)), shown(path), whole_file=True)


def _jsonl(path: Path, shown: Shown) -> list[dict[str, Any]]:
    where = shown(path)
    size = path.stat().st_size
    if size > limits.MAX_LOG_BYTES:
        raise LogError(
            f"{where}: {size:,} bytes; a log file is read up to {limits.MAX_LOG_BYTES:,} bytes"
        )
    out = []
    with path.open("rb") as fh:
        i = 0
        while line := fh.readline(limits.MAX_LOG_LINE_BYTES + 1):
            i += 1
            if len(line) > limits.MAX_LOG_LINE_BYTES:
                raise LogError(
                    f"{where}:{i}: a line longer than {limits.MAX_LOG_LINE_BYTES:,} bytes"
                )
            if not line.strip():
                continue
            rec = load_json(line, f"{where}:{i}")
            if not isinstance(rec, dict) or "doc_id" not in rec:
                raise LogError(
                    f"{where}:{i}: not an lm-eval sample record (no doc_id); write the log with "
                    "lm_eval --log_samples"
                )
            _doc_id(rec["doc_id"], f"{where}:{i}")
            # The prompts and raw responses are most of a line and the gate reads neither:
            # dropped as each line is read (the output shown is filtered_resps, cut to 300).
            rec.pop("arguments", None)
            rec.pop("resps", None)
            rec["filtered_resps"] = _text(rec.get("filtered_resps"), 300)
            rec["_line"] = i
            out.append(rec)
            if len(out) > limits.MAX_LOG_RECORDS:
                raise LogError(
                    f"{where}: more than {limits.MAX_LOG_RECORDS:,} records; a log is read up "
                    "to that many"
                )
    return out


def _doc_id(value: Any, where: str) -> int:
    """lm-eval's ``doc_id``: the document's index in its dataset, a non-negative integer."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**63:
        raise LogError(
            f"{where}: doc_id must be a non-negative integer (the document's index), got "
            f"{_text(value, 60)}"
        )
    return value


def _lmeval_task(path: Path, shown: Shown) -> str:
    m = _SAMPLES.match(path.name)
    if m is None:
        raise LogError(
            f"{shown(path)}: not an lm-eval samples file name (samples_<task>_<timestamp>.jsonl)"
        )
    return _name(m.group("task"), "task name", shown(path))


def _lmeval_model(directory: Path, shown: Shown) -> str | None:
    for results in sorted(directory.rglob("results_*.json"), reverse=True):
        try:
            data = _read_json_file(results, shown)
        except (OSError, LogError):
            continue
        if not isinstance(data, dict):
            continue
        config = data.get("config")
        name = data.get("model_name") or (config.get("model_args") if isinstance(config, dict) else None)
        if isinstance(name, str):
            return _name(name[:200], "model name", shown(results))
    return None


def _read_lmeval_dir(path: Path, shown: Shown) -> EvalLogSide:
    files = sorted(path.rglob("samples_*.jsonl"))
    if not files:
        raise LogError(
            f"{shown(path)}: no samples_<task>_*.jsonl under this directory; run lm_eval with "
            "--output_path and --log_samples"
        )
    side = EvalLogSide(source=shown(path), format="lm-eval", model=_lmeval_model(path, shown))
    by_task: dict[str, list[Path]] = {}
    for f in files:
        by_task.setdefault(_lmeval_task(f, shown), []).append(f)
    for task, paths in sorted(by_task.items()):
        if len(paths) > 1:
            # Several runs of one task in one directory: which one is meant is ambiguous.
            raise LogError(
                f"{shown(path)}: {len(paths)} samples files for task {task!r} "
                f"({', '.join(p.name for p in paths[:3])}); point at one file or a directory "
                "holding one run"
            )
        side.tasks[task] = _jsonl(paths[0], shown)
        side.files[task] = shown(paths[0])
    return side


def _slim_inspect(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """The fields of an Inspect sample the gate reads; the input kept as its fingerprint and the
    output as its first 300 characters (a sample's transcript and events can be megabytes)."""
    output = _mapping(rec.get("output"))
    choices = output.get("choices")
    if choices is not None and not (
        isinstance(choices, list) and all(isinstance(c, dict) for c in choices)
    ):
        # Inspect's ModelOutput.choices is a list of ChatCompletionChoice objects.
        raise LogError(
            f"{where}: output.choices must be a list of objects, got {_text(choices, 60)}"
        )
    completion = output.get("completion")
    if completion is None and choices:
        message = choices[0].get("message")
        completion = message.get("content") if isinstance(message, dict) else None
    sid = rec.get("id")
    if sid is not None:
        if isinstance(sid, bool) or not isinstance(sid, (int, str)):
            raise LogError(f"{where}: a sample id must be text or an integer, got {_text(sid, 60)}")
        if isinstance(sid, int) and abs(sid) >= 2**63:
            raise LogError(f"{where}: the sample id {str(sid)[:30]}… is out of range")
        if isinstance(sid, str):
            _name(sid, "sample id", where)
    epoch = rec.get("epoch", 1)
    if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch < 1_000_000:
        raise LogError(f"{where}: sample {_text(sid, 60)}: the epoch must be a small integer")
    return {
        "id": sid,
        "epoch": epoch,
        "scores": _mapping(rec.get("scores")),
        "metadata": _mapping(rec.get("metadata")),
        "error": rec.get("error"),
        "target": rec.get("target"),
        "output": "" if isinstance(completion, list) or completion is None else _text(completion, 300),
        "fingerprint": _hash(rec.get("input")),
    }


def _inspect_side(source: str, header: dict[str, Any], samples: list[dict[str, Any]]) -> EvalLogSide:
    spec = header.get("eval")
    if not isinstance(spec, dict) or "task" not in spec:
        raise LogError(f"{source}: not an Inspect eval log (no eval.task)")
    if header.get("status") not in (None, "success"):
        raise LogError(
            f"{source}: the Inspect log's status is {_text(header.get('status'), 60)!r}, not "
            "'success'; gate only complete evaluations"
        )
    if not samples:
        raise LogError(f"{source}: the Inspect log has no samples (was it written with log_samples?)")
    model = spec.get("model")
    side = EvalLogSide(
        source=source,
        format="inspect",
        model=_name(model, "model name (eval.model)", source) if isinstance(model, str) else None,
    )
    task = _name(str(spec["task"]).rsplit("/", 1)[-1], "task name", source)
    side.tasks[task] = samples
    side.files[task] = source
    return side


def _read_inspect_zip(path: Path, shown: Shown) -> EvalLogSide:
    where = shown(path)
    size = path.stat().st_size
    if size > limits.MAX_LOG_BYTES:
        raise LogError(
            f"{where}: {size:,} bytes; a log file is read up to {limits.MAX_LOG_BYTES:,} bytes"
        )
    budget = ZipBudget(where)
    with path.open("rb") as fh, zip_members(fh, where) as z:
        infos = {i.filename: i for i in z.infolist()}
        if "header.json" not in infos:
            raise LogError(f"{where}: not an Inspect .eval log (no header.json)")
        header = load_json(
            read_member(z, fh, infos["header.json"], budget), f"{where}, member header.json"
        )
        if not isinstance(header, dict):
            raise LogError(f"{where}: header.json is not a JSON object")
        samples = []
        for name in sorted(infos):
            if not (name.startswith("samples/") and name.endswith(".json")):
                continue
            member = f"{where}, member {name[:200]}"
            rec = load_json(read_member(z, fh, infos[name], budget), member)
            if isinstance(rec, dict):
                samples.append(_slim_inspect(rec, member))
    return _inspect_side(where, header, samples)


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
    return _text(" ".join(str(label)[:1000].split()), 80)


def _listing(names: Any) -> str:
    """Up to 20 names from a log for a message, each shown safely."""
    shown = [_text(n, 80) for n in sorted(names)[:20]]
    more = len(names) - len(shown)
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


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
                f"({_listing(names)}); name this side's with --baseline-provider / "
                "--candidate-provider"
            )
        chosen = next(iter(names))
    else:
        hits = [label for label, ids in names.items() if provider in ids]
        if not hits:
            raise LogError(
                f"{source}: no provider {provider!r} in the promptfoo results (providers: "
                f"{_listing(names)})"
            )
        if len(hits) > 1:
            # Two endpoints serving the same model name share a provider id: only the labels
            # tell them apart, and guessing would gate one endpoint against itself.
            raise LogError(
                f"{source}: {provider!r} names {len(hits)} providers ({_listing(hits)}); "
                "name one by its label"
            )
        chosen = hits[0]
    side = EvalLogSide(
        source=source, format="promptfoo", model=_name(chosen, "provider", source) or None
    )
    for r in recs:
        if _promptfoo_provider(r) != chosen:
            continue
        task = _promptfoo_prompt(r)
        side.tasks.setdefault(task, []).append(r)
        side.files[task] = source
    return side


def check_upload_name(
    name: str, stream: IO[bytes], *, several: bool, provider: str | None = None
) -> None:
    """What an uploaded file's name says it is, checked before it is stored: cheap (no
    parsing; a ``.eval``'s end-of-central-directory record only). ``several``: the file is one
    of several of a side, which are read as an lm-eval output directory. ``LogError`` with the
    reason, naming the file by ``name``."""
    if several:
        if _SAMPLES.match(name) or (name.startswith("results_") and name.endswith(".json")):
            return
        raise LogError(
            f"{name}: several files of one side are read as an lm-eval --output_path directory: "
            "samples_<task>_<timestamp>.jsonl and results_*.json files only"
        )
    if provider is not None and not name.endswith(".json"):
        raise LogError(
            f"{name}: a provider is named, but only a promptfoo results file (.json) has providers"
        )
    if name.endswith(".jsonl"):
        if not _SAMPLES.match(name):  # an Every Eval Ever file is told by its first record
            first = stream.readline(limits.MAX_LOG_LINE_BYTES)
            stream.seek(0)
            if eee.looks_like_eee(first):
                return
        _lmeval_task(Path(name), _as_given)
    elif name.endswith(".eval"):
        check_zip_directory(stream, name)
    elif not name.endswith(".json"):
        raise LogError(
            f"{name}: unknown log format; expected an lm-eval samples_<task>_*.jsonl file (or "
            "the files of an --output_path directory), an Inspect log (.json or .eval) or a "
            "promptfoo results file (.json)"
        )


def read_eval_log(
    path: str | Path, *, provider: str | None = None, shown: Shown | None = None
) -> EvalLogSide:
    """Read one side (see the module docstring). Raises :class:`LogError` with the reason.

    ``provider`` picks one provider of a promptfoo results file; other formats refuse it.
    ``shown`` names a file in messages and in the side's ``source``/``files`` (default: the
    path as given; an upload's reader passes its own file names, never a server path).
    """
    p = Path(path)
    show = shown or _as_given
    where = show(p)
    if not p.exists():
        raise LogError(f"{where}: no such file or directory")
    if provider is not None and not (p.is_file() and p.suffix == ".json"):
        raise LogError(f"{where}: a provider is named, but only a promptfoo results file has providers")
    if p.is_dir():
        return _read_lmeval_dir(p, show)
    if p.suffix == ".jsonl" and eee.is_eee_file(p):
        return _read_eee(p, where)
    if p.suffix == ".jsonl":
        side = EvalLogSide(source=where, format="lm-eval", model=_lmeval_model(p.parent, show))
        task = _lmeval_task(p, show)
        side.tasks[task] = _jsonl(p, show)
        side.files[task] = where
        return side
    if p.suffix == ".eval":
        return _read_inspect_zip(p, show)
    if p.suffix == ".json":
        data = _read_json_file(p, show)
        if not isinstance(data, dict):
            raise LogError(f"{where}: not an Inspect eval log (not a JSON object)")
        body = data.get("results")
        if isinstance(body, dict) and isinstance(body.get("results"), list):
            return _read_promptfoo(where, data, provider)
        if provider is not None:
            raise LogError(
                f"{where}: a provider is named, but this is not a promptfoo results file"
            )
        if "samples" not in data and "results" in data and "configs" in data:
            raise LogError(
                f"{where}: this is lm-eval's aggregate results file, which has no per-document "
                "scores; pass the samples_<task>_*.jsonl file (or its directory) written with "
                "--log_samples"
            )
        raw = data.get("samples") or []
        if not isinstance(raw, list):
            raise LogError(f"{where}: samples is not a list")
        samples = [
            _slim_inspect(s, f"{where}, sample {i + 1}") for i, s in enumerate(raw) if isinstance(s, dict)
        ]
        return _inspect_side(where, data, samples)
    raise LogError(
        f"{where}: unknown log format; expected an lm-eval --output_path directory, a "
        "samples_<task>_*.jsonl file, an Inspect log (.json or .eval) or a promptfoo results "
        "file (.json)"
    )


# Inspect's score values (inspect_ai.scorer: CORRECT "C", INCORRECT "I", PARTIAL "P", NOANSWER
# "N") mapped as its value_to_float() does.
_INSPECT_VALUES = {"C": 1.0, "I": 0.0, "P": 0.5, "N": 0.0, "yes": 1.0, "no": 0.0,
                   "true": 1.0, "false": 0.0}


def score_value(value: Any, *, what: str) -> float:
    """A per-document metric value as a float (bools, numbers, Inspect's letter grades).
    Refused (``LogError``): anything else, and numbers that are not finite or are beyond
    ``MAX_LOG_SCORE`` in absolute value (the statistics overflow to inf/NaN on them)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    number: float | None = None
    if isinstance(value, (int, float)):
        number = float(value) if abs(value) <= limits.MAX_LOG_SCORE else math.inf
    elif isinstance(value, str):
        if value in _INSPECT_VALUES or value.lower() in _INSPECT_VALUES:
            return _INSPECT_VALUES.get(value, _INSPECT_VALUES.get(value.lower(), 0.0))
        try:
            number = float(value[:100])
        except ValueError:
            number = None
    if number is None:
        raise LogError(
            f"{what}: the score {_text(value, 60)!r} is not a number, a boolean or a grade "
            "(C/I/P/N); pick a scalar metric"
        )
    if not math.isfinite(number) or abs(number) > limits.MAX_LOG_SCORE:
        raise LogError(
            f"{what}: the score {_text(value, 60)} is not finite or beyond ±{limits.MAX_LOG_SCORE:g}; "
            "scores are refused past that"
        )
    return number


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _hash(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _label(value: Any) -> str:
    return _text(value, 80)


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
    for name in filters:
        _name(name, "filter name", where)
    if not filters:
        return None
    if wanted is None:
        return filters[0]
    if wanted not in filters:
        raise LogError(
            f"{where}: no filter {wanted!r} in the log (filters: {', '.join(filters[:20])})"
        )
    return wanted


def default_metric(side: EvalLogSide, task: str) -> str:
    """The metric gated when none is named: lm-eval's first listed per-document metric, or the
    first Inspect scorer."""
    records = side.tasks[task]
    first = records[0] if records else {}
    if side.format == "lm-eval":
        names = first.get("metrics")
        if isinstance(names, list) and names:
            return _name(names[0], "metric name", side.files.get(task, side.source))
        return "acc"
    if side.format == "promptfoo":
        return "pass"
    if side.format == "eee":
        return str(first.get("result") or "score")
    scores = first.get("scores") or {}
    if isinstance(scores, dict) and scores:
        return _name(next(iter(scores)), "scorer name", side.files.get(task, side.source))
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
            line = f"{side.files.get(task, side.source)}:{rec.get('_line', '?')} (task {task})"
            doc_id = _doc_id(rec["doc_id"], line)
            key = f"doc{doc_id}"
            if key in out:
                raise LogError(f"{line}: document id {doc_id} appears twice")
            raw_listed = rec.get("metrics")
            listed: list[Any] = raw_listed if isinstance(raw_listed, list) else []
            if metric not in rec or metric.startswith("_"):
                have = [m for m in listed if isinstance(m, str) and m in rec] or sorted(
                    k for k, v in rec.items()
                    if isinstance(v, (int, float, bool)) and not k.startswith("_")
                )
                raise LogError(
                    f"{line}: no metric {metric!r} in document {doc_id} "
                    f"(per-document metrics: {', '.join(_text(h, 60) for h in have[:20]) or 'none'})"
                )
            doc = _mapping(rec.get("doc"))
            slices = _slices(slice_fields, doc, f"document {doc_id}", line, ("column", "columns"))
            out[key] = LogRecord(
                key=key,
                score=score_value(rec[metric], what=f"{line}, document {doc_id}, field {metric}"),
                error=None,
                output=str(rec.get("filtered_resps")),
                target=_scalar(rec.get("target")),
                fingerprint=(
                    _text(rec["doc_hash"], 200) if rec.get("doc_hash") else _hash(rec.get("doc"))
                ),
                slices=slices,
                metrics={
                    _text(m, 100): _scalar(rec[m]) for m in listed[:50]
                    if isinstance(m, str) and m in rec
                },
            )
        return out, notes
    if side.format == "promptfoo":
        return _promptfoo_records(records, where, metric, slice_fields), notes
    if side.format == "eee":
        return _eee_records(records, where, metric, slice_fields), notes
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
            err_text = _text(error.get("message") if isinstance(error, dict) else error, 1000)
        elif metric not in scores:
            raise LogError(
                f"{where}: no scorer {metric!r} in sample {sid} "
                f"(scorers: {', '.join(_text(k, 60) for k in sorted(scores)[:20]) or 'none'})"
            )
        else:
            entry = scores[metric]
            value = entry.get("value") if isinstance(entry, dict) else entry
            score = score_value(value, what=f"{where}, sample {sid}, scorer {metric}")
        out[key] = LogRecord(
            key=key,
            score=score,
            error=err_text,
            output=str(rec.get("output") or ""),
            target=_scalar(rec.get("target")),
            fingerprint=str(rec.get("fingerprint")),
            slices=slices,
            metrics={
                _text(k, 100): _scalar(v.get("value") if isinstance(v, dict) else v)
                for k, v in list(scores.items())[:50]
            },
        )
    return out, notes


def _read_eee(path: Path, where: str) -> EvalLogSide:
    records = eee.read_file(path, where)
    model = records[0]["model"]
    side = EvalLogSide(
        source=where, format="eee", model=_name(model, "model id (model_id)", where) if model else None
    )
    for rec in records:
        task = _name(rec["task"], "evaluation name", rec["_where"])
        side.tasks.setdefault(task, []).append(rec)
        side.files[task] = where
    return side


def _eee_records(
    records: list[dict[str, Any]], where: str, metric: str, slice_fields: Sequence[str]
) -> dict[str, LogRecord]:
    """Every Eval Ever records of one ``evaluation_name`` whose ``evaluation_result_id`` is
    ``metric`` (``score`` picks records without one), keyed by ``sample_id``; a record with an
    ``error`` is an errored document (the schema requires a score even then)."""
    out: dict[str, LogRecord] = {}
    results = list(dict.fromkeys(str(r["result"] or "score") for r in records))
    for rec in records:
        if str(rec["result"] or "score") != metric:
            continue
        key = _name(rec["sample_id"], "sample id", rec["_where"])
        if key in out:
            raise LogError(f"{rec['_where']}: sample {key} appears twice for {metric}")
        error = rec["error"]
        meta = _mapping(rec["metadata"])
        out[key] = LogRecord(
            key=key,
            score=None if error else score_value(rec["score"], what=f"{rec['_where']}, sample {key}"),
            error=_text(error, 1000) if error else None,
            output=rec["output"],
            target=_scalar(rec["reference"]),
            fingerprint=_text(rec["fingerprint"], 200) if rec["fingerprint"] else None,
            slices=_slices(slice_fields, meta, f"sample {key}", rec["_where"], ("metadata field", "fields")),
            metrics={metric: rec["score"]},
        )
    if not out:
        raise LogError(
            f"{where}: no records with evaluation_result_id {metric!r} "
            f"(ids: {', '.join(_text(r, 60) for r in results[:20])})"
        )
    return out


def _promptfoo_records(
    records: list[dict[str, Any]], where: str, metric: str, slice_fields: Sequence[str]
) -> dict[str, LogRecord]:
    """promptfoo results as records: ``pass`` is the test's ``success`` (all assertions
    passed), ``score`` its weighted assertion score, any other name a ``namedScores`` metric."""
    out: dict[str, LogRecord] = {}
    for rec in records:
        idx = rec.get("testIdx")
        if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < 2**63:
            raise LogError(f"{where}: a result has no testIdx (a non-negative integer)")
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
            err_text = _text(rec.get("error") or response.get("error") or "provider error", 1000)
        elif metric == "pass":
            score = score_value(bool(rec.get("success")), what=f"{where}, test {idx}, pass")
        elif metric == "score":
            score = score_value(rec.get("score"), what=f"{where}, test {idx}, score")
        elif metric in named:
            score = score_value(named[metric], what=f"{where}, test {idx}, {metric}")
        else:
            raise LogError(
                f"{where}: no metric {metric!r} in test {idx} (metrics: pass, score"
                + "".join(f", {_text(k, 60)}" for k in sorted(named)[:20])
                + ")"
            )
        output = response.get("output")
        asserts = case.get("assert")
        first = asserts[0] if isinstance(asserts, list) and asserts else {}
        out[key] = LogRecord(
            key=key,
            score=score,
            error=err_text,
            output=_text(output, 300) if output is not None else "",
            target=_scalar(_mapping(first).get("value")),
            fingerprint=_hash(variables),
            slices=slices,
            metrics={
                "pass": bool(rec.get("success")),
                "score": _scalar(rec.get("score")),
                **{_text(k, 100): _scalar(v) for k, v in list(named.items())[:50]},
            },
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
