"""Recovery: the ratio of two paired means (candidate ÷ baseline) with a confidence interval.

Quantized-model publishers report per-task *recovery* = candidate score ÷ baseline score. On
paired items (the same documents on both sides) its interval comes from:

* **Fieller's theorem** for a ratio of (correlated) means — Fieller (1954), "Some problems in
  interval estimation", J. R. Statist. Soc. B 16:175–185; in the form of Franz (2007), "Ratios:
  a short guide to confidence limits and proper use", arXiv:0710.2024, eq. 5–7. With means
  ``x̄`` (baseline), ``ȳ`` (candidate), the variances and covariance of the means ``v11, v22,
  v12`` (sample (co)variances / n) and ``t = t_{n−1, 1−α/2}``, the interval is the set of ρ with
  ``(ȳ − ρ x̄)² ≤ t² (v22 − 2ρ v12 + ρ² v11)``: the roots of a quadratic. It is bounded iff the
  baseline mean is itself significantly non-zero (``g = t² v11 / x̄² < 1``); otherwise the set
  is unbounded and no honest recovery interval exists.
* Its **dual test**: ρ ≤ ρ0 ⇔ ȳ − ρ0 x̄ ≤ 0 (for x̄ > 0), a one-sample t test of the paired
  contrasts ``c_i − ρ0 b_i``. Fieller's interval is exactly the set of ρ0 this test does not
  reject, so a recovery-floor gate and the printed interval never disagree.
* A **paired bootstrap** (resample documents, recompute ȳ/x̄; BCa, Efron 1987, JASA 82:171–185,
  via ``scipy.stats.bootstrap(paired=True)``) as a cross-check that makes no normality
  assumption.

Both are checked in ``tests/stats/test_ratio.py``: Fieller against a brute-force inversion of
``scipy.stats.ttest_1samp`` on the contrasts, both by seeded coverage simulation.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalsvc.stats._common import FloatArray, as_vector, check_alpha

__all__ = ["RatioResult", "RatioTest", "bootstrap_ratio_ci", "fieller_ratio_ci", "ratio_test"]

# Elements per vectorized call of the bootstrap statistic (scipy's ``batch`` is in resamples, and
# memory is O(batch · n)). Unbatched, scipy holds every resample and the BCa jackknife's n × n
# leave-one-out array at once: 7.6 GB at n = 14,000 (MMLU's size). Batched, the interval is the
# same to the bit (the same random stream) at 73 MB (docs/benchmarks.md, "Session 11").
_BATCH_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class RatioResult:
    """Recovery ``estimate = ȳ / x̄`` with a two-sided ``1 − alpha`` interval ``ci``.

    ``bounded`` is False when the interval is unbounded (the baseline mean is not significantly
    different from 0, Fieller's ``g ≥ 1``); ``ci`` is then ``(-inf, inf)``. ``g`` is Fieller's
    ``t² v11 / x̄²`` (the closer to 0, the closer the interval is to the delta method's).
    """

    estimate: float
    ci: tuple[float, float]
    bounded: bool
    g: float
    n: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        lo, hi = self.ci
        return {
            "estimate": self.estimate if math.isfinite(self.estimate) else None,
            "ci": [lo if math.isfinite(lo) else None, hi if math.isfinite(hi) else None],
            "bounded": self.bounded,
            "g": self.g if math.isfinite(self.g) else None,
            "n": self.n,
            "method": self.method,
        }


def _paired(baseline: Any, candidate: Any) -> tuple[FloatArray, FloatArray]:
    b = as_vector(baseline, name="baseline")
    c = as_vector(candidate, name="candidate")
    if b.size != c.size:
        raise ValueError(
            f"a paired ratio needs one baseline and one candidate value per item: got {b.size} "
            f"and {c.size}"
        )
    return b, c


def _moments(b: FloatArray, c: FloatArray) -> tuple[float, float, float, float, float]:
    n = b.size
    cov = np.cov(np.vstack([b, c]), ddof=1) if n > 1 else np.zeros((2, 2))
    return float(b.mean()), float(c.mean()), cov[0, 0] / n, cov[1, 1] / n, cov[0, 1] / n


def fieller_ratio_ci(baseline: Any, candidate: Any, *, alpha: float = 0.05) -> RatioResult:
    """Fieller's ``1 − alpha`` interval for ``mean(candidate) / mean(baseline)`` on paired data.

    Reference: Fieller (1954); Franz (2007, arXiv:0710.2024) eq. 5–7 (see the module docstring).
    Needs n ≥ 2. Returns an unbounded interval (``bounded=False``) when the baseline mean is not
    significantly non-zero at level ``alpha``.
    """
    import scipy
    a2 = 2.0 * check_alpha(alpha / 2.0)  # two-sided alpha, each tail in (0, 0.5)
    b, c = _paired(baseline, candidate)
    n = b.size
    if n < 2:
        raise ValueError(f"Fieller's interval needs at least 2 pairs, got {n}")
    xb, yb, v11, v22, v12 = _moments(b, c)
    est = yb / xb if xb != 0 else math.nan
    t = float(scipy.stats.t.ppf(1.0 - a2 / 2.0, n - 1))
    t2 = t * t
    a = xb * xb - t2 * v11
    bq = xb * yb - t2 * v12
    cq = yb * yb - t2 * v22
    g = t2 * v11 / (xb * xb) if xb != 0 else math.inf
    method = f"Fieller (paired means, t with {n - 1} df)"
    if a <= 0:
        return RatioResult(est, (-math.inf, math.inf), False, g, n, method)
    disc = max(0.0, bq * bq - a * cq)  # ≥ 0 analytically when a > 0; clip rounding
    root = math.sqrt(disc)
    return RatioResult(est, ((bq - root) / a, (bq + root) / a), True, g, n, method)


@dataclass(frozen=True)
class RatioTest:
    """One-sided tests of ρ = ȳ/x̄ against ``null_value`` ρ0 (Fieller's dual t test).

    ``p_greater``: H0 ρ ≤ ρ0 (small ⇒ recovery above the floor); ``p_less``: H0 ρ ≥ ρ0.
    """

    estimate: float
    null_value: float
    statistic: float
    p_greater: float
    p_less: float
    method: str


def ratio_test(baseline: Any, candidate: Any, null_value: float) -> RatioTest:
    """Test ρ = mean(candidate)/mean(baseline) against ρ0 on paired data (baseline mean > 0).

    ρ > ρ0 ⇔ E[c − ρ0·b] > 0 when the baseline mean is positive, so this is Student's
    one-sample t test of the contrasts ``c_i − ρ0 b_i`` (n − 1 df) — the test whose inversion is
    Fieller's interval (Fieller 1954). A contrast with zero variance gives p = 0 or 1 by its sign
    (0.5 each when it is exactly 0).
    """
    import scipy
    b, c = _paired(baseline, candidate)
    r0 = float(null_value)
    if not math.isfinite(r0):
        raise ValueError("the recovery null value must be finite")
    n = b.size
    if n < 2:
        raise ValueError(f"the recovery test needs at least 2 pairs, got {n}")
    if float(b.mean()) <= 0:
        raise ValueError("recovery needs a positive baseline mean")
    d = c - r0 * b
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    est = float(c.mean()) / float(b.mean())
    method = "Fieller's dual t test of the contrasts c − ρ0·b"
    if sd == 0.0 or not math.isfinite(sd):
        if mean > 0:
            return RatioTest(est, r0, math.inf, 0.0, 1.0, method)
        if mean < 0:
            return RatioTest(est, r0, -math.inf, 1.0, 0.0, method)
        return RatioTest(est, r0, 0.0, 0.5, 0.5, method)
    tstat = mean / (sd / math.sqrt(n))
    return RatioTest(
        est,
        r0,
        tstat,
        float(scipy.stats.t.sf(tstat, n - 1)),
        float(scipy.stats.t.cdf(tstat, n - 1)),
        method,
    )


def bootstrap_ratio_ci(
    baseline: Any,
    candidate: Any,
    *,
    alpha: float = 0.05,
    n_resamples: int = 9999,
    seed: int = 0,
) -> RatioResult:
    """Paired bootstrap ``1 − alpha`` interval of ``mean(candidate) / mean(baseline)``.

    Documents are resampled with replacement (both sides together, ``paired=True``) and the BCa
    interval (Efron 1987, JASA 82:171–185) taken by ``scipy.stats.bootstrap``; when BCa is
    degenerate (constant data, a resample with baseline mean 0) the percentile interval is used
    and the method says so. Reproducible given ``seed``.
    """
    import scipy
    a2 = 2.0 * check_alpha(alpha / 2.0)
    b, c = _paired(baseline, candidate)
    n = b.size
    if n < 2:
        raise ValueError(f"the bootstrap ratio interval needs at least 2 pairs, got {n}")
    xb = float(b.mean())
    est = float(c.mean()) / xb if xb != 0 else math.nan

    def ratio(bs: FloatArray, cs: FloatArray, axis: int = -1) -> Any:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.mean(cs, axis=axis) / np.mean(bs, axis=axis)

    for method in ("BCa", "percentile"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = scipy.stats.bootstrap(
                (b, c),
                ratio,
                paired=True,
                vectorized=True,
                n_resamples=n_resamples,
                confidence_level=1.0 - a2,
                method=method,
                rng=np.random.default_rng(seed),
                batch=max(1, _BATCH_ELEMENTS // n),
            )
        lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
        if math.isfinite(lo) and math.isfinite(hi):
            return RatioResult(est, (lo, hi), True, math.nan, n, f"paired bootstrap ({method})")
    return RatioResult(est, (-math.inf, math.inf), False, math.nan, n, "paired bootstrap")
