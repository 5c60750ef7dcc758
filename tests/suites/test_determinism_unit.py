"""Pure parts of the determinism kind: divergence metrics on synthetic traces, the schedule."""

from __future__ import annotations

import asyncio

import pytest

from evalsvc.domain import Provenance, Sample
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds.determinism import (
    DeterminismSuite,
    Trace,
    background_schedule,
    compare,
    summarize,
)


def trace(
    tokens: str, lps: list[float] | None = None, margins: list[float | None] | None = None
) -> Trace:
    toks = tokens.split()
    return Trace(
        " ".join(toks), toks, list(lps or [-0.1] * len(toks)), list(margins or [1.0] * len(toks))
    )


def test_identical_trace() -> None:
    d = compare(trace("a b c"), trace("a b c"), tie_epsilon=0.1)
    assert d.identical and d.first is None and d.flip is None and d.max_lp_delta == 0.0


def test_first_divergence_and_logprob_delta_on_common_prefix() -> None:
    ref = trace("a b c d", [-0.1, -0.2, -0.3, -0.4], [2.0, 1.5, 0.05, 1.0])
    out = trace("a b x d", [-0.1, -0.5, -0.9, -0.4])
    d = compare(ref, out, tie_epsilon=0.1)
    assert not d.identical
    assert d.first == 2
    assert d.max_lp_delta == pytest.approx(0.3)  # only positions 0 and 1 share their context
    assert d.flip == "tie" and d.margin == 0.05


def test_confident_flip() -> None:
    d = compare(trace("a b", margins=[3.0, 2.0]), trace("z b"), tie_epsilon=0.1)
    assert d.first == 0 and d.flip == "confident"


def test_length_difference_is_a_divergence_at_the_shorter_end() -> None:
    d = compare(trace("a b c"), trace("a b"), tie_epsilon=0.1)
    assert not d.identical and d.first == 2


def test_background_schedule_is_seeded() -> None:
    corpus = "x" * 10_000
    a = background_schedule(1, "mixed:0", 5, corpus, (10, 50), (4, 8), 2.0)
    b = background_schedule(1, "mixed:0", 5, corpus, (10, 50), (4, 8), 2.0)
    c = background_schedule(1, "mixed:1", 5, corpus, (10, 50), (4, 8), 2.0)
    assert a == b and a != c
    assert all(
        0 <= bg.start_s <= 2.0 and 10 <= len(bg.prompt) <= 50 and 4 <= bg.max_tokens <= 8
        for bg in a
    )


def test_plan_and_expected_samples() -> None:
    suite = DeterminismSuite(
        SuiteSpec(
            name="d",
            kind="determinism",
            seed=3,
            params={"n": 4, "repeats": 3, "concurrency_levels": [2, 4]},
        )
    )
    items = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    again = asyncio.run(suite.plan(None, Provenance()))  # type: ignore[arg-type]
    assert [i.model_dump() for i in items] == [i.model_dump() for i in again]
    # refs: ref + prefix_ref; conditions: prefix_warm, mixed, c2, c4, each 3 times
    assert suite.expected_samples(items) == 4 * (2 + 3 * 4)


def _s(
    probe: str, cond: str, repeat: int, score: float | None, output: str, **data: object
) -> Sample:
    return Sample(
        suite="d",
        item_id=f"{probe}/{cond}",
        endpoint="e",
        repeat=repeat,
        score=score,
        output=output,
        data={"probe": probe, "condition": cond, **data},
    )


def test_summarize_and_analyze_pair_by_prompt_condition_repeat() -> None:
    base = [
        _s("p0", "ref", 0, 1.0, "A"),
        _s("p1", "ref", 0, 1.0, "B"),
        _s("p0", "mixed", 0, 1.0, "A"),
        _s("p0", "mixed", 1, 0.0, "A2", first_divergence=3, max_lp_delta=0.2, flip="tie"),
        _s("p1", "mixed", 0, 1.0, "B"),
        _s("p1", "mixed", 1, 1.0, "B"),
    ]
    cand = [
        _s("p0", "ref", 0, 1.0, "A"),
        _s("p1", "ref", 0, 1.0, "B"),
        _s("p0", "mixed", 0, 0.0, "A3", first_divergence=1, max_lp_delta=0.4, flip="confident"),
        _s("p0", "mixed", 1, 0.0, "A3", first_divergence=1, max_lp_delta=0.5, flip="confident"),
        _s("p1", "mixed", 0, 1.0, "B"),
        _s("p1", "mixed", 1, None, ""),
    ]
    cand[-1].error = "boom"
    summary = summarize(base)
    mixed = summary["conditions"]["mixed"]
    assert mixed["identical_rate"] == 0.75
    assert mixed["tie_flips"] == 1 and mixed["confident_flips"] == 0
    assert mixed["first_divergence_median"] == 3
    assert summary["overall"]["distinct_outputs_per_prompt"] == 1.5  # p0: A, A2; p1: B

    suite = DeterminismSuite(SuiteSpec(name="d", kind="determinism", params={"n": 2}))
    analysis = suite.analyze(base, cand)
    # Gated: differs from the prompt's modal output on that endpoint (reference included).
    # Baseline p0: A, A, A2 -> mode A; candidate p0: A, A3, A3 -> mode A3.
    assert analysis.baseline == [0.0, 1.0, 0.0]
    assert analysis.candidate == [0.0, 0.0, 0.0]
    # Per-condition figures are reported, not gated (an absolute per-condition test saturates
    # on a noisy baseline); the gate is the kind's retention test.
    assert analysis.slices is None
    assert analysis.gate_test is not None
    assert analysis.n_errors == 1
    assert analysis.clusters == ["p0", "p0", "p1"]
    assert analysis.details["candidate"]["conditions"]["mixed"]["confident_flips"] == 2
    assert analysis.details["baseline"]["overall"]["identical_rate"] == 0.75
