"""Sequential mode: always-valid error control under continuous peeking, and sample savings."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evalsvc.stats import (
    confidence_sequence,
    required_n,
    sequential_decision,
    simulate_sample_use,
    tango_statistic,
)

ALPHA = 0.05


def _paired_binary_diffs(
    rng: np.random.Generator, sims: int, length: int, psi: float, delta: float
) -> np.ndarray:
    u = rng.random((sims, length))
    p_imp = (psi + delta) / 2
    p_reg = (psi - delta) / 2
    return np.where(u < p_imp, 1.0, np.where(u < p_imp + p_reg, -1.0, 0.0))


@pytest.mark.parametrize("method", ["eb", "hoeffding"])
def test_time_uniform_coverage(method: str) -> None:
    """P(∃t ≤ T: μ < L_t) ≤ α and P(∃t ≤ T: μ > U_t) ≤ α, peeking after every item."""
    rng = np.random.default_rng(0)
    sims, length = 2000, 1500
    tol = 3 * np.sqrt(ALPHA * (1 - ALPHA) / sims)
    cases = {
        "binary ψ=0.1 Δ=−0.05": (_paired_binary_diffs(rng, sims, length, 0.1, -0.05), -0.05),
        "binary ψ=0.4 Δ=0": (_paired_binary_diffs(rng, sims, length, 0.4, 0.0), 0.0),
        # Continuous bounded differences of two Beta scores in [0, 1].
        "beta diffs": (
            rng.beta(2, 5, (sims, length)) - rng.beta(2, 4, (sims, length)),
            2 / 7 - 2 / 6,
        ),
    }
    for name, (d, mu) in cases.items():
        lower, upper = confidence_sequence(d, alpha=ALPHA, method=method)  # type: ignore[arg-type]
        miss_low = np.mean((lower > mu).any(axis=1))
        miss_high = np.mean((upper < mu).any(axis=1))
        print(f"\n{method} {name}: ever above μ {miss_low:.4f}, ever below μ {miss_high:.4f}")
        assert miss_low <= ALPHA + tol
        assert miss_high <= ALPHA + tol
        assert np.all(np.diff(lower, axis=1) >= -1e-12)  # running intersection: monotone
        assert np.all(np.diff(upper, axis=1) <= 1e-12)


def test_error_rates_at_margin_under_peeking_vs_naive() -> None:
    """At Δ = −δ the sequential gate's false pass/fail stay ≤ α; re-testing a fixed-n interval
    after every item does not."""
    rng = np.random.default_rng(1)
    sims, length, margin, psi = 2000, 2000, 0.05, 0.2
    d = _paired_binary_diffs(rng, sims, length, psi, -margin)
    lower, upper = confidence_sequence(d, alpha=ALPHA)
    seq_pass = np.mean((lower > -margin).any(axis=1))
    seq_fail = np.mean((upper < -margin).any(axis=1))
    # Naive: corrected Tango test recomputed at every n ≥ 20, stopping at the first pass.
    n = np.arange(1, length + 1)
    b = np.cumsum(d == 1.0, axis=1)
    c = np.cumsum(d == -1.0, axis=1)
    z = tango_statistic(b[:, 19:], c[:, 19:], n[19:], -margin, corrected=True)
    naive_pass = np.mean((stats.norm.sf(z) < ALPHA).any(axis=1))
    tol = 3 * np.sqrt(ALPHA * (1 - ALPHA) / sims)
    print(
        f"\nat the margin, peeking after every item up to {length}: sequential false-pass "
        f"{seq_pass:.4f}, false-fail {seq_fail:.4f}; naive fixed-n test false-pass {naive_pass:.4f}"
    )
    assert seq_pass <= ALPHA + tol
    assert seq_fail <= ALPHA + tol
    assert naive_pass > 2 * ALPHA


@pytest.mark.parametrize(
    ("psi", "true_delta", "expected"),
    [(0.1, 0.05, "pass"), (0.2, 0.05, "pass"), (0.2, -0.2, "fail"), (0.4, -0.25, "fail")],
)
def test_sequential_uses_fewer_samples_on_clear_cases(
    psi: float, true_delta: float, expected: str
) -> None:
    margin = 0.05
    n_fixed = required_n(margin, psi, alpha=ALPHA)
    sim = simulate_sample_use(
        true_delta=true_delta, discordance=psi, margin=margin, alpha=ALPHA, n_sims=1000, seed=2
    )
    seq_right = sim.sequential_pass_rate if expected == "pass" else sim.sequential_fail_rate
    fix_right = sim.fixed_pass_rate if expected == "pass" else sim.fixed_fail_rate
    print(
        f"\nψ={psi} Δ={true_delta:+}: n_fixed={n_fixed}, mean sequential n "
        f"{sim.mean_n_sequential:.0f} (ratio {sim.sample_ratio:.2f}); correct call "
        f"sequential {seq_right:.3f} vs fixed {fix_right:.3f}"
    )
    assert sim.n_fixed == n_fixed
    assert sim.sample_ratio < 1.0
    assert seq_right >= 0.95
    wrong = sim.sequential_fail_rate if expected == "pass" else sim.sequential_pass_rate
    assert wrong == 0.0


def test_borderline_case_is_reported_honestly() -> None:
    """At Δ = 0 (the planning point) the CS needs more items than fixed n: the price of
    peeking. The helper reports it; nothing is asserted beyond validity."""
    sim = simulate_sample_use(true_delta=0.0, discordance=0.1, margin=0.05, n_sims=500, seed=3)
    print(
        f"\nborderline Δ=0: ratio {sim.sample_ratio:.2f}, sequential pass "
        f"{sim.sequential_pass_rate:.3f}, fixed pass {sim.fixed_pass_rate:.3f}"
    )
    assert sim.sequential_fail_rate == 0.0


def test_sequential_decision_api() -> None:
    assert sequential_decision([], margin=0.05) == (None, -1.0, 1.0)
    good = np.zeros(400)
    good[:8] = 1.0
    verdict, lo, hi = sequential_decision(good, margin=0.05)
    assert verdict == "pass" and -0.05 < lo <= 0.02 <= hi
    bad = -np.ones(60)
    assert sequential_decision(bad, margin=0.05)[0] == "fail"
    # Lower-is-better: differences are mirrored, bounds stay in metric units.
    v_lib, lo_lib, hi_lib = sequential_decision(-good, margin=0.05, higher_is_better=False)
    assert v_lib == "pass"
    assert (lo_lib, hi_lib) == pytest.approx((-hi, -lo))
    assert sequential_decision(good[:5], margin=0.05)[0] is None
    with pytest.raises(ValueError, match="NaN"):
        sequential_decision([0.0, float("nan")], margin=0.05)
    with pytest.raises(ValueError, match="lie in"):
        sequential_decision([2.0], margin=0.05)
    with pytest.raises(ValueError, match="margin"):
        sequential_decision([0.0], margin=-0.1)
