"""Stable-answer retention: a paired, clustered ratio test that a noisy baseline cannot saturate.

The determinism gate asks whether a candidate changes its answers under load beyond what the
baseline's numerics already do. An absolute margin on the difference of unstable rates
saturates on a noisy baseline: a fault that changes a share ``a`` of the answers raises the
unstable rate by ``(1 − q)·a`` only, ``q`` being the baseline's own unstable rate, because an
answer that already varies cannot vary "more" (``a = 0.28`` gives +28 points at ``q = 0`` and
+11 points at ``q = 0.6``). The *ratio* of stable shares does not: with independent noise the
candidate keeps ``(1 − q)(1 − a)`` stable answers against the baseline's ``(1 − q)``, a
retention ``R = 1 − a`` on any host.

Test. ``s_b``, ``s_c`` are 0/1 stable indicators per pair (prompt, condition, repeat), grouped
in clusters (prompts). Non-inferiority on ``R = E[s_c]/E[s_b]`` with relative margin δ is the
linear contrast ``d(r) = s_c − r·s_b`` at ``r₀ = 1 − δ`` (Fieller 1954, J. R. Stat. Soc. B
16:175–185): H0 (inferior) ``E[d(r₀)] ≤ 0``. Its cluster-robust (CR1) standard error with a
t reference on ``G − 1`` degrees of freedom is ``evalsvc.stats.cluster_robust_mean`` (Cameron &
Miller 2015; checked there against statsmodels). Johnson's (1978, JASA 73:536–544) modified t,
in Hall's (1992, JRSSB 54:221–228) monotone cubic form, corrects the skewness of the cluster
totals: in our simulations the plain t passed 5.5% of candidates exactly at the margin with 12
fully stable baseline prompts over the catalog's four looks, the corrected one 4.3%. The
interval for ``R`` is the set of ``r`` the same two one-sided tests do not reject (a
Fieller-type interval, found numerically because of the correction), so the verdict and the
interval never disagree.

No loss observed. When every informative cluster keeps all its stable answers (or, more
generally, the contrast is identical in every cluster) the CR1 variance is 0, t is ±∞ and the
Fieller interval collapses to a point: nothing varying in a few clusters would pass. Batch
nondeterminism hits prompts, not single answers, so the least favourable way to lose a share δ
of the stable answers is to lose *every* answer of a share δ of the prompts; seeing no such prompt
among ``G`` informative clusters (those with a stable baseline answer) then has probability
``(1 − δ)^G``, the exact (Clopper–Pearson 1934, Biometrika 26:404–413) one-sided p-value of zero
clusters with a loss. No observation of ``G`` clusters is stronger evidence than that one, so the
pass p-value is floored at it, and the fail p-value at ``δ^G`` (every cluster losing everything
under a loss of δ). Equivalently the interval's lower end for R is at most ``(α/looks)^{1/G}``
(the Clopper–Pearson bound ``1 − (α/looks)^{1/G}`` on the loss with no loss seen) and its upper
end at least ``1 − (α/looks)^{1/G}``, so the verdict and the interval still agree. A pass
therefore needs ``G ≥ ln(α/looks)/ln(1 − δ)`` informative clusters: 29 at δ = 0.10, α = 0.05
(:func:`retention_min_clusters`). More generally the pass p-value is floored at the exact
binomial p-value ``P(Bin(G, δ) ≤ K)`` of the ``K`` informative clusters that kept none of their
stable answers (the whole-prompt loss above; ``K = 0`` gives ``(1 − δ)^G``): with a few such
prompts among many on a noisy host the skewed cluster totals made the t liberal (single look,
48 prompts × 10 at 30% baseline instability, a whole prompt lost 10% of the time: false pass
0.065 in 2,000 runs; benchmarks/gate_calibration.py). ``method`` says whether the t or the exact
bound decided.

Staged sizing. A run may look at the data after each of ``looks`` planned stages and stop at the
first decision; each look tests at ``α/looks`` per side (Bonferroni over the planned looks:
``P(any false decision) ≤ Σ α/looks = α`` whatever the correlation between looks), and the
reported p-values are multiplied by ``looks`` (capped at 1) so that comparing them with α gives
the same decision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalsvc.stats._cluster import cluster_ids
from evalsvc.stats._common import as_binary_vector, check_alpha

__all__ = [
    "RetentionTest",
    "retention_mde",
    "retention_min_clusters",
    "retention_required_n",
    "retention_t",
    "retention_test",
]


METHOD_T = "cluster-robust t (CR1, skewness-corrected)"
METHOD_EXACT = "exact zero-loss bound (Clopper-Pearson over clusters)"


def retention_min_clusters(margin: float, alpha: float = 0.05, *, looks: int = 1) -> int | None:
    """Smallest number of informative clusters at which a run *with no loss at all* passes.

    The exact one-sided bound on the loss with no cluster lost among ``G`` is
    ``1 − (α/looks)^{1/G}`` (Clopper–Pearson); it is below δ once
    ``G > ln(α/looks)/ln(1 − δ)``: 29 at δ = 0.10, α = 0.05, one look; 42 at α/4.
    ``None`` when no size passes (δ = 0: a retention of exactly 1 cannot be shown).
    """
    alpha = check_alpha(alpha)
    if not 0.0 <= margin < 1.0:
        raise ValueError("margin must be a relative loss in [0, 1)")
    if margin == 0.0:
        return None
    g = math.log(alpha / looks) / math.log1p(-margin)
    # (1 − δ)^G must be strictly below α/looks: the smallest integer strictly above g.
    return math.floor(g) + 1


@dataclass(frozen=True)
class RetentionTest:
    """Retention ``R = stable_c/stable_b`` at relative margin δ (one look of a staged design)."""

    retention: float
    """R̂ = Σ s_c / Σ s_b (NaN when the baseline has no stable answer)."""
    stable_baseline: float
    stable_candidate: float
    ci: tuple[float, float]
    """Two-sided ``1 − 2α/looks`` interval for R (ends may be ±inf when R is not identified)."""
    margin: float
    alpha: float
    looks: int
    n: int
    n_clusters: int
    t: float
    """Skewness-corrected cluster-robust t of the contrast at r₀ = 1 − δ (> 0: evidence for pass)."""
    p_pass: float
    """Bonferroni-adjusted p of H0 ``R ≤ 1 − δ`` (small ⇒ pass)."""
    p_fail: float
    """Bonferroni-adjusted p of H0 ``R ≥ 1 − δ`` (small ⇒ fail)."""
    mde: float | None
    """Smallest loss ``1 − R`` beyond the margin this look fails with 80% power (normal approx.)."""
    design_effect: float
    informative_clusters: int = 0
    """Clusters with at least one stable baseline answer (the only ones that say anything on R)."""
    min_clusters: int | None = None
    """Smallest number of informative clusters at which this test can pass at all (no loss seen;
    ``None`` when none can: δ = 0)."""
    method: str = METHOD_T
    """Which method decided: ``METHOD_EXACT`` when the t degenerated (no spread) or would have
    passed alone and the exact zero-loss bound did not, else ``METHOD_T``. ``p_pass`` is always
    the larger of the two p-values."""

    @property
    def verdict(self) -> str:
        if self.p_pass < self.alpha:
            return "pass"
        if self.p_fail < self.alpha:
            return "fail"
        return "inconclusive"


Vec = np.ndarray[Any, np.dtype[np.float64]]


def _cluster_sums(b: Vec, c: Vec, clusters: Any) -> tuple[Vec, Vec, Vec]:
    """Per-cluster totals of ``b`` and ``c`` and the cluster sizes."""
    if clusters is None:
        return b, c, np.ones(b.size)
    ids, g = cluster_ids(clusters, b.size)
    return (
        np.bincount(ids, weights=b, minlength=g).astype(np.float64),
        np.bincount(ids, weights=c, minlength=g).astype(np.float64),
        np.bincount(ids, minlength=g).astype(np.float64),
    )


def retention_t(
    sb: Any, sc: Any, sizes: Any, r: float, *, skew_correction: bool = True
) -> tuple[float, float]:
    """Cluster-robust t of the contrast ``d̄ = mean(s_c − r·s_b)`` from cluster totals.

    ``sb``, ``sc``: per-cluster totals ``B_g``, ``C_g``; ``sizes``: pairs per cluster ``m_g``.
    Returns ``(t, se)``. CR1 (as ``cluster_robust_mean``, Cameron & Miller 2015):
    ``se² = G/(G−1)·Σ_g e_g²/n²`` with ``e_g = (C_g − r·B_g) − m_g·d̄``. The skewness
    correction (Johnson 1978, in Hall's 1992 monotone form) is
    ``T = √G·(u + γu²/3 + γ²u³/27 + γ/(6G))`` with ``u = d̄/s``, ``s² = G·se²`` and ``γ`` the
    skewness of the cluster pseudo-values ``G·e_g/n``; without it ``T = d̄/se``.
    """
    b = np.asarray(sb, dtype=np.float64)
    c = np.asarray(sc, dtype=np.float64)
    m = np.asarray(sizes, dtype=np.float64)
    g = b.size
    n = float(m.sum())
    if g < 2:
        return (math.nan, math.nan)
    est = float(np.sum(c - r * b)) / n
    res = g * ((c - r * b) - m * est) / n
    var = float(np.sum(res * res)) / (g * (g - 1.0))
    se = math.sqrt(var)
    if se == 0.0:
        return (math.inf if est > 0 else -math.inf if est < 0 else 0.0, 0.0)
    t = est / se
    if skew_correction:
        # Hall's (1992) monotone cubic version of Johnson's correction: with u = d̄/s and
        # γ = μ̂₃/s³, T = √G·(u + γu²/3 + γ²u³/27 + γ/(6G)); dT/du = √G·(1 + γu/3)² ≥ 0, so
        # unlike Johnson's quadratic it never turns a large effect round.
        s_unit = math.sqrt(g * var)
        gamma = float(np.mean(res**3)) / s_unit**3
        u = est / s_unit
        t = math.sqrt(g) * (u + gamma * u * u / 3.0 + gamma**2 * u**3 / 27.0 + gamma / (6.0 * g))
    return (t, se)


def retention_test(
    stable_baseline: Any,
    stable_candidate: Any,
    *,
    margin: float,
    alpha: float = 0.05,
    clusters: Any = None,
    looks: int = 1,
    skew_correction: bool = True,
) -> RetentionTest:
    """Non-inferiority of the candidate's stable share relative to the baseline's.

    ``stable_*``: paired 0/1 indicators (1 = the answer equals its prompt's modal answer).
    H0 for pass: ``R ≤ 1 − margin``; H0 for fail: ``R ≥ 1 − margin``; each tested at
    ``alpha/looks`` with the skewness-corrected cluster-robust t on ``G − 1`` df (see the module
    docstring). With no clusters every pair is its own cluster.
    """
    import scipy
    alpha = check_alpha(alpha)
    if not 0.0 <= margin < 1.0 or not math.isfinite(margin):
        raise ValueError("margin must be a relative loss in [0, 1)")
    if looks < 1:
        raise ValueError("looks must be ≥ 1")
    b = as_binary_vector(stable_baseline, name="stable_baseline")
    c = as_binary_vector(stable_candidate, name="stable_candidate")
    if b.size != c.size:
        raise ValueError("paired test: one baseline and one candidate indicator per pair")
    n = int(b.size)
    sb, sc, sizes = _cluster_sums(b, c, clusters)
    g = int(sb.size)
    level = alpha / looks
    r0 = 1.0 - margin
    nan = float("nan")
    g_inf = int(np.count_nonzero(sb > 0))
    g_min = retention_min_clusters(margin, alpha, looks=looks)
    if n == 0 or g < 2:
        return RetentionTest(nan, nan, nan, (-math.inf, math.inf), margin, alpha, looks, n, g,
                             nan, 1.0, 1.0, None, nan, g_inf, g_min, METHOD_T)
    mb, mc = float(b.mean()), float(c.mean())
    ratio = mc / mb if mb > 0 else nan
    df = float(g - 1)
    crit = float(scipy.special.stdtrit(df, 1.0 - level))
    t0, se0 = retention_t(sb, sc, sizes, r0, skew_correction=skew_correction)

    def p_upper(t: float) -> float:  # P(T ≥ t)
        return float(scipy.special.stdtr(df, -t)) if math.isfinite(t) else (0.0 if t > 0 else 1.0)

    p_pass_t = min(1.0, looks * p_upper(t0))
    p_fail_t = min(1.0, looks * p_upper(-t0))
    # The exact floors (module docstring): the binomial p-value of the clusters that lost
    # every stable answer among the informative ones, under the least favourable loss (whole
    # prompts at rate δ); with none lost it is (1 − δ)^G, no stronger evidence than which exists.
    lost = int(np.count_nonzero((sb > 0) & (sc == 0)))
    p_pass_exact = (
        min(1.0, looks * float(scipy.special.bdtr(lost, g_inf, margin)))
        if g_inf
        else 1.0
    )
    p_fail_exact = min(1.0, looks * margin**g_inf) if g_inf else 1.0
    p_pass = max(p_pass_t, p_pass_exact)
    p_fail = max(p_fail_t, p_fail_exact)
    # The exact bound decided when the t degenerated (no spread) or when it alone would pass.
    exact_decided = p_pass_exact > p_pass_t and (se0 == 0.0 or p_pass_t < alpha <= p_pass_exact)
    method = METHOD_EXACT if exact_decided else METHOD_T

    def tr(r: float) -> float:
        return retention_t(sb, sc, sizes, r, skew_correction=skew_correction)[0]

    lo = _invert(tr, crit, ratio, lower=True)
    hi = _invert(tr, crit, ratio, lower=False)
    # The same floors on the interval's ends, so that the verdict and the interval agree: the
    # Clopper-Pearson upper bound on the share of wholly lost clusters (1 − level^(1/G) with
    # none lost) for the lower end; the all-lost symmetric floor for the upper end.
    cp = level ** (1.0 / g_inf) if g_inf else 1.0
    cp_lost = (
        1.0 - float(scipy.special.betaincinv(lost + 1, g_inf - lost, 1.0 - level))
        if 0 < lost < g_inf
        else (cp if lost == 0 else 0.0)
    )
    lo, hi = min(lo, cp_lost), max(hi, 1.0 - cp)
    # Design effect: CR1 variance of the contrast against the iid variance of the pair values.
    d = c - r0 * b
    var_iid = float(d.var(ddof=1)) / n if n > 1 else nan
    deff = (se0 * se0) / var_iid if var_iid and var_iid > 0 else 1.0
    mde = None
    if mb > 0 and se0 > 0:
        # The loss 1 − R beyond the margin that fails with 80% power: (t_crit + z_0.8)·se / s̄_b.
        mde = float((crit + 0.8416212335729143) * se0 / mb)
    return RetentionTest(
        retention=ratio,
        stable_baseline=mb,
        stable_candidate=mc,
        ci=(lo, hi),
        margin=margin,
        alpha=alpha,
        looks=looks,
        n=n,
        n_clusters=g,
        t=t0,
        p_pass=p_pass,
        p_fail=p_fail,
        mde=mde,
        design_effect=float(deff),
        informative_clusters=g_inf,
        min_clusters=g_min,
        method=method,
    )


def _invert(tr: Any, crit: float, centre: float, *, lower: bool) -> float:
    """The ``r`` where the one-sided test stops rejecting: ``t(r) = crit`` (lower end) or
    ``t(r) = −crit`` (upper end), by bisection from the estimate outwards. ``t(r)`` decreases in
    ``r`` when the baseline has stable answers; an end that is never reached is ±inf."""
    if not math.isfinite(centre):
        return -math.inf if lower else math.inf
    target = crit if lower else -crit
    # Bracket: t(centre) ≈ 0; move outwards by doubling until the sign changes.
    step = max(0.05, abs(centre) * 0.5)
    inner = centre
    outer = centre - step if lower else centre + step
    for _ in range(60):
        v = tr(outer)
        if (v >= target) if lower else (v <= target):
            break
        inner, outer = outer, outer - step if lower else outer + step
        step *= 2.0
        if abs(outer) > 1e6:
            return -math.inf if lower else math.inf
    for _ in range(80):
        mid = 0.5 * (inner + outer)
        v = tr(mid)
        if (v >= target) if lower else (v <= target):
            outer = mid
        else:
            inner = mid
    return 0.5 * (inner + outer)


def retention_required_n(
    margin: float, discordance: float, alpha: float = 0.05, power: float = 0.8, *, looks: int = 1
) -> int:
    """Pairs needed to *pass* a candidate exactly as unstable as the baseline (normal approx.).

    Both endpoints unstable at rate ``q`` independently, so ``discordance ψ = 2q(1 − q)`` and
    ``q = (1 − √(1 − 2ψ))/2``. The contrast ``d = s_c − (1 − δ)·s_b`` then has mean
    ``δ(1 − q)`` and variance ``q(1 − q)(1 + (1 − δ)²)``; the one-sample size is
    ``((z_{1−α/looks} + z_{power})·sd/mean)²`` (pairs of one prompt are correlated, so for
    clustered designs this is a lower bound). ``ψ = 0`` (nothing varies) gives 2 pairs.
    """
    alpha = check_alpha(alpha)
    if not 0.0 < margin < 1.0:
        raise ValueError("margin must be in (0, 1)")
    q, sd, z = _plan_moments(margin, discordance, alpha, power, looks)
    return max(2, math.ceil((z * sd / (margin * (1.0 - q))) ** 2))


def retention_mde(
    n: int, discordance: float, alpha: float = 0.05, power: float = 0.8, *, looks: int = 1
) -> float:
    """Loss ``1 − R`` distinguishable from no loss with ``power`` at ``n`` pairs (the same
    normal approximation as :func:`retention_required_n`, whose margin it returns at its n)."""
    if n < 1:
        raise ValueError("n must be positive")
    q, sd, z = _plan_moments(0.1, discordance, check_alpha(alpha), power, looks)
    # sd depends on δ only through (1 − δ)²; solve δ(1 − q) = z·sd(δ)/√n by fixed point.
    delta = 0.1
    for _ in range(50):
        sd = math.sqrt(q * (1.0 - q) * (1.0 + (1.0 - delta) ** 2))
        delta = min(1.0, z * sd / math.sqrt(n) / (1.0 - q))
    return delta


def _plan_moments(
    margin: float, discordance: float, alpha: float, power: float, looks: int
) -> tuple[float, float, float]:
    import scipy
    if not 0.0 <= discordance <= 0.5:
        raise ValueError("discordance must be in [0, 0.5] for two endpoints of equal noise")
    q = (1.0 - math.sqrt(1.0 - 2.0 * discordance)) / 2.0
    sd = math.sqrt(q * (1.0 - q) * (1.0 + (1.0 - margin) ** 2))
    z = float(scipy.special.ndtri(1.0 - alpha / looks) + scipy.special.ndtri(power))
    return q, sd, z


def quieter_than_floor(varying: int, clusters: int, floor: float) -> float:
    """Exact one-sided binomial p-value that a run's baseline varies *less* than its calibrated
    noise floor: ``P(Bin(G, v₀) ≤ K)`` for ``K`` of ``G`` prompts with at least one unstable
    answer when an A/A calibration of the same endpoint found a share ``v₀`` of such prompts
    (the binomial test's lower tail; Clopper & Pearson 1934, Biometrika 26:404–413, for the
    exact tail; checked against ``scipy.stats.binomtest``). Prompts, not answers, are the
    units: batch nondeterminism hits prompts, so answers of one prompt are not independent.
    Small ⇒ the run's traffic did not reach the batching the calibration measured."""
    import scipy

    if clusters < 0 or not 0 <= varying <= clusters:
        raise ValueError("need 0 ≤ varying ≤ clusters")
    if not 0.0 <= floor <= 1.0:
        raise ValueError("floor must be a share in [0, 1]")
    return float(scipy.stats.binom.cdf(varying, clusters, floor))
