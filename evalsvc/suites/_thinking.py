"""Thinking traces: the reasoning a model emits, split from the answer its kind scores.

Contract: pure (no I/O, no client). Given what an endpoint returned for one generation — the
``content`` text, the engine's separate reasoning field if any (``reasoning_content`` /
``reasoning``, parsed by the client into ``Completion.reasoning``), the finish reason and the
usage counts — :func:`trace` returns the answer to score and a JSON-able record of the trace
for the sample's ``data["thinking"]``. :func:`paired_summary` turns the records of two
endpoints, paired by item, into the report's ``details["thinking"]``. Every function runs in
time linear in its input, with bounded work for the loop check, whatever the text holds
(unclosed, nested or lone markers, megabytes of one character).

How the trace is found, in order:

1. the engine's reasoning field (vLLM and SGLang with a reasoning parser put the thinking
   there and only the answer in ``content``);
2. the suite's markers in ``content`` (default ``<think>`` … ``</think>``, DeepSeek-R1 and
   Qwen3's): text before the first opening marker and after the *last* closing marker is the
   answer, everything between is thinking (so nested or repeated blocks are all thinking). A
   closing marker with no opening one before it is the R1 chat template's shape (the prompt
   ends in ``<think>``): everything before it is thinking. An opening marker never closed means
   the model was still thinking when it stopped: the answer is what came before it;
3. otherwise the whole content is the answer.

Leaked channel markup in the answer — gpt-oss harmony tokens (``<|channel|>``,
``<|message|>``, ``<|start|>``, ``<|end|>``, ``<|return|>``, ``<|call|>``), ChatML's
``<|im_start|>``/``<|im_end|>``, DeepSeek's full-width ``<｜…｜>`` tokens — is counted as a
defect (``leaked``), never stripped: a client of that endpoint would see it too, and the
answer is scored as served.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Special-token shapes that must never reach ``content``: ``<|name|>`` (harmony, ChatML,
#: Llama 3's ``<|eot_id|>``) and DeepSeek's full-width ``<｜name｜>``. Names are bounded, so the
#: scan is linear.
_LEAK = re.compile(r"<\|[A-Za-z][A-Za-z0-9_]{0,31}\|>|<｜[^｜<>\n]{1,40}｜>")

LOOP_N = 4
"""n of the n-gram repetition check: seq-rep-4 (Welleck et al. 2020, "Neural Text Generation
with Unlikelihood Training", ICLR, arXiv:1908.04319, §5: seq-rep-n = 1 − |unique n-grams| /
|n-grams| of a continuation)."""
LOOP_WINDOW = 400
"""Whitespace-separated words at the end of the output the check reads (words, not the
engine's tokens: the sample keeps no token ids): a looping model loops until the budget ends,
so the tail shows it, and the work per sample is bounded."""
LOOP_MIN_TOKENS = 64
"""Fewer tail tokens than this are never called a loop (a short answer repeats by chance)."""
LOOP_THRESHOLD = 0.5
"""seq-rep-4 at or above this marks a loop. Welleck et al. (Table 2) measure 0.006 on human
text and 0.442 on greedy continuations of a degenerate MLE model; a tail where half of all
4-grams are repeats is a paragraph said again and again, not careful reasoning."""
_CHARS_PER_WORD_CAP = 24
"""Characters read from the end of the output per tail word: bounds the work on any input."""

#: ``data["thinking"]["tokens_source"]`` values.
SOURCE_USAGE = "usage"  # the engine's usage (reasoning_tokens, or no thinking at all)
SOURCE_TOKENIZE = "tokenize"  # the endpoint's /tokenize route on the thinking text
SOURCE_ESTIMATE = "estimate"  # completion_tokens split by the thinking share of characters


class ThinkingPolicy(BaseModel):
    """A suite's ``thinking:`` block: how thinking is found, counted and optionally gated."""

    model_config = ConfigDict(extra="forbid")

    markers: tuple[str, str] | None = ("<think>", "</think>")
    """Opening and closing markers of a thinking block in ``content``; ``null``: none (only the
    engine's reasoning field is thinking)."""
    count: str = Field(default="estimate", pattern="^(estimate|tokenize)$")
    """How thinking tokens are counted when the usage does not say (vLLM reports only the total
    ``completion_tokens``): ``estimate`` splits the total by the thinking share of characters;
    ``tokenize`` asks the endpoint's ``/tokenize`` for the thinking text (one request more per
    sample)."""
    keep_chars: int = Field(default=8000, ge=0, le=1_000_000)
    """Characters of each sample's thinking text kept in its ``data["thinking"]["text"]`` for
    the samples page and the export: the first three quarters and the last quarter of a longer
    trace, with the cut marked (a looping model shows its loop at the end). 0 keeps none. The
    figures (tokens, loop, truncation) always read the whole trace."""
    max_length_ratio: float | None = Field(default=None, gt=1)
    """Fail when the candidate's mean thinking tokens ÷ the baseline's (paired by item) is
    significantly above this (Fieller's dual t test at the suite's α)."""
    max_truncation_increase: float | None = Field(default=None, ge=0, lt=1)
    """Fail when the candidate's rate of answers cut at the token budget exceeds the baseline's
    by significantly more than this (the paired binary gate at the suite's α)."""

    @field_validator("markers")
    @classmethod
    def _markers(cls, v: tuple[str, str] | None) -> tuple[str, str] | None:
        if v is not None and (not v[0] or not v[1] or v[0] == v[1]):
            raise ValueError(
                "thinking.markers: give two different non-empty strings, e.g. "
                '["<think>", "</think>"], or null for none'
            )
        return v


def split(content: str, markers: tuple[str, str] | None) -> tuple[str, str, bool]:
    """``(answer, thinking, unclosed)`` of ``content`` by ``markers`` (module docstring, step 2).

    Linear time: one ``find`` and one ``rfind``, then removal of the inner markers."""
    if not markers or not content:
        return content, "", False
    open_m, close_m = markers
    start = content.find(open_m)
    end = content.rfind(close_m)
    if end >= 0 and (start < 0 or start > end):
        # A closing marker with none before it: the prompt opened the block (R1's template).
        # What follows the last closing marker holds no closing marker, so at most an
        # unclosed block is left in it (one more step, no recursion).
        rest, more, unclosed = split(content[end + len(close_m) :], markers)
        thinking = _strip(content[:end], markers)
        return rest, "\n".join(p for p in (thinking, more) if p), unclosed
    if start < 0:
        return content, "", False
    if end < 0:  # opened, never closed: still thinking when it stopped
        return content[:start], _strip(content[start + len(open_m) :], markers), True
    answer = content[:start] + content[end + len(close_m) :]
    return answer, _strip(content[start + len(open_m) : end], markers), False


def _strip(text: str, markers: tuple[str, str]) -> str:
    return text.replace(markers[0], "").replace(markers[1], "")


def leaked_markers(answer: str, limit: int = 10) -> list[str]:
    """Distinct special-token markup in ``answer`` (at most ``limit``, in order of appearance)."""
    seen: list[str] = []
    for m in _LEAK.finditer(answer):
        tok = m.group(0)
        if tok not in seen:
            seen.append(tok)
            if len(seen) >= limit:
                break
    return seen


def repetition(text: str, *, n: int = LOOP_N, window: int = LOOP_WINDOW) -> float | None:
    """seq-rep-n of the last ``window`` words of ``text`` (None: fewer than
    ``LOOP_MIN_TOKENS``). Reads at most ``window × 24`` characters from the end."""
    tail = text[-window * _CHARS_PER_WORD_CAP :]
    words = tail.split()[-window:]
    if len(words) < max(LOOP_MIN_TOKENS, n + 1):
        return None
    total = len(words) - n + 1
    return 1.0 - len(set(zip(*(words[i:] for i in range(n)), strict=False))) / total


def is_loop(text: str) -> bool:
    """Whether the output's tail repeats itself (seq-rep-4 ≥ ``LOOP_THRESHOLD``)."""
    rep = repetition(text)
    return rep is not None and rep >= LOOP_THRESHOLD


def trace(
    content: str,
    reasoning: str | None,
    *,
    policy: ThinkingPolicy,
    finish_reason: str | None,
    completion_tokens: int | None,
    reasoning_tokens: int | None = None,
    tokenized_thinking: int | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """The answer to score, the thinking text and the sample's ``data["thinking"]`` record.

    ``reasoning_tokens``: the usage's ``completion_tokens_details.reasoning_tokens`` when the
    engine gives it; ``tokenized_thinking``: the thinking text's length from ``/tokenize``
    (``policy.count == "tokenize"``). Otherwise the thinking tokens are estimated from the
    characters (``tokens_source`` says which).
    """
    answer, marked, unclosed = split(content or "", policy.markers)
    parts = [p for p in (reasoning or "", marked) if p]
    thinking = "\n".join(parts)
    source: str | None
    if not thinking:
        think_tokens: int | None = 0
        source = SOURCE_USAGE
    elif reasoning_tokens is not None:
        think_tokens, source = int(reasoning_tokens), SOURCE_USAGE
    elif tokenized_thinking is not None:
        think_tokens, source = int(tokenized_thinking), SOURCE_TOKENIZE
    elif completion_tokens is not None:
        total = len(thinking) + len(answer)
        think_tokens = round(completion_tokens * len(thinking) / total) if total else 0
        source = SOURCE_ESTIMATE
    else:
        think_tokens, source = None, None
    answer_tokens = (
        max(0, completion_tokens - think_tokens)
        if completion_tokens is not None and think_tokens is not None
        else None
    )
    rep = repetition(thinking + "\n" + answer if thinking else answer)
    record: dict[str, Any] = {
        "tokens": think_tokens,
        "answer_tokens": answer_tokens,
        "tokens_source": source,
        "chars": len(thinking),
        "finish_reason": finish_reason,
        "budget_exhausted": finish_reason == "length",
        "unclosed": unclosed,
        "loop": rep is not None and rep >= LOOP_THRESHOLD,
        "repetition": None if rep is None else round(rep, 4),
        "leaked": leaked_markers(answer),
        "from_field": bool(reasoning),
    }
    if thinking and policy.keep_chars:
        record["text"] = excerpt(thinking, policy.keep_chars)
    return answer, thinking, record


def excerpt(text: str, limit: int) -> str:
    """``text`` in at most about ``limit`` characters: whole when it fits, else its first three
    quarters and last quarter of ``limit`` around a line saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit * 3 // 4
    tail = limit - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[… {cut} characters not kept …]\n{text[len(text) - tail:]}"


# ------------------------------------------------------------------------------ paired summary


def paired_summary(
    pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]],
    *,
    alpha: float = 0.05,
    max_length_ratio: float | None = None,
    max_truncation_increase: float | None = None,
    items: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The report's ``details["thinking"]`` from (baseline record, candidate record) per item.

    ``items`` (aligned with ``pairs``) names each pair's item: where an item has several pairs
    (a sampled suite's k samples), the length ratio and its bound are computed on per-item
    means, the paired unit of a sampled suite (``length.unit``); rates stay per sample.

    - ``length``: mean thinking tokens on each side and the inflation ratio candidate ÷
      baseline of the paired means, with Fieller's two-sided ``1 − 2α`` interval (so each end is
      the one-sided α bound a gate reads; ``evalsvc.stats.fieller_ratio_ci``), over the items
      where both sides have a count; withheld (``ratio: None`` with the reason) when the
      baseline does not think;
    - ``truncation`` and ``loops``: each side's rate and the paired Δ (candidate − baseline)
      with Tango's interval (``evalsvc.stats.tango_ci``, at ``2α``);
    - ``leaks``: samples whose answer carries special-token markup, per side, with examples;
    - ``bounds``: the suite's optional bounds, each tested one-sided (``fail`` when the data
      show the candidate beyond it): ``max_length_ratio`` by Fieller's dual t test
      (``evalsvc.stats.ratio_test``, H0 ratio ≤ bound), ``max_truncation_increase`` by Tango's
      corrected score test (``evalsvc.stats.tango_test``, H0 Δ ≤ bound). With ``k`` bounds set
      each p-value is multiplied by ``k + 1`` (Bonferroni over the bounds and the suite's own
      gate, valid under any dependence) before it is compared with ``alpha``. A bound only ever
      adds a fail call, like a slice; ``ok`` means not shown to be beyond it.
    """
    from evalsvc.stats import fieller_ratio_ci, ratio_test, tango_ci, tango_test

    n = len(pairs)
    out: dict[str, Any] = {"n": n, "alpha": alpha}
    keys = list(items) if items is not None else [str(i) for i in range(n)]
    keyed = [
        (key, float(b["tokens"]), float(c["tokens"]))
        for key, (b, c) in zip(keys, pairs, strict=True)
        if isinstance(b.get("tokens"), int | float) and isinstance(c.get("tokens"), int | float)
    ]
    grouped: dict[str, list[tuple[float, float]]] = {}
    for key, b_tok, c_tok in keyed:
        grouped.setdefault(key, []).append((b_tok, c_tok))
    counted = [
        (sum(b for b, _ in g) / len(g), sum(c for _, c in g) / len(g)) for g in grouped.values()
    ]
    sources = sorted(
        {str(r.get("tokens_source")) for b, c in pairs for r in (b, c) if r.get("tokens_source")}
    )
    length: dict[str, Any] = {
        "n": len(counted),
        "unit": "item (the mean over its samples)" if len(counted) < len(keyed) else "item",
        "tokens_source": sources,
    }
    if counted:
        bt = [b for b, _ in counted]
        ct = [c for _, c in counted]
        length["baseline_mean"] = sum(bt) / len(bt)
        length["candidate_mean"] = sum(ct) / len(ct)
        length["baseline_thinking_items"] = sum(1 for x in bt if x > 0)
        length["candidate_thinking_items"] = sum(1 for x in ct if x > 0)
        if len(counted) >= 2 and length["baseline_mean"] > 0:
            res = fieller_ratio_ci(bt, ct, alpha=2 * alpha)
            length["ratio"] = res.estimate
            length["ci"] = [float(x) if math.isfinite(x) else None for x in res.ci]
            length["method"] = res.method
        else:
            length["ratio"] = None
            length["note"] = (
                "the baseline does not think on these items"
                if length["baseline_mean"] <= 0
                else "fewer than 2 counted pairs"
            )
    out["length"] = length
    # Tokens per answer (thinking + answer): what an answer costs in generated tokens, the
    # divisor of answers per second (per_answer_speed).
    per_answer = [
        (float(b["tokens"]) + float(b["answer_tokens"]), float(c["tokens"]) + float(c["answer_tokens"]))
        for b, c in pairs
        if all(isinstance(r.get(k), int | float) for r in (b, c) for k in ("tokens", "answer_tokens"))
    ]
    if per_answer:
        pb = sum(x for x, _ in per_answer) / len(per_answer)
        pc = sum(y for _, y in per_answer) / len(per_answer)
        out["tokens_per_answer"] = {
            "n": len(per_answer), "baseline": pb, "candidate": pc,
            "ratio": pc / pb if pb > 0 else None,
        }
    for key, field in (("truncation", "budget_exhausted"), ("loops", "loop")):
        bflags = [bool(b.get(field)) for b, _ in pairs]
        cflags = [bool(c.get(field)) for _, c in pairs]
        out[key] = _rates(bflags, cflags, alpha, tango_ci)
    bounds: list[dict[str, Any]] = []
    family = 1 + (max_length_ratio is not None) + (max_truncation_increase is not None)
    if max_length_ratio is not None:
        row: dict[str, Any] = {"bound": "max_length_ratio", "value": max_length_ratio}
        if length.get("ratio") is not None:
            test = ratio_test([b for b, _ in counted], [c for _, c in counted], max_length_ratio)
            row["p"] = test.p_greater
            row["p_adjusted"] = min(1.0, test.p_greater * family)
            row["verdict"] = "fail" if row["p_adjusted"] < alpha else "ok"
            row["finding"] = (
                f"thinking length ×{length['ratio']:.2f} of the baseline's "
                f"(CI {_ci_text(length.get('ci'))}) is above the bound ×{max_length_ratio:g} "
                f"(adjusted p = {row['p_adjusted']:.2g}, α {alpha:g})"
            )
        else:
            row["verdict"] = "not tested"
            row["note"] = length.get("note", "no thinking counted")
        bounds.append(row)
    if max_truncation_increase is not None:
        tr = out["truncation"]
        row = {"bound": "max_truncation_increase", "value": max_truncation_increase}
        if n:
            gained = sum(1 for b, c in pairs if c.get("budget_exhausted") and not b.get("budget_exhausted"))
            lost = sum(1 for b, c in pairs if b.get("budget_exhausted") and not c.get("budget_exhausted"))
            test2 = tango_test(gained, lost, n, max_truncation_increase, corrected=True)
            row["p"] = test2.p_greater
            row["p_adjusted"] = min(1.0, test2.p_greater * family)
            row["verdict"] = "fail" if row["p_adjusted"] < alpha else "ok"
            row["finding"] = (
                f"answers cut at the token budget {tr['baseline']:.0%} → {tr['candidate']:.0%} "
                f"(Δ {tr['delta']:+.2f}, CI {_ci_text(tr.get('ci'))}), more than the bound "
                f"+{max_truncation_increase:g} (adjusted p = {row['p_adjusted']:.2g}, α {alpha:g})"
            )
        else:
            row["verdict"] = "not tested"
        bounds.append(row)
    for row in bounds:
        if row.get("verdict") != "fail":  # the finding text states an excess: only when shown
            row.pop("finding", None)
    if bounds:
        out["bounds"] = bounds
    out["leaks"] = {
        "baseline": sum(1 for b, _ in pairs if b.get("leaked")),
        "candidate": sum(1 for _, c in pairs if c.get("leaked")),
        "examples": _leak_examples(pairs),
    }
    return out


def per_answer_speed(
    thinking: dict[str, Any], throughput: dict[str, Any]
) -> dict[str, Any] | None:
    """Answers per second beside tokens per second: a throughput (``{"baseline", "candidate"}``
    output tokens/s, as a speed suite of the same run measured it, with ``suite`` and ``what``)
    divided by each side's mean tokens per answer (thinking + answer) from ``thinking``
    (``paired_summary``). A candidate 1.3× faster per token that spends 1.5× the tokens per
    answer gives 1.3 / 1.5 ≈ 0.87× the answers per second. ``None`` when either is missing."""
    tpa = thinking.get("tokens_per_answer") or {}
    values = (throughput.get("baseline"), throughput.get("candidate"),
              tpa.get("baseline"), tpa.get("candidate"))
    if not all(isinstance(x, int | float) and x > 0 for x in values):
        return None
    tb, tc, ab, ac = (float(x) for x in values)  # type: ignore[arg-type]  # checked above
    out: dict[str, Any] = {
        "speed_suite": throughput.get("suite"),
        "what": throughput.get("what"),
        "tokens_per_s": {"baseline": tb, "candidate": tc, "ratio": tc / tb},
        "tokens_per_answer": {"baseline": ab, "candidate": ac, "ratio": ac / ab},
        "baseline": tb / ab,
        "candidate": tc / ac,
    }
    out["ratio"] = (tc / ac) / (tb / ab)
    return out


def _rates(b: list[bool], c: list[bool], alpha: float, tango_ci: Any) -> dict[str, Any]:
    n = len(b)
    row: dict[str, Any] = {
        "baseline": sum(b) / n if n else None,
        "candidate": sum(c) / n if n else None,
        "baseline_count": sum(b),
        "candidate_count": sum(c),
    }
    if n:
        gained = sum(1 for x, y in zip(b, c, strict=True) if y and not x)
        lost = sum(1 for x, y in zip(b, c, strict=True) if x and not y)
        row["delta"] = (gained - lost) / n
        row["ci"] = [float(x) for x in tango_ci(gained, lost, n, alpha=2 * alpha)]
    return row


def _ci_text(ci: Any) -> str:
    if not isinstance(ci, list | tuple) or len(ci) != 2:
        return "—"
    return "[" + ", ".join("—" if x is None else f"{x:.2f}" for x in ci) + "]"


def _leak_examples(pairs: Sequence[tuple[dict[str, Any], dict[str, Any]]]) -> list[str]:
    seen: list[str] = []
    for _, c in pairs:
        for tok in c.get("leaked") or []:
            if tok not in seen:
                seen.append(str(tok))
    return seen[:10]
