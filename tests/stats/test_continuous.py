"""Continuous statistics against scipy, and the bootstrap within Monte Carlo error of the
analytic answer."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from evalsvc.stats import bootstrap_mean, t_test_mean, welch_test, wilcoxon_signed_rank


@pytest.fixture
def skewed() -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.exponential(1.0, 60) - 0.8


def test_t_test_matches_scipy(skewed: np.ndarray) -> None:
    for null in (-0.3, 0.0, 0.4):
        ours = t_test_mean(skewed, null_value=null, alpha=0.1)
        for alt, p in (("greater", ours.p_greater), ("less", ours.p_less)):
            ref = stats.ttest_1samp(skewed, null, alternative=alt)
            assert p == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-15)
        ci = stats.ttest_1samp(skewed, null).confidence_interval(confidence_level=0.9)
        assert ours.ci[0] == pytest.approx(ci.low, abs=1e-12)
        assert ours.ci[1] == pytest.approx(ci.high, abs=1e-12)


def test_welch_matches_scipy() -> None:
    rng = np.random.default_rng(4)
    b, c = rng.normal(0, 1, 40), rng.normal(0.3, 2, 25)
    for null in (-0.5, 0.0, 0.2):
        ours = welch_test(b, c, null_value=null, alpha=0.1)
        for alt, p in (("greater", ours.p_greater), ("less", ours.p_less)):
            ref = stats.ttest_ind(c - null, b, equal_var=False, alternative=alt)
            assert p == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-15)
    ci = stats.ttest_ind(c, b, equal_var=False).confidence_interval(confidence_level=0.9)
    ours = welch_test(b, c, alpha=0.1)
    assert ours.ci[0] == pytest.approx(ci.low, abs=1e-12)
    assert ours.ci[1] == pytest.approx(ci.high, abs=1e-12)


def test_wilcoxon_matches_scipy(skewed: np.ndarray) -> None:
    for null in (-0.2, 0.0, 0.3):
        ours = wilcoxon_signed_rank(skewed, null_value=null)
        assert ours is not None
        for alt, p in (("greater", ours.p_greater), ("less", ours.p_less)):
            ref = stats.wilcoxon(skewed - null, alternative=alt)
            assert p == pytest.approx(ref.pvalue, rel=1e-12, abs=1e-15)
    # Zero differences are dropped (Wilcoxon's convention); all-zero → no information.
    assert wilcoxon_signed_rank(np.zeros(10)) is None
    with_zeros = np.r_[np.zeros(5), skewed[:20]]
    ours = wilcoxon_signed_rank(with_zeros)
    assert ours is not None
    assert ours.p_greater == pytest.approx(
        stats.wilcoxon(with_zeros, alternative="greater", zero_method="wilcox").pvalue
    )


def test_bca_matches_scipy_within_monte_carlo_error(skewed: np.ndarray) -> None:
    ours = bootstrap_mean(skewed, alpha=0.1, n_resamples=9999, seed=1)
    ref = stats.bootstrap(
        (skewed,), np.mean, confidence_level=0.9, n_resamples=9999, method="BCa", rng=2
    ).confidence_interval
    se = skewed.std(ddof=1) / np.sqrt(skewed.size)
    # Two independent sets of 9999 resamples: quantile MC error ≈ 0.02·SE each.
    assert ours.ci[0] == pytest.approx(ref.low, abs=0.08 * se)
    assert ours.ci[1] == pytest.approx(ref.high, abs=0.08 * se)


@pytest.fixture
def graded() -> np.ndarray:
    """Paired differences of binary scores: three distinct values, resampled by counts."""
    rng = np.random.default_rng(11)
    return rng.choice([-1.0, 0.0, 1.0], size=400, p=[0.12, 0.8, 0.08])


def test_bca_on_few_distinct_values_matches_scipy_within_monte_carlo_error(
    graded: np.ndarray,
) -> None:
    ours = bootstrap_mean(graded, alpha=0.1, n_resamples=9999, seed=1)
    ref = stats.bootstrap(
        (graded,), np.mean, confidence_level=0.9, n_resamples=9999, method="BCa", rng=2
    ).confidence_interval
    se = graded.std(ddof=1) / np.sqrt(graded.size)
    # The resample mean moves in steps of 1/n (0.14·SE here), so both quantiles are one of a few
    # lattice points: the MC tolerance of the continuous case plus one step.
    step = 1.0 / graded.size
    assert ours.ci[0] == pytest.approx(ref.low, abs=0.08 * se + step)
    assert ours.ci[1] == pytest.approx(ref.high, abs=0.08 * se + step)


@pytest.mark.parametrize("n", [32, 60, 400])  # four distinct values: counts from n = 32
def test_resampling_by_counts_has_the_distribution_of_resampling_indices(
    n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The counts path (few distinct values) against the index path, forced on the same data:
    two-sample KS on 9,999 resample means and SDs each, and the studentized interval."""
    from evalsvc.stats import _continuous

    x = np.random.default_rng(n).choice([-1.0, 0.0, 0.5, 1.0], size=n, p=[0.2, 0.5, 0.1, 0.2])
    by_counts = _continuous._resample_moments(x, 9999, 7, with_sd=True)
    with monkeypatch.context() as m:
        m.setattr(_continuous, "_FEW_DISTINCT", n + 1)  # no data has that few distinct values
        by_index = _continuous._resample_moments(x, 9999, 8, with_sd=True)
        t_index = bootstrap_mean(x, method="studentized", alpha=0.1, seed=3)
    t_counts = bootstrap_mean(x, method="studentized", alpha=0.1, seed=4)
    for a, b in zip(by_counts, by_index, strict=True):
        assert a is not None and b is not None
        # Discrete statistics: KS is conservative on ties, so 0.001 is a loose floor that a
        # wrong distribution (e.g. counts from the wrong probabilities) misses by far.
        assert stats.ks_2samp(a, b).pvalue > 0.001
        assert float(np.mean(a)) == pytest.approx(float(np.mean(b)), abs=0.04 * float(np.std(b)))
    # The moments themselves: resample means centre on the sample mean, and a resample's
    # ddof=1 variance is unbiased for the plug-in (ddof=0) variance of x.
    assert float(np.mean(by_counts[0])) == pytest.approx(float(x.mean()), abs=0.01)
    assert float(np.mean(by_counts[1] ** 2)) == pytest.approx(float(x.var()), rel=0.03)
    se = x.std(ddof=1) / np.sqrt(n)
    assert t_counts.ci[0] == pytest.approx(t_index.ci[0], abs=0.1 * se + 1.0 / n)
    assert t_counts.ci[1] == pytest.approx(t_index.ci[1], abs=0.1 * se + 1.0 / n)


