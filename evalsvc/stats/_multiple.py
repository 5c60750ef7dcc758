"""Multiplicity: Holm's step-down adjustment."""

from __future__ import annotations

from typing import Any

import numpy as np

from evalsvc.stats._common import FloatArray, as_vector

__all__ = ["holm"]


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
