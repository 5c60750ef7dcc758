"""Sampled evaluation: k samples per item, the item's mean score as the paired unit.

With k samples of item i at temperature T > 0, each side's score of the item is the mean of its
k samples, p̂_i; the paired unit is d_i = p̂_cand,i − p̂_base,i, and the gate is the paired
continuous test on the d_i (the continuous machinery of :mod:`evalsvc.stats._continuous` and
:mod:`evalsvc.stats._cluster`). Its variance decomposes (law of total variance):

    Var(d_i) = σ²_B + σ²_W / k

with σ²_B the between-item variance of the true per-item difference (what the two models
really disagree on) and σ²_W the variance of a **single** sample's paired difference around
its item's true difference (the sampling noise of both sides: for 0/1 scores with independent
draws, σ²_W = E[p_b(1 − p_b) + p_c(1 − p_c)]). Miller 2024, "Adding Error Bars to Evals"
(arXiv:2411.00640), §3.2 ("resampling"), gives the same decomposition for one model's mean.

Consequences, used by ``evalsvc plan``:

- n items of k samples need n = (z_{1−α} + z_{power})² (σ²_B + σ²_W/k) / δ² items to pass an
  equal candidate at margin δ (the normal approximation of ``required_n_mean``);
- at a fixed number of requests N = n·k the variance of the mean difference is
  (k σ²_B + σ²_W) / N, increasing in k: when items cost what samples cost, **more items always
  beat more samples**. Samples help where the items are few (a fixed benchmark) or cheaper
  to repeat (a cached prompt);
- with n items fixed, k → ∞ reaches the floor σ²_B / n; at k = r·σ²_W/σ²_B the variance is
  within a factor (1 + 1/r) of that floor, so past k* = 4 σ²_W/σ²_B (within 25% of the floor)
  more samples barely help and only more items can (:func:`samples_knee`).

pass@k: the unbiased estimator of Chen et al. 2021, "Evaluating Large Language Models Trained on
Code" (arXiv:2107.03374), eq. 1: with c correct among n samples, pass@k = 1 − C(n−c, k)/C(n, k),
computed as a running product to stay exact for large n (their Fig. 3 code does the same).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalsvc.stats._common import as_vector, check_alpha

__all__ = [
    "VarianceComponents",
    "pass_at_k",
    "required_items_sampled",
    "samples_knee",
    "samples_for_items",
    "t_interval",
    "variance_components",
]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Chen et al. 2021 eq. 1: P(at least one of k samples drawn without replacement from the
    n taken is correct), 1 − C(n−c, k)/C(n, k), for c correct of n samples (k ≤ n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 ≤ c ≤ n and 1 ≤ k ≤ n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    # 1 − Π_{i=n−c+1}^{n} (1 − k/i): the product form of the binomial ratio.
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


@dataclass(frozen=True)
class VarianceComponents:
    """The variance of per-item paired differences split into between-item and sampling parts
    (method of moments: one-way random-effects ANOVA, Searle, Casella & McCulloch 1992 §3.5)."""

    between: float
    """σ²_B: variance across items of the true per-item difference (clipped at 0)."""
    within: float
    """σ²_W: variance of one sample's paired difference within its item."""
    k: float
    """The mean number of samples per item the estimate used."""
    n: int
    """Items."""

    def unit_variance(self, k: float) -> float:
        """Var(d_i) of an item's mean difference over k samples: σ²_B + σ²_W / k."""
        return self.between + self.within / k


