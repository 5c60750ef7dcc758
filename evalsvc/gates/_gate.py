"""Non-inferiority and threshold gates built on :mod:`evalsvc.stats`.

Decision rule (margin δ ≥ 0, one-sided level α, Δ = candidate − baseline oriented so that bad is
negative, i.e. sign-flipped for lower-is-better metrics):

* ``pass``  — the one-sided (1 − α) lower bound of Δ is above −δ, equivalently the
  non-inferiority test of H0: Δ ≤ −δ rejects (``p_value < α``);
* ``fail``  — the one-sided (1 − α) upper bound is below −δ, or the inferiority test of
  H0: Δ ≥ −δ rejects (``p_inferiority < α``); for the tests used here these coincide;
* ``inconclusive`` — neither.

Both calls are one-sided level-α tests of opposite hypotheses, so a candidate exactly at the
margin is wrongly passed with probability ≤ α and wrongly failed with probability ≤ α.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np

from evalsvc.gates._outcome import GateOutcome, Verdict
from evalsvc.stats import (
    FloatArray,
    as_binary_vector,
    as_vector,
    bootstrap_mean,
    check_alpha,
    cluster_ids,
    cluster_robust_mean,
    mcnemar_exact,
    mde_mean,
    mde_paired_binary,
    mde_two_proportions,
    miettinen_nurminen_ci,
    miettinen_nurminen_test,
    newcombe_paired_ci,
    newcombe_unpaired_ci,
    paired_binary_counts,
    t_test_mean,
    tango_ci,
    tango_test,
    welch_test,
    wilcoxon_signed_rank,
)

__all__ = ["MIN_N_CONTINUOUS", "BOOTSTRAP_RESAMPLES", "evaluate_gate", "threshold_gate"]

GateKind = Literal["binary", "continuous", "ratio"]

# Below this many items (per group when unpaired) a continuous gate is always inconclusive:
# bootstrap intervals undercover badly for tiny samples (Efron & Tibshirani 1993, ch. 13) and a
# t interval leans entirely on normality. Binary gates need no such floor: Tango's score
# interval stays honest (and wide) at any n.
MIN_N_CONTINUOUS = 10
# Resamples for the gate's own bootstrap intervals: ≈ ±0.002 Monte Carlo error on a 5% tail
# (Efron & Tibshirani 1993 recommend at least 1000 for percentile-based intervals).
BOOTSTRAP_RESAMPLES = 9999
# Resamples for the binary gate's bootstrap cross-check (reported only, not used in the verdict).
_BINARY_CROSSCHECK_RESAMPLES = 2000


@dataclass
class _Analysis:
    """Inference on the analysis scale (metric units, or log ratio for ``kind="ratio"``)."""

    estimate: float
    ci: tuple[float, float]
    p_greater: float
    p_less: float
    test: str
    mde: float | None
    details: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None  # set when the gate must be inconclusive whatever the numbers
    method: str | None = None  # which method decided, when the gate has a fallback


def _check_margin(margin: float, kind: str, higher_is_better: bool) -> float:
    m = float(margin)
    if not math.isfinite(m) or m < 0:
        raise ValueError(f"margin must be finite and ≥ 0, got {margin!r}")
    if kind == "binary" and m >= 1:
        raise ValueError("a margin for a proportion must be < 1")
    if kind == "ratio" and higher_is_better and m >= 1:
        raise ValueError("a relative margin for a higher-is-better ratio must be < 1")
    return m


def _null_boundary(kind: str, margin: float, higher_is_better: bool) -> float:
    """The boundary value of Δ on the analysis scale (not oriented)."""
    if kind == "ratio":
        # Relative margin: the candidate may be at most δ·100% slower (higher-is-better), or
        # at most δ·100% higher (lower-is-better, e.g. latency), as a geometric-mean ratio.
        return math.log1p(-margin) if higher_is_better else math.log1p(margin)
    return -margin if higher_is_better else margin


def _decide(
    analysis: _Analysis, null: float, alpha: float, higher_is_better: bool
) -> tuple[Verdict, float, float]:
    """Verdict and (p_noninferiority, p_inferiority) from analysis-scale results."""
    if higher_is_better:
        p_ni, p_inf = analysis.p_greater, analysis.p_less
        beyond_good = analysis.ci[0] > null
        beyond_bad = analysis.ci[1] < null
    else:
        p_ni, p_inf = analysis.p_less, analysis.p_greater
        beyond_good = analysis.ci[1] < null
        beyond_bad = analysis.ci[0] > null
    if analysis.reason is not None:
        return "inconclusive", p_ni, p_inf
    # Pass needs both the test and the displayed bound (they agree up to root-finding and
    # bootstrap-quantile resolution; requiring both keeps the report self-consistent).
    if p_ni < alpha and beyond_good:
        return "pass", p_ni, p_inf
    if p_inf < alpha or beyond_bad:
        return "fail", p_ni, p_inf
    return "inconclusive", p_ni, p_inf


# --------------------------------------------------------------------------------------------
# Binary
# --------------------------------------------------------------------------------------------


def _binary_paired(
    b: FloatArray, c: FloatArray, null: float, alpha: float, clusters: Any, seed: int
) -> _Analysis:
    counts = paired_binary_counts(b, c)
    n = counts.n
    diffs = c - b
    scale = 1.0
    cluster_info: dict[str, Any] | None = None
    reason: str | None = None
    test_name = "paired non-inferiority (Tango score CI, continuity+skew corrected; McNemar exact)"
    if clusters is not None:
        cr = cluster_robust_mean(diffs, clusters, null_value=null, alpha=2 * alpha)
        deff = cr.design_effect if math.isfinite(cr.design_effect) else 1.0
        method = "Rao-Scott design-effect adjustment of Tango; CR1 SE (Miller 2024)"
        if not cr.se_iid > 0:
            # No flip at all (or every item flipped the same way): the design effect is 0/0.
            # Taking 1 would treat 40 items in 8 clusters that break together as 40 independent
            # chances to see a flip (false pass 0.40 at the margin in our simulation); the
            # clusters are the independent units, so take the largest design effect the
            # cluster sizes allow, Σ m_g² / n (every item of a cluster alike, Kish 1965,
            # *Survey Sampling* §5.4): Tango then sees one observation per cluster.
            ids, g = cluster_ids(clusters, n)
            sizes = np.bincount(ids, minlength=g).astype(np.float64)
            deff = float(np.sum(sizes * sizes)) / n
            method = (
                "Rao-Scott adjustment of Tango at the largest design effect Σm²/n (no flips: "
                "the clusters are the independent units)"
            )
        # Rao & Scott (1992, Biometrics 48:577–585): divide counts by the design effect and
        # analyse as if independent. Never shrink below the iid analysis (deff floored at 1):
        # a negative intra-cluster correlation estimate is usually noise.
        scale = 1.0 / max(1.0, deff)
        cluster_info = {
            "n_clusters": cr.n_clusters,
            "design_effect": deff,
            "design_effect_used": max(1.0, deff),
            "se_clustered": cr.se,
            "se_iid": cr.se_iid,
            "wald_ci_clustered": list(cr.ci),
            "method": method,
        }
        if cr.n_clusters < 2:
            reason = "fewer than 2 clusters: the clustered variance cannot be estimated"
        test_name = (
            "paired non-inferiority (Tango score CI with Rao-Scott cluster design effect; "
            "McNemar exact)"
        )
    b_eff = counts.improvements * scale
    c_eff = counts.regressions * scale
    n_eff = n * scale
    t = tango_test(b_eff, c_eff, n_eff, null, corrected=True)
    ci = tango_ci(b_eff, c_eff, n_eff, alpha=2 * alpha, corrected=True)
    boot = bootstrap_mean(
        diffs,
        null_value=null,
        alpha=2 * alpha,
        n_resamples=_BINARY_CROSSCHECK_RESAMPLES,
        seed=seed,
    )
    # Laplace-smoothed discordance so that a run without flips does not claim MDE = 0.
    psi_smoothed = (counts.discordant + 1.0) / (n + 2.0)
    details: dict[str, Any] = {
        "flips": {
            "baseline_correct_candidate_wrong": counts.regressions,
            "baseline_wrong_candidate_correct": counts.improvements,
        },
        "counts": counts.to_dict(),
        "discordance": counts.discordant / n,
        "mcnemar_p": mcnemar_exact(counts.regressions, counts.improvements),
        "statistic": t.statistic,
        "newcombe_ci": list(newcombe_paired_ci(counts, alpha=2 * alpha)),
        "bootstrap_ci": list(boot.ci),
        "cluster": cluster_info,
    }
    return _Analysis(
        estimate=counts.delta,
        ci=ci,
        p_greater=t.p_greater,
        p_less=t.p_less,
        test=test_name,
        mde=mde_paired_binary(n_eff, psi_smoothed, alpha),
        details=details,
        reason=reason,
        method=None if cluster_info is None else str(cluster_info["method"]),
    )


def _binary_unpaired(b: FloatArray, c: FloatArray, null: float, alpha: float) -> _Analysis:
    x1, n1 = float(c.sum()), c.size  # candidate
    x2, n2 = float(b.sum()), b.size  # baseline
    t = miettinen_nurminen_test(x1, n1, x2, n2, null)
    ci = miettinen_nurminen_ci(x1, n1, x2, n2, alpha=2 * alpha)
    # Add-one smoothing keeps the MDE informative when a rate is 0 or 1.
    p1s, p2s = (x1 + 1.0) / (n1 + 2.0), (x2 + 1.0) / (n2 + 2.0)
    return _Analysis(
        estimate=x1 / n1 - x2 / n2,
        ci=ci,
        p_greater=t.p_greater,
        p_less=t.p_less,
        test="unpaired non-inferiority (Miettinen-Nurminen score CI)",
        mde=mde_two_proportions(n1, p1s, n2, p2s, alpha),
        details={
            "n_baseline": n2,
            "n_candidate": n1,
            "statistic": t.statistic,
            "newcombe_ci": list(newcombe_unpaired_ci(x1, n1, x2, n2, alpha=2 * alpha)),
        },
    )


# --------------------------------------------------------------------------------------------
# Continuous (differences on the analysis scale)
# --------------------------------------------------------------------------------------------


def _continuous_paired(
    d: FloatArray,
    null: float,
    alpha: float,
    clusters: Any,
    seed: int,
    diff_range: tuple[float, float] | None = None,
) -> _Analysis:
    n = d.size
    reason = None
    if n < MIN_N_CONTINUOUS:
        reason = f"n = {n} is below the minimum of {MIN_N_CONTINUOUS} for a continuous gate"
    wil = wilcoxon_signed_rank(d, null_value=null)
    details: dict[str, Any] = {
        "sd_diff": float(d.std(ddof=1)) if n > 1 else None,
        "wilcoxon": None
        if wil is None
        else {
            "p_greater": wil.p_greater,
            "p_less": wil.p_less,
            "hodges_lehmann": wil.estimate,
            "note": "tests the pseudo-median of the differences against the boundary; "
            "robustness check only",
        },
    }
    sd = float(d.std(ddof=1)) if n > 1 else float("nan")
    if reason is None and n > 1 and not sd > 0:
        units = n if clusters is None else cluster_ids(clusters, n)[1]
        return _zero_variance(
            d, details, reason=_ZERO_VARIANCE.format(value=float(d[0])),
            value_range=diff_range, units=units, null=null, alpha=alpha,
        )
    if clusters is not None:
        cr = cluster_robust_mean(d, clusters, null_value=null, alpha=2 * alpha)
        if cr.n_clusters < 2:
            reason = "fewer than 2 clusters: the clustered variance cannot be estimated"
        elif reason is None and not cr.se > 0:
            return _zero_variance(
                d, details, reason="zero observed variance between clusters: every cluster's "
                "differences sum to the same residual, so the cluster-robust interval would "
                "have zero width; no evidence about the spread"
            )
        details["cluster"] = {
            "n_clusters": cr.n_clusters,
            "design_effect": cr.design_effect,
            "se_clustered": cr.se,
            "se_iid": cr.se_iid,
            "df": cr.df,
        }
        deff = cr.design_effect if math.isfinite(cr.design_effect) else 1.0
        mde = mde_mean(n, sd * math.sqrt(max(deff, 1.0)), alpha) if math.isfinite(sd) else None
        return _Analysis(
            estimate=cr.estimate,
            ci=cr.ci,
            p_greater=cr.p_greater,
            p_less=cr.p_less,
            test="paired non-inferiority (cluster-robust CR1 t CI, Miller 2024; Wilcoxon)",
            mde=mde,
            details=details,
            reason=reason,
        )
    both = _bootstrap_union(d, null, alpha, seed)
    details.update(both.details)
    return _Analysis(
        estimate=float(d.mean()),
        ci=both.ci,
        p_greater=both.p_greater,
        p_less=both.p_less,
        test="paired non-inferiority (BCa and bootstrap-t CI of mean difference; "
        "Wilcoxon signed-rank)",
        mde=mde_mean(n, sd, alpha) if math.isfinite(sd) else None,
        details=details,
        reason=reason,
    )


# A continuous gate whose differences are all identical has seen no spread at all; its t or
# bootstrap interval has zero width and would pass at any n (0/1 scores alike on both sides at
# n = 10: false pass 0.36 at the margin). The metric's range is not known here, so no exact
# bound exists: the gate says so and stays inconclusive (0/1 outcomes belong to the binary
# gate, whose exact and score bounds hold at no events).
_ZERO_VARIANCE = (
    "zero observed variance: every paired difference is {value:g}, so the interval would have "
    "zero width; identical scores are no evidence about the spread (0/1 scores: use kind binary)"
)
METHOD_ZERO_VARIANCE = "none: zero observed variance (no interval without a known range)"
METHOD_EXACT_CONSTANT = "exact bound for a bounded mean with no spread observed"


def exact_constant_bounds(
    value: float, units: int, value_range: tuple[float, float], null: float, alpha: float
) -> tuple[tuple[float, float], float, float]:
    """Exact one-sided bounds and p-values for the mean of a variable in ``[lo, hi]`` when all
    ``units`` independent observations equal ``value``.

    If the mean is μ, the share q of the mass at ``value`` satisfies ``μ ≥ q·value + (1 − q)·lo``
    (the rest lies at lo or above), so ``q ≤ (μ − lo)/(value − lo)`` and seeing ``value``
    ``units`` times has probability ``q^units``. Hence ``p(H0: μ ≤ null) =
    ((null − lo)/(value − lo))^units`` and the level-α lower bound ``lo + (value − lo)·α^{1/units}``
    (mirror image above); for a 0/1 variable this is Clopper–Pearson (1934) with no event.
    Returns ``((lower, upper), p_greater, p_less)``; an infinite end of the range gives an
    infinite bound and p = 1 on that side.
    """
    lo, hi = value_range
    root = alpha ** (1.0 / units)
    lower = lo + (value - lo) * root if math.isfinite(lo) else -math.inf
    upper = hi - (hi - value) * root if math.isfinite(hi) else math.inf
    if value <= null or not math.isfinite(lo):
        p_greater = 1.0
    else:
        p_greater = float(np.clip((null - lo) / (value - lo), 0.0, 1.0)) ** units
    if value >= null or not math.isfinite(hi):
        p_less = 1.0
    else:
        p_less = float(np.clip((hi - null) / (hi - value), 0.0, 1.0)) ** units
    return (lower, upper), p_greater, p_less


def _check_range(
    value_range: tuple[float, float] | None, v: FloatArray
) -> tuple[float, float] | None:
    if value_range is None:
        return None
    lo, hi = (float(x) for x in value_range)
    if math.isnan(lo) or math.isnan(hi) or not lo < hi:
        raise ValueError("value_range is (lo, hi) with lo < hi")
    outside = np.flatnonzero((v < lo) | (v > hi))
    if outside.size:
        raise ValueError(f"values outside value_range at positions {outside[:10].tolist()}")
    return (lo, hi)


def _zero_variance(
    d: FloatArray,
    details: dict[str, Any],
    *,
    reason: str,
    value_range: tuple[float, float] | None = None,
    units: int = 0,
    null: float = 0.0,
    alpha: float = 0.05,
) -> _Analysis:
    """Analysis of values without spread: never a point interval. With the range the values
    can take, the exact bound of :func:`exact_constant_bounds` over ``units`` independent
    units; without it an unbounded interval and the trivial p-values 1 (inconclusive)."""
    if value_range is not None and units >= 1:
        ci, pg, pl = exact_constant_bounds(float(d[0]), units, value_range, null, alpha)
        return _Analysis(
            estimate=float(d.mean()),
            ci=ci,
            p_greater=pg,
            p_less=pl,
            test="exact bound for a bounded mean (zero observed variance)",
            mde=None,
            details={**details, "zero_variance": True, "value_range": list(value_range),
                     "independent_units": units},
            method=METHOD_EXACT_CONSTANT,
        )
    return _Analysis(
        estimate=float(d.mean()),
        ci=(-math.inf, math.inf),
        p_greater=1.0,
        p_less=1.0,
        test="paired non-inferiority: zero observed variance",
        mde=None,
        details={**details, "zero_variance": True},
        reason=reason,
        method=METHOD_ZERO_VARIANCE,
    )


@dataclass
class _Union:
    ci: tuple[float, float]
    p_greater: float
    p_less: float
    details: dict[str, Any]


def _bootstrap_union(d: FloatArray, null: float, alpha: float, seed: int) -> _Union:
    """BCa and bootstrap-t on the same resamples; the gate needs both to agree.

    Reported interval is the union of the two, each p-value the larger of the two, so a pass or
    fail call needs both methods. Why both: BCa is the standard (and what scipy offers), but for
    a mean of skewed differences (skewness −2) its one-sided error at n = 30 was 0.088 at
    nominal 0.05 in our simulations, the bootstrap-t's 0.069 and Student t's 0.104
    (tests/stats/test_calibration.py); requiring both bootstrap tests is never worse than the
    better one. Student t is reported for reference.
    """
    bca = bootstrap_mean(
        d, null_value=null, alpha=2 * alpha, n_resamples=BOOTSTRAP_RESAMPLES, seed=seed
    )
    bt = bootstrap_mean(
        d,
        null_value=null,
        alpha=2 * alpha,
        n_resamples=BOOTSTRAP_RESAMPLES,
        seed=seed,
        method="studentized",
    )
    tt = t_test_mean(d, null_value=null, alpha=2 * alpha)
    return _Union(
        ci=(min(bca.ci[0], bt.ci[0]), max(bca.ci[1], bt.ci[1])),
        p_greater=max(bca.p_greater, bt.p_greater),
        p_less=max(bca.p_less, bt.p_less),
        details={
            "bca_ci": list(bca.ci),
            "bca_p_greater": bca.p_greater,
            "bca_p_less": bca.p_less,
            "bootstrap_t_ci": list(bt.ci),
            "bootstrap_t_p_greater": bt.p_greater,
            "bootstrap_t_p_less": bt.p_less,
            "student_t_ci": list(tt.ci),
            "student_t_p_greater": tt.p_greater,
            "student_t_p_less": tt.p_less,
            "bootstrap": {
                "n_resamples": bca.n_resamples,
                "seed": seed,
                "z0": bca.z0,
                "acceleration": bca.acceleration,
                "degenerate": bca.degenerate,
            },
        },
    )


def _continuous_unpaired(b: FloatArray, c: FloatArray, null: float, alpha: float) -> _Analysis:
    reason = None
    if min(b.size, c.size) < MIN_N_CONTINUOUS:
        reason = f"each group needs at least {MIN_N_CONTINUOUS} items for a continuous gate"
    w = welch_test(b, c, null_value=null, alpha=2 * alpha)
    if reason is None and w.se == 0.0:
        # Both groups constant: Welch's interval is a point (see _ZERO_VARIANCE).
        flat = _zero_variance(
            c - float(b.mean()), {"n_baseline": b.size, "n_candidate": c.size},
            reason=_ZERO_VARIANCE.replace("every paired difference is", "every value is "
                                          "constant in each group, their difference").format(
                value=float(c.mean() - b.mean())),
        )
        flat.test = "unpaired non-inferiority: zero observed variance"
        return flat
    mde = None
    if b.size > 1 and c.size > 1:
        sd_eff = math.sqrt(float(b.var(ddof=1)) / b.size + float(c.var(ddof=1)) / c.size)
        mde = mde_mean(1, sd_eff, alpha)
    return _Analysis(
        estimate=w.estimate,
        ci=w.ci,
        p_greater=w.p_greater,
        p_less=w.p_less,
        test="unpaired non-inferiority (Welch t CI)",
        mde=mde,
        details={"n_baseline": b.size, "n_candidate": c.size, "df": w.df},
        reason=reason,
    )


# --------------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------------


def _inconclusive_empty(
    metric: str, margin: float, alpha: float, test: str, reason: str, **extra: Any
) -> GateOutcome:
    nan = float("nan")
    return GateOutcome(
        verdict="inconclusive",
        metric=metric,
        baseline=nan,
        candidate=nan,
        delta=nan,
        ci=(nan, nan),
        p_value=None,
        margin=margin,
        alpha=alpha,
        n=0,
        mde=None,
        test=test,
        details={"reason": reason, "p_inferiority": None, **extra},
    )


def _geometric_mean(x: FloatArray) -> float:
    return float(np.exp(np.mean(np.log(x))))


# ln of the largest finite float: exp() of more overflows. A log-ratio interval from two or three
# pairs can reach it (t with 1-2 degrees of freedom times a wide spread: a speed ratio's CI was
# seen as [0.156, 2.7e8], and one run raised OverflowError in math.expm1 and lost the run).
_MAX_LOG = math.log(sys.float_info.max)


def _ratio_minus_one(log_ratio: float) -> float:
    """``exp(log_ratio) - 1``, saturating at the largest finite float (reports stay valid JSON:
    no ``Infinity``); the verdict is decided on the log scale, never from this value."""
    return math.expm1(min(log_ratio, _MAX_LOG))


def evaluate_gate(
    baseline: Any,
    candidate: Any,
    *,
    metric: str,
    kind: GateKind,
    margin: float,
    alpha: float = 0.05,
    higher_is_better: bool = True,
    clusters: Any = None,
    paired: bool = True,
    seed: int = 0,
    value_range: tuple[float, float] | None = None,
) -> GateOutcome:
    """Non-inferiority gate: is the candidate no worse than the baseline by more than ``margin``?

    Parameters
    ----------
    baseline, candidate
        Per-item scores. Paired (default): same length, same item order. ``kind="binary"``
        needs 0/1 values; ``kind="ratio"`` needs positive values (throughput, latency).
    metric
        Name copied into the outcome.
    kind
        ``"binary"``: paired Tango score test (continuity- and skewness-corrected) with McNemar
        exact and Newcombe/bootstrap cross-checks; unpaired Miettinen–Nurminen.
        ``"continuous"``: paired BCa and bootstrap-t must agree (or cluster-robust t with
        ``clusters``); unpaired Welch t.
        ``"ratio"``: as continuous on ``log(candidate) − log(baseline)``; the margin is relative.
    margin
        δ ≥ 0, the largest acceptable drop in metric units (a fraction for ``"ratio"``:
        0.05 = at most 5% worse as a geometric-mean ratio).
    alpha
        One-sided level of each of the pass and fail tests.
    higher_is_better
        ``False`` flips the orientation (error rates, KLD, latency).
    clusters
        Optional cluster label per item (items sharing a document/template). Binary: Rao–Scott
        design-effect adjustment of Tango's interval; continuous/ratio: cluster-robust CR1 t
        (Miller 2024, arXiv:2411.00640).
    paired
        ``False`` for rates measured on different items (e.g. determinism repeats).
    seed
        Seed of the bootstrap resampling (results are reproducible given the seed).
    value_range
        ``(lo, hi)``, the scores' possible range (``(0, 1)`` for a per-item pass rate), for
        ``kind="continuous"``. Used only when every paired difference is identical: the exact
        bound for a bounded mean then replaces the zero-width interval; without it such a
        gate is inconclusive (``details["reason"]``).

    Returns a :class:`GateOutcome`; see its docstring for field conventions. ``n = 0`` gives an
    inconclusive outcome with ``details["reason"]``. NaN/inf inputs raise ``ValueError``.
    """
    alpha = check_alpha(alpha)
    if kind not in ("binary", "continuous", "ratio"):
        raise ValueError(f"kind must be 'binary', 'continuous' or 'ratio', got {kind!r}")
    margin = _check_margin(margin, kind, higher_is_better)
    b = as_vector(baseline, name="baseline")
    c = as_vector(candidate, name="candidate")
    if paired and b.size != c.size:
        raise ValueError(
            f"paired gate needs one baseline and one candidate score per item: got "
            f"{b.size} baseline and {c.size} candidate scores"
        )
    if not paired and clusters is not None:
        raise ValueError("clusters are only supported for paired comparisons")
    if kind == "binary":
        b = as_binary_vector(b, name="baseline")
        c = as_binary_vector(c, name="candidate")
    if kind == "ratio":
        for name, arr in (("baseline", b), ("candidate", c)):
            bad = np.flatnonzero(arr <= 0)
            if bad.size:
                raise ValueError(
                    f"ratio metrics need positive values; {name} has non-positive values at "
                    f"positions {bad[:10].tolist()}"
                )
    if clusters is not None:
        cluster_ids(clusters, b.size)  # validates length and labels up front

    diff_range: tuple[float, float] | None = None
    if value_range is not None:
        lo_v, hi_v = (float(x) for x in value_range)
        if kind != "continuous" or not lo_v < hi_v:
            raise ValueError("value_range is (lo, hi) with lo < hi, for kind='continuous' only")
        outside = np.flatnonzero((b < lo_v) | (b > hi_v) | (c < lo_v) | (c > hi_v))
        if outside.size:
            raise ValueError(f"scores outside value_range at positions {outside[:10].tolist()}")
        diff_range = (lo_v - hi_v, hi_v - lo_v)

    null = _null_boundary(kind, margin, higher_is_better)
    if paired and b.size == 0:
        return _inconclusive_empty(metric, margin, alpha, f"paired {kind}", "no paired items")
    if not paired and (b.size == 0 or c.size == 0):
        return _inconclusive_empty(
            metric,
            margin,
            alpha,
            f"unpaired {kind}",
            "baseline or candidate has no items",
            n_baseline=b.size,
            n_candidate=c.size,
        )

    if kind == "binary":
        analysis = (
            _binary_paired(b, c, null, alpha, clusters, seed)
            if paired
            else _binary_unpaired(b, c, null, alpha)
        )
        base_val, cand_val = float(b.mean()), float(c.mean())
        delta, ci = analysis.estimate, analysis.ci
        mde = analysis.mde
    elif kind == "continuous":
        analysis = (
            _continuous_paired(c - b, null, alpha, clusters, seed, diff_range)
            if paired
            else _continuous_unpaired(b, c, null, alpha)
        )
        base_val, cand_val = float(b.mean()), float(c.mean())
        delta, ci = analysis.estimate, analysis.ci
        mde = analysis.mde
    else:
        lb, lc = np.log(b), np.log(c)
        analysis = (
            _continuous_paired(lc - lb, null, alpha, clusters, seed)
            if paired
            else _continuous_unpaired(lb, lc, null, alpha)
        )
        base_val, cand_val = _geometric_mean(b), _geometric_mean(c)
        delta = _ratio_minus_one(analysis.estimate)
        ci = (_ratio_minus_one(analysis.ci[0]), _ratio_minus_one(analysis.ci[1]))
        mde = _ratio_minus_one(analysis.mde) if analysis.mde is not None else None
        analysis.details["log_ratio"] = {
            "estimate": analysis.estimate,
            "ci": list(analysis.ci),
            "null_boundary": null,
            "mde": analysis.mde,
        }
        analysis.details["arithmetic_means"] = {
            "baseline": float(b.mean()),
            "candidate": float(c.mean()),
        }

    verdict, p_ni, p_inf = _decide(analysis, null, alpha, higher_is_better)
    details = dict(analysis.details)
    details.update(
        {
            "p_inferiority": p_inf,
            "null_boundary": null if kind != "ratio" else math.expm1(null),
            "ci_level": 1.0 - 2.0 * alpha,
            "higher_is_better": higher_is_better,
            "paired": paired,
            "kind": kind,
        }
    )
    if analysis.reason is not None:
        details["reason"] = analysis.reason
    n = b.size if paired else min(b.size, c.size)
    return GateOutcome(
        verdict=verdict,
        metric=metric,
        baseline=base_val,
        candidate=cand_val,
        delta=float(delta),
        ci=(float(ci[0]), float(ci[1])),
        p_value=p_ni,
        margin=margin,
        alpha=alpha,
        n=int(n),
        mde=None if mde is None or not math.isfinite(mde) else float(mde),
        test=analysis.test,
        details=details,
        method=analysis.method,
    )


def threshold_gate(
    values: Any,
    *,
    metric: str,
    threshold: float,
    higher_is_better: bool,
    alpha: float = 0.05,
    seed: int = 0,
    kind: Literal["auto", "binary", "continuous"] = "auto",
    value_range: tuple[float, float] | None = None,
) -> GateOutcome:
    """Absolute gate: is the candidate's mean significantly on the good side of ``threshold``?

    ``pass`` if the one-sided (1 − α) bound is beyond the threshold on the good side (lower bound
    > threshold when higher is better), ``fail`` if the opposite one-sided bound is beyond it on
    the bad side, else ``inconclusive``.

    * Binary values (``kind="binary"``, or ``"auto"`` when every value is 0 or 1): exact binomial
      test and Clopper–Pearson bounds (Clopper & Pearson 1934, Biometrika 26:404–413), which are
      exactly dual to each other.
    * Continuous values: BCa and bootstrap-t must agree, as in the paired continuous gate, with at
      least ``MIN_N_CONTINUOUS`` items. Pass ``kind="continuous"`` for metrics that can be exactly
      0 or 1 but are not Bernoulli (e.g. per-item KL divergence that is 0 on every item).

    * Continuous values that are all identical (zero observed variance): no zero-width
      interval. With ``value_range`` (the values' possible ``(lo, hi)``; an infinite end is
      allowed, e.g. ``(0, inf)`` for a KL divergence) the exact bound for a bounded mean
      (:func:`exact_constant_bounds`); without it, or on an infinite side, inconclusive.

    In the outcome, ``baseline`` is the threshold, ``candidate`` the observed mean, ``delta`` and
    ``ci`` are relative to the threshold (``candidate − threshold``), ``margin`` is 0 and
    ``details["ci_metric"]`` holds the interval on the metric's own scale.
    """
    import scipy
    alpha = check_alpha(alpha)
    thr = float(threshold)
    if not math.isfinite(thr):
        raise ValueError("threshold must be finite")
    v = as_vector(values, name="values")
    n = v.size
    is_binary = bool(np.all((v == 0.0) | (v == 1.0))) if n else False
    use_binary = kind == "binary" or (kind == "auto" and is_binary)
    if kind == "binary" and not is_binary:
        as_binary_vector(v, name="values")  # raises with positions
    if kind not in ("auto", "binary", "continuous"):
        raise ValueError("kind must be 'auto', 'binary' or 'continuous'")
    test_name = (
        "threshold (exact binomial, Clopper-Pearson)"
        if use_binary
        else "threshold (BCa and bootstrap-t CI of the mean)"
    )
    if n == 0:
        out = _inconclusive_empty(metric, 0.0, alpha, test_name, "no items", threshold=thr)
        return replace(out, baseline=thr)

    reason: str | None = None
    method: str | None = None
    if use_binary:
        if not (0.0 <= thr <= 1.0):
            raise ValueError("a threshold for a proportion must be in [0, 1]")
        k = int(v.sum())
        p_greater = float(scipy.stats.binomtest(k, n, thr, alternative="greater").pvalue)
        p_less = float(scipy.stats.binomtest(k, n, thr, alternative="less").pvalue)
        cp = scipy.stats.binomtest(k, n).proportion_ci(
            confidence_level=1.0 - 2.0 * alpha, method="exact"
        )
        ci_metric = (float(cp.low), float(cp.high))
        sd = math.sqrt(max(thr * (1.0 - thr), 1.0 / (n + 2.0)))
        mde: float | None = mde_mean(n, sd, alpha)
        extra: dict[str, Any] = {"successes": k}
    else:
        if n < MIN_N_CONTINUOUS:
            reason = f"n = {n} is below the minimum of {MIN_N_CONTINUOUS} for a continuous gate"
        sd = float(v.std(ddof=1)) if n > 1 else float("nan")
        if reason is None and not sd > 0:
            # Every value identical: see _ZERO_VARIANCE (no zero-width interval).
            flat = _zero_variance(
                v, {"sd": sd},
                reason=_ZERO_VARIANCE.replace("paired difference", "value").format(
                    value=float(v[0])
                ),
                value_range=_check_range(value_range, v), units=n, null=thr, alpha=alpha,
            )
            reason = flat.reason
            ci_metric = flat.ci
            p_greater, p_less = flat.p_greater, flat.p_less
            mde = None
            extra = flat.details
            method = flat.method
            test_name = flat.test
        else:
            both = _bootstrap_union(v, thr, alpha, seed)
            ci_metric = both.ci
            p_greater, p_less = both.p_greater, both.p_less
            mde = mde_mean(n, sd, alpha) if math.isfinite(sd) else None
            extra = {**both.details, "sd": sd}

    mean = float(v.mean())
    analysis = _Analysis(
        estimate=mean,
        ci=ci_metric,
        p_greater=p_greater,
        p_less=p_less,
        test=test_name,
        mde=mde,
        reason=reason,
    )
    verdict, p_ni, p_inf = _decide(analysis, thr, alpha, higher_is_better)
    details: dict[str, Any] = {
        "threshold": thr,
        "ci_metric": list(ci_metric),
        "p_inferiority": p_inf,
        "ci_level": 1.0 - 2.0 * alpha,
        "higher_is_better": higher_is_better,
        **extra,
    }
    if reason is not None:
        details["reason"] = reason
    return GateOutcome(
        verdict=verdict,
        metric=metric,
        baseline=thr,
        candidate=mean,
        delta=mean - thr,
        ci=(ci_metric[0] - thr, ci_metric[1] - thr),
        p_value=p_ni,
        margin=0.0,
        alpha=alpha,
        n=n,
        mde=mde,
        test=test_name,
        details=details,
        method=method,
    )
