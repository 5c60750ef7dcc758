"""Binary statistics against statsmodels/scipy, published worked examples and independent
numerical solutions of the score equations."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize, stats
from statsmodels.stats import proportion as sm_proportion
from statsmodels.stats.contingency_tables import mcnemar as sm_mcnemar

from evalsvc.stats import (
    PairedBinaryCounts,
    mcnemar_exact,
    miettinen_nurminen_ci,
    miettinen_nurminen_statistic,
    miettinen_nurminen_test,
    newcombe_paired_ci,
    newcombe_unpaired_ci,
    paired_binary_counts,
    tango_ci,
    tango_statistic,
    tango_test,
    wilson_interval,
)

# Cavo et al. (2012) complete response before/after consolidation therapy, the paired worked
# example of Fagerland, Lydersen & Laake (2014, Stat Med 33:2850-2875; and their 2017 book
# "Statistical Analysis of Contingency Tables", ch. 8): table [[59, 6], [16, 80]], with the row
# variable as "candidate": both=59, improvements (row yes, column no)=6, regressions=16, both
# wrong=80. Published: estimate -0.0621, Tango 95% CI -0.1240 to -0.0054, Newcombe
# square-and-add -0.1186 to -0.0046, exact conditional McNemar P = 0.052479.
CAVO = PairedBinaryCounts(both_correct=59, regressions=16, improvements=6, both_wrong=80)


def _arrays(counts: PairedBinaryCounts) -> tuple[np.ndarray, np.ndarray]:
    base = np.array(
        [1] * counts.both_correct
        + [1] * counts.regressions
        + [0] * counts.improvements
        + [0] * counts.both_wrong
    )
    cand = np.array(
        [1] * counts.both_correct
        + [0] * counts.regressions
        + [1] * counts.improvements
        + [0] * counts.both_wrong
    )
    return base, cand


def _tango_z_numeric(b: float, c: float, n: float, d0: float) -> float:
    """Tango's score statistic from a *numerically* maximised restricted likelihood.

    Independent of the closed-form quadratic in the implementation: maximise
    b·log(q + d0) + c·log(q) + (n − b − c)·log(1 − 2q − d0) over q, then
    Z = (b − c − n d0) / sqrt(n (p₊ + p₋ − d0²)).
    """
    lo = max(0.0, -d0) + 1e-13
    hi = (1.0 - d0) / 2.0 - 1e-13
    conc = n - b - c

    def negll(q: float) -> float:
        val = conc * np.log(1.0 - 2.0 * q - d0)
        if b > 0:
            val += b * np.log(q + d0)
        if c > 0:
            val += c * np.log(q)
        return -float(val)

    q = optimize.minimize_scalar(
        negll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-15}
    ).x
    var = (q + d0) + q - d0 * d0
    return (b - c - n * d0) / np.sqrt(n * var)


def test_paired_counts_and_flips() -> None:
    base, cand = _arrays(CAVO)
    counts = paired_binary_counts(base, cand)
    assert counts == CAVO
    assert counts.n == 161
    assert counts.discordant == 22
    assert counts.delta == pytest.approx((6 - 16) / 161, abs=1e-15)
    assert counts.candidate_rate - counts.baseline_rate == pytest.approx(counts.delta)
    assert paired_binary_counts([True, False], [False, False]).regressions == 1


@pytest.mark.parametrize(
    ("baseline", "candidate", "message"),
    [
        ([1, np.nan], [1, 0], "NaN"),
        ([1, 2], [1, 0], "0/1"),
        ([1, 0, 1], [1, 0], "equal lengths"),
        ([[1, 0]], [[1, 0]], "one-dimensional"),
    ],
)
def test_paired_counts_rejects_bad_input(baseline: object, candidate: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_binary_counts(baseline, candidate)


def test_mcnemar_exact_matches_statsmodels() -> None:
    for b in range(0, 25):
        for c in range(0, 25):
            expected = sm_mcnemar([[10, b], [c, 10]], exact=True).pvalue
            assert mcnemar_exact(b, c) == pytest.approx(expected, abs=1e-12, rel=1e-12)
    # Published value for the Cavo example (exact conditional McNemar).
    assert mcnemar_exact(16, 6) == pytest.approx(0.052479, abs=5e-7)


def test_tango_ci_published_cavo_example() -> None:
    lo, hi = tango_ci(CAVO.improvements, CAVO.regressions, CAVO.n, alpha=0.05)
    assert round(lo, 4) == -0.1240
    assert round(hi, 4) == -0.0054


@pytest.mark.parametrize(
    ("b", "c", "n"),
    [(6, 16, 161), (40, 20, 160), (1, 7, 21), (3, 0, 50), (0, 5, 40), (12, 12, 300), (1, 0, 10)],
)
@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_tango_matches_numerical_score_equation(b: int, c: int, n: int, alpha: float) -> None:
    # Statistic at several hypothesised values, against the numerical restricted MLE.
    for d0 in (-0.3, -0.05, 0.0, 0.07, 0.25):
        if b == c == 0 and d0 == 0.0:
            continue
        z = float(tango_statistic(b, c, n, d0))
        assert z == pytest.approx(_tango_z_numeric(b, c, n, d0), abs=1e-6)
    # Interval: solve the numerical score equation with brentq, independently.
    crit = stats.norm.isf(alpha / 2)
    est = (b - c) / n
    lo_ref = optimize.brentq(lambda d: _tango_z_numeric(b, c, n, d) - crit, -0.999999, est)
    hi_ref = optimize.brentq(lambda d: _tango_z_numeric(b, c, n, d) + crit, est, 0.999999)
    lo, hi = tango_ci(b, c, n, alpha=alpha)
    assert lo == pytest.approx(lo_ref, abs=1e-6)
    assert hi == pytest.approx(hi_ref, abs=1e-6)


def test_tango_without_discordance_is_defined_and_closed_form() -> None:
    # With b = c = 0 the score equation solves to ±z²/(n + z²).
    for n in (1, 5, 20, 400):
        z = stats.norm.isf(0.05)
        lo, hi = tango_ci(0, 0, n, alpha=0.1)
        assert lo == pytest.approx(-(z * z) / (n + z * z), abs=1e-9)
        assert hi == pytest.approx(z * z / (n + z * z), abs=1e-9)
        lo_c, hi_c = tango_ci(0, 0, n, alpha=0.1, corrected=True)
        assert lo_c < lo < 0 < hi < hi_c
    t = tango_test(0, 0, 100, 0.0)
    assert t.statistic == 0.0 and t.p_greater == pytest.approx(0.5)


@pytest.mark.parametrize("corrected", [False, True])
def test_tango_ci_is_inversion_of_test(corrected: bool) -> None:
    rng = np.random.default_rng(11)
    for _ in range(40):
        n = int(rng.integers(10, 500))
        b, c = (int(x) for x in rng.multinomial(n, [0.07, 0.1, 0.83])[:2])
        lo, hi = tango_ci(b, c, n, alpha=0.1, corrected=corrected)
        if lo > -1:
            assert tango_test(b, c, n, lo, corrected=corrected).p_greater == pytest.approx(
                0.05, abs=1e-7
            )
        if hi < 1:
            assert tango_test(b, c, n, hi, corrected=corrected).p_less == pytest.approx(
                0.05, abs=1e-7
            )


def test_corrected_tango_is_monotone_and_conservative() -> None:
    grid = np.linspace(-0.9999, 0.9999, 20001)
    for b, c, n in [(0, 0, 100), (0, 0, 5), (3, 1, 50), (0, 5, 40), (10, 0, 30), (1, 0, 10)]:
        z = tango_statistic(b, c, n, grid, corrected=True)
        for crit in (1.645, -1.645, 2.326, -2.326):
            crossings = np.flatnonzero(np.diff(np.sign(z - crit)) != 0)
            assert crossings.size == 1, (b, c, n, crit)
        plain = tango_ci(b, c, n, alpha=0.1)
        corr = tango_ci(b, c, n, alpha=0.1, corrected=True)
        assert corr[0] <= plain[0] + 1e-12 and corr[1] >= plain[1] - 1e-12


def test_tango_statistic_is_vectorised() -> None:
    b = np.array([0, 3, 10, 6])
    c = np.array([0, 1, 2, 16])
    n = np.array([20, 50, 100, 161])
    z = tango_statistic(b, c, n, -0.05, corrected=True)
    for i in range(4):
        assert z[i] == pytest.approx(
            float(tango_statistic(b[i], c[i], n[i], -0.05, corrected=True))
        )


def test_newcombe_paired_published_cavo_example() -> None:
    lo, hi = newcombe_paired_ci(CAVO, alpha=0.05)
    assert round(lo, 4) == -0.1186
    assert round(hi, 4) == -0.0046


def test_wilson_matches_statsmodels() -> None:
    for x, n in [(0, 10), (3, 10), (10, 10), (56, 70), (1, 1000)]:
        lo, hi = wilson_interval(x, n, alpha=0.05)
        ref = sm_proportion.proportion_confint(x, n, alpha=0.05, method="wilson")
        assert lo == pytest.approx(ref[0], abs=1e-12)
        assert hi == pytest.approx(ref[1], abs=1e-12)


def test_newcombe_unpaired_published_and_statsmodels() -> None:
    # Newcombe (1998a) example: 56/70 - 48/80, method 10 gives 0.0524 to 0.3339.
    lo, hi = newcombe_unpaired_ci(56, 70, 48, 80, alpha=0.05)
    assert (round(lo, 4), round(hi, 4)) == (0.0524, 0.3339)
    for args in [(56, 70, 48, 80), (9, 10, 3, 10), (0, 20, 5, 20), (7, 34, 1, 34)]:
        ref = sm_proportion.confint_proportions_2indep(*args, method="newcomb", alpha=0.1)
        ours = newcombe_unpaired_ci(*args, alpha=0.1)
        assert ours[0] == pytest.approx(ref[0], abs=1e-12)
        assert ours[1] == pytest.approx(ref[1], abs=1e-12)


def _mn_z_numeric(x1: float, n1: float, x2: float, n2: float, d0: float) -> float:
    """Miettinen-Nurminen statistic from a numerically maximised restricted likelihood."""
    lo, hi = max(0.0, -d0) + 1e-13, min(1.0, 1.0 - d0) - 1e-13

    def negll(p2: float) -> float:
        p1 = p2 + d0
        val = 0.0
        for k, m, p in ((x1, n1, p1), (x2, n2, p2)):
            if k > 0:
                val += k * np.log(p)
            if m - k > 0:
                val += (m - k) * np.log(1.0 - p)
        return -val

    p2 = optimize.minimize_scalar(
        negll, bounds=(lo, hi), method="bounded", options={"xatol": 1e-15}
    ).x
    p1 = p2 + d0
    big_n = n1 + n2
    var = (p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2) * big_n / (big_n - 1)
    return (x1 / n1 - x2 / n2 - d0) / np.sqrt(var)


@pytest.mark.parametrize(
    "args", [(56, 70, 48, 80), (9, 10, 3, 10), (7, 34, 1, 34), (30, 40, 35, 45)]
)
def test_miettinen_nurminen_against_numerical_mle(args: tuple[int, int, int, int]) -> None:
    for d0 in (-0.2, -0.05, 0.1, 0.3):
        ours = float(miettinen_nurminen_statistic(*args, d0))
        assert ours == pytest.approx(_mn_z_numeric(*args, d0), abs=1e-6)


def test_miettinen_nurminen_published_and_statsmodels_at_zero() -> None:
    # Newcombe (1998a) Table II, example (a): Miettinen-Nurminen 0.0528 to 0.3382.
    lo, hi = miettinen_nurminen_ci(56, 70, 48, 80, alpha=0.05)
    assert (round(lo, 4), round(hi, 4)) == (0.0528, 0.3382)
    # statsmodels' restricted MLE for value != 0 has a known wrong coefficient
    # (statsmodels issue #10269), so compare with it only at the pooled null value 0.
    for args in [(56, 70, 48, 80), (9, 10, 3, 10), (30, 40, 35, 45)]:
        ref = sm_proportion.test_proportions_2indep(
            *args, value=0, method="score", compare="diff", alternative="larger", correction=True
        )
        t = miettinen_nurminen_test(*args, 0.0)
        assert t.statistic == pytest.approx(ref.statistic, abs=1e-10)
        assert t.p_greater == pytest.approx(ref.pvalue, abs=1e-10)


def test_miettinen_nurminen_ci_is_inversion() -> None:
    for args in [(56, 70, 48, 80), (0, 30, 2, 25), (30, 30, 28, 30)]:
        lo, hi = miettinen_nurminen_ci(*args, alpha=0.1)
        if lo > -1:
            assert miettinen_nurminen_test(*args, lo).p_greater == pytest.approx(0.05, abs=1e-7)
        if hi < 1:
            assert miettinen_nurminen_test(*args, hi).p_less == pytest.approx(0.05, abs=1e-7)
