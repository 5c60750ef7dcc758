"""No pass without evidence: gates at the boundaries (no events, zero variance, few clusters).

The determinism cases go through the runner's own path (``gate_outcome`` on the kind's
``analyze`` result), the rest through the public gate functions; the seeded audit of every gate
kind is ``benchmarks/gate_calibration.py`` (a few of its cells run here).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from evalsvc.domain import Sample
from evalsvc.gates import SuiteGate, decide, evaluate_gate, recovery_gate
from evalsvc.runner._runner import gate_outcome
from evalsvc.services.planning import plan
from evalsvc.stats import min_n_flip_free, retention_min_clusters, retention_test
from evalsvc.suites import load_suite
from evalsvc.suites.kinds.determinism import PREFIX_REFERENCE, REFERENCE

ALPHA = 0.05


def _determinism_samples(role: str, probes: int, labels: list[str]) -> list[Sample]:
    """One endpoint's samples of a run in which nothing varies: every answer of a probe is the
    same text, references included (what ``DeterminismSuite.run`` records)."""
    out = []
    for p in range(probes):
        probe = f"probe-{p}"
        for label in [REFERENCE, PREFIX_REFERENCE, *labels]:
            out.append(Sample(suite="determinism-smoke", item_id=f"{probe}/{label}",
                              endpoint=role, output=f"answer {p}", score=1.0,
                              data={"probe": probe, "cluster": probe, "condition": label}))
    return out


def test_determinism_smoke_all_stable_aa_is_inconclusive_underpowered() -> None:
    suite = load_suite("determinism-smoke")
    assert suite.params.n == 4 and suite.looks() == 1
    labels = suite._labels()
    assert len(labels) * suite.params.repeats == 2  # 4 probes × 2 gated answers
    base = _determinism_samples("baseline", 4, labels)
    cand = _determinism_samples("candidate:0", 4, labels)
    analysis = suite.analyze(base, cand)
    assert analysis.baseline == [0.0] * 8 and analysis.candidate == [0.0] * 8
    out = gate_outcome(suite.bind_gate(), analysis, seed=0)
    # Before: unstable 0.0 → 0.0, Δ 0.000 [0.000, 0.000], p = 0, "pass".
    assert out.verdict == "inconclusive"
    assert "reason" not in out.details  # it could decide; this size cannot pass
    assert out.details["underpowered"].startswith("underpowered")
    assert "at least 29 probes" in out.details["underpowered"]
    # The report's reasons: the interval includes the margin, and underpowered.
    decision = decide([SuiteGate("determinism-smoke", out)])
    assert decision.verdict == "inconclusive"
    codes = [r.code for r in decision.suites[0].reasons]
    assert codes == ["ci_includes_margin", "underpowered"]
    assert out.method == "exact zero-loss bound (Clopper-Pearson over clusters)"
    assert out.to_dict()["method"] == out.method
    # The exact p-value of no loss in 4 clusters at a loss of δ = 0.10, and a non-zero-width
    # interval for the loss whose upper end is the Clopper-Pearson bound 1 − α^(1/4).
    assert out.p_value == pytest.approx(0.9**4)
    assert out.ci[0] == pytest.approx(0.0, abs=1e-9)
    assert out.ci[1] == pytest.approx(1 - ALPHA ** (1 / 4))
    cp_upper = stats.beta.ppf(1 - ALPHA, 1, 4)  # Clopper-Pearson upper bound with 0 of 4
    assert out.ci[1] == pytest.approx(cp_upper)


def test_determinism_passes_at_the_exact_minimum_and_not_below() -> None:
    assert retention_min_clusters(0.10, ALPHA) == 29
    assert retention_min_clusters(0.10, ALPHA, looks=4) == 42
    assert retention_min_clusters(0.0, ALPHA) is None
    # The minimum is the first G with (1 − δ)^G < α (scipy's exact binomial agrees).
    assert stats.binom.cdf(0, 29, 0.1) < ALPHA <= stats.binom.cdf(0, 28, 0.1)
    suite = load_suite("determinism-smoke")
    gate = suite.bind_gate()
    for probes, verdict in ((28, "inconclusive"), (29, "pass")):
        labels = suite._labels()
        analysis = suite.analyze(_determinism_samples("baseline", probes, labels),
                                 _determinism_samples("candidate:0", probes, labels))
        out = gate_outcome(gate, analysis, seed=0)
        assert out.verdict == verdict, (probes, out.details)
    # A grossly unstable candidate still fails at the smoke size (every answer changes).
    b = np.ones(8)
    res = retention_test(b, np.zeros(8), margin=0.1, clusters=np.repeat(np.arange(4), 2))
    assert res.verdict == "fail"


def test_retention_with_variance_keeps_the_t_method() -> None:
    rng = np.random.default_rng(3)
    cl = np.repeat(np.arange(60), 10)
    b = (rng.random(600) > 0.3).astype(float)
    c = (rng.random(600) > 0.3).astype(float)
    res = retention_test(b, c, margin=0.1, clusters=cl)
    assert res.method.startswith("cluster-robust t") and res.informative_clusters == 60
    # Clusters without a stable baseline answer say nothing about R and do not count.
    b2 = b.copy()
    b2[:300] = 0.0
    assert retention_test(b2, c, margin=0.1, clusters=cl).informative_clusters == 30


def test_binary_clusters_without_flips_count_clusters_not_items() -> None:
    # 40 items in 8 clusters, no flip: before, Tango saw 40 independent items and passed.
    ones = np.ones(40)
    cl = np.repeat(np.arange(8), 5)
    out = evaluate_gate(ones, ones, metric="acc", kind="binary", margin=0.1, clusters=cl)
    assert out.verdict == "inconclusive"
    assert out.details["cluster"]["design_effect_used"] == pytest.approx(5.0)
    assert "largest design effect" in (out.method or "")
    # Enough clusters: the flip-free minimum of the binary gate, counted in clusters.
    g = min_n_flip_free(0.1, ALPHA)
    assert g == 32
    big = np.ones(5 * g)
    ok = evaluate_gate(big, big, metric="acc", kind="binary", margin=0.1,
                       clusters=np.repeat(np.arange(g), 5))
    assert ok.verdict == "pass"
    small = np.ones(5 * (g - 1))
    assert evaluate_gate(small, small, metric="acc", kind="binary", margin=0.1,
                         clusters=np.repeat(np.arange(g - 1), 5)).verdict == "inconclusive"


def test_recovery_without_loss_needs_the_exact_minimum() -> None:
    for n, verdict in ((28, "inconclusive"), (29, "pass")):
        out = recovery_gate(np.ones(n), np.ones(n), metric="acc", recovery_min=0.9)
        assert out.verdict == verdict, out.details
    low = recovery_gate(np.ones(20), np.ones(20), metric="acc", recovery_min=0.9)
    assert low.method == "exact zero-loss bound (Clopper-Pearson, no item lost)"
    assert low.p_value == pytest.approx(0.9**20)
    assert "reason" not in low.details
    assert low.details["underpowered"].startswith("underpowered") and "29" in low.details[
        "underpowered"]


def test_plan_states_the_smallest_n_that_can_pass() -> None:
    rows = {r["suite"]: r for r in plan(suites=["determinism-smoke", "determinism"],
                                         margin=None, alpha=None, discordance=0.0)}
    smoke, full = rows["determinism-smoke"], rows["determinism"]
    assert smoke["min_items_to_pass"] == 29 and smoke["required_items"] == 29
    assert smoke["cannot_pass"].startswith("inconclusive: underpowered")
    assert smoke["note"].startswith("inconclusive: underpowered")
    assert full["min_items_to_pass"] == 42 and "cannot_pass" not in full
    assert "29 probes" in load_suite("determinism-smoke").spec.description


def test_audit_cells_at_small_reps() -> None:
    """A few cells of the audit that failed before the fix, at 300 seeded runs each: every
    false-PASS rate is within Monte Carlo error of α or below."""
    mod = runpy.run_path(str(Path(__file__).parents[2] / "benchmarks" / "gate_calibration.py"),
                         run_name="gate_calibration")
    cells = {(c.gate, c.setting): (i, c) for i, c in enumerate(mod["cells"]())}
    wanted = [
        ("retention (determinism)", "4 probes × 2, stable baseline"),
        ("retention (determinism)", "12 probes × 10, stable baseline"),
        ("binary (Tango)", "8 clusters × 5 lost together"),
        ("continuous", "0/1 scores n = 20"),
        ("recovery ratio ≥ 0.9", "n = 20, baseline all right"),
    ]
    for key in wanted:
        i, cell = cells[key]
        row = mod["run_cell"](cell, 300, 41, i)
        assert not row.above_alpha, (key, row.rate)
        assert row.rate <= 0.02, (key, row.rate)  # before the fix: 0.66, 0.29, 0.40, 0.16, 0.12


def test_continuous_gates_never_pass_on_a_zero_width_interval() -> None:
    ones = np.ones(40)
    paired = evaluate_gate(ones, ones, metric="s", kind="continuous", margin=0.1)
    unpaired = evaluate_gate(ones[:30], ones, metric="s", kind="continuous", margin=0.1,
                             paired=False)
    clustered = evaluate_gate(ones, ones, metric="s", kind="continuous", margin=0.1,
                              clusters=np.repeat(np.arange(8), 5))
    for out in (paired, unpaired, clustered):
        assert out.verdict == "inconclusive" and "zero observed variance" in out.details["reason"]
        assert out.ci[0] < out.ci[1]
    # With the scores' range the exact bound counts clusters, not items: 8 clusters give
    # p = 0.9^8, 40 iid items 0.9^40.
    ranged = evaluate_gate(ones, ones, metric="s", kind="continuous", margin=0.1,
                           clusters=np.repeat(np.arange(8), 5), value_range=(0.0, 1.0))
    assert ranged.verdict == "inconclusive" and ranged.p_value == pytest.approx(0.9**8)
    iid = evaluate_gate(ones, ones, metric="s", kind="continuous", margin=0.1,
                        value_range=(0.0, 1.0))
    assert iid.verdict == "pass" and iid.p_value == pytest.approx(0.9**40)
    with pytest.raises(ValueError, match="outside value_range"):
        evaluate_gate(ones * 2, ones, metric="s", kind="continuous", margin=0.1,
                      value_range=(0.0, 1.0))
