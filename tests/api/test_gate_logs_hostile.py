"""Hostile log files (issue 37, N2 and N7): each one the red team's probes answered with a 500,
or a traceback and exit 1, is now a data error naming the file as its user knows it.

Over REST (the real API server on loopback, SQLite and PostgreSQL, and a real ``Worker`` with
the default executor) an upload is refused with 422 when its name or zip directory says enough,
or it is queued (202) and the worker ends its run ``error`` with the reason; never a 500, and no
message names a server path. Through the CLI (``evalsvc gate-logs``, the Typer app in this
process; one case as a real interpreter) every case exits 2 with the reason on stderr, never a
traceback or exit 1.
"""

from __future__ import annotations

import functools
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalsvc import limits
from evalsvc.scheduler import default_executor
from tests.fixtures.cli import run_cli, run_cli_process
from tests.services.test_gatelogs import FIXTURES, STAMP, write_lmeval

from .conftest import Api

LM_NAME = f"samples_toy_{STAMP}.jsonl"
INSPECT = json.loads((FIXTURES / "inspect_baseline.json").read_text())


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _lm(tmp: Path, first: str | bytes) -> bytes:
    """A valid lm-eval samples file of 40 documents whose first line is ``first``."""
    path = write_lmeval(tmp / "valid", [1.0, 0.0] * 20)
    lines = path.read_bytes().splitlines(keepends=True)
    head = first.encode() if isinstance(first, str) else first
    return head + b"\n" + b"".join(lines[2:])


def _line(**fields: Any) -> str:
    """The first record of a valid samples file with ``fields`` replaced (raw JSON text for
    values given as ``RAW(...)``)."""
    base = {
        "doc_id": 0, "doc": {"question": "q0"}, "target": "x", "filter": "strict-match",
        "metrics": ["exact_match"], "doc_hash": "h0", "exact_match": 1.0,
    }
    raw = {k: v for k, v in fields.items() if isinstance(v, RAW)}
    base.update({k: v for k, v in fields.items() if not isinstance(v, RAW)})
    text = json.dumps(base)
    for key, value in raw.items():
        text = text.replace(f'"{key}": {json.dumps(base[key])}', f'"{key}": {value}', 1)
    return text


class RAW(str):
    """A JSON value written as given (Infinity, 1e400, 5,000 digits)."""


def _inspect(mutate: Callable[[dict[str, Any]], None]) -> bytes:
    log = json.loads(json.dumps(INSPECT))
    mutate(log)
    return json.dumps(log).encode()


def _inspect_raw(replace: tuple[str, str]) -> bytes:
    text = json.dumps(INSPECT)
    assert replace[0] in text
    return text.replace(replace[0], replace[1], 1).encode()


def _eval(header: bytes | None = None, member: bytes | None = None, zstd: bool = False) -> bytes:
    """An Inspect ``.eval`` zip of the hand-written baseline log, with a header or a first
    sample member replaced; ``zstd``: members compressed with Zstandard, as Inspect writes them."""
    log = json.loads(json.dumps(INSPECT))
    samples = log.pop("samples")
    buf = io.BytesIO()
    method = zipfile.ZIP_DEFLATED
    if zstd:
        import zipfile_zstd

        method = zipfile_zstd.ZIP_ZSTANDARD
    with zipfile.ZipFile(buf, "w", compression=method) as z:
        z.writestr("header.json", header if header is not None else json.dumps(log))
        for i, s in enumerate(samples):
            body = member if (i == 0 and member is not None) else json.dumps(s).encode()
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", body)
    return buf.getvalue()


