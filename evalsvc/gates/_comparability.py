"""The comparability guard: may these two endpoints be compared as a quantization change?

A paired gate answers "is the candidate worse than the baseline by more than the margin?". The
answer is about quantization only when nothing else differs between the sides: another
tokenizer or chat template changes every prompt, another model family is another model, other
default sampling parameters or another reasoning handling change every answer, a context
shorter than a suite needs refuses its long items on one side only. NVIDIA Model Optimizer's
"verify baseline-vs-quantized comparability" checklist names the same list (chat template,
generation settings, reasoning handling, sample counts); Cloudflare's eval CI marks runs with
unequal trial counts "non-comparable" for the same reason.

Contract: pure functions over the probe's provenance as plain mappings (``Provenance.model_dump``)
and over per-side counts; no I/O, nothing of evalsvc above :mod:`evalsvc.stats`. The runner
calls :func:`provenance_differences` (and builds ``max_context`` differences from the suites'
own needs with :func:`context_difference`) once per candidate, after the probe and before any
item is sent; :func:`refusal_difference` once per suite and candidate after the run;
:func:`blocking` drops what the run or every suite allows; :func:`non_comparable` turns a
candidate's decision into the ``non-comparable`` verdict with one ``non_comparable`` reason per
difference. What is never compared: the quantization itself (dtype, KV-cache dtype, quantization
method, KV capacity, served model name, checkpoint path, engine version): those are the point.
A field either side did not report is not compared (an engine that does not expose its
generation defaults cannot be caught changing them; docs/statistics.md says which engines do).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from evalsvc.gates._combine import CandidateDecision, Reason

__all__ = [
    "DIFFERENCES",
    "Difference",
    "blocking",
    "context_difference",
    "is_refusal",
    "non_comparable",
    "provenance_differences",
    "refusal_difference",
    "suite_allows",
]

#: Each comparable difference: what it is, in words, for messages (the names are the closed set
#: ``evalsvc.domain.ComparabilityField``; a test holds the two equal).
DIFFERENCES: dict[str, str] = {
    "tokenizer": "tokenizer change",
    "chat_template": "template change",
    "model_family": "model change",
    "generation_defaults": "change of default sampling parameters",
    "reasoning": "change of reasoning handling",
    "max_context": "shorter context",
    "sample_counts": "difference in what each side answers",
}


@dataclass(frozen=True)
class Difference:
    """One way the candidate differs from the baseline beyond quantization."""

    field: str
    """One of :data:`DIFFERENCES`."""
    message: str
    """The difference in words, with both sides' values."""
    suite: str | None = None
    """The suite it concerns (``max_context``, ``sample_counts``); None for the endpoint."""

    @property
    def fix(self) -> str:
        return (
            f"compare endpoints that serve the same model the same way, or pass "
            f"--allow-difference {self.field} if the {DIFFERENCES[self.field]} is what you are "
            f"testing (in a suite or a REST run: comparability: {{allow: [{self.field}]}})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "suite": self.suite, "message": self.message, "fix": self.fix}


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _mapping_diff(base: Mapping[str, Any], cand: Mapping[str, Any]) -> list[str]:
    """``key base → cand`` for every key both report with different values."""
    return [
        f"{key} {_short(base[key])} → {_short(cand[key])}"
        for key in sorted(set(base) & set(cand))
        if base[key] != cand[key]
    ]


def provenance_differences(
    baseline: Mapping[str, Any], candidate: Mapping[str, Any], *, reasoning_split: bool = False
) -> list[Difference]:
    """Every difference between the two probes' provenance that is not the quantization:
    tokenizer fingerprint, chat-template fingerprint, model family, generation defaults and
    reasoning handling; a field is compared only when both sides report it.

    ``reasoning_split``: every suite of the run splits the thinking from the answer before
    scoring (``Suite.scores_answers``), so a trace in a separate field and one inline between
    ``<think>`` markers score alike, and only a model that reasons on one side and not on the
    other differs; otherwise (lm-eval reads the content as it comes) how the trace comes
    back differs too."""
    out: list[Difference] = []
    for name, key, what in (
        ("tokenizer", "tokenizer_fingerprint",
         "tokenizes a fixed sentence into other token ids: another tokenizer"),
        ("chat_template", "chat_template_fingerprint",
         "renders a fixed conversation differently: another chat template"),
    ):
        b, c = baseline.get(key), candidate.get(key)
        if b and c and b != c:
            out.append(Difference(name, f"the candidate {what} (fingerprint {c} vs {b})"))
    for name, key, what in (
        ("model_family", "model_family", "is another model"),
        ("generation_defaults", "generation_defaults", "has other default sampling parameters"),
    ):
        b, c = baseline.get(key), candidate.get(key)
        if isinstance(b, Mapping) and isinstance(c, Mapping):
            changed = _mapping_diff(b, c)
            if changed:
                out.append(Difference(name, f"the candidate {what}: {', '.join(changed)}"))
    b, c = baseline.get("reasoning"), candidate.get("reasoning")
    if reasoning_split:
        b, c = (b and "parsed"), (c and "parsed")
    if b != c and (b or c):

        def said(v: Any) -> str:
            return {"parsed": "in a separate reasoning field", "inline": "inside the answer"}.get(
                str(v), "not at all"
            )

        out.append(
            Difference(
                "reasoning",
                f"the candidate returns its reasoning {said(c)}, the baseline {said(b)} "
                "(another reasoning parser or model)",
            )
        )
    return out


def context_difference(
    suite: str, problems: Sequence[str], baseline_context: int | None, candidate_context: int | None
) -> Difference | None:
    """A ``max_context`` difference when a suite that runs on the baseline reports ``problems``
    on the candidate (its own ``preflight``) and the candidate's context is the shorter: its
    long items would be refused on one side only."""
    if not problems or candidate_context is None:
        return None
    if baseline_context is not None and candidate_context >= baseline_context:
        return None
    return Difference(
        "max_context",
        f"suite {suite} needs more context than the candidate's {candidate_context} tokens "
        f"(the baseline serves {baseline_context if baseline_context is not None else 'more'}): "
        + "; ".join(problems),
        suite,
    )


#: 4xx statuses that say "too busy" or "who are you", not "I will not do this with that
#: request": load and credentials, hence infrastructure.
_NOT_REFUSALS = ("HTTP 401", "HTTP 403", "HTTP 407", "HTTP 408", "HTTP 429")


def is_refusal(error: str | None) -> bool:
    """Whether a sample's error is the endpoint refusing the request (an HTTP 4xx answer: a
    prompt past its context, a parameter it does not take), as opposed to a transport failure,
    a timeout, a 5xx, load (408, 429) or credentials (401, 403, 407), which are infrastructure."""
    return bool(error) and str(error).startswith("HTTP 4") and not str(error).startswith(
        _NOT_REFUSALS
    )


def refusal_difference(
    suite: str,
    planned: int,
    refused_baseline: int,
    refused_candidate: int,
    max_error_rate: float,
    examples: Iterable[str] = (),
) -> Difference | None:
    """A ``sample_counts`` difference when one side refused more of the ``planned`` items than
    the other by more than the run's error budget: the paired test would then rest on the items
    one side accepts, which is not the same item set on both (unequal trial counts)."""
    if planned <= 0 or abs(refused_candidate - refused_baseline) / planned <= max_error_rate:
        return None
    side, more, less = (
        ("candidate", refused_candidate, refused_baseline)
        if refused_candidate > refused_baseline
        else ("baseline", refused_baseline, refused_candidate)
    )
    shown = "; ".join(sorted(set(examples))[:2])
    return Difference(
        "sample_counts",
        f"suite {suite}: the {side} refused {more} of {planned} items, the other side {less} "
        f"(budget {max_error_rate:.0%})" + (f": {shown}" if shown else ""),
        suite,
    )


def blocking(
    differences: Iterable[Difference],
    *,
    run_allows: Collection[str] = (),
    suites_allow: Sequence[Collection[str]] = (),
) -> tuple[list[Difference], list[Difference]]:
    """(blocking, allowed): a difference is allowed when the run allows it or every suite of
    the run does (a difference one suite declares the point of leaves the others
    incomparable); a suite's own difference (``max_context``, ``sample_counts``) is allowed by
    that suite too."""
    keep: list[Difference] = []
    allowed: list[Difference] = []
    every = set.intersection(*(set(a) for a in suites_allow)) if suites_allow else set()
    for d in differences:
        (allowed if d.field in run_allows or d.field in every else keep).append(d)
    return keep, allowed


def suite_allows(
    differences: Iterable[Difference], allows: Mapping[str, Collection[str]]
) -> list[Difference]:
    """``differences`` without the suite-specific ones their own suite allows."""
    return [d for d in differences if not (d.suite and d.field in allows.get(d.suite, ()))]


def non_comparable(
    decision: CandidateDecision, differences: Sequence[Difference]
) -> CandidateDecision:
    """``decision`` as ``non-comparable``: one ``non_comparable`` reason per difference (with
    its fix) first, then the gate's own reasons, which no longer decide anything."""
    reasons = tuple(
        Reason("non_comparable", f"{d.message}; fix: {d.fix}", d.suite) for d in differences
    )
    return replace(decision, verdict="non-comparable", reasons=(*reasons, *decision.reasons))