def test_resamples_of_one_repeated_value_have_no_spread_by_counts() -> None:
    from evalsvc.stats import _continuous

    x = np.r_[np.full(199, 0.1), 0.7]  # most resamples draw only 0.1, whose SD must be exactly 0
    means, sds = _continuous._resample_moments(x, 2000, 5, with_sd=True)
    assert sds is not None
    only_low = np.abs(means - 0.1) < 1e-12
    assert only_low.any() and not only_low.all()
    assert np.all(sds[only_low] == 0.0)
    assert np.all(sds[~only_low] > 0.0)


def test_bootstrap_close_to_t_interval_for_normal_data() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(0.1, 1.0, 400)
    t = t_test_mean(x, alpha=0.1)
    for method in ("BCa", "percentile"):
        b = bootstrap_mean(x, alpha=0.1, n_resamples=9999, seed=6, method=method)
        se = x.std(ddof=1) / np.sqrt(x.size)
        # Bootstrap SE uses 1/n instead of 1/(n−1) and z instead of t: a 0.3% narrower interval,
        # plus Monte Carlo error; 0.1·SE covers both comfortably.
        assert b.ci[0] == pytest.approx(t.ci[0], abs=0.1 * se)
        assert b.ci[1] == pytest.approx(t.ci[1], abs=0.1 * se)
        # p-values within Monte Carlo error of the t test's.
        for null in (-0.05, 0.0, 0.05):
            bb = bootstrap_mean(x, null_value=null, alpha=0.1, n_resamples=9999, seed=6)
            tt = t_test_mean(x, null_value=null)
            assert bb.p_greater == pytest.approx(tt.p_greater, abs=0.01)


def test_bootstrap_p_value_inverts_its_interval(skewed: np.ndarray) -> None:
    res = bootstrap_mean(skewed, alpha=0.1, n_resamples=20000, seed=8)
    at_lower = bootstrap_mean(skewed, null_value=res.ci[0], alpha=0.1, n_resamples=20000, seed=8)
    at_upper = bootstrap_mean(skewed, null_value=res.ci[1], alpha=0.1, n_resamples=20000, seed=8)
    assert at_lower.p_greater == pytest.approx(0.05, abs=0.003)
    assert at_upper.p_less == pytest.approx(0.05, abs=0.003)


def test_bca_acceleration_matches_generic_jackknife(skewed: np.ndarray) -> None:
    # Jackknife acceleration (Efron & Tibshirani 1993, ch. 14) with leave-one-out means.
    n = skewed.size
    loo = (skewed.sum() - skewed) / (n - 1)
    u = loo.mean() - loo
    expected = np.sum(u**3) / (6 * np.sum(u**2) ** 1.5)
    assert bootstrap_mean(skewed, n_resamples=99).acceleration == pytest.approx(expected, rel=1e-10)


def test_bootstrap_degenerate_and_small_inputs() -> None:
    res = bootstrap_mean(np.full(30, 0.25), null_value=0.0, n_resamples=999)
    assert res.degenerate
    assert res.ci == (0.25, 0.25)
    assert res.p_greater < 0.01
    single = t_test_mean([0.3])
    assert single.p_greater == 1.0 and single.p_less == 1.0
    constant = t_test_mean(np.zeros(5), null_value=-0.1)
    assert constant.ci == (0.0, 0.0) and constant.p_greater == 0.0
    with pytest.raises(ValueError, match="NaN"):
        bootstrap_mean([0.1, float("nan")])
    with pytest.raises(ValueError, match="empty"):
        bootstrap_mean([])


def test_bootstrap_is_reproducible_given_seed(skewed: np.ndarray) -> None:
    a = bootstrap_mean(skewed, seed=42, n_resamples=999)
    b = bootstrap_mean(skewed, seed=42, n_resamples=999)
    c = bootstrap_mean(skewed, seed=43, n_resamples=999)
    assert a == b
    assert a.ci != c.ci


def test_studentized_bootstrap_with_zero_spread_resamples_has_a_finite_ordered_ci() -> None:
    """Three values, one repeated: many resamples have zero spread, so t* holds ±inf. The CI
    must still be two ordered numbers (no inf − inf = NaN from interpolation), without warnings."""
    import warnings

    x = np.array([0.012, 0.012, 0.031])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = bootstrap_mean(x, null_value=0.05, method="studentized", n_resamples=2000, seed=1)
    lo, hi = res.ci
    assert not np.isnan(lo) and not np.isnan(hi) and lo <= res.estimate <= hi