@functools.cache
def _many_members() -> bytes:
    """A zip whose central directory holds one member more than a log may have (whatever its
    end record declares, every entry is counted)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("header.json", json.dumps({k: v for k, v in INSPECT.items() if k != "samples"}))
        for i in range(limits.MAX_LOG_MEMBERS):
            z.writestr(f"samples/{i}.json", b"")
    return buf.getvalue()


def _promptfoo_nul() -> bytes:
    data = json.loads((FIXTURES / "promptfoo_qa.json").read_text())
    data["results"]["results"][0]["provider"] = {"id": "x", "label": "bf\x0016"}
    return json.dumps(data).encode()


def _choices(value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(log: dict[str, Any]) -> None:
        log["samples"][0]["output"] = {"choices": value}

    return mutate


def _model(log: dict[str, Any]) -> None:
    log["eval"]["model"] = "openai/m\x00odel"


def _surrogate_model(log: dict[str, Any]) -> None:
    log["eval"]["model"] = "\ud800"  # json.dumps writes it as the escape "\\ud800"


def _eee_surrogate() -> bytes:
    """An Every Eval Ever samples file (the package converter's, ``lmeval_eee``) whose records
    name the model ``"\\ud800"``: JSON that decodes to a lone surrogate."""
    (path,) = (FIXTURES / "lmeval_eee" / "eee" / "fp8-kv").glob("*_samples.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return "".join(json.dumps({**r, "model_id": "\ud800"}) + "\n" for r in records).encode()


def _score(value: float) -> Callable[[dict[str, Any]], None]:
    def mutate(log: dict[str, Any]) -> None:
        entry = log["samples"][0]["scores"]
        entry[next(iter(entry))]["value"] = value

    return mutate


def _many_containers(n: int = limits.MAX_JSON_CONTAINERS) -> str:
    return "[" + ",".join(["{}"] * (n + 10)) + "]"


def _deep_doc(n: int) -> str:
    return '{"a":' * n + "1" + "}" * n


#: (case, file name, bytes builder(tmp), what the refusal says). The lm-eval cases pair with a
#: valid lm-eval candidate, the Inspect ones with the hand-written Inspect candidate.
CASES: list[tuple[str, str, Callable[[Path], bytes], str]] = [
    ("doc_id-text", LM_NAME, lambda t: _lm(t, _line(doc_id="abc")), "doc_id must be"),
    ("doc_id-null", LM_NAME, lambda t: _lm(t, _line(doc_id=None)), "doc_id must be"),
    ("doc_id-list", LM_NAME, lambda t: _lm(t, _line(doc_id=[1])), "doc_id must be"),
    ("doc_id-Infinity", LM_NAME, lambda t: _lm(t, _line(doc_id=RAW("Infinity"))), "doc_id must be"),
    ("doc_id-1e400", LM_NAME, lambda t: _lm(t, _line(doc_id=RAW("1e400"))), "doc_id must be"),
    ("doc_id-5000-digits", LM_NAME, lambda t: _lm(t, _line(doc_id=RAW("7" * 5000))),
     "a number of 5,000 characters"),
    ("line-100k-deep", LM_NAME, lambda t: _lm(t, _line(doc=RAW(_deep(100_000)))), "nested more than"),
    ("doc-985-deep", LM_NAME, lambda t: _lm(t, _line(doc=RAW(_deep_doc(985)))), "nested more than"),
    ("not-utf8", LM_NAME, lambda t: _lm(t, _line(target="x").encode().replace(b'"x"', b'"\xff\xfe"')),
     "not UTF-8"),
    ("score-1e308", LM_NAME, lambda t: _lm(t, _line(exact_match=1e308)), "beyond"),
    ("score--1e308", LM_NAME, lambda t: _lm(t, _line(exact_match=-1e308)), "beyond"),
    ("line-1M-containers", LM_NAME, lambda t: _lm(t, _line(doc=RAW(_many_containers()))),
     "JSON objects and arrays"),
    ("inspect-100k-deep", "inspect_b.json",
     lambda t: _inspect_raw(('"metadata": {', f'"deep": {_deep(100_000)}, "metadata": {{')),
     "nested more than"),
    ("inspect-not-utf8", "inspect_b.json", lambda t: _inspect_raw(('"q1"', '"q1')) + b"\xc3\x28",
     "not UTF-8"),
    ("inspect-4M-containers", "inspect_b.json",
     lambda t: _inspect_raw(
         ('"metadata": {', f'"x": {_many_containers(limits.MAX_JSON_FILE_CONTAINERS)}, "metadata": {{')
     ),
     "JSON objects and arrays"),
    ("choices-string", "inspect_b.json", lambda t: _inspect(_choices("abc")), "output.choices"),
    ("choices-[5]", "inspect_b.json", lambda t: _inspect(_choices([5])), "output.choices"),
    ("choices-{}", "inspect_b.json", lambda t: _inspect(_choices({})), "output.choices"),
    ("inspect-score-1e308", "inspect_b.json", lambda t: _inspect(_score(1e308)), "beyond"),
    ("inspect-score--1e308", "inspect_b.json", lambda t: _inspect(_score(-1e308)), "beyond"),
    ("model-nul", "inspect_b.json", lambda t: _inspect(_model), "NUL"),
    ("model-lone-surrogate", "inspect_b.json", lambda t: _inspect(_surrogate_model),
     "the model name (eval.model) is not valid Unicode text (a lone surrogate U+D800"),
    ("eee-model_id-lone-surrogate", "eee_samples.jsonl", lambda t: _eee_surrogate(),
     "the model id (model_id) is not valid Unicode text (a lone surrogate U+D800"),
    ("promptfoo-nul-provider", "promptfoo_b.json", lambda t: _promptfoo_nul(), "providers"),
    ("eval-header-100k-deep", "inspect_b.eval", lambda t: _eval(header=_deep(100_000).encode()),
     "nested more than"),
    ("eval-too-many-members", "inspect_b.eval", lambda t: _many_members(), "zip members"),
    ("eval-member-1M-containers", "inspect_b.eval",
     lambda t: _eval(member=_many_containers().encode(), zstd=True), "JSON objects and arrays"),
]


def _candidate(name: str, tmp: Path) -> tuple[str, bytes]:
    if name.endswith(".jsonl"):
        return LM_NAME, write_lmeval(tmp / "cand", [1.0, 0.0] * 20).read_bytes()
    return "inspect_c.json", (FIXTURES / "inspect_candidate.json").read_bytes()


@pytest.mark.parametrize(("case", "name", "build", "says"), CASES, ids=[c[0] for c in CASES])
def test_the_cli_exits_2_with_the_reason(
    tmp_path: Path, case: str, name: str, build: Callable[[Path], bytes], says: str
) -> None:
    (tmp_path / "b").mkdir()
    base = tmp_path / "b" / name
    base.write_bytes(build(tmp_path))
    cand_name, cand_bytes = _candidate(name, tmp_path)
    (tmp_path / "c").mkdir()
    cand = tmp_path / "c" / cand_name
    cand.write_bytes(cand_bytes)
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "COLUMNS": "400"}
    out = run_cli("gate-logs", str(base), str(cand), env=env)
    text = " ".join(out.stderr.split())
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert says in text and str(base) in text, text


def test_the_real_interpreter_exits_2_on_one_line(tmp_path: Path) -> None:
    base = tmp_path / LM_NAME
    base.write_bytes(_lm(tmp_path, _line(doc=RAW(_deep(100_000)))))
    cand = write_lmeval(tmp_path / "c", [1.0, 0.0] * 20)
    env = {"EVALSVC_DATABASE_URL": f"sqlite:///{tmp_path / 'cli.db'}", "COLUMNS": "400"}
    out = run_cli_process("gate-logs", str(base), str(cand), env=env)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{base}:1: JSON nested more than" in lines[0], out.stderr


def test_rest_refuses_every_case_as_data_never_500(api: Api, tmp_path: Path) -> None:
    """All cases in one test per backend: the module's server and one worker pass."""
    with api.client("submit") as client:
        queued: dict[str, tuple[str, str, str]] = {}
        for i, (case, name, build, says) in enumerate(CASES):
            if i % limits.MAX_PENDING_UPLOADS == limits.MAX_PENDING_UPLOADS - 1:
                api.run_worker_once(default_executor)  # a token may have 16 waiting at once
            cand_name, cand_bytes = _candidate(name, tmp_path)
            r = client.post(
                "/gate-logs",
                files=[("baseline", (name, build(tmp_path))), ("candidate", (cand_name, cand_bytes))],
            )
            assert r.status_code in (202, 422), (case, r.status_code, r.text)
            if r.status_code == 422:
                assert says in r.text and name in r.text, (case, r.text)
            else:
                queued[case] = (r.json()["id"], name, says)
        api.run_worker_once(default_executor)
        for case, (run_id, name, says) in queued.items():
            run = api.store.get_run(run_id)
            assert run is not None and run.status.value == "error", (case, run)
            assert run.error is not None and run.error.startswith("uploaded logs refused: ")
            assert says in run.error and f"baseline log: {name}" in run.error, (case, run.error)
            assert "/tmp" not in run.error and "evalsvc-gate-logs" not in run.error
            shown = client.get(f"/runs/{run_id}")  # what a client polling the run reads
            assert shown.status_code == 200 and shown.json()["error"] == run.error
            assert api.store.log_uploads.manifest(run_id) is None
