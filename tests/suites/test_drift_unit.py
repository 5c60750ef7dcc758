"""Pure parts of the drift kind: the KLD approximation on hand-made distributions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import entropy

from evalsvc.domain import Sample
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds.drift import (
    DriftSuite,
    Position,
    compare_positions,
    decode_positions,
    encode_positions,
    percentiles,
    position_kld,
    top1,
)


def lp(probs: dict[str, float]) -> dict[str, float]:
    return {k: math.log(v) for k, v in probs.items()}


def test_identical_distributions_have_zero_kld() -> None:
    p = lp({"a": 0.5, "b": 0.3, "c": 0.1})
    kld, other = position_kld(p, p)
    assert kld == 0.0
    assert other == pytest.approx(0.1)


def test_full_support_equals_exact_kl() -> None:
    # When both top-k lists cover the whole vocabulary the approximation is the exact KL.
    p = {"a": 0.6, "b": 0.3, "c": 0.1}
    q = {"a": 0.5, "b": 0.2, "c": 0.3}
    kld, other = position_kld(lp(p), lp(q))
    assert other == pytest.approx(0.0, abs=1e-12)
    assert kld == pytest.approx(entropy(list(p.values()), list(q.values())))


def test_tail_is_lumped_into_one_bucket() -> None:
    # Vocabulary a, b, c, d. Baseline lists a, b; candidate lists a, c. Only "a" is shared, so the
    # partition is {a}, {other}: p = (0.5, 0.5), q = (0.4, 0.6).
    p = {"a": 0.5, "b": 0.3}
    q = {"a": 0.4, "c": 0.35}
    kld, other = position_kld(lp(p), lp(q))
    assert other == pytest.approx(0.5)
    assert kld == pytest.approx(entropy([0.5, 0.5], [0.4, 0.6]))


def test_lumped_kld_is_a_lower_bound_of_the_true_kld() -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        vocab = [str(i) for i in range(30)]
        p = rng.dirichlet(np.full(30, 0.3))
        q = rng.dirichlet(np.full(30, 0.3))
        k = 5
        top_p = {vocab[i]: math.log(p[i]) for i in np.argsort(-p)[:k]}
        top_q = {vocab[i]: math.log(q[i]) for i in np.argsort(-q)[:k]}
        approx, _ = position_kld(top_p, top_q)
        assert approx <= entropy(p, q) + 1e-9


def test_near_zero_other_mass_on_candidate_side_is_finite() -> None:
    p = {"a": 0.9}  # 0.1 in "other"
    q = {"a": 1.0}  # nothing left
    kld, _ = position_kld(lp(p), lp(q))
    assert math.isfinite(kld) and kld > 1.0


def test_compare_positions_top1_and_delta_p() -> None:
    base = [
        Position(lp({"x": 0.7, "y": 0.2}), "x", math.log(0.7)),
        Position(lp({"x": 0.4, "y": 0.5}), "x", math.log(0.4)),
    ]
    cand = [
        Position(lp({"x": 0.6, "y": 0.3}), "x", math.log(0.6)),
        Position(lp({"x": 0.55, "y": 0.35}), "x", math.log(0.55)),
    ]
    out = compare_positions(base, cand)
    assert out["same_top"] == [1.0, 0.0]
    assert out["delta_p"] == pytest.approx([-0.1, 0.15])
    assert top1({"b": -1.0, "a": -1.0}) == "a"  # ties broken by key, the same on both sides


def test_encoding_round_trips() -> None:
    pos = [Position({"1": -0.123456789, "2": -2.0}, "1", -0.123456789)]
    back = decode_positions(encode_positions(pos))
    assert back[0].ref == "1"
    assert back[0].top == {"1": -0.12346, "2": -2.0}


def test_sample_logprobs_show_the_stored_positions_for_the_samples_browser() -> None:
    from evalsvc.suites._base import LOGPROB_TOKENS_SHOWN

    n = LOGPROB_TOKENS_SHOWN + 6
    pos = [Position({"a": -0.25, "b": -1.5, "c": -3.0}, "b" if i % 2 else "a",
                    -1.5 if i % 2 else -0.25) for i in range(n)]
    shown = DriftSuite.sample_logprobs({"n_positions": n, **encode_positions(pos)})
    assert shown is not None and shown["positions"] == n
    assert len(shown["tokens"]) == LOGPROB_TOKENS_SHOWN  # a passage is long: the first ones
    first, second = shown["tokens"][:2]
    assert first == {"token": "a", "logprob": -0.25,
                     "top": [["a", -0.25], ["b", -1.5], ["c", -3.0]]}
    assert second["token"] == "b" and second["logprob"] == -1.5
    assert dict(shown["summary"]) == {"positions": n,
                                      "mean reference-token logprob": pytest.approx(-0.875)}
    # An errored sample keeps no positions; a malformed row loses its logprobs, not the page.
    assert DriftSuite.sample_logprobs({}) is None
    assert DriftSuite.sample_logprobs({"ref": ["a"], "ref_lp": [-1.0], "top_keys": []}) is None


def test_percentiles_match_numpy() -> None:
    values = list(np.linspace(0, 1, 1001))
    out = percentiles(values)
    assert out["median"] == pytest.approx(0.5)
    assert out["p99"] == pytest.approx(0.99)
    assert out["p99.9"] == pytest.approx(0.999)
    assert out["max"] == 1.0


def _sample(item: str, positions: list[Position], endpoint: str) -> Sample:
    nll = -sum(p.ref_lp or 0.0 for p in positions) / len(positions)
    return Sample(
        suite="d",
        item_id=item,
        endpoint=endpoint,
        score=nll,
        data={"n_positions": len(positions), **encode_positions(positions)},
    )


def test_analyze_reports_mismatched_tokenizations_and_uses_a_threshold() -> None:
    suite = DriftSuite(SuiteSpec(name="d", kind="drift", params={"n": 2}))
    base_pos = [Position(lp({"a": 0.6, "b": 0.3}), "a", math.log(0.6))] * 3
    cand_pos = [Position(lp({"a": 0.5, "b": 0.4}), "a", math.log(0.5))] * 3
    other_tok = [Position(lp({"a": 0.6, "b": 0.3}), "b", math.log(0.3))] * 3
    analysis = suite.analyze(
        [_sample("p1", base_pos, "baseline"), _sample("p2", base_pos, "baseline")],
        [_sample("p1", cand_pos, "candidate:0"), _sample("p2", other_tok, "candidate:0")],
    )
    expected = entropy([0.6, 0.3, 0.1], [0.5, 0.4, 0.1])
    assert analysis.candidate == pytest.approx([expected], rel=1e-4)  # logprobs stored to 1e-5
    assert analysis.baseline == [0.0]
    assert analysis.details["tokenizer_mismatch"]["passages"] == 1
    assert analysis.details["same_top_p"] == 1.0
    gate = suite.bind_gate()  # the kind declares the gate: a threshold, lower is better
    assert gate.threshold is not None and gate.higher_is_better is False
    assert analysis.details["perplexity"]["ratio"] == pytest.approx(0.6 / 0.5)
