"""Multiplicity: Holm's step-down adjustment, unweighted and weighted."""

from __future__ import annotations

from typing import Any

import numpy as np

from evalsvc.stats._common import FloatArray, as_vector

__all__ = ["holm", "weighted_holm"]


def holm(pvalues: Any) -> FloatArray:
    """Holm-adjusted p-values (Holm 1979, Scand. J. Statist. 6:65–70).

    Sort ascending, multiply the i-th smallest (0-based) by ``m − i``, take the running maximum
    so the adjusted values stay monotone, cap at 1, and return them in the input order. Rejecting
    every hypothesis whose adjusted p-value is ≤ α controls the family-wise error rate at α under
    any dependence between the tests. Equals ``statsmodels`` ``multipletests(method="holm")``.
    """
    p = as_vector(pvalues, name="pvalues")
    if p.size and (p.min() < 0.0 or p.max() > 1.0):
        raise ValueError("p-values must lie in [0, 1]")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = (m - np.arange(m)) * p[order]
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    out = np.empty(m, dtype=np.float64)
    out[order] = adjusted_sorted
    return out


def weighted_holm(pvalues: Any, weights: Any) -> FloatArray:
    """Weighted Holm adjusted p-values (Holm 1979, §5; Benjamini & Hochberg 1997, Scand. J.
    Statist. 24:407–418): with weights wᵢ > 0, order the hypotheses by pᵢ/wᵢ; the k-th adjusted
    value is the running maximum of ``min(1, pₖ/wₖ · Σ_{j ≥ k} wⱼ)``. Rejecting every adjusted
    value ≤ α controls the family-wise error rate at α under any dependence. Equal weights give
    :func:`holm` exactly.
    """
    p = as_vector(pvalues, name="pvalues")
    w = as_vector(weights, name="weights")
    if w.size != p.size:
        raise ValueError("one weight per p-value")
    if p.size and (p.min() < 0.0 or p.max() > 1.0):
        raise ValueError("p-values must lie in [0, 1]")
    if w.size and w.min() <= 0.0:
        raise ValueError("weights must be positive")
    order = np.argsort(p / w, kind="stable")
    ws = w[order]
    remaining = np.cumsum(ws[::-1])[::-1]  # Σ_{j ≥ k} w_(j)
    scaled = p[order] / ws * remaining
    adjusted_sorted = np.minimum(np.maximum.accumulate(scaled), 1.0)
    out = np.empty(p.size, dtype=np.float64)
    out[order] = adjusted_sorted
    return out
