"""The thinking splitter, the leak scan and the loop check (``evalsvc.suites._thinking``) on
ordinary and hostile inputs, and the paired summary against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from evalsvc.suites._thinking import (
    LOOP_THRESHOLD,
    ThinkingPolicy,
    is_loop,
    leaked_markers,
    paired_summary,
    repetition,
    split,
    trace,
)

M = ("<think>", "</think>")


@pytest.mark.parametrize(
    ("content", "answer", "thinking", "unclosed"),
    [
        ("<think>a b</think>The answer is 4.", "The answer is 4.", "a b", False),
        ("no markers at all", "no markers at all", "", False),
        # R1's template opens the block in the prompt: only the closing marker is generated.
        ("reasoning here</think>42", "42", "reasoning here", False),
        # Still thinking when the budget ran out: no answer.
        ("<think>step one, step two", "", "step one, step two", True),
        ("Sure. <think>x", "Sure. ", "x", True),
        # Nested and repeated blocks: all of it is thinking, markers removed.
        ("<think>a<think>b</think>c</think>ans", "ans", "abc", False),
        ("<think>a</think>mid<think>b</think>end", "end", "amidb", False),
        # A marker alone.
        ("<think>", "", "", True),
        ("</think>", "", "", False),
        ("<think></think>", "", "", False),
        # Close before open: the closed part is thinking, the reopened one unclosed.
        ("a</think>b<think>c", "b", "a\nc", True),
        ("", "", "", False),
    ],
)
def test_split(content: str, answer: str, thinking: str, unclosed: bool) -> None:
    assert split(content, M) == (answer, thinking, unclosed)


def test_split_custom_markers_and_none() -> None:
    assert split("[[r]]why[[/r]]yes", ("[[r]]", "[[/r]]")) == ("yes", "why", False)
    assert split("<think>x</think>y", None) == ("<think>x</think>y", "", False)


def test_policy_refuses_bad_markers() -> None:
    with pytest.raises(ValueError, match="two different non-empty"):
        ThinkingPolicy(markers=("<t>", "<t>"))
    with pytest.raises(ValueError, match="two different non-empty"):
        ThinkingPolicy(markers=("", "</t>"))


def test_leaks_found_in_answers() -> None:
    harmony = "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>4"
    assert leaked_markers(harmony) == ["<|channel|>", "<|message|>", "<|end|>", "<|start|>"]
    assert leaked_markers("<|im_start|>assistant\nhi<|im_end|>") == ["<|im_start|>", "<|im_end|>"]
    assert leaked_markers("done<｜end▁of▁sentence｜>") == ["<｜end▁of▁sentence｜>"]
    # Ordinary text with bars and angle brackets is not markup.
    assert leaked_markers("if a <| b and x |> y, or <|  |> or <|1abc|>") == []


def test_loop_check() -> None:
    rng = np.random.default_rng(0)
    varied = " ".join(f"w{int(x)}" for x in rng.integers(0, 10_000, 500))
    assert repetition(varied) is not None and repetition(varied) < 0.05
    assert not is_loop(varied)
    looping = varied[:2000] + " " + "Wait, let me check the sum again. " * 80
    assert is_loop(looping)
    assert repetition(looping) >= LOOP_THRESHOLD
    assert repetition("yes yes yes") is None  # too short to call
    assert not is_loop("")


@pytest.mark.parametrize(
    "content",
    [
        "<think>" * 200_000,
        "</think>" * 200_000,
        "<think>" + "a" * 4_000_000,
        "x" * 4_000_000 + "</think>" + "y" * 4_000_000,
        "<|" * 500_000 + "|>",
        ("<think>a</think>" * 100_000),
    ],
)
def test_hostile_inputs_finish(content: str) -> None:
    # Linear scans and a bounded tail: each of these is a few MB and must simply finish
    # (no timing is asserted; a quadratic scan would not finish within the test timeout).
    answer, thinking, record = trace(
        content, None, policy=ThinkingPolicy(), finish_reason="length", completion_tokens=1000
    )
    assert record["budget_exhausted"] is True
    assert len(answer) + len(thinking) <= len(content)


def test_trace_counts() -> None:
    p = ThinkingPolicy()
    answer, thinking, rec = trace(
        "<think>abcdef</think>xy", None, policy=p, finish_reason="stop", completion_tokens=8
    )
    assert (answer, thinking) == ("xy", "abcdef")
    assert rec["tokens"] == 6 and rec["answer_tokens"] == 2 and rec["tokens_source"] == "estimate"
    _, _, rec = trace("xy", "abcdef", policy=p, finish_reason="stop", completion_tokens=8,
                      reasoning_tokens=5)
    assert rec["tokens"] == 5 and rec["tokens_source"] == "usage" and rec["from_field"]
    _, _, rec = trace("plain", None, policy=p, finish_reason="stop", completion_tokens=3)
    assert rec["tokens"] == 0 and rec["answer_tokens"] == 3 and rec["tokens_source"] == "usage"
    _, _, rec = trace("<think>ab", None, policy=p, finish_reason="length", completion_tokens=None)
    assert rec["tokens"] is None and rec["unclosed"] and rec["budget_exhausted"]


def _rec(tokens: float, cut: bool = False, loop: bool = False) -> dict[str, object]:
    return {"tokens": tokens, "budget_exhausted": cut, "loop": loop, "leaked": []}


def test_paired_summary_matches_scipy_and_gates() -> None:
    rng = np.random.default_rng(3)
    b = rng.integers(200, 400, 60).astype(float)
    c = 2.0 * b + rng.normal(0, 30, 60)
    cut_b = [False] * 60
    cut_c = [i % 10 < 3 for i in range(60)]
    pairs = [(_rec(x, cb), _rec(y, cc)) for x, y, cb, cc in zip(b, c, cut_b, cut_c, strict=True)]
    out = paired_summary(pairs, alpha=0.05, max_length_ratio=1.5, max_truncation_increase=0.05)
    length = out["length"]
    assert length["ratio"] == pytest.approx(c.mean() / b.mean())
    assert length["ci"][0] < length["ratio"] < length["ci"][1]
    # Fieller's dual test: the contrasts c − 1.5 b against 0, one-sided (scipy).
    p = scipy.stats.ttest_1samp(c - 1.5 * b, 0.0, alternative="greater").pvalue
    # Two bounds and the suite's own gate: Bonferroni over three.
    bound = {r["bound"]: r for r in out["bounds"]}
    assert bound["max_length_ratio"]["p"] == pytest.approx(p)
    assert bound["max_length_ratio"]["p_adjusted"] == pytest.approx(min(1.0, 3 * p))
    assert bound["max_length_ratio"]["verdict"] == "fail"
    assert out["truncation"]["candidate"] == pytest.approx(0.3)
    assert out["truncation"]["delta"] == pytest.approx(0.3)
    assert bound["max_truncation_increase"]["verdict"] == "fail"
    # The same data against itself: nothing is beyond a bound.
    same = paired_summary([(x, x) for x, _ in pairs], max_length_ratio=1.5,
                          max_truncation_increase=0.05)
    assert same["length"]["ratio"] == pytest.approx(1.0)
    assert {r["verdict"] for r in same["bounds"]} == {"ok"}


def test_paired_summary_without_thinking() -> None:
    out = paired_summary([(_rec(0), _rec(0))] * 5, max_length_ratio=1.2)
    assert out["length"]["ratio"] is None
    assert out["bounds"][0]["verdict"] == "not tested"


def test_columns_give_the_same_summary_as_samples() -> None:
    from evalsvc.domain import Sample
    from evalsvc.suites import SuiteSpec, suite_kinds

    suite = suite_kinds()["reasoning"](SuiteSpec(name="r", kind="reasoning",
                                                 thinking={"max_truncation_increase": 0.05}))
    rng = np.random.default_rng(1)
    samples = []
    for i in range(40):
        for role, scale in (("baseline", 1.0), ("candidate:0", 1.8)):
            tokens = int(rng.integers(50, 300) * scale)
            cut = role != "baseline" and i % 4 == 0
            rec = {"tokens": tokens, "answer_tokens": 5, "tokens_source": "estimate",
                   "budget_exhausted": cut, "loop": i % 9 == 0, "leaked": ["<|end|>"] if i == 3 else []}
            error = "HTTP 500" if (role == "baseline" and i == 7) else None
            samples.append(Sample(suite="r", item_id=f"i{i}", endpoint=role, output="x",
                                  score=None if error else 1.0, error=error,
                                  data={} if error else {"thinking": rec}))
    base = [s for s in samples if s.endpoint == "baseline"]
    cand = [s for s in samples if s.endpoint != "baseline"]
    cols = suite.sample_columns(["baseline", "candidate:0"])
    for s in samples:
        cols.add(s)
    from_samples = suite.thinking_summary(base, cand)
    from_columns = suite.thinking_summary([], [], columns=cols, role="candidate:0")
    assert from_samples == from_columns
    assert from_samples is not None and from_samples["n"] == 39
    assert from_samples["leaks"]["candidate"] == 1


def test_sampled_items_pair_by_their_means() -> None:
    # k = 4 samples of 30 items: the ratio and its interval rest on 30 per-item means.
    rng = np.random.default_rng(2)
    items, pairs, b_means, c_means = [], [], [], []
    for i in range(30):
        level = float(rng.integers(100, 400))
        bs = level + rng.normal(0, 40, 4)
        cs = 1.5 * level + rng.normal(0, 40, 4)
        b_means.append(bs.mean())
        c_means.append(cs.mean())
        for b, c in zip(bs, cs, strict=True):
            items.append(f"i{i}")
            pairs.append((_rec(float(b)), _rec(float(c))))
    out = paired_summary(pairs, items=items)
    assert out["n"] == 120 and out["length"]["n"] == 30
    assert out["length"]["unit"] == "item (the mean over its samples)"
    from evalsvc.stats import fieller_ratio_ci

    ref = fieller_ratio_ci(b_means, c_means, alpha=0.1)
    assert out["length"]["ci"] == pytest.approx(list(ref.ci))
