"""The comparability guard's pure rules (``evalsvc.gates._comparability``) and where the
non-comparable verdict ranks (``combine_candidates``).

The quantized pairs are the provenance the probe recorded from the real local endpoints
(2026-12-04): llama.cpp F16 against Q4_K_M weights with a q8_0 KV cache, and vLLM bf16 (whose
chat-template and tokenizer fingerprints equal llama.cpp's for the same model); every
quantization field differs and none of them may make a run non-comparable.
"""

from __future__ import annotations

from typing import Any, get_args

import pytest

from evalsvc.domain import ComparabilityField
from evalsvc.endpoints._engines import facts_from_info
from evalsvc.endpoints._probe import _model_family
from evalsvc.gates import (
    DIFFERENCES,
    CandidateDecision,
    Reason,
    blocking,
    combine_candidates,
    context_difference,
    is_refusal,
    non_comparable,
    provenance_differences,
    refusal_difference,
)

DEFAULTS = {"temperature": 0.800000011920929, "top_k": 40, "top_p": 0.949999988079071,
            "min_p": 0.05000000074505806, "repeat_penalty": 1.0}
FAMILY = {"vocab_type": 2, "n_vocab": 49152, "n_ctx_train": 8192, "n_embd": 576,
          "n_params": 134515008}
F16: dict[str, Any] = {
    "engine": "llama.cpp", "model": "smollm2-135m-f16", "max_context": 1024,
    "tokenizer_fingerprint": "4ea1778403f125d3", "chat_template_fingerprint": "e471642afdc9d0d2",
    "generation_defaults": DEFAULTS, "model_family": FAMILY, "reasoning": None,
    "dtype": "F16", "kv_cache_dtype": "f16", "quantization": None,
}
Q4_KV8 = {**F16, "model": "smollm2-135m-q4", "max_context": 2048, "dtype": "Q4_K - Medium",
          "kv_cache_dtype": "q8_0", "quantization": "Q4_K_M", "root": "/models/q4.gguf"}
VLLM_BF16 = {"engine": "vllm", "model": "bf16", "max_context": 4096, "kv_cache_dtype": "auto",
             "tokenizer_fingerprint": "4ea1778403f125d3",
             "chat_template_fingerprint": "e471642afdc9d0d2"}
VLLM_FP8 = {**VLLM_BF16, "model": "fp8-kv", "kv_cache_dtype": "fp8", "quantization": "fp8",
            "kv_capacity_tokens": 90000, "version": "0.11.1"}


def test_the_closed_set_is_the_domains() -> None:
    assert set(DIFFERENCES) == set(get_args(ComparabilityField))


@pytest.mark.parametrize(("base", "cand"), [(F16, Q4_KV8), (VLLM_BF16, VLLM_FP8),
                                            (VLLM_BF16, Q4_KV8)])
def test_quantization_is_never_a_difference(base: dict[str, Any], cand: dict[str, Any]) -> None:
    assert provenance_differences(base, cand) == []


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        ({"tokenizer_fingerprint": "ffff"}, "tokenizer", "another tokenizer"),
        ({"chat_template_fingerprint": "ffff"}, "chat_template", "another chat template"),
        ({"model_family": {**FAMILY, "n_embd": 960, "n_params": 361821120}}, "model_family",
         "n_embd 576 → 960"),
        ({"generation_defaults": {**DEFAULTS, "temperature": 0.6}}, "generation_defaults",
         "temperature 0.800000011920929 → 0.6"),
        ({"reasoning": "parsed"}, "reasoning", "in a separate reasoning field, the baseline not"),
    ],
)
def test_each_difference_is_named_with_both_values(
    change: dict[str, Any], field: str, says: str
) -> None:
    (diff,) = provenance_differences(F16, {**Q4_KV8, **change})
    assert diff.field == field and says in diff.message
    assert f"--allow-difference {field} if the" in diff.fix


def test_how_a_trace_comes_back_matters_only_where_no_split_reads_it() -> None:
    parsed, inline = {**Q4_KV8, "reasoning": "parsed"}, {**F16, "reasoning": "inline"}
    assert [d.field for d in provenance_differences(inline, parsed)] == ["reasoning"]
    assert provenance_differences(inline, parsed, reasoning_split=True) == []
    (diff,) = provenance_differences(F16, parsed, reasoning_split=True)  # reasons vs does not
    assert "the baseline not at all" in diff.message


