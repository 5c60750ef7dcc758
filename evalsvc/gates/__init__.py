"""Gate policy: turns per-item baseline/candidate scores into pass / fail / inconclusive.

Contract: owns the non-inferiority and threshold decision rules, their per-suite-kind
defaults (:data:`DEFAULTS`) and the combination of verdicts across gates. Pure functions over
arrays; it may call :mod:`evalsvc.stats` and nothing else in evalsvc (no I/O, no database, no
network). The runner calls :func:`evaluate_gate` / :func:`threshold_gate` per suite and metric,
stores :meth:`GateOutcome.to_dict`, and calls :func:`combine_verdicts` for the overall verdict.

Conventions (see docs/statistics.md): margin δ ≥ 0 is the largest acceptable drop; Δ =
candidate − baseline, sign-flipped internally for lower-is-better metrics so that bad is always
negative; each of pass and fail is a one-sided level-α test; ``p_value`` is the
non-inferiority p-value (small ⇒ pass), ``details["p_inferiority"]`` the inferiority p-value
(small ⇒ fail, used by Holm).
"""

from evalsvc.gates._combine import combine_verdicts, holm_inferiority
from evalsvc.gates._defaults import DEFAULTS, GateDefaults, resolve_margin_alpha
from evalsvc.gates._gate import (
    BOOTSTRAP_RESAMPLES,
    MIN_N_CONTINUOUS,
    evaluate_gate,
    threshold_gate,
)
from evalsvc.gates._guard import apply_guard, baseline_guard, min_informative_correct
from evalsvc.gates._outcome import GateOutcome, Verdict

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "DEFAULTS",
    "MIN_N_CONTINUOUS",
    "GateDefaults",
    "GateOutcome",
    "Verdict",
    "apply_guard",
    "baseline_guard",
    "min_informative_correct",
    "combine_verdicts",
    "evaluate_gate",
    "holm_inferiority",
    "resolve_margin_alpha",
    "threshold_gate",
]
