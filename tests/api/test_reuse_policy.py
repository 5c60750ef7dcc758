"""Issue 47's red-team cases, staged as they were done, against a real API server (uvicorn on
loopback, tokens per scope, SQLite and PostgreSQL) and a real worker running the real runner.

The fault injected is a second OpenAI-compatible server on loopback that reports the production
endpoint's identity: the same model id, checkpoint, tokenizer and chat template (every fact the
probe reads), so its provenance fingerprint is production's, but it answers differently.

- **Blessings.** A ``submit`` token runs a baseline on the second server (it answers as badly as
  the candidate), an admin blesses that run; the production run (the real baseline against a
  candidate wrong on a third of the items) measures its own baseline and fails. The blessing
  applies to runs of the endpoint it was measured on, and only to them.
- **Allowed differences.** A ``submit`` token asking ``options.comparability.allow`` for a
  candidate with another tokenizer and template is refused (422 naming
  ``EVALSVC_ALLOWED_DIFFERENCES``) on ``/runs`` and ``/calibrations``; the run stays
  ``non-comparable`` (exit 5). What the operator's setting names, and an admin token, may; a
  worker checks a stored row again (the setting narrowed after it was queued: refused).
- **Noise floors.** A ``submit`` token calibrates the second server (a fault proxy path that
  changes answers under load: random answers) and even the production endpoint itself; neither
  floor reaches a production gate or ``plan --endpoint`` until an admin adopts it, and one
  measured on the second server never does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from evalsvc.domain import provenance_fingerprint
from evalsvc.scheduler import default_executor
from evalsvc.services.identity import normalize_base_url, shown
from tests.fixtures.cli import run_cli
from tests.fixtures.faults import base_url, fault_server
from tests.runner.fault_proxy import FaultProxy, fault_proxy
from tests.runner.level_server import LevelServer, level_server

from .conftest import Api

# reasoning-smoke's seed (the catalog's: a REST client names catalog suites only).
SEED = 7
GOOD = dict.fromkeys(range(1, 6), 0.8)
# Right on 5 of every 10 items where the baseline is right on 8: on reasoning-smoke's items at
# 48 the baseline reads 0.958 and this 0.688 (Δ −0.27), and a baseline this bad reads Δ 0.
BAD = dict.fromkeys(range(1, 6), 0.5)
ITEMS = 48


def _run(api: Api, scope: str, base: str, cand: str, **options: Any) -> str:
    body = {"baseline": {"url": base}, "candidates": [{"url": cand}],
            "suites": ["reasoning-smoke"], "options": {"concurrency": 8, **options}}
    with api.client(scope) as client:
        made = client.post("/runs", json=body)
    assert made.status_code == 202, made.text
    return str(made.json()["id"])


def _work(api: Api, runs: int = 1) -> None:
    assert api.run_worker_once(default_executor) == runs


def _report(api: Api, run_id: str) -> dict[str, Any]:
    with api.client("read") as reader:
        got = reader.get(f"/runs/{run_id}/report")
    assert got.status_code == 200, got.text
    report: dict[str, Any] = got.json()
    return report


def _fingerprint(api: Api, run_id: str) -> str:
    return provenance_fingerprint(api.store.get_endpoint_snapshots(run_id)["baseline"][1])


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[LevelServer, LevelServer, LevelServer]]:
    """Production's baseline, the second server reporting its identity (answering as badly
    as the candidate), and the candidate: three servers every probe reads as one model."""
    with level_server(GOOD, [SEED], per_level=60) as prod, \
            level_server(BAD, [SEED], per_level=60) as rogue, \
            level_server(BAD, [SEED], per_level=60) as cand:
        yield prod, rogue, cand


def test_a_blessing_measured_on_another_server_is_not_reused(api: Api, servers: Any) -> None:
    prod, rogue, cand = servers
    rogue_run = _run(api, "submit", rogue.url, cand.url, samples=ITEMS)
    _work(api)
    with api.client("submit") as submitter:  # blessing stays admin
        assert submitter.post("/baselines", json={"runs": [rogue_run]}).status_code == 403
    with api.client("admin") as admin:
        made = admin.post("/baselines", json={"runs": [rogue_run]})
    assert made.status_code == 201, made.text
    (blessing,) = made.json()
    assert blessing["endpoint"] == normalize_base_url(rogue.url)

    sent = len(prod.seen)
    prod_run = _run(api, "submit", prod.url, cand.url, samples=ITEMS)
    _work(api)
    # The fault is real: the second server's fingerprint is production's, so the blessing's
    # key matched production's baseline; only the endpoint told them apart.
    assert _fingerprint(api, prod_run) == _fingerprint(api, rogue_run)
    assert len(prod.seen) - sent == ITEMS  # production measured its own baseline
    with api.client("read") as reader:
        gate = reader.get(f"/runs/{prod_run}/gate").json()
    assert gate["verdict"] == "fail" and gate["exit_code"] == 1, gate
    report = _report(api, prod_run)
    (entry,) = report["baseline_reuse"]
    assert entry["status"] == "other-endpoint" and entry["applied"] is False
    assert entry["blessing"] == blessing["id"] and entry["endpoint"] == blessing["endpoint"]
    assert entry["baseline_endpoint"] == normalize_base_url(prod.url)
    assert isinstance(entry["age_s"], float) and entry["measured_at"]
    said = f"blessed on {shown(blessing['endpoint'])}; this run's baseline is {shown(prod.url)}"
    assert said in entry["reason"] and f"evalsvc baselines bless {prod_run}" in entry["reason"]
    assert any(said in w for w in report["warnings"])
    (suite,) = report["candidates"][0]["suites"]
    assert suite["delta"] < -0.15 and suite["ci"][1] < -0.15  # the honest Δ

    # The blessing does apply where it was measured: a run whose baseline is the second server
    # reuses its samples (nothing sent to that baseline but the probe).
    sent = len(rogue.seen)
    again = _run(api, "submit", rogue.url, cand.url, samples=ITEMS)
    _work(api)
    (entry,) = _report(api, again)["baseline_reuse"]
    assert entry["status"] == "reused" and entry["applied"] is True
    assert entry["items_reused"] == ITEMS and len(rogue.seen) == sent


def test_a_submit_token_cannot_allow_a_difference(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    with level_server(GOOD, [SEED], per_level=60) as base, \
            level_server(GOOD, [SEED], per_level=60, tokenizer_offset=3,
                         chat_template="other") as cand:
        honest = _run(api, "submit", base.url, cand.url)
        allow = {"allow": ["tokenizer", "chat_template"]}
        before = len(api.store.list_runs())
        with api.client("submit") as submitter:
            refused = submitter.post("/runs", json={
                "baseline": {"url": base.url}, "candidates": [{"url": cand.url}],
                "suites": ["reasoning-smoke"], "options": {"comparability": allow}})
            calibrating = submitter.post("/calibrations", json={
                "endpoint": {"url": cand.url}, "suites": ["reasoning-smoke"],
                "options": {"comparability": allow}})
        for answer in (refused, calibrating):
            assert answer.status_code == 422, answer.text
            detail = answer.json()["detail"]
            assert "tokenizer, chat_template refused" in detail
            assert "EVALSVC_ALLOWED_DIFFERENCES" in detail and "allow none" in detail
        assert len(api.store.list_runs()) == before  # nothing queued

        # The operator's setting names what a submitter may allow, and nothing more.
        monkeypatch.setenv("EVALSVC_ALLOWED_DIFFERENCES", "tokenizer")
        with api.client("submit") as submitter:
            half = submitter.post("/runs", json={
                "baseline": {"url": base.url}, "candidates": [{"url": cand.url}],
                "suites": ["reasoning-smoke"], "options": {"comparability": allow}})
        assert half.status_code == 422 and "chat_template refused" in half.text
        assert "allow tokenizer (EVALSVC_ALLOWED_DIFFERENCES)" in half.text
        # Admitted under the setting, then the operator narrows it before a worker runs it:
        # the worker checks the stored row again and refuses it with the reason.
        monkeypatch.setenv("EVALSVC_ALLOWED_DIFFERENCES", "tokenizer,chat_template")
        narrowed = _run(api, "submit", base.url, cand.url, comparability=allow)
        monkeypatch.delenv("EVALSVC_ALLOWED_DIFFERENCES")
        # An admin token sets policy.
        admitted = _run(api, "admin", base.url, cand.url, comparability=allow)
        _work(api, 3)

    with api.client("read") as reader:
        gate = reader.get(f"/runs/{honest}/gate").json()
        allowed = reader.get(f"/runs/{admitted}/gate").json()
        refused_later = reader.get(f"/runs/{narrowed}").json()
    assert gate["verdict"] == "non-comparable" and gate["exit_code"] == 5, gate
    assert allowed["verdict"] != "non-comparable", allowed
    assert refused_later["status"] == "error", refused_later
    assert "EVALSVC_ALLOWED_DIFFERENCES" in refused_later["error"]


def _calibrate(api: Api, url: str) -> str:
    with api.client("submit") as submitter:
        made = submitter.post("/calibrations",
                              json={"endpoint": {"url": url}, "suites": ["determinism-smoke"]})
    assert made.status_code == 202, made.text
    _work(api)
    return str(made.json()["id"])


def _floor(api: Api, url: str) -> tuple[str, dict[str, Any] | None]:
    """A production run of ``url`` (A/A, determinism-smoke) and the noise floor it is gated
    with."""
    with api.client("submit") as submitter:
        made = submitter.post("/runs", json={"baseline": {"url": url}, "candidates": [{"url": url}],
                                             "suites": ["determinism-smoke"]})
    assert made.status_code == 202, made.text
    _work(api)
    (suite,) = _report(api, made.json()["id"])["candidates"][0]["suites"]
    floor: dict[str, Any] | None = suite["details"]["gate"]["noise_floor"]
    return str(made.json()["id"]), floor


def _plan(api: Api, url: str) -> dict[str, Any]:
    done = run_cli("plan", "--suite", "determinism-smoke", "--endpoint", url, "--json",
                   env={"EVALSVC_DATABASE_URL": api.db_url})
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return dict(row)


def test_a_submitters_calibration_changes_no_production_gate_or_plan(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("EVALSVC_ALLOWED_ENDPOINTS", "127.0.0.0/8")  # plan's CLI probe too
    # determinism-smoke's mixed schedule (seed 31338) starts requests at 0.138, 0.168, 0.496,
    # 0.603, 0.748, 0.925, 1.119 and 1.756 s. Held 0.5 s, every one from 0.168 to 1.119 arrives
    # while another is in flight with at least 137 ms to spare (three of them probes), the last
    # one alone. Unheld in front of an upstream that answers at once, only the probe at 0.168
    # could overlap, and only if the one at 0.138 took 30 ms: on a host with five pytest workers
    # no answer was changed and the floor read a discordance of 0.
    with (
        fault_server() as srv,
        fault_proxy(base_url(srv, "ok"), alter_p=0.8, seed=5, hold_s=0.5) as px,
    ):
        _floors_stay_the_operators(api, px)


def _floors_stay_the_operators(api: Api, px: FaultProxy) -> None:
    rogue, prod = px.url("noisy"), px.url("pass")  # one server's two paths: one fingerprint
    rogue_cal = _calibrate(api, rogue)
    with api.client("read") as reader:
        shown_cal = reader.get(f"/calibrations/{rogue_cal}").json()
    assert shown_cal["adopted"] is False and shown_cal["submitted_by"] == "t-submit"
    floor = shown_cal["floors"]["determinism-smoke"]
    assert floor["endpoint"] == normalize_base_url(rogue) and floor["adopted_by"] is None
    assert floor["discordance"] > 0  # the random answers: a floor that would excuse anything

    prod_run, found = _floor(api, prod)
    assert found is None
    assert _fingerprint(api, prod_run) == shown_cal["fingerprint"]  # the staged fault
    assert _plan(api, prod).get("discordance_source") != "calibration"
    assert _plan(api, rogue).get("discordance_source") != "calibration"  # not adopted, not used

    # Even a submitter's calibration of production itself waits for an admin.
    prod_cal = _calibrate(api, prod)
    assert _floor(api, prod)[1] is None
    assert _plan(api, prod).get("discordance_source") != "calibration"
    with api.client("submit") as submitter:
        assert submitter.post(f"/calibrations/{prod_cal}/adopt").status_code == 403
    with api.client("admin") as admin:
        adopted = admin.post(f"/calibrations/{prod_cal}/adopt")
        assert adopted.status_code == 200, adopted.text
        assert adopted.json()["adopted_by"] == "t-admin"
        assert admin.post(f"/calibrations/{rogue_cal}/adopt").status_code == 200
        assert admin.post(f"/calibrations/{'0' * 32}/adopt").status_code == 404

    # Adopted: production's own floor, never the second server's, in the gate and the plan.
    gate_floor = _floor(api, prod)[1]
    assert gate_floor is not None and gate_floor["calibration"] == prod_cal
    assert gate_floor["endpoint"] == normalize_base_url(prod)
    assert gate_floor["adopted_by"] == "t-admin" and gate_floor["submitted_by"] == "t-submit"
    row = _plan(api, prod)
    assert row["discordance_source"] == "calibration" and prod_cal in row["discordance_note"]
