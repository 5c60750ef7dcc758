"""Power, minimum detectable effect (MDE) and sample-size planning for the gates.

Sign convention: differences are *oriented* so that bad is negative (the gate flips the sign for
lower-is-better metrics before calling these). The non-inferiority boundary is ``−margin``.

The MDE is a *distance from the boundary*: at the achieved n, the gate has the requested power
to **pass** a candidate whose true Δ is at least ``−margin + MDE`` and to **fail** one whose true Δ
is at most ``−margin − MDE``. So ``MDE > margin`` means that even a candidate identical to the
baseline will usually come out inconclusive: the run is too small for the margin.
"""

from __future__ import annotations

import math

import numpy as np

from evalsvc.stats._binary import TANGO_CONTINUITY, _tango_restricted_q, tango_test
from evalsvc.stats._common import check_alpha

__all__ = [
    "mde_mean",
    "mde_paired_binary",
    "mde_two_proportions",
    "min_n_flip_free",
    "power_paired_binary",
    "required_n",
    "required_n_mean",
]


def _check_power(power: float) -> float:
    if not (0.0 < power < 1.0):
        raise ValueError(f"power must be in (0, 1), got {power!r}")
    return float(power)


def mde_mean(n: int, sd: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """MDE of a one-sided level-α test on a mean difference with SD ``sd`` of the differences.

    Normal approximation ``(z_{1−α} + z_{power}) · sd / √n`` (e.g. Chow, Shao & Wang, *Sample Size
    Calculations in Clinical Research*, 2nd ed., one-sample means). ``inf`` when n = 0.
    """
    import scipy
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if n <= 0:
        return math.inf
    if sd < 0 or not math.isfinite(sd):
        raise ValueError("sd must be finite and non-negative")
    return float((scipy.stats.norm.isf(alpha) + scipy.stats.norm.ppf(power)) * sd / math.sqrt(n))


def mde_paired_binary(
    n: float, discordance: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """MDE for paired 0/1 outcomes with discordance rate ψ (share of items that flip).

    The per-item difference ``dᵢ ∈ {−1, 0, 1}`` has variance ``ψ − Δ² ≤ ψ``; using ψ gives the
    slightly conservative ``(z_{1−α} + z_{power}) √(ψ/n)`` (Connor 1987, Biometrics 43:207–211
    for the paired-proportion power calculation). Callers that estimate ψ from data should smooth
    it (the gate uses ``(discordant + 1)/(n + 2)``) so that a run with no flips does not report an
    MDE of zero.
    """
    import scipy
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if n <= 0:
        return math.inf
    if not (0.0 <= discordance <= 1.0):
        raise ValueError("discordance must be in [0, 1]")
    z = scipy.stats.norm.isf(alpha) + scipy.stats.norm.ppf(power)
    return float(z * math.sqrt(discordance / n))


def mde_two_proportions(
    n1: int, p1: float, n2: int, p2: float, alpha: float = 0.05, power: float = 0.8
) -> float:
    """MDE for an unpaired difference of two proportions (normal approximation, Wald variance)."""
    import scipy
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if n1 <= 0 or n2 <= 0:
        return math.inf
    sd = math.sqrt(p1 * (1.0 - p1) / n1 + p2 * (1.0 - p2) / n2)
    return float((scipy.stats.norm.isf(alpha) + scipy.stats.norm.ppf(power)) * sd)


def _paired_sigmas(margin: float, discordance: float, true_delta: float) -> tuple[float, float]:
    """Per-item SDs of the score statistic under the null boundary and under the alternative.

    Under the alternative the cell probabilities are ``(ψ ± Δ1)/2`` and ``σ1² = ψ − Δ1²``. Under
    the boundary Δ0 = −margin the variance uses the restricted MLE evaluated at the expected cell
    proportions (Nam 1997, Biometrics 53:1422–1430): ``σ0² = 2 q̃ + Δ0 (1 − Δ0)``.
    """
    if not (0.0 <= discordance <= 1.0):
        raise ValueError("discordance must be in [0, 1]")
    if abs(true_delta) > discordance + 1e-15:
        raise ValueError(
            f"|true_delta| = {abs(true_delta)} cannot exceed the discordance rate {discordance}: "
            "a difference needs at least that many flipped items"
        )
    d0 = -margin
    p_imp = (discordance + true_delta) / 2.0
    p_reg = (discordance - true_delta) / 2.0
    q = float(
        _tango_restricted_q(np.asarray(p_imp), np.asarray(p_reg), np.asarray(1.0), np.asarray(d0))
    )
    sigma0 = math.sqrt(max(2.0 * q + d0 * (1.0 - d0), 0.0))
    sigma1 = math.sqrt(max(discordance - true_delta**2, 0.0))
    return sigma0, sigma1


def power_paired_binary(
    n: int,
    margin: float,
    discordance: float,
    alpha: float = 0.05,
    true_delta: float = 0.0,
) -> float:
    """Approximate power of the paired Tango non-inferiority gate to reach the right verdict.

    If ``true_delta > −margin`` this is P(pass); if ``true_delta < −margin`` it is P(fail).
    Normal approximation with null and alternative variances (Nam 1997, Biometrics
    53:1422–1430), including the gate's continuity correction ``cc = 0.5`` item:
    ``Φ((√n |Δ1 + δ| − cc/√n − z_{1−α} σ0) / σ1)``. The skewness correction is ignored (it is
    negligible at the n this returns).
    """
    import scipy
    alpha = check_alpha(alpha)
    if margin < 0:
        raise ValueError("margin must be non-negative")
    dist = abs(true_delta + margin)
    if dist == 0.0:
        raise ValueError("true_delta equals the boundary −margin: power is undefined")
    sigma0, sigma1 = _paired_sigmas(margin, discordance, true_delta)
    if n <= 0:
        return 0.0
    drift = (
        math.sqrt(n) * dist
        - TANGO_CONTINUITY / math.sqrt(n)
        - float(scipy.stats.norm.isf(alpha)) * sigma0
    )
    if sigma1 == 0.0:
        return 1.0 if drift > 0 else 0.0
    return float(scipy.stats.norm.cdf(drift / sigma1))


def required_n(
    margin: float,
    discordance: float,
    alpha: float = 0.05,
    power: float = 0.8,
    true_delta: float = 0.0,
) -> int:
    """Items needed for the paired binary gate to reach the right verdict with ``power``.

    Target: with ``true_delta`` (oriented; default 0, "the candidate is as good as the
    baseline") the gate **passes** with probability ``power``; if ``true_delta < −margin`` the
    target is a **fail** call instead. By the symmetry of the test, the n planned for
    ``true_delta = 0`` also fails a true drop of ``2·margin`` with at least that power (the
    variance ``ψ − Δ²`` is smaller there); the tests check both by simulation.

    Without continuity correction this is ``n = ((z_{1−α} σ0 + z_{power} σ1) / |Δ1 + δ|)²``
    (Nam 1997, Biometrics 53:1422–1430; the score-test sample size for matched pairs). The gate's
    continuity correction ``cc`` adds a term: with ``K = z_{1−α} σ0 + z_{power} σ1`` and
    ``D = |Δ1 + δ|``, solve ``D n − K √n − cc = 0``, i.e.
    ``√n = (K + √(K² + 4 D cc)) / (2D)`` (as in Fleiss, Tytun & Ury 1980, Biometrics 36:343–346,
    for the two-sample case). ``discordance`` ψ is the expected share of
    items on which baseline and candidate disagree; estimate it from a pilot run or a previous
    release (the JSON report's ``details.discordance``).
    """
    import scipy
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if margin < 0:
        raise ValueError("margin must be non-negative")
    dist = abs(true_delta + margin)
    if dist == 0.0:
        raise ValueError("true_delta equals the boundary −margin: no n achieves the power")
    sigma0, sigma1 = _paired_sigmas(margin, discordance, true_delta)
    za = float(scipy.stats.norm.isf(alpha))
    zb = float(scipy.stats.norm.ppf(power))
    k = za * sigma0 + zb * sigma1
    root_n = (k + math.sqrt(k * k + 4.0 * dist * TANGO_CONTINUITY)) / (2.0 * dist)
    return max(1, math.ceil(root_n * root_n - 1e-9))


def required_n_mean(
    margin: float,
    sd: float,
    alpha: float = 0.05,
    power: float = 0.8,
    true_delta: float = 0.0,
) -> int:
    """Items needed for a continuous paired gate: ``⌈((z_{1−α} + z_{power}) sd / |Δ1 + δ|)²⌉``.

    Normal approximation for the one-sided test on a mean difference (Chow, Shao & Wang,
    *Sample Size Calculations in Clinical Research*); the t reference adds a few items at
    small n, so treat values below ~30 as optimistic.
    """
    import scipy
    alpha = check_alpha(alpha)
    power = _check_power(power)
    if margin < 0:
        raise ValueError("margin must be non-negative")
    dist = abs(true_delta + margin)
    if dist == 0.0:
        raise ValueError("true_delta equals the boundary −margin: no n achieves the power")
    if sd < 0 or not math.isfinite(sd):
        raise ValueError("sd must be finite and non-negative")
    za = float(scipy.stats.norm.isf(alpha))
    zb = float(scipy.stats.norm.ppf(power))
    return max(2, math.ceil(((za + zb) * sd / dist) ** 2 - 1e-9))


def min_n_flip_free(margin: float, alpha: float = 0.05) -> int | None:
    """Fewest paired binary items at which a run **without a single flip** passes the gate's
    corrected Tango test at margin δ (32 at δ = 0.10, α = 0.05; the exact Clopper–Pearson bound
    ``1 − α^{1/n}`` would need 29). Below it no outcome can pass; with clusters the count is of
    independent clusters. ``None`` for δ = 0 (a superiority test) or beyond 10⁶ items.
    """
    alpha = check_alpha(alpha)
    if not 0.0 <= margin < 1.0:
        raise ValueError("margin must be in [0, 1)")
    if margin == 0.0:
        return None

    def passes(n: int) -> bool:
        return tango_test(0.0, 0.0, float(n), -margin, corrected=True).p_greater < alpha

    # A flip-free run's p-value falls with n: bisect between a failing and a passing size.
    lo, hi = 1, 2
    while not passes(hi):
        lo, hi = hi, hi * 2
        if hi > 1_000_000:
            return None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if passes(mid) else (mid, hi)
    return hi
