"""Seeded calibration simulations of the gate's tests: error rates and power.

Binary simulations draw whole 2×2 tables (multinomial counts) and run the same vectorised
``tango_statistic(..., corrected=True)`` that the gate uses; ``test_vectorised_path_is_the_gate``
ties the two together. Run with ``-s`` to see the tables.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evalsvc.gates import evaluate_gate
from evalsvc.stats import (
    bootstrap_mean,
    cluster_robust_mean,
    required_n,
    t_test_mean,
    tango_statistic,
    tango_test,
)

ALPHA = 0.05
SIMS = 20_000
# Three Monte Carlo standard errors of an error rate near α.
MC_TOL = 3.0 * np.sqrt(ALPHA * (1 - ALPHA) / SIMS)


def _rates(
    rng: np.random.Generator, n: int, psi: float, true_delta: float, margin: float, sims: int = SIMS
) -> tuple[float, float]:
    """(pass rate, fail rate) of the paired binary gate for one configuration."""
    p_imp = (psi + true_delta) / 2
    p_reg = (psi - true_delta) / 2
    counts = rng.multinomial(n, [p_imp, p_reg, 1 - psi], size=sims)
    z = tango_statistic(counts[:, 0], counts[:, 1], n, -margin, corrected=True)
    return float(np.mean(stats.norm.sf(z) < ALPHA)), float(np.mean(stats.norm.cdf(z) < ALPHA))


def test_vectorised_path_is_the_gate() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        n = int(rng.integers(20, 400))
        psi = float(rng.uniform(0.02, 0.4))
        margin = float(rng.choice([0.02, 0.05, 0.1]))
        b_imp, b_reg, _ = rng.multinomial(n, [psi / 2, psi / 2, 1 - psi])
        base = np.r_[np.zeros(b_imp), np.ones(b_reg), np.ones(n - b_imp - b_reg)]
        cand = np.r_[np.ones(b_imp), np.zeros(b_reg), np.ones(n - b_imp - b_reg)]
        out = evaluate_gate(base, cand, metric="acc", kind="binary", margin=margin)
        z = float(tango_statistic(b_imp, b_reg, n, -margin, corrected=True))
        expected = (
            "pass"
            if stats.norm.sf(z) < ALPHA
            else "fail"
            if stats.norm.cdf(z) < ALPHA
            else "inconclusive"
        )
        assert out.verdict == expected
        assert out.p_value == pytest.approx(stats.norm.sf(z), abs=1e-12)


def test_aa_false_fail_rate_over_discordance() -> None:
    """Baseline vs itself (Δ = 0): fail calls ≤ α, also with margin 0 (pure superiority test)."""
    rng = np.random.default_rng(1)
    worst = 0.0
    print("\nA/A false-fail rate (Δ = 0), rows: margin, ψ; columns n = 30, 100, 400, 1000")
    for margin in (0.0, 0.05):
        for psi in (0.02, 0.05, 0.1, 0.2, 0.4):
            row = [_rates(rng, n, psi, 0.0, margin)[1] for n in (30, 100, 400, 1000)]
            worst = max(worst, *row)
            print(f"  δ={margin:<5} ψ={psi:<5} " + " ".join(f"{r:.4f}" for r in row))
    print(f"  worst {worst:.4f} (α = {ALPHA}, tolerance {ALPHA + MC_TOL:.4f})")
    assert worst <= ALPHA + MC_TOL


def test_error_rates_at_the_margin() -> None:
    """True Δ exactly −δ: false pass ≤ α and false fail ≤ α over n, ψ and δ."""
    rng = np.random.default_rng(2)
    worst_pass = worst_fail = 0.0
    print("\nAt Δ = −δ: false-pass / false-fail, columns n = 30, 100, 400, 1000")
    for margin in (0.02, 0.05, 0.1):
        for psi in (0.05, 0.1, 0.2, 0.4):
            if psi < margin:
                continue
            cells = []
            for n in (30, 100, 400, 1000):
                fp, ff = _rates(rng, n, psi, -margin, margin)
                worst_pass, worst_fail = max(worst_pass, fp), max(worst_fail, ff)
                cells.append(f"{fp:.4f}/{ff:.4f}")
            print(f"  δ={margin:<5} ψ={psi:<5} " + " ".join(cells))
    print(f"  worst false-pass {worst_pass:.4f}, worst false-fail {worst_fail:.4f}")
    assert worst_pass <= ALPHA + MC_TOL
    assert worst_fail <= ALPHA + MC_TOL


def test_uncorrected_tango_is_liberal_where_the_correction_is_not() -> None:
    """Why the gate corrects Tango's statistic: when almost every flip goes one way the plain
    score test fails a candidate that is exactly at the margin far more often than α."""
    rng = np.random.default_rng(4)
    print("\nfalse-fail at Δ = −δ, plain vs corrected Tango")
    for n, psi, margin in ((30, 0.2, 0.1), (100, 0.1, 0.1)):
        counts = rng.multinomial(n, [(psi - margin) / 2, (psi + margin) / 2, 1 - psi], SIMS)
        plain = tango_statistic(counts[:, 0], counts[:, 1], n, -margin)
        corr = tango_statistic(counts[:, 0], counts[:, 1], n, -margin, corrected=True)
        plain_rate = float(np.mean(stats.norm.cdf(plain) < ALPHA))
        corr_rate = float(np.mean(stats.norm.cdf(corr) < ALPHA))
        print(f"  n={n} ψ={psi} δ={margin}: plain {plain_rate:.4f}, corrected {corr_rate:.4f}")
        assert plain_rate > ALPHA + 0.015
        assert corr_rate <= ALPHA + MC_TOL


def test_power_at_required_n() -> None:
    """At n = required_n(δ, ψ): Δ = 0 passes and Δ = −2δ fails, each with power ≥ 0.8.

    required_n targets P(pass | Δ = 0) = 0.8; by symmetry the fail call at −2δ (the same
    distance on the other side of −δ, with smaller variance ψ − 4δ²) has at least that power.
    """
    rng = np.random.default_rng(3)
    tol = 3.0 * np.sqrt(0.8 * 0.2 / SIMS)
    print("\nPower at required_n: P(pass | Δ=0), P(fail | Δ=−2δ)")
    for margin in (0.02, 0.05, 0.1):
        for psi in (0.05, 0.1, 0.2, 0.4):
            n = required_n(margin, psi, alpha=ALPHA, power=0.8)
            p_pass, _ = _rates(rng, n, psi, 0.0, margin)
            line = f"  δ={margin:<5} ψ={psi:<5} n={n:<5} pass {p_pass:.4f}"
            assert p_pass >= 0.8 - tol
            assert p_pass <= 0.92  # not grossly over-planned
            if psi >= 2 * margin:
                _, p_fail = _rates(rng, n, psi, -2 * margin, margin)
                line += f"  fail {p_fail:.4f}"
                assert p_fail >= 0.8 - tol
            print(line)


def test_tiny_n_never_passes() -> None:
    """With a handful of items the interval is wide; even a perfect candidate is inconclusive."""
    for n in range(0, 21):
        out = evaluate_gate([1] * n, [1] * n, metric="acc", kind="binary", margin=0.05)
        assert out.verdict == "inconclusive"
    for n in range(1, 10):
        out = evaluate_gate(np.ones(n), np.ones(n) + 1.0, metric="x", kind="continuous", margin=0.1)
        assert out.verdict == "inconclusive"


# Documented limit: with strongly skewed differences (skewness −2) and only 30 items the
# continuous gate's false-pass rate is ~0.065 at nominal 0.05 (no bootstrap is exact there);
# from n ≈ 100 it is within Monte Carlo error of α. docs/statistics.md states this.
@pytest.mark.parametrize(("n", "limit"), [(30, 0.075), (100, ALPHA)])
def test_continuous_gate_false_pass_with_left_skew(n: int, limit: float) -> None:
    """Left-skewed differences (occasional large drops) at the boundary Δ = −δ.

    Student t alone is liberal on the pass side here; the gate requires BCa and bootstrap-t to
    agree. Both methods are reflection-equivariant, so this also covers the fail side under right
    skew."""
    rng = np.random.default_rng(40 + n)
    sims, margin = 1500, 0.1
    t_pass = bca_pass = bt_pass = gate_pass = 0
    for i in range(sims):
        d = -margin + 1.0 - rng.exponential(1.0, n)  # mean exactly −margin, skewness −2
        t = t_test_mean(d, null_value=-margin).p_greater < ALPHA
        bca = bootstrap_mean(d, null_value=-margin, n_resamples=999, seed=i).p_greater < ALPHA
        bt = (
            bootstrap_mean(
                d, null_value=-margin, n_resamples=999, seed=i, method="studentized"
            ).p_greater
            < ALPHA
        )
        t_pass += t
        bca_pass += bca
        bt_pass += bt
        gate_pass += bca and bt
    tol = 3.0 * np.sqrt(ALPHA * (1 - ALPHA) / sims)
    print(
        f"\nskewed continuous, n={n}: false-pass Student t {t_pass / sims:.4f}, "
        f"BCa {bca_pass / sims:.4f}, bootstrap-t {bt_pass / sims:.4f}, gate {gate_pass / sims:.4f}"
    )
    assert gate_pass / sims <= limit + tol
    assert gate_pass <= min(bca_pass, bt_pass)


def test_clustered_binary_rao_scott_keeps_level() -> None:
    """Flips that cluster by document: the naive Tango test over-rejects at the margin, the
    Rao-Scott design-effect adjustment the gate applies (via cluster_robust_mean) does not."""
    rng = np.random.default_rng(9)
    sims, n_clusters, size, psi, margin, tau = 1500, 50, 10, 0.2, 0.05, 0.06
    ids = np.repeat(np.arange(n_clusters), size)
    naive = adjusted = 0
    for _ in range(sims):
        # Each document tilts its flips towards regressions or improvements (±tau, symmetric),
        # so E[Δ] = −margin but items of one document are correlated (design effect ≈ 1.6).
        tilt = tau * rng.choice([-1.0, 1.0], n_clusters)[ids]
        p_reg = (psi + margin) / 2 + tilt
        p_imp = (psi - margin) / 2 - tilt
        u = rng.random(ids.size)
        d = np.where(u < p_reg, -1.0, np.where(u < p_reg + p_imp, 1.0, 0.0))
        b, c, n = float(np.sum(d == 1)), float(np.sum(d == -1)), float(d.size)
        naive += tango_test(b, c, n, -margin, corrected=True).p_greater < ALPHA
        deff = max(1.0, cluster_robust_mean(d, ids).design_effect)
        adjusted += (
            tango_test(b / deff, c / deff, n / deff, -margin, corrected=True).p_greater < ALPHA
        )
    tol = 3.0 * np.sqrt(ALPHA * (1 - ALPHA) / sims)
    print(
        f"\nclustered flips at the margin: false-pass naive {naive / sims:.4f}, "
        f"Rao-Scott adjusted {adjusted / sims:.4f}"
    )
    assert adjusted / sims <= ALPHA + tol
    assert naive / sims > ALPHA + tol
