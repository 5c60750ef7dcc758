"""Binary (0/1) outcomes: paired counts, McNemar, Tango, Newcombe, Miettinen–Nurminen, Wilson.

Orientation used throughout: ``Δ = p_candidate − p_baseline``. In the paired 2×2 table

================  ==================  =================
candidate \\ base  baseline correct    baseline wrong
================  ==================  =================
candidate right   ``both_correct``    ``improvements``
candidate wrong   ``regressions``     ``both_wrong``
================  ==================  =================

so ``Δ = (improvements − regressions) / n``. Only the discordant cells carry information about
Δ, which is why the paired design is so much more sensitive than comparing two accuracies.

The score statistics are written as vectorised NumPy expressions (they accept arrays of counts)
so that the calibration simulations in ``tests/stats`` run the very same code as the gate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalsvc.stats._common import FloatArray, MarginTest, as_binary_vector

__all__ = [
    "TANGO_CONTINUITY",
    "TANGO_MAX_SKEW",
    "PairedBinaryCounts",
    "mcnemar_exact",
    "miettinen_nurminen_ci",
    "miettinen_nurminen_statistic",
    "miettinen_nurminen_test",
    "newcombe_paired_ci",
    "newcombe_unpaired_ci",
    "paired_binary_counts",
    "tango_ci",
    "tango_statistic",
    "tango_test",
    "wilson_interval",
]


@dataclass(frozen=True)
class PairedBinaryCounts:
    """The paired 2×2 table of baseline vs candidate 0/1 outcomes on the same items.

    ``regressions`` counts items the baseline got right and the candidate got wrong (the flips
    a release manager worries about); ``improvements`` counts the reverse flips.
    """

    both_correct: int
    regressions: int
    improvements: int
    both_wrong: int

    @property
    def n(self) -> int:
        return self.both_correct + self.regressions + self.improvements + self.both_wrong

    @property
    def discordant(self) -> int:
        return self.regressions + self.improvements

    @property
    def baseline_rate(self) -> float:
        return (self.both_correct + self.regressions) / self.n if self.n else float("nan")

    @property
    def candidate_rate(self) -> float:
        return (self.both_correct + self.improvements) / self.n if self.n else float("nan")

    @property
    def delta(self) -> float:
        """Observed ``p_candidate − p_baseline``."""
        return (self.improvements - self.regressions) / self.n if self.n else float("nan")

    def to_dict(self) -> dict[str, int]:
        return {
            "both_correct": self.both_correct,
            "regressions": self.regressions,
            "improvements": self.improvements,
            "both_wrong": self.both_wrong,
        }


def paired_binary_counts(baseline: Any, candidate: Any) -> PairedBinaryCounts:
    """Cross-tabulate paired 0/1 outcomes into a :class:`PairedBinaryCounts` table.

    Raises ``ValueError`` for NaN, non-0/1 values or unequal lengths.
    """
    b = as_binary_vector(baseline, name="baseline")
    c = as_binary_vector(candidate, name="candidate")
    if b.shape != c.shape:
        raise ValueError(
            f"paired outcomes need equal lengths: baseline has {b.size}, candidate {c.size}"
        )
    bb = b.astype(bool)
    cc = c.astype(bool)
    return PairedBinaryCounts(
        both_correct=int(np.sum(bb & cc)),
        regressions=int(np.sum(bb & ~cc)),
        improvements=int(np.sum(~bb & cc)),
        both_wrong=int(np.sum(~bb & ~cc)),
    )


def mcnemar_exact(regressions: int, improvements: int) -> float:
    """Two-sided exact (conditional) McNemar test of H0: p_candidate = p_baseline.

    Conditional on the number of discordant pairs ``m``, the regressions are Binomial(m, 1/2)
    under H0 (McNemar 1947, Psychometrika 12:153–157; exact form e.g. Agresti, *Categorical Data
    Analysis*, ch. on matched pairs). Returns 1.0 when there are no discordant pairs. This tests
    equality, not the margin; the gate reports it alongside the non-inferiority test.
    """
    import scipy
    m = int(regressions) + int(improvements)
    if regressions < 0 or improvements < 0:
        raise ValueError("counts must be non-negative")
    if m == 0:
        return 1.0
    return float(scipy.stats.binomtest(int(regressions), m, 0.5, alternative="two-sided").pvalue)


# --------------------------------------------------------------------------------------------
# Tango's score statistic for the paired difference of proportions
# --------------------------------------------------------------------------------------------


def _tango_restricted_q(
    improvements: FloatArray, regressions: FloatArray, n: FloatArray, delta0: FloatArray
) -> FloatArray:
    """Restricted MLE of the regression-cell probability under H0: Δ = delta0.

    Derivation (Tango 1998, Stat Med 17:891–908): with cell probabilities
    ``q`` (regressions) and ``q + Δ0`` (improvements), the concordant cells share
    ``1 − 2q − Δ0``; setting the profile-likelihood derivative to zero gives
    ``2n q² + B q + C = 0`` with ``B = −b − c + (2n − b + c) Δ0``, ``C = −c Δ0 (1 − Δ0)``,
    where ``b`` = improvements and ``c`` = regressions. The admissible root is the larger one.
    """
    b, c = improvements, regressions
    a_coef = 2.0 * n
    b_coef = -b - c + (2.0 * n - b + c) * delta0
    c_coef = -c * delta0 * (1.0 - delta0)
    disc = np.maximum(b_coef * b_coef - 4.0 * a_coef * c_coef, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = (-b_coef + np.sqrt(disc)) / (2.0 * a_coef)
    # The root lies in [max(0, -Δ0), (1 - Δ0)/2]; clip away rounding error only.
    return np.clip(q, np.maximum(0.0, -delta0), np.maximum(0.0, (1.0 - delta0) / 2.0))


# Half the lattice step of the score numerator b − c − nΔ0 (one item moving between cells).
TANGO_CONTINUITY = 0.5
# Bound on the estimated skewness used in the Cornish–Fisher correction: beyond it the one-term
# expansion is unreliable (it only arises with a handful of discordant pairs).
TANGO_MAX_SKEW = 0.25


def tango_statistic(
    improvements: Any, regressions: Any, n: Any, delta0: Any, *, corrected: bool = False
) -> FloatArray:
    """Tango's score statistic ``Z(Δ0)`` for paired proportions (vectorised).

    ``Z = (b − c − n Δ0) / sqrt(n (2 q̃ + Δ0 (1 − Δ0)))`` with ``q̃`` the restricted MLE
    (Tango 1998, Stat Med 17:891–908). Large positive ``Z`` is evidence that Δ > Δ0.
    At ``Δ0 = 0`` this is the (uncorrected) McNemar z statistic. Counts may be non-integer
    (design-effect-deflated counts for clustered data, Rao & Scott 1992).

    ``corrected=True`` (what the gate uses) adds two small-sample corrections that make the
    *one-sided* error rates conservative, which the plain statistic is not: in our simulations
    (tests/stats/test_calibration.py) its one-sided rejection rate at the boundary reached about
    0.08 at nominal 0.05 for n = 30 and 0.07 for n = 100 when nearly all discordant pairs go
    one way; with both corrections no simulated configuration exceeded 0.05 + Monte Carlo error.

    1. Continuity correction: shrink ``|b − c − nΔ0|`` by 0.5, half the lattice step.
    2. Skewness correction (one-term Cornish–Fisher; Gart & Nam 1990, Biometrics 46:637–643,
       and Laud 2017, Pharm Stat 16:334–348, for the analogous independent-sample case):
       ``Z − (γ/6)(Z² − 1)`` where ``γ = μ₃/(σ³√n)`` is the skewness of the score under the
       restricted MLE, with per-item third central moment
       ``μ₃ = (q̃+Δ0)(1−Δ0)³ + q̃(−1−Δ0)³ + (1−2q̃−Δ0)(−Δ0)³``. γ is bounded to
       ``±TANGO_MAX_SKEW`` and the corrected statistic is held constant past its turning point
       ``Z = 3/γ`` so that it stays monotone in the data.
    """
    b = np.asarray(improvements, dtype=np.float64)
    c = np.asarray(regressions, dtype=np.float64)
    nn = np.asarray(n, dtype=np.float64)
    d0 = np.asarray(delta0, dtype=np.float64)
    q = _tango_restricted_q(b, c, nn, d0)
    per_item_var = np.maximum(2.0 * q + d0 * (1.0 - d0), 0.0)
    var = nn * per_item_var
    num = b - c - nn * d0
    if corrected:
        num = np.sign(num) * np.maximum(np.abs(num) - TANGO_CONTINUITY, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = num / np.sqrt(var)
    # 0/0 happens only when the data sit exactly on the boundary with no variance (e.g. no
    # discordant pairs and Δ0 = 0): no evidence either way.
    z = np.where((var <= 0.0) & (num == 0.0), 0.0, z)
    if corrected:
        mu3 = (q + d0) * (1.0 - d0) ** 3 + q * (-1.0 - d0) ** 3 + (1.0 - 2.0 * q - d0) * (-d0) ** 3
        with np.errstate(invalid="ignore", divide="ignore"):
            gamma = np.where(var > 0.0, mu3 / (per_item_var**1.5 * np.sqrt(nn)), 0.0)
        gamma = np.clip(np.nan_to_num(gamma), -TANGO_MAX_SKEW, TANGO_MAX_SKEW)
        zc = z - (gamma / 6.0) * (z * z - 1.0)
        with np.errstate(invalid="ignore", divide="ignore"):
            turn = np.where(gamma != 0.0, 3.0 / gamma, np.inf)
            plateau = 1.5 / gamma + gamma / 6.0
        past = ((gamma > 0.0) & (z > turn)) | ((gamma < 0.0) & (z < turn))
        z = np.where(past, plateau, zc)
    return np.asarray(z, dtype=np.float64)


def tango_test(
    improvements: float,
    regressions: float,
    n: float,
    delta0: float,
    *,
    corrected: bool = False,
) -> MarginTest:
    """One-sided Tango score tests of H0: Δ ≤ Δ0 (``p_greater``) and H0: Δ ≥ Δ0 (``p_less``).

    Normal reference distribution for the score statistic (Tango 1998; Nam 1997, Biometrics
    53:1422–1430 for the equivalent non-inferiority test). Inverting these tests at one-sided
    level α gives the bounds returned by :func:`tango_ci` at ``alpha = 2α`` (same ``corrected``).
    """
    import scipy
    if n <= 0:
        raise ValueError("n must be positive")
    z = float(tango_statistic(improvements, regressions, n, delta0, corrected=corrected))
    return MarginTest(
        estimate=(improvements - regressions) / n,
        null_value=float(delta0),
        statistic=z,
        p_greater=float(scipy.stats.norm.sf(z)),
        p_less=float(scipy.stats.norm.cdf(z)),
        method="Tango score (continuity + skewness corrected)" if corrected else "Tango score",
    )


def _invert_decreasing(
    fn: Callable[[float], float], estimate: float, crit: float, lo: float, hi: float
) -> tuple[float, float]:
    """Solve ``fn(x) = +crit`` below ``estimate`` and ``fn(x) = −crit`` above it.

    ``fn`` is a score statistic, decreasing in the hypothesised value and 0 at the estimate.
    If the statistic never reaches the critical value inside ``[lo, hi]`` the interval extends
    to the parameter-space boundary.
    """
    import scipy
    eps = 1e-12
    lo_in, hi_in = lo + eps, hi - eps
    if estimate <= lo_in or fn(lo_in) <= crit:
        lower = lo
    else:
        lower = float(scipy.optimize.brentq(lambda x: fn(x) - crit, lo_in, estimate, xtol=1e-13))
    if estimate >= hi_in or fn(hi_in) >= -crit:
        upper = hi
    else:
        upper = float(scipy.optimize.brentq(lambda x: fn(x) + crit, estimate, hi_in, xtol=1e-13))
    return lower, upper


def tango_ci(
    improvements: float,
    regressions: float,
    n: float,
    alpha: float = 0.05,
    *,
    corrected: bool = False,
) -> tuple[float, float]:
    """Two-sided ``1 − alpha`` Tango score interval for the paired difference Δ.

    The set of Δ0 with ``|Z(Δ0)| < z_{1−alpha/2}`` (Tango 1998, Stat Med 17:891–908; recommended
    by Fagerland, Lydersen & Laake 2014, Stat Med 33:2850–2875). Unlike the Wald interval it does
    not collapse to a point when there are no discordant pairs: with ``b = c = 0`` the bounds are
    ``±z²/(n + z²)``. Each limit is a one-sided ``alpha/2`` bound, so the gate calls this with
    ``alpha = 2α`` to get one-sided α bounds; ``corrected`` as in :func:`tango_statistic`.
    """
    import scipy
    if n <= 0:
        raise ValueError("n must be positive")
    crit = float(scipy.stats.norm.isf(alpha / 2.0))
    est = (improvements - regressions) / n

    def fn(d0: float) -> float:
        return float(tango_statistic(improvements, regressions, n, d0, corrected=corrected))

    return _invert_decreasing(fn, est, crit, -1.0, 1.0)


# --------------------------------------------------------------------------------------------
# Wilson / Newcombe hybrid score intervals
# --------------------------------------------------------------------------------------------


def wilson_interval(successes: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for one proportion (Wilson 1927, JASA 22:209–212), ``1 − alpha``."""
    import scipy
    if n <= 0:
        raise ValueError("n must be positive")
    z = float(scipy.stats.norm.isf(alpha / 2.0))
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * np.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def newcombe_paired_ci(counts: PairedBinaryCounts, alpha: float = 0.05) -> tuple[float, float]:
    """Newcombe's hybrid score interval for a paired difference (Newcombe 1998b, method 10).

    Newcombe RG (1998) "Improved confidence intervals for the difference between binomial
    proportions based on paired data", Stat Med 17:2635–2650: Wilson intervals for each marginal
    proportion combined by square-and-add with a correlation estimate phi of the 2×2 table.
    phi uses Newcombe's continuity adjustment of the cross-product ``A = ad − bc``:
    ``(A − n/2)/√(margins)`` if ``A > n/2``, 0 if ``0 ≤ A ≤ n/2``, ``A/√(margins)`` if ``A < 0``,
    and 0 when a margin is empty (the form evaluated by Fagerland, Lydersen & Laake 2014, Stat Med
    33:2850–2875, whose worked example — Cavo et al. 2012, 95% CI −0.1186 to −0.0046 — is checked
    in the tests). Reported next to Tango's interval as a cross-check.
    """
    n = counts.n
    if n == 0:
        raise ValueError("no items")
    a, b = counts.both_correct, counts.improvements
    c, d = counts.regressions, counts.both_wrong
    p1, p2 = counts.candidate_rate, counts.baseline_rate
    l1, u1 = wilson_interval(a + b, n, alpha)
    l2, u2 = wilson_interval(a + c, n, alpha)
    denom = float(a + b) * float(c + d) * float(a + c) * float(b + d)
    cross = float(a) * float(d) - float(b) * float(c)
    if denom <= 0:
        phi = 0.0
    elif cross > n / 2.0:
        # Shrinking a positive cross-product by n/2 keeps the interval from being too narrow
        # when the correlation estimate is noisy (Newcombe 1998b).
        phi = (cross - n / 2.0) / float(np.sqrt(denom))
    elif cross >= 0:
        phi = 0.0
    else:
        phi = cross / float(np.sqrt(denom))
    dl = np.sqrt(max((p1 - l1) ** 2 - 2.0 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0.0))
    du = np.sqrt(max((u1 - p1) ** 2 - 2.0 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0.0))
    est = p1 - p2
    return float(est - dl), float(est + du)


