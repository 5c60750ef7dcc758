"""Shared types and input validation for :mod:`evalsvc.stats`.

Every public function in the package validates its own inputs with these helpers, so a NaN that
slipped through a suite's scorer is reported where it enters the statistics, with its position,
instead of silently turning a confidence bound into NaN (which would compare False against the
margin and could masquerade as a verdict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

__all__ = [
    "FloatArray",
    "MarginTest",
    "as_binary_vector",
    "as_vector",
    "check_alpha",
]


@dataclass(frozen=True)
class MarginTest:
    """One-sided tests of a difference ``Δ`` against a boundary value ``null_value``.

    ``p_greater`` tests H0: Δ ≤ null_value against H1: Δ > null_value; ``p_less`` tests
    H0: Δ ≥ null_value against H1: Δ < null_value. For the continuous statistics used here
    ``p_greater + p_less = 1``; they are reported separately because the gate uses one as the
    non-inferiority p-value and the other as the inferiority p-value, depending on the metric's
    direction.
    """

    estimate: float
    null_value: float
    statistic: float
    p_greater: float
    p_less: float
    method: str


def as_vector(values: Any, *, name: str, allow_empty: bool = True) -> FloatArray:
    """Return ``values`` as a 1-D float64 array, or raise ``ValueError`` explaining why not.

    NaN and ±inf are rejected with the offending positions: a missing score must be handled
    (counted as an error, or scored as wrong) by the caller, never averaged away.
    """
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if not allow_empty and arr.size == 0:
        raise ValueError(f"{name} is empty")
    nan = np.flatnonzero(np.isnan(arr))
    if nan.size:
        raise ValueError(
            f"{name} contains NaN/missing values at positions {nan[:10].tolist()}"
            f"{' ...' if nan.size > 10 else ''} ({nan.size} in total); drop or score them "
            "explicitly before computing statistics"
        )
    inf = np.flatnonzero(np.isinf(arr))
    if inf.size:
        raise ValueError(
            f"{name} contains infinite values at positions {inf[:10].tolist()}"
            f"{' ...' if inf.size > 10 else ''}"
        )
    return arr


def as_binary_vector(values: Any, *, name: str) -> FloatArray:
    """Like :func:`as_vector`, but every value must be 0 or 1 (booleans are accepted)."""
    arr = as_vector(values, name=name)
    bad = np.flatnonzero((arr != 0.0) & (arr != 1.0))
    if bad.size:
        raise ValueError(
            f"{name} must contain only 0/1 outcomes; positions {bad[:10].tolist()} hold "
            f"{arr[bad[:3]].tolist()}"
        )
    return arr


def check_alpha(alpha: float) -> float:
    """Validate a one-sided significance level: 0 < alpha < 0.5."""
    a = float(alpha)
    if not (0.0 < a < 0.5):
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha!r}")
    return a
