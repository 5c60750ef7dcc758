"""Default gate policy per suite kind, with the rationale and the source of each number.

These are defaults, not truths: a suite YAML can override margin, alpha and direction, and
docs/statistics.md explains how to choose a margin. Every number here must carry its reason.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import MappingProxyType
from typing import Any, Literal

__all__ = ["DEFAULTS", "GateDefaults"]


@dataclass(frozen=True)
class GateDefaults:
    """The default gate for one suite kind.

    ``gate="noninferiority"`` compares candidate with baseline item by item against ``margin``
    (:func:`evalsvc.gates.evaluate_gate`); ``gate="threshold"`` checks the candidate's metric
    against an absolute ``threshold`` (:func:`evalsvc.gates.threshold_gate`). ``required=False``
    marks an informational gate the runner reports but leaves out of the overall verdict.
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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["sources"] = list(self.sources)
        return out


# One-sided α = 0.05 for every gate: the two one-sided 5% tests correspond to a two-sided 90%
# interval, the convention of two one-sided tests for equivalence (Schuirmann 1987,
# J Pharmacokinet Biopharm 15:657–680). Regulatory non-inferiority trials use 0.025; a release
# gate that can be re-run is a cheaper decision, and Holm's correction across gates already
# guards the fail calls.
_ALPHA = 0.05

_VLLM_CI = (
    "vLLM CI compares lm-eval accuracy of each model with a reference using a relative "
    "tolerance of 0.08 (.buildkite/lm-eval-harness/test_lm_eval_correctness.py, "
    "DEFAULT_RTOL = 0.08)"
)
_KURTIC = (
    "Kurtic et al. 2024, 'Give Me BF16 or Give Me Death? Accuracy-Performance Trade-Offs in "
    "LLM Quantization', arXiv:2411.02355: FP8 W8A8 is essentially lossless, INT8 W8A8 loses "
    "1-3%, INT4 weight-only is competitive with INT8"
)
_LLAMA_CPP_KLD = (
    "llama.cpp perplexity README (examples/perplexity, later tools/perplexity; KL-divergence "
    "tables on wikitext-2): mean KLD vs FP16 of "
    "Q8_0 is 0.00037 (LLaMA 2 7B), 0.00075-0.0014 (LLaMA 3 8B), 0.00088 (LLaMA 2 70B), 0.0031 "
    "(LLaMA 3 70B) with 97.8-98.8% same top token; Q6_K 0.002-0.009; Q4_K_M 0.013-0.055"
)

