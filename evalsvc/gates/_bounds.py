"""A suite's secondary bounds: limits beside its margin that can only add a fail call.

A kind that scores answers reports its thinking traces (``details["thinking"]``, built by
``evalsvc.suites._thinking.paired_summary``) with the suite's optional bounds already tested
one-sided and Bonferroni-adjusted over the bounds and the suite's own gate: the thinking-length
inflation ratio (``max_length_ratio``) and the rise in answers cut at the token budget
(``max_truncation_increase``). :func:`apply_bounds` turns a bound shown exceeded into the
suite's ``fail`` (``details["failed_bounds"]``, one finding each) and gives the fail call the
bound's adjusted p-value for the Holm correction across suites. Like a slice gate, a bound never
makes a suite pass: a suite whose own gate is inconclusive stays so unless a bound fails.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evalsvc.gates._outcome import GateOutcome

__all__ = ["apply_bounds"]


def apply_bounds(outcome: GateOutcome, bounds: Sequence[Mapping[str, Any]] | None) -> GateOutcome:
    """``outcome`` with the failed ``bounds`` (rows with ``verdict`` ``fail``, ``finding`` and
    ``p_adjusted``) applied; unchanged when none failed."""
    failed = [b for b in bounds or () if b.get("verdict") == "fail"]
    if not failed:
        return outcome
    p_bounds = min(float(b.get("p_adjusted", 1.0)) for b in failed)
    own = outcome.p_inferiority if outcome.verdict == "fail" else None
    details = {
        **outcome.details,
        "failed_bounds": [str(b.get("finding") or b.get("bound")) for b in failed],
        "verdict_before_bounds": outcome.verdict,
        "p_inferiority": p_bounds if own is None else min(own, p_bounds),
    }
    return replace(outcome, verdict="fail", details=details)
