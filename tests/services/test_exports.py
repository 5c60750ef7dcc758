"""``evalsvc export``: a run produced by the real runner, exported to MLflow and to Every Eval Ever.

The run is ``services.runs.compare`` of a tiny reasoning suite against the loopback fault server
(``/ok``: a well-formed answer), stored in a SQLite store of the module. The MLflow export goes
to a local MLflow store in ``tmp_path`` and is read back with MLflow's own ``MlflowClient``; the
Every Eval Ever export is checked against the package's schema and read back by ``gate-logs``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.services import exports, runs
from evalsvc.services.gatelogs import gate_logs
from evalsvc.suites import eee
from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server
from tests.fixtures.loopback import free_port
from tests.fixtures.runs import stored_ok_run

SUITE = "name: tiny-reasoning\nkind: reasoning\nseed: 3\nparams:\n  n: 12\n  max_tokens: 8\n"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, dict[str, Any]]:
    """(database URL, run id, report) of one real run, shared by the tests of this module."""
    tmp = tmp_path_factory.mktemp("exports")
    suite = tmp / "tiny-reasoning.yaml"
    suite.write_text(SUITE)
    url = f"sqlite:///{tmp / 'store.db'}"
    store = Store.from_url(url)
    store.ensure_ready(upgrade_fresh_sqlite=True)
    with fault_server() as srv:
        endpoint = base_url(srv, "ok")
        report = runs.compare(
            RunSpec(
                baseline=EndpointRef(url=endpoint),
                candidates=[EndpointRef(url=endpoint)],
                suites=[str(suite)],
                options=RunOptions(concurrency=4, seed=7),
            ),
            store=store,
        )
    store.close()
    return url, report["run_id"], report


def _client(uri: str) -> Any:
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def test_mlflow_export_reads_back_with_mlflows_own_client(
    stored: tuple[str, str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url, run_id, report = stored
    # MLflow 3 keeps its file store behind this switch (it recommends a database store); the
    # file store is the cheap local one for a test (no migrations of MLflow's own schema).
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    r = run_cli("export", run_id[:8], "--mlflow", uri, "--mlflow-experiment", "nightly",
                "--database-url", db_url)
    assert r.returncode == 0, r.stderr
    assert "logged" in r.stdout and "as MLflow run" in r.stdout

    client = _client(uri)
    experiment = client.get_experiment_by_name("nightly")
    (found,) = client.search_runs([experiment.experiment_id])
    got = client.get_run(found.info.run_id)
    cand = report["candidates"][0]
    suite = cand["suites"][0]
    assert got.info.status == "FINISHED"
    params = got.data.params
    assert params["evalsvc.run_id"] == run_id
    assert params["evalsvc.version"] == report["evalsvc_version"]
    assert params["baseline.url"] == report["baseline"]["url"]
    assert params["candidate.model"] == cand["model"]
    assert params["suites"] == "tiny-reasoning"
    assert params["suite.tiny-reasoning.seed"] == "7"  # the run's seed, which overrides the suite's 3
    assert params["options.seed"] == "7" and params["options.concurrency"] == "4"
    metrics = got.data.metrics
    for field in ("baseline", "candidate", "delta", "n", "margin"):
        assert metrics[f"tiny-reasoning.{field}"] == pytest.approx(suite[field]), field
    if suite["ci"][0] is not None:
        assert metrics["tiny-reasoning.ci_low"] == pytest.approx(suite["ci"][0])
    assert metrics["tiny-reasoning.verdict_code"] == runs.exit_code(suite["verdict"])
    assert metrics["verdict_code"] == runs.exit_code(cand["verdict"])
    tags = got.data.tags
    assert tags["evalsvc.verdict"] == cand["verdict"]
    assert tags["verdict.tiny-reasoning"] == suite["verdict"]
    assert tags["evalsvc.candidate"] == cand["label"]
    assert [a.path for a in client.list_artifacts(got.info.run_id)] == [exports.REPORT_ARTIFACT]
    local = client.download_artifacts(got.info.run_id, exports.REPORT_ARTIFACT, str(tmp_path))
    assert json.loads(Path(local).read_text()) == report

    # Exporting again finds the MLflow run by its tags and logs nothing twice.
    again = run_cli("export", run_id, "--mlflow", uri, "--mlflow-experiment", "nightly",
                    "--database-url", db_url)
    assert again.returncode == 0 and "already logged" in again.stdout
    assert len(client.search_runs([experiment.experiment_id])) == 1


def test_mlflow_refusals_exit_2_with_the_fix_and_an_unreachable_server_4(
    stored: tuple[str, str, dict[str, Any]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db_url, run_id, _ = stored
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    r = run_cli("export", run_id, "--mlflow", uri, "--database-url", db_url)
    assert r.returncode == 2 and "MLFLOW_ALLOW_FILE_STORE" in r.stderr, r.stderr
    # A tracking server that does not answer: an infrastructure error (exit 4), not a traceback.
    closed = free_port()
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    r = run_cli("export", run_id, "--mlflow", f"http://127.0.0.1:{closed}", "--database-url", db_url)
    assert r.returncode == 4 and f"MLflow at http://127.0.0.1:{closed}" in r.stderr, r.stderr
    # Without MLflow installed (an import of it fails, as in a venv without the extra).
    monkeypatch.setitem(sys.modules, "mlflow", None)
    r = run_cli("export", run_id, "--mlflow", uri, "--database-url", db_url)
    assert r.returncode == 2 and "pip install 'evalsvc[mlflow]'" in r.stderr, r.stderr


def test_eee_export_is_schema_valid_and_gate_logs_reads_it_back(
    stored: tuple[str, str, dict[str, Any]], tmp_path: Path
) -> None:
    db_url, run_id, report = stored
    out = tmp_path / "eee"
    r = run_cli("export", run_id, "--format", "eee", "--out", str(out), "--database-url", db_url)
    assert r.returncode == 0, r.stderr
    base, cand = out / f"{run_id}_baseline.jsonl", out / f"{run_id}_candidate-0.jsonl"
    records = [json.loads(line) for line in base.read_text().splitlines()]
    assert len(records) == 12
    for rec in records:
        eee.validate(rec, where="export")
    assert records[0]["evaluation_name"] == "tiny-reasoning"
    assert records[0]["evaluation_result_id"] == report["candidates"][0]["suites"][0]["metric"]

    # gate-logs on the two exported files pairs the same items and reads the same means.
    store = Store.from_url(db_url)
    try:
        logged = gate_logs(base, cand, store=store)
    finally:
        store.close()
    direct = report["candidates"][0]["suites"][0]
    g = logged["candidates"][0]["suites"][0]
    assert g["details"]["log_pairs"]["paired"] == direct["n"] == 12
    for key in ("baseline", "candidate", "delta"):
        assert g[key] == pytest.approx(direct[key]), key


def test_eee_reader_refuses_a_record_outside_the_schema(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"schema_version": "0.3.0", "evaluation_id": "e", "sample_id": "1"}) + "\n")
    other = tmp_path / "other.jsonl"
    other.write_text(bad.read_text())
    r = run_cli("gate-logs", str(bad), str(other))
    assert r.returncode == 2
    assert "bad.jsonl:1: not an Every Eval Ever instance-level record" in r.stderr, r.stderr


def test_eee_export_keeps_a_dataset_suites_references(tmp_path: Path) -> None:
    """A ``dataset`` suite keeps each row's reference as ``data["reference"]``; the export
    reads it through the kind's own ``expected_answer`` (it wrote ``"reference": []``)."""
    rows = [{"id": f"r{i}", "question": f"What is {i} + {i}?", "answer": str(2 * i)}
            for i in range(6)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = tmp_path / "qa.yaml"
    suite.write_text("name: qa\nkind: dataset\nparams:\n  path: rows.jsonl\n  id_column: id\n"
                     "  prompt: {template: 'Question: {question}'}\n  reference: answer\n"
                     "  scorer: exact\n  max_tokens: 8\n")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    report = stored_ok_run(suite, url)
    out = tmp_path / "eee"
    r = run_cli("export", report["run_id"], "--format", "eee", "--out", str(out),
                "--database-url", url)
    assert r.returncode == 0, r.stderr
    records = [json.loads(line)
               for line in (out / f"{report['run_id']}_baseline.jsonl").read_text().splitlines()]
    answers = {r["id"]: r["answer"] for r in rows}
    assert sorted(rec["sample_id"] for rec in records) == sorted(answers)
    for rec in records:
        eee.validate(rec, where="export")
        assert rec["input"]["reference"] == [answers[rec["sample_id"]]], rec["input"]
        assert "Question: What is" in rec["input"]["raw"]