def test_a_field_one_side_does_not_report_is_not_compared() -> None:
    # vLLM reports neither generation defaults nor the model's shape.
    assert provenance_differences(F16, {**VLLM_BF16, "chat_template_fingerprint": None}) == []


def test_allowed_by_the_run_or_by_every_suite_only() -> None:
    diffs = provenance_differences(F16, {**Q4_KV8, "chat_template_fingerprint": "ffff",
                                         "tokenizer_fingerprint": "eeee"})
    keep, allowed = blocking(diffs, run_allows=["chat_template"])
    assert [d.field for d in keep] == ["tokenizer"] and [d.field for d in allowed] == ["chat_template"]
    keep, _ = blocking(diffs, suites_allow=[["chat_template", "tokenizer"], ["tokenizer"]])
    assert [d.field for d in keep] == ["chat_template"]


def test_a_shorter_context_is_a_difference_only_where_a_suite_needs_it() -> None:
    need = ["lengths [3000] do not fit the endpoint's max context of 2048 tokens"]
    diff = context_difference("needle", need, 8192, 2048)
    assert diff is not None and diff.field == "max_context" and diff.suite == "needle"
    assert context_difference("needle", [], 8192, 2048) is None  # every length fits
    assert context_difference("needle", need, 2048, 4096) is None  # not the shorter side


def test_refusals_not_outages_and_only_past_the_budget() -> None:
    assert is_refusal("HTTP 400 Bad Request") and is_refusal("HTTP 413 Content Too Large")
    for outage in ("HTTP 429 Too Many Requests", "HTTP 408 Request Timeout",
                   "HTTP 401 Unauthorized", "HTTP 403 Forbidden",
                   "HTTP 503 Service Unavailable", "timeout after 300 s", None):
        assert not is_refusal(outage)
    assert refusal_difference("r", 100, 0, 5, 0.05) is None  # 5% is within a 5% budget
    diff = refusal_difference("r", 100, 1, 7, 0.05, ["HTTP 400 Bad Request"])
    assert diff is not None and "the candidate refused 7 of 100 items, the other side 1" in (
        diff.message)
    assert refusal_difference("r", 0, 0, 0, 0.05) is None


def _decision(verdict: str) -> CandidateDecision:
    return CandidateDecision(verdict, (Reason("passed" if verdict == "pass" else "failed_gate",
                                              verdict),))  # type: ignore[arg-type]


def test_non_comparable_never_passes_and_ranks_above_fail() -> None:
    (diff,) = provenance_differences(F16, {**Q4_KV8, "tokenizer_fingerprint": "ffff"})
    nc = non_comparable(_decision("pass"), [diff])
    assert nc.verdict == "non-comparable" and nc.reasons[0].code == "non_comparable"
    for others in (["pass"], ["fail"], ["inconclusive"], ["fail", "pass"]):
        decisions = [(f"candidate:{i}", _decision(v)) for i, v in enumerate(others)]
        verdict, reasons = combine_candidates([*decisions, (f"candidate:{len(others)}", nc)])
        assert verdict == "non-comparable"
        assert reasons[0].code == "non_comparable"
    assert combine_candidates([("candidate:0", _decision("fail")),
                               ("candidate:1", _decision("pass"))])[0] == "fail"


def test_llama_cpp_props_and_meta_give_the_defaults_template_and_shape() -> None:
    props = {"default_generation_settings": {"n_ctx": 1024, "params": {
        **DEFAULTS, "seed": 4294967295, "n_predict": -1, "ignore_eos": False}},
        "chat_template": "{{ messages }}", "build_info": "b1-abc", "model_path": "/m.gguf"}
    facts = facts_from_info("/props", props)
    assert facts is not None and facts.extra["generation_defaults"] == DEFAULTS
    assert facts.extra["chat_template"] == "{{ messages }}"
    old = facts_from_info("/props", {"default_generation_settings": {"n_ctx": 512, **DEFAULTS}})
    assert old is not None and old.extra["generation_defaults"] == DEFAULTS
    meta = {**FAMILY, "n_ctx": 2048, "size": 103668480, "ftype": "Q4_K - Medium"}
    assert _model_family(meta) == FAMILY  # what quantization changes is left out
    assert _model_family(None) is None
