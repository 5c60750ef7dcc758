"""Blessed baselines from real runs (``evalsvc.services.baselines``), on SQLite and PostgreSQL.

Real runs through ``evalsvc.services.runs.compare`` against loopback servers of known behaviour
(``tests/runner/level_server.py``; each counts the reasoning items it was sent in ``seen``):

- a run after its baseline was blessed sends no item to the baseline (the candidate gets all of
  them) and reaches the verdict, Δ and p of a full run on the same items, and says so;
- a changed baseline (another max context: another provenance fingerprint) and a stale blessing
  (``EVALSVC_BASELINE_MAX_AGE``) re-run the baseline with a warning naming why and the refresh;
  ``blessed_baseline=False`` re-runs it silently;
- a blessing of three runs measures the noise floor (0 on a deterministic server); two runs, a
  run of another seed, an unfinished run and a determinism suite are refused with the fix;
- a queued run a worker executes (server mode: a catalog suite) reuses a blessing as ``compare``
  does;
- a determinism suite is never given a blessed baseline's samples, even under a matching key;
- a blessing belongs to the endpoint it was measured on (issue 47): a registered name keeps it
  when the name moves to another host, the old host by its URL measures its own baseline
  (``other-endpoint``, with the fix), and blessings or runs without a recorded endpoint are
  never reused or blessed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from evalsvc.db import Store
from evalsvc.domain import Provenance, RunStatus
from evalsvc.reports import report_schema, reuse_lines, to_markdown
from evalsvc.scheduler import Worker
from evalsvc.services import baselines, runs
from evalsvc.suites import SuiteSpec, suite_kinds
from tests.fixtures.db import (  # noqa: F401  (pytest fixtures)
    db_url,
    pg_session_url,
    sqlite_template,
)
from tests.services.real_runs import SEED, run_spec, server_pair, write_suite

GOOD = dict.fromkeys(range(1, 6), 0.8)
N = 40


@pytest.fixture
def db(db_url: str) -> Iterator[Store]:  # noqa: F811  (the fixture)
    with Store.from_url(db_url) as opened:
        yield opened


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Any, Any]]:
    """A baseline and a candidate server (building one reads every item of the seed)."""
    seeds = [SEED, SEED + 1, 7]  # 7: the catalog's reasoning-smoke, for the queued run
    with server_pair(GOOD, seeds) as both:
        yield both


@pytest.fixture
def suite_file(tmp_path: Path) -> Path:
    return write_suite(tmp_path, "bless-reasoning", N)


def _run(db: Store, pair: tuple[Any, Any], suite: Path, **options: Any) -> tuple[dict[str, Any], int, int]:
    """One real run; the report and the items each side was sent."""
    base, cand = pair
    b0, c0 = len(base.seen), len(cand.seen)
    report = runs.compare(run_spec(suite, base.url, cand.url, **options), store=db)
    return report, len(base.seen) - b0, len(cand.seen) - c0


def _gate(report: dict[str, Any]) -> tuple[Any, ...]:
    s = report["candidates"][0]["suites"][0]
    return s["verdict"], s["delta"], s["p_value"], s["n"]


def test_a_blessed_baseline_is_reused_and_gates_the_same(db: Store, pair: Any, suite_file: Path) -> None:
    full, sent_b, sent_c = _run(db, pair, suite_file)
    assert (sent_b, sent_c) == (N, N)
    [blessing] = baselines.bless(db, [full["run_id"]], note="nightly reference", by="ci")
    assert blessing["items"] == N and blessing["noise"] is None

    reused, sent_b, sent_c = _run(db, pair, suite_file)
    assert (sent_b, sent_c) == (0, N)  # no baseline request for the reusable kind
    assert _gate(reused) == _gate(full)
    jsonschema.validate(reused, report_schema())
    [entry] = reused["baseline_reuse"]
    assert entry["status"] == "reused" and entry["blessing_id"] == blessing["id"]
    assert entry["items_reused"] == N and entry["blessed_run"] == full["run_id"]
    assert 0 <= entry["age_s"] < 600
    assert not [w for w in reused["warnings"] if "blessed" in w]
    line = reuse_lines(reused)[0]
    assert blessing["id"] in line and "no baseline request" in line
    assert f"> Baseline: bless-reasoning: baseline reused from blessing {blessing['id']}" in (
        to_markdown(reused))

    # Opting out sends everything again and says nothing about the blessing.
    off, sent_b, _ = _run(db, pair, suite_file, blessed_baseline=False)
    assert sent_b == N and off["baseline_reuse"][0]["status"] == "off"
    assert _gate(off) == _gate(full)


def test_a_changed_baseline_is_run_again_with_a_warning(db: Store, pair: Any, suite_file: Path) -> None:
    base = pair[0]
    first, _, _ = _run(db, pair, suite_file)
    baselines.bless(db, [first["run_id"]])
    base.max_len = 4096  # the endpoint was redeployed with a shorter context
    try:
        again, sent_b, _ = _run(db, pair, suite_file)
    finally:
        base.max_len = 8192
    assert sent_b == N
    entry = again["baseline_reuse"][0]
    assert entry["status"] == "changed" and "endpoint.max_context" in entry["changed"]
    [warning] = [w for w in again["warnings"] if "blessed baseline" in w]
    assert "max_context" in warning and f"evalsvc baselines bless {again['run_id']}" in warning


def test_a_stale_blessing_is_run_again_with_a_warning(
    db: Store, pair: Any, suite_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, _, _ = _run(db, pair, suite_file)
    baselines.bless(db, [first["run_id"]])
    monkeypatch.setenv("EVALSVC_BASELINE_MAX_AGE", "0.001")
    again, sent_b, _ = _run(db, pair, suite_file)
    assert sent_b == N and again["baseline_reuse"][0]["status"] == "stale"
    [warning] = [w for w in again["warnings"] if "blessed baseline" in w]
    assert "EVALSVC_BASELINE_MAX_AGE" in warning and f"bless {again['run_id']}" in warning


def test_three_runs_measure_the_noise_floor_and_wrong_blessings_are_refused(
    db: Store, pair: Any, suite_file: Path
) -> None:
    ids = [_run(db, pair, suite_file)[0]["run_id"] for _ in range(3)]
    with pytest.raises(baselines.UsageError, match="at least 3 runs"):
        baselines.bless(db, ids[:2])
    [blessing] = baselines.bless(db, ids)
    assert blessing["run_id"] == ids[0] and blessing["run_ids"] == ids
    noise = blessing["noise"]
    assert noise["runs"] == 3 and noise["units"] == N
    assert noise["sd"] == 0.0 and noise["discordance"] == 0.0  # a deterministic server
    other, _, _ = _run(db, pair, suite_file, seed=SEED + 1)
    with pytest.raises(baselines.UsageError, match="differs from run"):
        baselines.bless(db, [ids[0], ids[1], other["run_id"]])
    with pytest.raises(LookupError, match="evalsvc runs list"):
        baselines.bless(db, ["nosuchrun"])
    revoked = baselines.revoke(db, blessing["id"], by="ci")
    assert revoked["revoked_at"] is not None
    again, sent_b, _ = _run(db, pair, suite_file)
    assert sent_b == N and again["baseline_reuse"][0]["status"] == "none"


def test_determinism_always_runs_both_sides(db: Store, pair: Any, suite_file: Path) -> None:
    """Even under a blessing whose key matches, a determinism suite is sent both sides."""
    assert not suite_kinds()["determinism"].baseline_reusable
    assert not suite_kinds()["speed"].baseline_reusable
    first, _, _ = _run(db, pair, suite_file)
    run = db.get_run(first["run_id"])
    assert run is not None
    det = suite_kinds()["determinism"](SuiteSpec(name="det", kind="determinism", seed=SEED))
    prov = Provenance(engine="vllm", model="m")
    snap = {"name": det.name, "kind": det.kind, "version": det.version,
            "spec": det.spec.model_dump(mode="json")}
    key = baselines.suite_key(snap, run.spec.options, prov)
    db.blessed.add(fingerprint=baselines.key_fingerprint(key), suite="det",
                   endpoint_url=run.spec.baseline.url, endpoint=run.spec.baseline.url,
                   key=key, run_ids=[run.id], items=N, noise=None, note=None, blessed_by=None)
    reuse = baselines.Reuse(db, run, [det])
    done: set[tuple[str, str, str, int]] = set()
    reuse.apply(run.spec.baseline, prov, done, endpoint=run.spec.baseline.url)
    assert done == set() and reuse.entries["det"]["status"] == "not-reusable"


def test_a_queued_run_reuses_it_too(db: Store, pair: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # loopback, as an operator allows
    base, cand = pair
    spec = run_spec("reasoning-smoke", base.url, cand.url, concurrency=4)

    def queued() -> tuple[str, int]:
        sent = len(base.seen)
        run = runs.submit(spec, store=db)
        assert Worker(db, poll_seconds=0.05, lease_seconds=30).run(once=True) == 1
        done = db.get_run(run.id)
        assert done is not None and done.status == RunStatus.completed, done
        return run.id, len(base.seen) - sent

    first, sent = queued()
    assert sent == 16
    [blessing] = baselines.bless(db, [first])
    second, sent = queued()
    assert sent == 0
    report = db.get_report(second)
    assert report is not None
    assert report["baseline_reuse"][0]["blessing_id"] == blessing["id"]


def test_more_samples_than_a_dataset_has_rows_reuses_the_blessing_of_the_same_rows(
    db: Store, tmp_path: Path
) -> None:
    """A 12-row dataset suite blessed as written; ``--samples 500`` (more than its rows: the
    same 12 items) reuses that blessing, and ``--samples 6`` (other items) does not."""
    import json

    from evalsvc.domain import EndpointRef, RunOptions, RunSpec
    from tests.fixtures.faults import base_url, fault_server

    rows = [{"id": f"r{i}", "q": f"What is {i} + 1?", "a": str(i + 1)} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    suite = tmp_path / "rows-qa.yaml"
    suite.write_text("name: rows-qa\nkind: dataset\nparams:\n  path: rows.jsonl\n  id_column: id\n"
                     "  prompt: {template: '{q}'}\n  reference: a\n  scorer: exact\n"
                     "  max_tokens: 8\n")
    with fault_server() as base, fault_server() as cand:
        def run(samples: int | None) -> dict[str, Any]:
            spec = RunSpec(baseline=EndpointRef(url=base_url(base, "ok")),
                           candidates=[EndpointRef(url=base_url(cand, "ok"))],
                           suites=[str(suite)],
                           options=RunOptions(concurrency=4, samples=samples))
            return runs.compare(spec, store=db)

        first = run(None)
        baselines.bless(db, [first["run_id"]], by="ci")
        more = run(500)
        [entry] = more["baseline_reuse"]
        assert entry["status"] == "reused" and entry["items_reused"] == 12, entry
        assert more["candidates"][0]["suites"][0]["n"] == 12
        assert any("asks for more rows" in w for w in more["warnings"]), more["warnings"]
        fewer = run(6)
        assert fewer["baseline_reuse"][0]["status"] != "reused", fewer["baseline_reuse"]


def test_a_blessing_follows_its_registered_name_not_its_host(
    db: Store, pair: Any, suite_file: Path
) -> None:
    """A blessing belongs to the endpoint it was measured on (issue 47): a registered name, which
    may move between hosts (a redeployment the operator names), keeps it; the same server by its
    URL, or a run blessed with another, is another endpoint."""
    base, cand = pair
    db.upsert_endpoint(name="gpu-a", url=base.url)
    named = runs.compare(run_spec(suite_file, base.url, cand.url, base_name="gpu-a"), store=db)
    [blessing] = baselines.bless(db, [named["run_id"]])
    assert blessing["endpoint"] == "gpu-a"

    by_url, sent_b, _ = _run(db, pair, suite_file)  # the same host, not by its name
    assert sent_b == 0  # the URL of a registered endpoint is that endpoint
    assert by_url["baseline_reuse"][0]["endpoint"] == "gpu-a"

    db.upsert_endpoint(name="gpu-a", url=cand.url)  # gpu-a moved to the other host
    b0, c0 = len(base.seen), len(cand.seen)
    moved = runs.compare(run_spec(suite_file, cand.url, base.url, base_name="gpu-a"), store=db)
    assert len(cand.seen) - c0 == 0 and len(base.seen) - b0 == N  # reused on gpu-a's new host
    [entry] = moved["baseline_reuse"]
    assert entry["status"] == "reused" and entry["applied"] is True
    assert entry["endpoint"] == entry["baseline_endpoint"] == "gpu-a"
    assert "blessed on gpu-a" in entry["reason"] and entry["measured_at"]

    # The old host by its URL is no longer gpu-a: another endpoint, which measures its own.
    other, sent_b, _ = _run(db, pair, suite_file)
    assert sent_b == N
    [entry] = other["baseline_reuse"]
    assert entry["status"] == "other-endpoint" and entry["applied"] is False
    assert entry["reason"].startswith(
        f"blessed on gpu-a; this run's baseline is {base.url.split('//')[1].removesuffix('/v1')}")
    assert f"evalsvc baselines bless {other['run_id']}" in entry["reason"]
    assert any("blessed on gpu-a" in line for line in reuse_lines(other))
    jsonschema.validate(other, report_schema())
    with pytest.raises(baselines.UsageError, match="different endpoints"):
        baselines.bless(db, [named["run_id"], other["run_id"], moved["run_id"]])


def test_blessings_and_runs_without_an_endpoint_are_never_reused(
    db: Store, pair: Any, suite_file: Path
) -> None:
    """A blessing from before endpoints were recorded (migration 0009 leaves NULL) is not
    reused, and says to bless again; a run recorded without one cannot be blessed."""
    first, _, _ = _run(db, pair, suite_file)
    [blessing] = baselines.bless(db, [first["run_id"]])
    baselines.revoke(db, blessing["id"])
    legacy = db.blessed.add(
        fingerprint=blessing["fingerprint"], suite=blessing["suite"],
        endpoint_url=blessing["endpoint_url"], endpoint=None, key=blessing["key"],
        run_ids=blessing["run_ids"], items=blessing["items"], noise=None, note=None,
        blessed_by=None)
    again, sent_b, _ = _run(db, pair, suite_file)
    assert sent_b == N
    [entry] = again["baseline_reuse"]
    assert entry["status"] == "unbound" and entry["blessing"] == legacy["id"]
    assert entry["applied"] is False and "bless again" in entry["reason"]

    ref, prov = db.get_endpoint_snapshots(first["run_id"])["baseline"]
    db.save_endpoint_snapshot(first["run_id"], role="baseline", endpoint=ref, provenance=prov)
    with pytest.raises(baselines.UsageError, match="no recorded baseline endpoint"):
        baselines.bless(db, [first["run_id"]])
