"""The report's ``basis`` from the fields it derives from, as reports of every age carry them:
a reused blessing with and without the endpoint identity fields, a stale one, a floor with and
without its endpoint and adopter, a judge, an allowed difference of the run and of the suites;
the policy's refusals; and the DSSE pre-authentication encoding against the specification's
example (github.com/secure-systems-lab/dsse, protocol.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from evalsvc.reports import basis, basis_lines, basis_of, policy_refusals
from evalsvc.services.attest import pae

NOW = datetime(2026, 12, 6, 12, 0, tzinfo=UTC)


def _suite(name: str, **extra: Any) -> dict[str, Any]:
    return {"suite": name, "kind": "reasoning", "verdict": "pass", "details": {}, **extra}


def _report(reuse: list[dict[str, Any]], allow: list[str] | None = None) -> dict[str, Any]:
    floor = {"calibration": "cal1", "measured_at": (NOW - timedelta(days=2)).isoformat(),
             "fingerprint": "f" * 16, "discordance": 0.02, "pairs": 100}
    judge = {"purpose": "judge", "name": "judge-a", "url": "http://j:8000/v1", "model": "qwen",
             "engine": "vllm", "fingerprint": "a" * 16}
    return {
        "options": {"comparability": {"allow": allow} if allow else None},
        "baseline": {"name": "gpu-a", "url": "http://10.0.0.7:8000/v1", "model": "m"},
        "baseline_reuse": reuse,
        "candidates": [{
            "role": "candidate:0", "name": None, "url": "http://10.0.0.8:8000/v1", "model": "m",
            "comparability": {"allowed": [{"field": "chat_template", "suite": None,
                                           "message": "the template differs"}]} if allow else {},
            "suites": [
                _suite("reasoning-smoke", details={"gate": {"noise_floor": floor}}),
                _suite("dataset-qa", helpers=[judge]),
                _suite("speed-smoke"),
            ],
        }],
    }


def test_a_reused_blessing_with_its_endpoint_and_one_recorded_before_identities() -> None:
    reused_new = {"suite": "reasoning-smoke", "status": "reused", "applied": True,
                  "blessing": "b1", "blessing_id": "b1", "blessed_run": "r0",
                  "endpoint": "gpu-a", "measured_at": (NOW - timedelta(days=4)).isoformat(),
                  "blessed_at": (NOW - timedelta(days=3)).isoformat(), "age_s": 3 * 86400.0,
                  "items_reused": 40}
    stale_old = {"suite": "dataset-qa", "status": "stale", "blessing_id": "b2",
                 "blessed_run": "r1", "age_s": 9 * 86400.0}
    b = basis_of(_report([reused_new, stale_old]), now=NOW)
    by = {s["suite"]: s for s in b["suites"]}
    side = by["reasoning-smoke"]["sides"]["baseline"]
    # The samples' age counts from when the blessed run measured them, not from the blessing.
    assert side == {"source": "blessing", "blessing": "b1", "blessed_run": "r0",
                    "endpoint": "gpu-a", "measured_at": reused_new["measured_at"],
                    "age_s": 4 * 86400.0, "items": 40}
    assert by["reasoning-smoke"]["sides"]["candidate:0"]["source"] == "measured"
    floor = by["reasoning-smoke"]["noise_floor"]
    assert floor["calibration"] == "cal1" and floor["age_s"] == 2 * 86400.0
    assert floor["endpoint"] is None and floor["adopted_by"] is None  # not recorded then
    stale = by["dataset-qa"]["sides"]["baseline"]
    assert stale["source"] == "measured"
    assert stale["blessing_not_used"] == {"blessing": "b2", "reason": "stale"}
    assert by["dataset-qa"]["helpers"][0]["endpoint"] == "judge-a (qwen)"
    assert b["oldest_reuse_s"] == 4 * 86400.0 and b["allowed_differences"] == []
    lines = basis_lines(b)
    assert lines[0] == "speed-smoke: every sample measured in this run, on both sides"
    assert any("reused from blessing b1 (run r0) measured on gpu-a, 4.0 days before this run, "
               "40 items" in line for line in lines)
    assert any("noise floor from calibration cal1, 2.0 days old" in line for line in lines)
    assert any("judge qwen at judge-a (qwen) (fingerprint aaaa" in line for line in lines)
    # The policy: samples 4 days old are refused at 3 days and accepted at 7.
    (why,) = policy_refusals(b, max_reuse_age_s=3 * 86400)
    assert "reasoning-smoke" in why and "blessing b1, 4.0 days" in why
    assert policy_refusals(b, max_reuse_age_s=7 * 86400, allowed_differences=False) == []


def test_a_blessing_recorded_before_measured_at_falls_back_to_its_own_age() -> None:
    old = {"suite": "reasoning-smoke", "status": "reused", "blessing_id": "b1",
           "blessed_run": "r0", "blessed_at": (NOW - timedelta(hours=5)).isoformat(),
           "age_s": 5 * 3600.0, "items_reused": 40}
    side = basis_of(_report([old]), now=NOW)["suites"][0]["sides"]["baseline"]
    assert side["age_s"] == 5 * 3600.0 and side["endpoint"] is None
    assert side["measured_at"] == old["blessed_at"]


def test_allowed_differences_say_who_allowed_them_and_the_policy_refuses_them() -> None:
    b = basis_of(_report([], allow=["chat_template"]), now=NOW)
    (d,) = b["allowed_differences"]
    assert d["allowed_by"] == "run" and d["field"] == "chat_template"
    assert d["candidate_label"] == "10.0.0.8:8000 (m)"
    assert any(line.startswith("allowed difference: 10.0.0.8:8000 (m): chat_template")
               for line in basis_lines(b))
    (why,) = policy_refusals(b, allowed_differences=False)
    assert "--no-allowed-differences" in why
    suites_allowed = _report([], allow=["chat_template"])
    suites_allowed["options"] = {}
    assert basis_of(suites_allowed, now=NOW)["allowed_differences"][0]["allowed_by"] == "suites"


def test_a_stored_basis_is_used_and_an_old_report_gets_one_derived() -> None:
    stored = {"suites": [], "allowed_differences": [], "at": "then"}
    assert basis({"basis": stored}) is stored
    assert basis(_report([]))["suites"][0]["suite"] == "reasoning-smoke"


def test_pae_is_the_dsse_specifications_encoding() -> None:
    assert pae("http://example.com/HelloWorld", b"hello world") == (
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world")
    # Lengths count bytes, not characters.
    assert pae("t", "é".encode()) == b"DSSEv1 1 t 2 \xc3\xa9"
