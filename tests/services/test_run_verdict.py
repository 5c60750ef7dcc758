"""The run page's decision (evalsvc.services.run_verdict): banner and gates table on one scale.

The report comes from the runner's own combination (``evalsvc.gates.decide``) over real gate
outcomes; the next step's n is the planning service's, with this run as the pilot.
"""

from __future__ import annotations

import math
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