DEFAULTS: MappingProxyType[str, GateDefaults] = MappingProxyType(
    {
        "needle": GateDefaults(
            suite_kind="needle",
            metric="accuracy",
            gate="noninferiority",
            kind="binary",
            margin=0.05,
            threshold=None,
            alpha=_ALPHA,
            higher_is_better=True,
            paired=True,
            required=True,
            rationale=(
                "Long-context retrieval is where FP8 KV cache fails first; a drop of up to 5 "
                "accuracy points is accepted, more is a regression. 5 points absolute is "
                "tighter than vLLM's 8% relative CI tolerance at typical accuracies and loose "
                "enough that an FP8 deployment (~99% recovery) passes with a few hundred items. "
                "Needles sharing a haystack document are clustered (pass clusters=)."
            ),
            sources=(_VLLM_CI, _KURTIC),
        ),
        "reasoning": GateDefaults(
            suite_kind="reasoning",
            metric="accuracy",
            gate="noninferiority",
            kind="binary",
            margin=0.05,
            threshold=None,
            alpha=_ALPHA,
            higher_is_better=True,
            paired=True,
            required=True,
            rationale=(
                "Multi-step reasoning is where 4-bit weights hurt most; same 5-point margin as "
                "needle for one consistent notion of 'material regression'. Items from one "
                "template should share a cluster id."
            ),
            sources=(_VLLM_CI, _KURTIC),
        ),
        "determinism": GateDefaults(
            suite_kind="determinism",
            metric="identical_rate",
            gate="noninferiority",
            kind="binary",
            margin=0.10,
            threshold=None,
            alpha=_ALPHA,
            higher_is_better=True,
            paired=False,
            required=True,
            rationale=(
                "Share of repeated greedy requests whose output is identical under different "
                "batch conditions. Non-batch-invariant kernels make this vary a lot between "
                "engines and versions even in BF16, so only a drop of more than 10 points "
                "relative to the baseline is a regression. Unpaired (Miettinen-Nurminen) by "
                "default because baseline and candidate may be measured on different prompt "
                "repeats; pass paired=True when the same prompts are used."
            ),
            sources=(
                "Horace He & Thinking Machines Lab, 'Defeating Nondeterminism in LLM Inference' "
                "(Sep 2025): 1000 temperature-0 runs of one prompt on Qwen3-235B gave 80 "
                "distinct completions with standard kernels, 1 with batch-invariant kernels",
                "The 0.10 margin itself is a policy choice of evalsvc, not a published figure",
            ),
        ),
        "drift": GateDefaults(
            suite_kind="drift",
            metric="kld_mean",
            gate="threshold",
            kind="continuous",
            margin=None,
            threshold=0.01,
            alpha=_ALPHA,
            higher_is_better=False,
            paired=True,
            required=True,
            rationale=(
                "Mean per-item KL divergence of the candidate's next-token distribution from "
                "the baseline's must be significantly below 0.01 nats: about 3-25x what 8-bit "
                "quantization shows in llama.cpp's tables and below typical 4-bit K-quants, so "
                "FP8/INT8 candidates pass and a broken kernel or a 4-bit model is flagged for a "
                "look at the task suites. KLD from top-k API logprobs is a truncated estimate; "
                "recalibrate the threshold if the suite changes k."
            ),
            sources=(_LLAMA_CPP_KLD,),
        ),
        "lmeval": GateDefaults(
            suite_kind="lmeval",
            metric="accuracy",
            gate="noninferiority",
            kind="binary",
            margin=0.03,
            threshold=None,
            alpha=_ALPHA,
            higher_is_better=True,
            paired=True,
            required=True,
            rationale=(
                "Standard benchmarks have large item counts (gsm8k 1319, MMLU 14042), so a "
                "tighter 3-point margin is affordable (MDE ~0.02 at n~1300 with 10% flips) and "
                "matches the 1-3% degradation reported for well-tuned INT8."
            ),
            sources=(_VLLM_CI, _KURTIC),
        ),
        "speed": GateDefaults(
            suite_kind="speed",
            metric="throughput",
            gate="noninferiority",
            kind="ratio",
            margin=0.0,
            threshold=None,
            alpha=_ALPHA,
            higher_is_better=True,
            paired=True,
            required=False,
            rationale=(
                "Output tokens/s per item, compared as a paired log ratio. Margin 0 means "
                "'pass only if the candidate is significantly faster' (ratio > 1); the gate is "
                "informational by default because a capacity gain (KV cache) may be the goal "
                "even without a throughput gain."
            ),
            sources=("evalsvc design: quantization must pay for itself",),
        ),
    }
)


def resolve_margin_alpha(
    kind: str,
    *,
    flag_margin: float | None,
    flag_alpha: float | None,
    yaml_margin: float | None,
    yaml_alpha: float | None,
) -> tuple[float | None, float]:
    """The margin and α a gate uses: the CLI/API flag, else the suite's YAML, else the kind's
    documented default in :data:`DEFAULTS` (α falls back to 0.05). The margin is ``None`` when
    none of the three sets one; the runner then uses 0.05 and ``evalsvc plan`` says it has none.
    """
    defaults = DEFAULTS.get(kind)
    margin = flag_margin or yaml_margin or (defaults.margin if defaults and defaults.margin else None)
    alpha = flag_alpha or yaml_alpha or (defaults.alpha if defaults else 0.05)
    return margin, alpha
