"""The run page's decision (evalsvc.services.run_verdict): banner and gates table on one scale.

The report comes from the runner's own combination (``evalsvc.gates.decide``) over real gate
outcomes; the next step's n is the planning service's, with this run as the pilot.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, Provenance, RunOptions, RunSpec, RunStatus
from evalsvc.gates import SuiteGate, combine_candidates, decide, evaluate_gate, threshold_gate
from evalsvc.reports import build_report
from evalsvc.runner import CandidateResult, RunResult, SuiteResult
from evalsvc.services import planning, run_verdict
from tests.fixtures.db import sqlite_template  # noqa: F401  (fixture)


@pytest.fixture
def one_store(tmp_path: Path, sqlite_template: Path) -> Iterator[Store]:  # noqa: F811
    import shutil

    path = tmp_path / "evalsvc.db"
    shutil.copy(sqlite_template, path)
    with Store.from_url(f"sqlite:///{path}") as s:
        yield s


def _report(store: Store) -> tuple[str, dict]:  # type: ignore[type-arg]
    rng = np.random.default_rng(3)
    # reasoning-smoke at n = 16: a candidate like the baseline with a few flips cannot pass at
    # margin 0.15 (the MDE is above it): inconclusive and underpowered.
    base = (rng.random(16) < 0.6).astype(float)
    cand = base.copy()
    cand[:3] = 1 - cand[:3]
    reasoning = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=0.15)
    reasoning = replace(reasoning, details={
        **reasoning.details, "underpowered": "underpowered: the MDE at n = 16 is above the margin"})
    kld = threshold_gate(rng.gamma(2.0, 0.01, 40), metric="kld_mean", threshold=0.05,
                         higher_is_better=False)
    speed = evaluate_gate(rng.lognormal(4, 0.1, 20), rng.lognormal(3.9, 0.1, 20),
                          metric="request_output_tok_s", kind="ratio", margin=0.05)
    suites = [
        SuiteResult("reasoning-smoke", "reasoning", "1", reasoning, 0, 16, True,
                    {"gate": {"gate": "noninferiority", "higher_is_better": True}}),
        SuiteResult("drift-smoke", "drift", "1", kld, 0, 40, True,
                    {"gate": {"gate": "threshold", "threshold": 0.05, "higher_is_better": False}}),
        SuiteResult("speed-smoke", "speed", "1", speed, 0, 20, False, {}),
    ]
    prov = Provenance(model="m")
    cres = CandidateResult("candidate:0", EndpointRef(url="http://127.0.0.1:9002/v1", model="c"),
                           prov, suites)
    d = decide([SuiteGate(s.suite, s.outcome, s.gated) for s in suites])
    for s, sd in zip(suites, d.suites, strict=True):
        s.outcome, s.reasons = sd.outcome, list(sd.reasons)
    cres.verdict, cres.reasons = d.verdict, list(d.reasons)
    verdict, reasons = combine_candidates([("candidate:0", d)])
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9001/v1"),
                   candidates=[EndpointRef(url="http://127.0.0.1:9002/v1")],
                   suites=["reasoning-smoke", "drift-smoke", "speed-smoke"])
    run = store.create_run(spec, status=RunStatus.running)
    result = RunResult(run.id, verdict, EndpointRef(url="http://127.0.0.1:9001/v1", model="b"),
                       prov, [cres], options=RunOptions(), reasons=list(reasons))
    report = build_report(result)
    store.save_report(run.id, report)
    store.finish_run(run.id, status=RunStatus.completed, verdict=verdict)
    return run.id, report


def test_banner_names_the_blocking_gate_its_reasons_and_the_planned_n(one_store: Store) -> None:
    run_id, report = _report(one_store)
    assert report["verdict"] == "inconclusive"
    run = one_store.get_run(run_id)
    assert run is not None
    b = run_verdict.banner(one_store, run, report)
    assert b["verdict"] == "inconclusive" and b["headline"].startswith("Cannot tell yet")
    (blocking,) = b["blocking"]  # drift passes, speed is not gated
    assert blocking["suite"] == "reasoning-smoke"
    codes = [r["code"] for r in blocking["reasons"]]
    assert "underpowered" in codes and "ci_includes_margin" in codes
    # The next step's n is what `evalsvc plan --suite reasoning-smoke --pilot-run RUN` says.
    (row,) = planning.plan(suites=["reasoning-smoke"], margin=None, alpha=None,
                           pilot_run=run_id, store=one_store)
    text = b["next"][0]["text"]
    assert f"evalsvc plan --suite reasoning-smoke --pilot-run {run_id[:12]}" in text
    assert f"says n = {row['required_items']} items" in text
    assert any(r["code"] == "not_gated" and r["suite"] == "speed-smoke" for r in b["info"])


def test_gates_table_one_oriented_scale_threshold_and_informational_rows(one_store: Store) -> None:
    _, report = _report(one_store)
    table = run_verdict.gate_table(report)
    rows = {r["suite"]: r for r in table["rows"]}
    axis = table["axis"]
    assert axis["lo"] <= -2 and axis["hi"] >= 1
    assert [t["value"] for t in axis["ticks"]] == list(range(int(axis["lo"]), int(axis["hi"]) + 1))
    # Drift: the metric, its own CI and the threshold; on the scale KLD 0 sits at 0, the
    # threshold at −1 (the margin line), and lower KLD is further right.
    drift = rows["drift-smoke"]
    assert drift["view"]["baseline"] == "—" and drift["view"]["delta"] == "—"
    assert drift["view"]["limit"] == "threshold < 0.05"
    kld = report["candidates"][0]["suites"][1]
    assert math.isclose(drift["scaled"]["at"], -kld["candidate"] / 0.05)
    assert drift["bar"]["margin"] == axis["margin"] and drift["bar"]["zero"] == axis["zero"]
    lo_ci, hi_ci = kld["details"]["ci_metric"]
    assert math.isclose(drift["scaled"]["lo"], -hi_ci / 0.05)  # the worse end is on the left
    # Reasoning (higher is better): Δ/δ; its MDE above the margin is flagged.
    reasoning = rows["reasoning-smoke"]
    r = report["candidates"][0]["suites"][0]
    assert math.isclose(reasoning["scaled"]["at"], r["delta"] / 0.15)
    assert reasoning["mde_flag"]
    # Speed is informational, not an amber inconclusive.
    assert rows["speed-smoke"]["informational"] and not rows["reasoning-smoke"]["informational"]


def _binary_run(
    store: Store, base: np.ndarray, cand: np.ndarray, margin: float,  # type: ignore[type-arg]
    labels: dict[str, str] | None = None,
) -> tuple[str, dict]:  # type: ignore[type-arg]
    """A stored run of one reasoning-smoke gate over these per-item scores, gated and reported
    as the runner does (``evaluate_gate``, ``decide``, ``build_report``)."""
    outcome = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=margin)
    suite = SuiteResult("reasoning-smoke", "reasoning", "1", outcome, 0, len(base), True,
                        {"gate": {"gate": "noninferiority", "higher_is_better": True}})
    prov = Provenance(model="m")
    cres = CandidateResult("candidate:0", EndpointRef(url="http://127.0.0.1:9002/v1", model="c"),
                           prov, [suite])
    d = decide([SuiteGate(suite.suite, suite.outcome, suite.gated)])
    suite.outcome, suite.reasons = d.suites[0].outcome, list(d.suites[0].reasons)
    cres.verdict, cres.reasons = d.verdict, list(d.reasons)
    verdict, reasons = combine_candidates([("candidate:0", d)])
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9001/v1"),
                   candidates=[EndpointRef(url="http://127.0.0.1:9002/v1")],
                   suites=["reasoning-smoke"], labels=labels or {})
    run = store.create_run(spec, status=RunStatus.running)
    result = RunResult(run.id, verdict, EndpointRef(url="http://127.0.0.1:9001/v1", model="b"),
                       prov, [cres], options=RunOptions(), reasons=list(reasons))
    report = build_report(result)
    store.save_report(run.id, report)
    store.finish_run(run.id, status=RunStatus.completed, verdict=verdict)
    return run.id, report


def _advice(store: Store, run_id: str, report: dict) -> list[str]:  # type: ignore[type-arg]
    run = store.get_run(run_id)
    assert run is not None
    return [n["text"] for n in run_verdict.banner(store, run, report)["next"]]


def test_a_candidate_worse_but_not_beyond_the_margin_is_said_so_never_fewer_items(
    one_store: Store,
) -> None:
    # 150 items, 20 the candidate loses: Δ = −0.133, its interval wholly below 0 and reaching
    # past −δ = −0.15. The plan at this discordance asks for fewer than the 150 items run.
    base = np.ones(150)
    base[120:] = 0
    cand = base.copy()
    cand[:20] = 0
    run_id, report = _binary_run(one_store, base, cand, margin=0.15)
    (gate,) = report["candidates"][0]["suites"]
    assert gate["verdict"] == "inconclusive" and gate["ci"][0] < -0.15 < gate["ci"][1] < 0
    (row,) = planning.plan(suites=["reasoning-smoke"], margin=0.15, alpha=None,
                           pilot_run=run_id, store=one_store)
    assert row["required_items"] < 150  # the old advice: "re-run with --samples" fewer
    (text,) = _advice(one_store, run_id, report)
    assert "worse than baseline, not shown beyond δ = 0.15 at n = 150" in text
    assert "more items than n = 150" in text
    for n in re.findall(r"n = (\d+)", text):
        assert int(n) >= 150, text  # never fewer items than were run


def test_a_gate_logs_run_is_never_told_samples(one_store: Store) -> None:
    rng = np.random.default_rng(5)
    base = (rng.random(16) < 0.6).astype(float)
    cand = base.copy()
    cand[:3] = 1 - cand[:3]
    run_id, report = _binary_run(one_store, base, cand, margin=0.15,
                                 labels={"source": "gate-logs"})
    assert report["verdict"] == "inconclusive"
    texts = _advice(one_store, run_id, report)
    assert texts and not any("--samples" in t for t in texts), texts
    assert any("log" in t for t in texts), texts
    # The same scores from a run the runner generated: --samples, and more than it ran.
    run_id, report = _binary_run(one_store, base, cand, margin=0.15)
    texts = _advice(one_store, run_id, report)
    sizes = [int(n) for t in texts for n in re.findall(r"n = (\d+) items", t)]
    assert sizes and all(n > 16 for n in sizes), texts
