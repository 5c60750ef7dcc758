"""Gate policy: turns per-item baseline/candidate scores into pass / fail / inconclusive.

Contract: owns the decision of *how* a suite is gated (:func:`resolve` → :class:`ResolvedGate`,
from the kind's declared :class:`GateDefaults`, the suite YAML's policy and the submitter's
tighten-only options), the non-inferiority and threshold decision rules, the
informative-baseline guard, the comparability guard (may two endpoints be compared as a
quantization change at all: ``non-comparable`` otherwise), slice gates, recovery
(candidate ÷ baseline) with its interval and the recovery-floor gate, and the combination of verdicts across gates. Pure
functions over arrays; it may call :mod:`evalsvc.stats` and nothing else in evalsvc (no I/O, no
database, no network). The runner calls :func:`resolve` once per suite, then
:func:`evaluate_gate` / :func:`threshold_gate`, :func:`baseline_guard`, stores
:meth:`GateOutcome.to_dict`, and calls :func:`decide` (one candidate's suites: final verdicts
and :class:`Reason` s) and :func:`combine_candidates` (the run) for the overall verdict.

Conventions (see docs/statistics.md): margin δ ≥ 0 is the largest acceptable drop; Δ =
candidate − baseline, sign-flipped internally for lower-is-better metrics so that bad is always
negative; each of pass and fail is a one-sided level-α test; ``p_value`` is the
non-inferiority p-value (small ⇒ pass), ``details["p_inferiority"]`` the inferiority p-value
(small ⇒ fail, used by Holm).
"""

from evalsvc.gates._bounds import apply_bounds
from evalsvc.gates._combine import (
    REASON_CODES,
    CandidateDecision,
    CandidateVerdict,
    Reason,
    ReasonCode,
    SuiteDecision,
    SuiteGate,
    combine_candidates,
    combine_verdicts,
    decide,
    holm_inferiority,
)
from evalsvc.gates._comparability import (
    DIFFERENCES,
    Difference,
    blocking,
    context_difference,
    is_refusal,
    non_comparable,
    provenance_differences,
    refusal_difference,
    suite_allows,
)
from evalsvc.gates._defaults import (
    ALPHA,
    GENERIC_MARGIN,
    KURTIC_SOURCE,
    LLAMA_CPP_KLD_SOURCE,
    VLLM_CI_SOURCE,
    GateDefaults,
    generic_default,
)
from evalsvc.gates._gate import (
    BOOTSTRAP_RESAMPLES,
    MIN_N_CONTINUOUS,
    evaluate_gate,
    threshold_gate,
)
from evalsvc.gates._guard import apply_guard, baseline_guard, min_informative_correct
from evalsvc.gates._outcome import GateOutcome, Verdict
from evalsvc.gates._recovery import RECOVERY_RESAMPLES, recovery_gate, recovery_summary
from evalsvc.gates._resolve import (
    GateLimits,
    GatePolicyError,
    NoiseFloor,
    ResolvedGate,
    check_run_options,
    resolve,
)
from evalsvc.gates._slices import slice_gates

__all__ = [
    "ALPHA",
    "apply_bounds",
    "REASON_CODES",
    "CandidateDecision",
    "CandidateVerdict",
    "DIFFERENCES",
    "Difference",
    "blocking",
    "context_difference",
    "is_refusal",
    "non_comparable",
    "provenance_differences",
    "refusal_difference",
    "suite_allows",
    "Reason",
    "ReasonCode",
    "SuiteDecision",
    "SuiteGate",
    "combine_candidates",
    "decide",
    "BOOTSTRAP_RESAMPLES",
    "GENERIC_MARGIN",
    "KURTIC_SOURCE",
    "LLAMA_CPP_KLD_SOURCE",
    "MIN_N_CONTINUOUS",
    "RECOVERY_RESAMPLES",
    "VLLM_CI_SOURCE",
    "GateDefaults",
    "GateLimits",
    "GateOutcome",
    "GatePolicyError",
    "NoiseFloor",
    "ResolvedGate",
    "Verdict",
    "apply_guard",
    "baseline_guard",
    "check_run_options",
    "combine_verdicts",
    "evaluate_gate",
    "generic_default",
    "holm_inferiority",
    "min_informative_correct",
    "recovery_gate",
    "recovery_summary",
    "resolve",
    "slice_gates",
    "threshold_gate",
]
