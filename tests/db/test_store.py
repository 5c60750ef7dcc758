"""Store behaviour on both backends: runs, samples (idempotency, resume keys), snapshots,
gates, reports, the endpoint registry, API tokens, exports."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from evalsvc.cli.export import export
from evalsvc.db import Conflict, Store
from evalsvc.domain import EndpointRef, Provenance, RunStatus, Sample
from tests.fixtures.db import make_spec


def _sample(
    item: str,
    *,
    endpoint: str = "baseline",
    suite: str = "needle-4k",
    score: float | None = 1.0,
    error: str | None = None,
    repeat: int = 0,
) -> Sample:
    return Sample(
        suite=suite,
        item_id=item,
        endpoint=endpoint,
        repeat=repeat,
        output=f"out {item}",
        score=None if error else score,
        error=error,
        prompt_tokens=10,
        completion_tokens=None,
        latency_s=0.25,
        data={"depth": 0.5, "ctx": 4096},
    )


def test_create_get_and_list_runs(store: Store) -> None:
    first = store.create_run(make_spec(labels={"team": "infra"}))
    second = store.create_run(make_spec("http://other:8000/v1", ("http://127.0.0.1:9002/v1/",)))
    got = store.get_run(first.id)
    assert got is not None and got.spec == first.spec and got.status == RunStatus.queued
    assert got.created_at.tzinfo is not None and got.created_at.utcoffset().total_seconds() == 0
    assert store.get_run("missing") is None
    assert [r.id for r in store.list_runs()] == [second.id, first.id]  # newest first
    assert [r.id for r in store.list_runs(limit=1)] == [second.id]
    # by endpoint: baseline or candidate, trailing slash ignored
    assert {r.id for r in store.list_runs(endpoint_url="http://127.0.0.1:9002/v1")} == {
        first.id,
        second.id,
    }
    assert [r.id for r in store.list_runs(endpoint_url="http://other:8000/v1/")] == [second.id]
    assert store.finish_run(first.id, status=RunStatus.completed, verdict="pass")
    assert [r.id for r in store.list_runs(verdict="pass")] == [first.id]
    assert [r.id for r in store.list_runs(status=RunStatus.queued)] == [second.id]
    running = store.create_run(make_spec(), status=RunStatus.running)
    assert running.started_at is not None and running.lease_expires_at is None


def test_progress_and_finish_rules(store: Store) -> None:
    run = store.create_run(make_spec())
    store.update_progress(run.id, {"done": 3, "total": 10})
    assert store.get_run(run.id).progress == {"done": 3, "total": 10}  # type: ignore[union-attr]
    assert store.cancel_run(run.id)
    # a late in-process completion never overwrites a cancel
    assert not store.finish_run(run.id, status=RunStatus.completed, verdict="pass")
    assert store.get_run(run.id).status == RunStatus.cancelled  # type: ignore[union-attr]
    assert not store.cancel_run(run.id)


def test_samples_are_idempotent_and_errors_are_replaced(store: Store) -> None:
    run = store.create_run(make_spec())
    store.add_samples(run.id, [_sample("1"), _sample("2", error="timeout"), _sample("3")])
    # a duplicate writer (resumed run, retried batch) changes nothing for successful samples
    store.add_samples(run.id, [_sample("1", score=0.0), _sample("3", error="late failure")])
    assert store.done_keys(run.id) == {
        ("baseline", "needle-4k", "1", 0),
        ("baseline", "needle-4k", "3", 0),
    }
    # the retried errored item lands
    store.add_samples(run.id, [_sample("2", score=0.5)])
    samples = {s.item_id: s for s in store.get_samples(run.id)}
    assert len(samples) == 3 and len(store.get_samples(run.id)) == 3
    assert samples["1"].score == 1.0 and samples["2"].score == 0.5 and samples["2"].error is None
    assert samples["3"].error is None
    assert samples["1"].data == {"depth": 0.5, "ctx": 4096}
    assert samples["1"].completion_tokens is None and samples["1"].prompt_tokens == 10
    assert len(store.done_keys(run.id)) == 3
    assert store.count_samples(run.id) == {"total": 3, "errors": 0}


def test_sample_filters_repeats_and_large_batches(store: Store) -> None:
    run = store.create_run(make_spec())
    batch = [
        _sample(str(i), endpoint=e, suite=s, repeat=r)
        for i in range(150)
        for e in ("baseline", "candidate:0")
        for s in ("needle-4k", "gsm8k")
        for r in (0, 1)
    ]
    store.add_samples(run.id, batch)  # 1200 rows: more than one INSERT chunk
    store.add_samples(run.id, batch[:700])
    assert store.count_samples(run.id)["total"] == 1200
    assert len(store.get_samples(run.id, suite="gsm8k")) == 600
    assert len(store.get_samples(run.id, suite="gsm8k", endpoint="candidate:0")) == 300
    assert ("candidate:0", "gsm8k", "149", 1) in store.done_keys(run.id)
    # same key twice in one call: the last one wins, no error
    other = store.create_run(make_spec())
    store.add_samples(other.id, [_sample("x", error="e"), _sample("x", score=0.25)])
    assert [s.score for s in store.get_samples(other.id)] == [0.25]


def test_snapshots_gates_report_and_cascade(store: Store) -> None:
    run = store.create_run(make_spec())
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    baseline = EndpointRef(url="http://127.0.0.1:9001/v1", model="smollm2-bf16")
    store.save_endpoint_snapshot(
        run.id,
        role="baseline",
        endpoint=baseline,
        provenance=Provenance(engine="vllm", max_context=8192, probed_at=when, extra_field="kept"),
    )
    store.save_endpoint_snapshot(
        run.id,
        role="baseline",
        endpoint=baseline,
        provenance=Provenance(engine="vllm", version="0.9"),
    )
    snapshots = store.get_endpoint_snapshots(run.id)
    assert snapshots["baseline"][0] == baseline and snapshots["baseline"][1].version == "0.9"
    store.save_suite_snapshot(
        run.id, name="needle-4k", kind="needle", version="1", spec={"context": 4096, "seed": 7}
    )
    assert store.get_suite_snapshots(run.id) == [
        {
            "name": "needle-4k",
            "kind": "needle",
            "version": "1",
            "spec": {"context": 4096, "seed": 7},
        }
    ]
    gates = [
        {
            "candidate": "candidate:0",
            "suite": "needle-4k",
            "verdict": "pass",
            "metric": "accuracy",
            "delta": -0.01,
            "ci": [-0.03, 0.01],
            "n": 400,
        }
    ]
    store.save_gate_results(run.id, gates)
    store.save_gate_results(run.id, gates)  # replaces, no duplicates
    assert store.get_gate_results(run.id) == gates
    report = {"run_id": run.id, "verdict": "pass", "candidates": []}
    assert store.get_report(run.id) is None
    store.save_report(run.id, report)
    store.save_report(run.id, {**report, "verdict": "fail"})
    assert store.get_report(run.id) == {**report, "verdict": "fail"}
    store.add_samples(run.id, [_sample("1")])
    assert store.delete_run(run.id)
    assert store.get_report(run.id) is None and store.get_samples(run.id) == []
    assert store.get_gate_results(run.id) == [] and store.get_endpoint_snapshots(run.id) == {}


def test_endpoint_registry(store: Store) -> None:
    ref = store.upsert_endpoint(name="bf16", url="http://127.0.0.1:9001/v1", model="m")
    assert ref == EndpointRef(name="bf16", url="http://127.0.0.1:9001/v1", model="m")
    store.upsert_endpoint(name="bf16", url="http://127.0.0.1:9011/v1", api_key_env="KEY")
    store.upsert_endpoint(name="fp8", url="http://127.0.0.1:9002/v1")
    assert store.get_endpoint("bf16") == EndpointRef(
        name="bf16", url="http://127.0.0.1:9011/v1", api_key_env="KEY"
    )
    assert [e.name for e in store.list_endpoints()] == ["bf16", "fp8"]
    assert store.delete_endpoint("fp8") and not store.delete_endpoint("fp8")
    assert store.get_endpoint("fp8") is None


def test_api_tokens(store: Store) -> None:
    token, info = store.create_api_token(name="ci", scopes=["read", "submit"])
    assert info.scopes == ["read", "submit"] and token not in info.model_dump_json()
    verified = store.verify_api_token(token)
    assert verified is not None and verified.name == "ci"
    assert verified.last_used_at is not None
    assert store.verify_api_token(token + "x") is None
    with pytest.raises(Conflict):
        store.create_api_token(name="ci", scopes=["read"])
    with pytest.raises(ValueError, match="scopes"):
        store.create_api_token(name="bad", scopes=["root"])
    assert store.revoke_api_token("ci") and store.verify_api_token(token) is None
    assert [t.name for t in store.list_api_tokens()] == ["ci"]


@pytest.mark.parametrize("fmt", ["parquet", "csv", "jsonl"])
def test_export_formats(store: Store, db_url: str, tmp_path: Path, fmt: str) -> None:
    run = store.create_run(make_spec())
    store.save_endpoint_snapshot(
        run.id,
        role="baseline",
        endpoint=EndpointRef(url="http://b/v1", model="bf16"),
        provenance=Provenance(),
    )
    store.add_samples(
        run.id,
        [_sample("1"), _sample("2", error="boom"), _sample("1", endpoint="candidate:0", score=0.0)],
    )
    app = typer.Typer()
    app.command()(export)
    out = tmp_path / f"samples.{fmt}"
    result = CliRunner().invoke(
        app, [run.id, "--format", fmt, "--out", str(out), "--database-url", db_url]
    )
    assert result.exit_code == 0, result.output
    assert "wrote 3 samples" in result.output
    if fmt == "parquet":
        frame = pd.read_parquet(out)
    elif fmt == "csv":
        frame = pd.read_csv(out)
    else:
        frame = pd.read_json(out, lines=True)
    assert len(frame) == 3
    # Labels as people name the endpoints; the role is the key they are stored under.
    assert list(frame["endpoint"]) == ["127.0.0.1:9001 (smollm2-bf16)"] * 2 + [
        "127.0.0.1:9002 (smollm2-fp8)"]
    assert list(frame["role"]) == ["baseline", "baseline", "candidate:0"]
    assert frame["endpoint_url"].iloc[0] == "http://b/v1"
    assert frame["error"].iloc[1] == "boom"
    data = frame["data"].iloc[0]
    assert (data if fmt == "jsonl" else json.loads(data)) == {"ctx": 4096, "depth": 0.5}
    missing = CliRunner().invoke(
        app, ["nope", "--format", fmt, "--out", str(out), "--database-url", db_url]
    )
    assert missing.exit_code == 2 and "no run" in missing.output  # unknown run: usage error


def test_concurrent_endpoint_creates_one_wins(db_url: str) -> None:
    """create_endpoint is insert-only: of 4 racing creates of one name exactly one succeeds."""
    from concurrent.futures import ThreadPoolExecutor

    stores = [Store.from_url(db_url) for _ in range(4)]

    def create(k: int) -> str:
        try:
            stores[k].create_endpoint(name="prod", url=f"http://gpu-{k}:8000/v1")
            return "ok"
        except Conflict as err:
            assert "already exists" in str(err)
            return "conflict"

    try:
        with ThreadPoolExecutor(4) as pool:
            outcomes = sorted(pool.map(create, range(4)))
    finally:
        for s in stores:
            s.close()
    assert outcomes == ["conflict", "conflict", "conflict", "ok"]
    with Store.from_url(db_url) as store:
        assert len([e for e in store.list_endpoints() if e.name == "prod"]) == 1
