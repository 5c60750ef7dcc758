"""Combining gate verdicts across suites into one release verdict."""

from __future__ import annotations

from collections.abc import Sequence

from evalsvc.gates._outcome import GateOutcome, Verdict
from evalsvc.stats import holm

__all__ = ["combine_verdicts", "holm_inferiority"]


def _family_alpha(outcomes: Sequence[GateOutcome], alpha: float | None) -> float:
    # Gates may carry different alphas; the strictest one is the family level unless the caller
    # sets it, which keeps the family-wise guarantee for every gate's own α.
    return float(alpha) if alpha is not None else min(o.alpha for o in outcomes)


def holm_inferiority(outcomes: Sequence[GateOutcome], *, alpha: float | None = None) -> list[float]:
    """Holm-adjusted inferiority p-values, one per gate, in input order.

    Gates without an inferiority p-value (no items) count as 1.0: no evidence of a drop.
    A gate's fail call survives the multiplicity correction when its adjusted value is below
    the family α (Holm 1979, Scand. J. Statist. 6:65–70).
    """
    del alpha  # the adjustment itself does not depend on α; kept for a symmetric signature
    raw = [o.p_inferiority if o.p_inferiority is not None else 1.0 for o in outcomes]
    return [float(p) for p in holm(raw)] if raw else []


def combine_verdicts(outcomes: Sequence[GateOutcome], *, alpha: float | None = None) -> Verdict:
    """Overall verdict over several gates (suites × metrics for one candidate).

    * ``fail`` if any gate's fail call survives Holm's step-down correction of the inferiority
      p-values across gates at the family level ``alpha`` (default: the smallest gate α), so the
      probability of failing a release because of at least one wrongly failed gate is ≤ α.
    * ``pass`` only if every gate passes. This is an intersection–union test (Berger 1982,
      Technometrics 24:295–300): each gate at level α already controls the chance of passing a
      candidate that is inferior on any one metric, so no correction is needed (or allowed to
      help) for the pass side.
    * ``inconclusive`` otherwise, including an empty list (nothing was tested).

    Gates whose own verdict is ``fail`` but do not survive Holm make the overall verdict
    ``inconclusive``, not ``pass``.
    """
    if not outcomes:
        return "inconclusive"
    fam = _family_alpha(outcomes, alpha)
    adjusted = holm_inferiority(outcomes)
    if any(p < fam for p in adjusted):
        return "fail"
    if all(o.verdict == "pass" for o in outcomes):
        return "pass"
    return "inconclusive"
