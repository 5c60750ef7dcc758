"""The result of one gate, as the runner persists it and the JSON report prints it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

Verdict = Literal["pass", "fail", "inconclusive"]

__all__ = ["GateOutcome", "Verdict", "jsonable"]


def jsonable(value: Any) -> Any:
    """Convert ``value`` to plain JSON types: numpy scalars → Python, tuples → lists,
    NaN/±inf → ``None`` (strict JSON has no NaN)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    if value is None or isinstance(value, str):
        return value
    return str(value)


@dataclass(frozen=True)
class GateOutcome:
    """One gate's verdict with the numbers behind it.

    Sign conventions: ``delta`` and ``ci`` are ``candidate − baseline`` in the metric's own units
    (not flipped for lower-is-better metrics). For ``kind="ratio"`` they are relative changes
    ``candidate/baseline − 1`` of geometric means, and the log-ratio versions are in
    ``details["log_ratio"]``. For a threshold gate ``baseline`` is the threshold and ``delta`` is
    ``candidate − threshold``. ``ci`` is the two-sided ``1 − 2·alpha`` interval, whose ends are the
    two one-sided level-``alpha`` bounds the verdict uses.

    ``p_value`` is the non-inferiority p-value (H0: the candidate is worse than the margin allows;
    small ⇒ evidence for ``pass``). ``details["p_inferiority"]`` is the p-value of the opposite
    one-sided test (H0: not worse than the margin; small ⇒ evidence for ``fail``) and is what
    Holm's correction uses across gates. For binary paired gates ``details["mcnemar_p"]`` is the
    two-sided exact McNemar p-value of "any difference at all".

    ``method`` names the method that decided when a gate has more than one (the asymptotic
    statistic, or the exact bound it falls back on where the statistic degenerates: no events,
    zero observed variance); ``None`` when ``test`` says it all.
    """

    verdict: Verdict
    metric: str
    baseline: float
    candidate: float
    delta: float
    ci: tuple[float, float]
    p_value: float | None
    margin: float
    alpha: float
    n: int
    mde: float | None
    test: str
    details: dict[str, Any] = field(default_factory=dict)
    method: str | None = None

    def __post_init__(self) -> None:
        # Keep details JSON-serialisable at construction, so nothing downstream has to guess.
        object.__setattr__(self, "details", jsonable(self.details))

    @property
    def p_inferiority(self) -> float | None:
        """p-value of H0: Δ ≥ −margin (small ⇒ evidence for fail); ``None`` if not computed."""
        value = self.details.get("p_inferiority")
        return float(value) if value is not None else None

    def to_dict(self) -> dict[str, Any]:
        """Plain-JSON dict with the report's field names; non-finite floats become ``None``."""
        out: dict[str, Any] = {
            "verdict": self.verdict,
            "metric": self.metric,
            "baseline": self.baseline,
            "candidate": self.candidate,
            "delta": self.delta,
            "ci": list(self.ci),
            "p_value": self.p_value,
            "margin": self.margin,
            "alpha": self.alpha,
            "n": self.n,
            "mde": self.mde,
            "test": self.test,
            "method": self.method,
            "details": self.details,
        }
        result = jsonable(out)
        assert isinstance(result, dict)
        return result
