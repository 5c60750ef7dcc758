"""Cluster-robust SE against statsmodels, and its calibration under intra-cluster correlation."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.api as sm

from evalsvc.stats import cluster_robust_mean, t_test_mean


def _clustered_diffs(
    rng: np.random.Generator, n_clusters: int, size: int, mean: float, rho_sd: float
) -> tuple[np.ndarray, np.ndarray]:
    """Differences with a shared per-cluster shift (intra-cluster correlation)."""
    shift = rng.normal(0.0, rho_sd, n_clusters)
    ids = np.repeat(np.arange(n_clusters), size)
    d = mean + shift[ids] + rng.normal(0.0, 1.0, ids.size)
    return d, ids


def test_matches_statsmodels_cluster_ols() -> None:
    rng = np.random.default_rng(0)
    d, ids = _clustered_diffs(rng, 25, 6, 0.2, 0.7)
    ids = ids[rng.permutation(ids.size)]  # unsorted labels must not matter
    ours = cluster_robust_mean(d, ids, alpha=0.1)
    fit = sm.OLS(d, np.ones_like(d)).fit(cov_type="cluster", cov_kwds={"groups": ids}, use_t=True)
    assert ours.estimate == pytest.approx(fit.params[0], abs=1e-12)
    assert ours.se == pytest.approx(fit.bse[0], rel=1e-10)
    lo, hi = fit.conf_int(alpha=0.1)[0]
    assert ours.ci[0] == pytest.approx(lo, abs=1e-10)
    assert ours.ci[1] == pytest.approx(hi, abs=1e-10)
    assert ours.n_clusters == 25 and ours.df == 24


def test_singleton_clusters_reduce_to_paired_t() -> None:
    rng = np.random.default_rng(1)
    d = rng.normal(0.1, 1, 80)
    cr = cluster_robust_mean(d, [f"item-{i}" for i in range(80)], null_value=-0.05, alpha=0.1)
    t = t_test_mean(d, null_value=-0.05, alpha=0.1)
    assert cr.se == pytest.approx(t.se, rel=1e-12)
    assert cr.p_greater == pytest.approx(t.p_greater, rel=1e-10)
    assert cr.design_effect == pytest.approx(1.0, rel=1e-12)


def test_label_validation() -> None:
    with pytest.raises(ValueError, match="one label per item"):
        cluster_robust_mean([0.1, 0.2, 0.3], [1, 2])
    with pytest.raises(ValueError, match="NaN"):
        cluster_robust_mean([0.1, 0.2], [1.0, float("nan")])
    one = cluster_robust_mean([0.1, 0.2, 0.3], ["a", "a", "a"])
    assert one.n_clusters == 1 and one.p_greater == 1.0


def test_calibration_under_intra_cluster_correlation() -> None:
    """At the boundary, naive SEs over-reject; clustered SEs keep the level (Miller 2024)."""
    rng = np.random.default_rng(2)
    sims, alpha, margin = 2000, 0.05, 0.1
    naive = clustered = 0
    for _ in range(sims):
        d, ids = _clustered_diffs(rng, 40, 10, -margin, 0.8)
        clustered += cluster_robust_mean(d, ids, null_value=-margin).p_greater < alpha
        naive += t_test_mean(d, null_value=-margin).p_greater < alpha
    mc = 3 * np.sqrt(alpha * (1 - alpha) / sims)
    print(
        f"\nfalse-pass at boundary, ICC≈0.39: naive {naive / sims:.3f}, "
        f"clustered {clustered / sims:.3f}"
    )
    assert clustered / sims <= alpha + mc
    assert naive / sims > 2 * alpha  # the reason clustering matters
