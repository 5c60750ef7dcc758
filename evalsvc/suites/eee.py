"""Every Eval Ever instance-level records: the schema, validation, and reading a file of them.

Every Eval Ever (the EvalEval Coalition's shared format for evaluation results, PyPI
``every-eval-ever``) keeps per-sample results as JSON Lines of ``InstanceLevelEvaluationLog``
records: ``evaluation_name`` (the task), ``evaluation_result_id`` (the metric, with lm-eval's
filter after a colon), ``sample_id``, ``sample_hash`` (of the input and references),
``evaluation.score``, ``output.raw`` and ``error``. Its converters write them from lm-eval,
Inspect and HELM logs.

The schema here is the package's own ``instance_level_eval.schema.json``, shipped beside this
module unchanged (``schemas/every-eval-ever/``, version :data:`SCHEMA_VERSION`, MIT licence
there). It is read from the file, not imported from the package, because ``every-eval-ever``
requires Python 3.12 and pulls in duckdb, matplotlib, seaborn and a code generator, none of
which reading or writing a record needs; the tests check records against the package's own
models and read files its own converter wrote (tests/fixtures/logs/README.md).

Contract: :func:`validate` raises ``ValueError`` naming the first violation; :func:`read_file`
returns the records of one file, slimmed to what a gate reads, or raises ``LogError``. Files
only: no sockets, no database.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from evalsvc import limits
from evalsvc.suites._logread import LogError, load_json

__all__ = ["SCHEMA_VERSION", "looks_like_eee", "read_file", "sample_hash", "schema", "validate"]

#: The Every Eval Ever schema version of the shipped schema (``every-eval-ever`` 0.3.0).
SCHEMA_VERSION = "0.3.0"


@cache
def schema() -> dict[str, Any]:
    """The instance-level JSON Schema (draft-07) as the package publishes it."""
    text = (
        resources.files("evalsvc.suites")
        .joinpath("schemas/every-eval-ever/instance_level_eval.schema.json")
        .read_text("utf-8")
    )
    loaded: dict[str, Any] = json.loads(text)
    return loaded


@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft7Validator(schema())


def validate(record: dict[str, Any], *, where: str) -> None:
    """``ValueError`` naming the first schema violation of ``record`` (at ``where``)."""
    error = next(iter(_validator().iter_errors(record)), None)
    if error is not None:
        path = "/".join(str(p) for p in error.absolute_path) or "(record)"
        raise ValueError(
            f"{where}: not an Every Eval Ever instance-level record ({path}: {error.message[:200]})"
        )


def sample_hash(raw: str, reference: Any) -> str:
    """The schema's ``sample_hash``, "a hash of (input.raw + input.reference)", computed as the
    package's lm-eval converter does (SHA-256 of the sorted JSON of both)."""
    payload = json.dumps({"raw": raw, "reference": reference}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()


def looks_like_eee(first_line: bytes) -> bool:
    """Whether a JSON Lines file's first line is an instance-level record (its required keys)."""
    try:
        rec = json.loads(first_line)
    except (ValueError, RecursionError):
        # Not this format's record: the reader that takes the file says what is wrong with it
        # (a hostile line nested past the recursion limit gets the depth bound's message).
        return False
    return isinstance(rec, dict) and {"schema_version", "evaluation_id", "sample_id"} <= rec.keys()


def _first_line(path: Path) -> bytes:
    with path.open("rb") as fh:
        while line := fh.readline(limits.MAX_LOG_LINE_BYTES + 1):
            if line.strip():
                return line
    return b""


def is_eee_file(path: Path) -> bool:
    """A ``.jsonl`` file whose first record is an instance-level record."""
    return path.suffix == ".jsonl" and looks_like_eee(_first_line(path))


def _slim(rec: dict[str, Any], where: str) -> dict[str, Any]:
    """What the gate reads of a record: the metric id, the score or the error, the
    fingerprint, the first output (cut to 300 characters), the references and metadata."""
    evaluation = rec["evaluation"]
    output = rec.get("output") or {}
    raw = output.get("raw") or [""]
    return {
        "task": rec["evaluation_name"],
        "result": rec.get("evaluation_result_id"),
        "sample_id": rec["sample_id"],
        "fingerprint": rec.get("sample_hash"),
        "score": evaluation["score"],
        "error": rec.get("error"),
        "output": str(raw[0])[:300],
        "reference": (rec.get("input") or {}).get("reference"),
        "metadata": rec.get("metadata") or {},
        "model": rec.get("model_id"),
        "_where": where,
    }


def read_file(path: Path, shown: str) -> list[dict[str, Any]]:
    """The records of one instance-level file, each validated against the schema and slimmed
    (:func:`_slim`). ``LogError`` names the line of the first bad record."""
    size = path.stat().st_size
    if size > limits.MAX_LOG_BYTES:
        raise LogError(f"{shown}: {size:,} bytes; a log file is read up to {limits.MAX_LOG_BYTES:,} bytes")
    out: list[dict[str, Any]] = []
    with path.open("rb") as fh:
        i = 0
        while line := fh.readline(limits.MAX_LOG_LINE_BYTES + 1):
            i += 1
            where = f"{shown}:{i}"
            if len(line) > limits.MAX_LOG_LINE_BYTES:
                raise LogError(f"{where}: a line longer than {limits.MAX_LOG_LINE_BYTES:,} bytes")
            if not line.strip():
                continue
            rec = load_json(line, where)
            if not isinstance(rec, dict):
                raise LogError(f"{where}: not an Every Eval Ever instance-level record")
            try:
                validate(rec, where=where)
            except ValueError as err:
                raise LogError(str(err)) from None
            out.append(_slim(rec, where))
            if len(out) > limits.MAX_LOG_RECORDS:
                raise LogError(
                    f"{shown}: more than {limits.MAX_LOG_RECORDS:,} records; a log is read up to that many"
                )
    if not out:
        raise LogError(f"{shown}: no records")
    return out