def variance_components(
    baseline: Sequence[Sequence[float]], candidate: Sequence[Sequence[float]]
) -> VarianceComponents:
    """σ²_B and σ²_W of the paired difference from per-item samples (``baseline[i]`` and
    ``candidate[i]``: item i's sample scores on each side, at least one each).

    Within an item the two sides' samples are independent draws, so a single sample's paired
    difference has variance s²_b,i + s²_c,i (each side's unbiased sample variance; needs two
    samples on a side, else that side contributes nothing); σ²_W is its mean over items.
    σ²_B = Var_i(d̄_i) − mean_i(s²_b,i/k_b,i + s²_c,i/k_c,i), clipped at 0 (ANOVA's moment
    estimator)."""
    if len(baseline) != len(candidate):
        raise ValueError("baseline and candidate need the samples of the same items")
    n = len(baseline)
    if n < 2:
        return VarianceComponents(0.0, 0.0, float(len(baseline[0]) if n else 0), n)
    within, noise, diffs, ks = [], [], [], []
    for b_raw, c_raw in zip(baseline, candidate, strict=True):
        b = as_vector(b_raw, name="baseline samples")
        c = as_vector(c_raw, name="candidate samples")
        if b.size == 0 or c.size == 0:
            raise ValueError("every item needs at least one sample on each side")
        vb = float(b.var(ddof=1)) if b.size > 1 else 0.0
        vc = float(c.var(ddof=1)) if c.size > 1 else 0.0
        within.append(vb + vc)
        noise.append(vb / b.size + vc / c.size)
        diffs.append(float(c.mean() - b.mean()))
        ks.append((b.size + c.size) / 2.0)
    total = float(np.var(diffs, ddof=1))
    return VarianceComponents(
        between=max(0.0, total - float(np.mean(noise))),
        within=float(np.mean(within)),
        k=float(np.mean(ks)),
        n=n,
    )


def required_items_sampled(
    margin: float, between: float, within: float, k: int, alpha: float = 0.05, power: float = 0.8
) -> int:
    """Items of k samples each to pass a candidate equal to the baseline at margin δ with
    ``power``: ⌈(z_{1−α} + z_{power})² (σ²_B + σ²_W/k) / δ²⌉ (the module docstring; the normal
    approximation of ``required_n_mean`` with the per-item-mean variance)."""
    import scipy

    check_alpha(alpha)
    if margin <= 0:
        raise ValueError("margin must be > 0 to size a non-inferiority gate")
    if k < 1:
        raise ValueError("k must be ≥ 1")
    if between < 0 or within < 0 or not (math.isfinite(between) and math.isfinite(within)):
        raise ValueError("variances must be finite and non-negative")
    z = float(scipy.stats.norm.isf(alpha)) + float(scipy.stats.norm.ppf(power))
    var = between + within / k
    return max(2, math.ceil(z * z * var / (margin * margin) - 1e-9))


def samples_for_items(
    n: int, margin: float, between: float, within: float, alpha: float = 0.05, power: float = 0.8
) -> int | None:
    """Fewest samples per item with which ``n`` items reach ``power`` at margin δ; ``None`` when
    no k can (n δ²/z² ≤ σ²_B: the between-item variance alone is too large, add items)."""
    import scipy

    check_alpha(alpha)
    z = float(scipy.stats.norm.isf(alpha)) + float(scipy.stats.norm.ppf(power))
    room = n * margin * margin / (z * z) - between
    if room <= 0:
        return None
    if within == 0:
        return 1
    return max(1, math.ceil(within / room - 1e-9))


def samples_knee(between: float, within: float, closeness: float = 0.25) -> int | None:
    """The k past which more samples per item barely help: the variance σ²_B + σ²_W/k is within
    a factor (1 + ``closeness``) of its floor σ²_B at k = σ²_W / (closeness · σ²_B) (module
    docstring). ``None`` when σ²_B = 0 (no floor: samples keep helping as 1/k)."""
    if between <= 0:
        return None
    return max(1, math.ceil(within / (closeness * between) - 1e-9))


def t_interval(values: Sequence[float], alpha: float = 0.05) -> tuple[float, float]:
    """Two-sided (1 − α) Student-t interval of a mean over independent units (items), the
    interval Miller 2024 (arXiv:2411.00640, eq. 2) recommends for an eval's mean; a single unit
    or no spread gives the mean itself."""
    import scipy

    v = as_vector(values, name="values")
    if v.size == 0:
        return (math.nan, math.nan)
    m = float(v.mean())
    if v.size < 2:
        return (m, m)
    se = float(v.std(ddof=1)) / math.sqrt(v.size)
    half = float(scipy.stats.t.isf(alpha / 2, v.size - 1)) * se
    return (m - half, m + half)