def newcombe_unpaired_ci(
    x1: float, n1: float, x2: float, n2: float, alpha: float = 0.05
) -> tuple[float, float]:
    """Newcombe's hybrid score interval for ``p1 − p2`` from independent samples (method 10).

    Newcombe RG (1998) "Interval estimation for the difference between independent proportions:
    comparison of eleven methods", Stat Med 17:873–890. Worked example in the paper:
    56/70 − 48/80 gives 0.0524 to 0.3339 (checked in the tests).
    """
    p1, p2 = x1 / n1, x2 / n2
    l1, u1 = wilson_interval(x1, n1, alpha)
    l2, u2 = wilson_interval(x2, n2, alpha)
    est = p1 - p2
    return (
        float(est - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)),
        float(est + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)),
    )


# --------------------------------------------------------------------------------------------
# Miettinen–Nurminen score statistic for independent proportions
# --------------------------------------------------------------------------------------------


def _mn_restricted_p1(
    p1: FloatArray, n1: FloatArray, p2: FloatArray, n2: FloatArray, delta0: FloatArray
) -> FloatArray:
    """Restricted MLE of ``p1`` under H0: p1 − p2 = Δ0 (closed-form cubic root).

    Miettinen & Nurminen (1985) Stat Med 4:213–226, Appendix; the trigonometric solution as
    written by Farrington & Manning (1990) Stat Med 9:1447–1454.
    """
    theta = n2 / n1
    a = 1.0 + theta
    b = -(1.0 + theta + p1 + theta * p2 + delta0 * (theta + 2.0))
    c = delta0 * delta0 + delta0 * (2.0 * p1 + theta + 1.0) + p1 + theta * p2
    d = -p1 * delta0 * (1.0 + delta0)
    v = b**3 / (27.0 * a**3) - b * c / (6.0 * a * a) + d / (2.0 * a)
    u = np.sign(v) * np.sqrt(np.maximum(b * b / (9.0 * a * a) - c / (3.0 * a), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(u == 0.0, 0.0, v / u**3)
    w = (np.pi + np.arccos(np.clip(ratio, -1.0, 1.0))) / 3.0
    p1r = 2.0 * u * np.cos(w) - b / (3.0 * a)
    lo = np.maximum(0.0, delta0)
    hi = np.minimum(1.0, 1.0 + delta0)
    return np.asarray(np.clip(p1r, lo, hi), dtype=np.float64)


def miettinen_nurminen_statistic(x1: Any, n1: Any, x2: Any, n2: Any, delta0: Any) -> FloatArray:
    """Miettinen–Nurminen score statistic for ``p1 − p2 = Δ0`` (vectorised).

    ``Z = (p̂1 − p̂2 − Δ0) / sqrt((p̃1 q̃1/n1 + p̃2 q̃2/n2) · N/(N − 1))`` with restricted MLEs
    ``p̃`` (Miettinen & Nurminen 1985, Stat Med 4:213–226). Without the ``N/(N−1)`` factor this
    is the Farrington–Manning (1990) non-inferiority test.
    """
    x1a = np.asarray(x1, dtype=np.float64)
    x2a = np.asarray(x2, dtype=np.float64)
    n1a = np.asarray(n1, dtype=np.float64)
    n2a = np.asarray(n2, dtype=np.float64)
    d0 = np.asarray(delta0, dtype=np.float64)
    p1, p2 = x1a / n1a, x2a / n2a
    p1r = _mn_restricted_p1(p1, n1a, p2, n2a, d0)
    p2r = np.clip(p1r - d0, 0.0, 1.0)
    big_n = n1a + n2a
    var = (p1r * (1.0 - p1r) / n1a + p2r * (1.0 - p2r) / n2a) * big_n / (big_n - 1.0)
    num = p1 - p2 - d0
    with np.errstate(invalid="ignore", divide="ignore"):
        z = num / np.sqrt(np.maximum(var, 0.0))
    z = np.where((var <= 0.0) & (np.abs(num) < 1e-15), 0.0, z)
    return np.asarray(z, dtype=np.float64)


def miettinen_nurminen_test(
    x1: float, n1: float, x2: float, n2: float, delta0: float
) -> MarginTest:
    """One-sided Miettinen–Nurminen score tests of H0: Δ ≤ Δ0 and H0: Δ ≥ Δ0, Δ = p1 − p2."""
    import scipy
    if n1 <= 0 or n2 <= 0:
        raise ValueError("both samples must be non-empty")
    z = float(miettinen_nurminen_statistic(x1, n1, x2, n2, delta0))
    return MarginTest(
        estimate=x1 / n1 - x2 / n2,
        null_value=float(delta0),
        statistic=z,
        p_greater=float(scipy.stats.norm.sf(z)),
        p_less=float(scipy.stats.norm.cdf(z)),
        method="Miettinen-Nurminen score",
    )


def miettinen_nurminen_ci(
    x1: float, n1: float, x2: float, n2: float, alpha: float = 0.05
) -> tuple[float, float]:
    """Two-sided ``1 − alpha`` Miettinen–Nurminen score interval for ``p1 − p2``.

    Test inversion of :func:`miettinen_nurminen_statistic` (Miettinen & Nurminen 1985; the same
    interval as ``statsmodels`` ``confint_proportions_2indep(method="score", correction=True)``).
    """
    import scipy
    if n1 <= 0 or n2 <= 0:
        raise ValueError("both samples must be non-empty")
    crit = float(scipy.stats.norm.isf(alpha / 2.0))
    est = x1 / n1 - x2 / n2

    def fn(d0: float) -> float:
        return float(miettinen_nurminen_statistic(x1, n1, x2, n2, d0))

    return _invert_decreasing(fn, est, crit, -1.0, 1.0)
