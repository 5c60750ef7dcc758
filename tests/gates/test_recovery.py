"""Recovery beside Δ and the recovery-floor gate (gate: {recovery_min: 0.99}): resolution with
tighten-only submitter values, the decision rule, and its error rate at the floor."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evalsvc.domain import RunOptions
from evalsvc.gates import GateLimits, GatePolicyError, recovery_gate, recovery_summary
from evalsvc.stats import fieller_ratio_ci
from evalsvc.suites import GatePolicy, SuiteSpec, suite_kinds


def _lmeval(gate: dict[str, object] | None = None):
    cls = suite_kinds()["lmeval"]
    return cls(SuiteSpec(name="t-lmeval", kind="lmeval", gate=GatePolicy(**(gate or {}))))


def _binary(rng: np.random.Generator, n: int, cells: tuple[float, float, float, float]):
    idx = rng.choice(4, size=n, p=cells)
    return np.isin(idx, (0, 1)).astype(float), np.isin(idx, (0, 2)).astype(float)


def test_resolve_recovery_floor_and_tighten_only() -> None:
    g = _lmeval({"recovery_min": 0.97}).bind_gate(None)
    assert g.recovery_min == 0.97 and g.policy_recovery_min == 0.97
    assert g.origin["recovery_min"] == "suite policy" and "not applicable" in g.origin["margin"]
    assert g.to_dict()["recovery_min"] == 0.97
    g = _lmeval({"recovery_min": 0.97}).bind_gate(RunOptions(recovery_min=0.99))
    assert g.recovery_min == 0.99 and g.origin["recovery_min"] == "submitter"
    with pytest.raises(GatePolicyError, match="loosen"):
        _lmeval({"recovery_min": 0.97}).bind_gate(RunOptions(recovery_min=0.9))
    # A margin-gated suite keeps its margin: the submitter cannot change a gate's form.
    g = _lmeval().bind_gate(RunOptions(recovery_min=0.99))
    assert g.recovery_min is None and "not applicable" in g.origin["recovery_min"]
    # The server's margin bound bounds a floor too (1 − max_margin).
    with pytest.raises(GatePolicyError, match="below the server's minimum"):
        _lmeval({"recovery_min": 0.5}).bind_gate(None, limits=GateLimits())
    with pytest.raises(GatePolicyError, match="exclusive"):
        _lmeval({"recovery_min": 0.9, "threshold": 0.5}).bind_gate(None)
    with pytest.raises(GatePolicyError, match="higher-is-better"):
        cls = suite_kinds()["speed"]
        cls(SuiteSpec(name="s", kind="speed", gate=GatePolicy(recovery_min=0.9))).bind_gate(None)


def test_gate_decisions_and_self_consistency() -> None:
    rng = np.random.default_rng(5)
    b = (rng.random(600) < 0.6).astype(float)
    same = recovery_gate(b, b.copy(), metric="acc", recovery_min=0.95, alpha=0.05)
    assert same.verdict == "pass"
    worse = b.copy()
    worse[np.flatnonzero(b == 1)[:60]] = 0  # loses 60 of ~360 correct: recovery ≈ 0.83
    bad = recovery_gate(b, worse, metric="acc", recovery_min=0.95, alpha=0.05)
    assert bad.verdict == "fail"
    for o in (same, bad):
        rec = o.details["recovery"]
        lo, hi = rec["ci"]
        # The Δ view and the recovery view say the same thing.
        assert o.ci[0] == pytest.approx(o.baseline * (lo - 1))
        assert o.margin == pytest.approx(0.05 * o.baseline)
        assert (o.verdict == "pass") == (o.ci[0] > -o.margin and o.p_value < 0.05)
        f = fieller_ratio_ci(b, worse if o is bad else b, alpha=0.10)
        assert lo <= f.ci[0] and hi >= f.ci[1]  # the union contains Fieller's interval
    # An all-zero baseline: recovery undefined, inconclusive with the reason.
    z = recovery_gate(np.zeros(50), np.ones(50), metric="acc", recovery_min=0.9)
    assert z.verdict == "inconclusive" and "undefined" in z.details["reason"]
    assert recovery_summary(np.zeros(5), np.ones(5)) is None


def test_recovery_floor_gate_error_rate_at_the_floor() -> None:
    """Seeded simulation: true recovery exactly at the floor (0.95), every flip a loss (the
    skewed case where Fieller alone is anti-conservative). The gate's pass rate stays ≤ α plus
    Monte Carlo error."""
    rng = np.random.default_rng(11)
    cells = (0.57, 0.03, 0.0, 0.40)
    sims = 200
    passes = 0
    for i in range(sims):
        b, c = _binary(rng, 500, cells)
        passes += recovery_gate(b, c, metric="acc", recovery_min=0.95, seed=i).verdict == "pass"
    assert passes / sims <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / sims), passes / sims


def test_power_when_recovery_is_well_above_the_floor() -> None:
    rng = np.random.default_rng(12)
    cells = (0.58, 0.02, 0.02, 0.38)  # recovery 1.0, 4% discordant
    passes = sum(
        recovery_gate(*_binary(rng, 800, cells), metric="acc", recovery_min=0.95, seed=i).verdict
        == "pass"
        for i in range(40)
    )
    assert passes >= 36
