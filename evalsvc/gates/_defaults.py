"""What a suite kind declares about its gate, and the shared sources behind the numbers.

Each suite kind declares its own :class:`GateDefaults` (``Suite.gate_default``, so plugin kinds
can too); :func:`evalsvc.gates.resolve` combines it with the suite YAML's ``gate:`` block and the
submitter's options. This module holds only the type, the one α every built-in kind uses, the
literature the kinds cite, and :func:`generic_default` for kinds that declare nothing. Every
number a kind declares must carry its reason (``rationale``, ``sources``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

__all__ = [
    "ALPHA",
    "GENERIC_MARGIN",
    "KURTIC_SOURCE",
    "LLAMA_CPP_KLD_SOURCE",
    "VLLM_CI_SOURCE",
    "GateDefaults",
    "generic_default",
]


@dataclass(frozen=True)
class GateDefaults:
    """The default gate of one suite kind.

    ``gate="noninferiority"`` compares candidate with baseline item by item against ``margin``
    (:func:`evalsvc.gates.evaluate_gate`); ``gate="threshold"`` checks the candidate's metric
    against an absolute ``threshold`` (:func:`evalsvc.gates.threshold_gate`). ``required=False``
    marks an informational gate the runner reports but leaves out of the overall verdict.
    ``baseline_floor`` is the baseline rate at or below which a binary gate cannot pass (a score
    at chance; ``None``: only the worst-case rule of :func:`evalsvc.gates.baseline_guard`).
    ``slice_min_items`` is the fewest paired items a slice needs for its own gate.
    """

    suite_kind: str
    metric: str
    gate: Literal["noninferiority", "threshold"]
    kind: Literal["binary", "continuous", "ratio"]
    margin: float | None
    threshold: float | None
    alpha: float
    higher_is_better: bool
    paired: bool
    required: bool
    rationale: str
    sources: tuple[str, ...]
    baseline_floor: float | None = None
    slice_min_items: int = 20

    @classmethod
    def paired_noninferiority(
        cls,
        suite_kind: str,
        *,
        margin: float,
        rationale: str,
        sources: tuple[str, ...],
        metric: str = "accuracy",
        kind: Literal["binary", "continuous", "ratio"] = "binary",
        higher_is_better: bool = True,
        baseline_floor: float | None = None,
    ) -> GateDefaults:
        """The common gate: required, paired non-inferiority at ``margin`` with α = ``ALPHA``."""
        return cls(
            suite_kind=suite_kind,
            metric=metric,
            gate="noninferiority",
            kind=kind,
            margin=margin,
            threshold=None,
            alpha=ALPHA,
            higher_is_better=higher_is_better,
            paired=True,
            required=True,
            rationale=rationale,
            sources=sources,
            baseline_floor=baseline_floor,
        )

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sources"] = list(self.sources)
        return out


# One-sided α = 0.05 for every gate: the two one-sided 5% tests correspond to a two-sided 90%
# interval, the convention of two one-sided tests for equivalence (Schuirmann 1987,
# J Pharmacokinet Biopharm 15:657–680). Regulatory non-inferiority trials use 0.025; a release
# gate that can be re-run is a cheaper decision, and Holm's correction across gates already
# guards the fail calls.
ALPHA = 0.05

#: The margin of a kind that declares no gate: the 5 accuracy points of the built-in task kinds.
GENERIC_MARGIN = 0.05

VLLM_CI_SOURCE = (
    "vLLM CI compares lm-eval accuracy of each model with a reference using a relative "
    "tolerance of 0.08 (.buildkite/lm-eval-harness/test_lm_eval_correctness.py, "
    "DEFAULT_RTOL = 0.08)"
)
KURTIC_SOURCE = (
    "Kurtic et al. 2024, 'Give Me BF16 or Give Me Death? Accuracy-Performance Trade-Offs in "
    "LLM Quantization', arXiv:2411.02355: FP8 W8A8 is essentially lossless, INT8 W8A8 loses "
    "1-3%, INT4 weight-only is competitive with INT8"
)
LLAMA_CPP_KLD_SOURCE = (
    "llama.cpp perplexity README (examples/perplexity, later tools/perplexity; KL-divergence "
    "tables on wikitext-2): mean KLD vs FP16 of "
    "Q8_0 is 0.00037 (LLaMA 2 7B), 0.00075-0.0014 (LLaMA 3 8B), 0.00088 (LLaMA 2 70B), 0.0031 "
    "(LLaMA 3 70B) with 97.8-98.8% same top token; Q6_K 0.002-0.009; Q4_K_M 0.013-0.055"
)


def generic_default(
    suite_kind: str,
    *,
    metric: str,
    kind: Literal["binary", "continuous", "ratio"],
    higher_is_better: bool,
) -> GateDefaults:
    """The gate of a kind that declares none: paired non-inferiority at 5 points, α = 0.05,
    required (a plugin kind should declare its own; this keeps an undeclared one honest)."""
    return GateDefaults.paired_noninferiority(
        suite_kind,
        margin=GENERIC_MARGIN,
        metric=metric,
        kind=kind,
        higher_is_better=higher_is_better,
        rationale="the kind declares no gate: the built-in task kinds' 5-point paired margin",
        sources=("evalsvc policy for undeclared kinds",),
    )
