"""Pure parts of the speed kind: percentile and throughput math, the gain statement."""

from __future__ import annotations

import numpy as np
import pytest

from evalsvc.domain import Provenance, Sample
from evalsvc.gates import evaluate_gate
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds.speed import (
    SpeedSuite,
    gain_summary,
    level_metrics,
    percentile_summary,
    tpot,
)


def test_percentiles_linear_interpolation() -> None:
    out = percentile_summary([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert out["p50"] == 5.5
    assert out["p90"] == pytest.approx(9.1)
    assert out["p99"] == pytest.approx(9.91)
    assert out["mean"] == 5.5
    assert percentile_summary([0.25], 1000.0) == {
        "mean": 250.0,
        "p50": 250.0,
        "p90": 250.0,
        "p99": 250.0,
    }
    assert percentile_summary([]) == {}
    vals = np.random.default_rng(1).exponential(size=101)
    assert percentile_summary(vals)["p99"] == pytest.approx(float(np.percentile(vals, 99)))


def test_tpot() -> None:
    assert tpot(2.1, 0.1, 21) == pytest.approx(0.1)
    assert tpot(1.0, 0.5, 1) is None


def _s(
    item: str, level: int, t0: float, t1: float, tokens: int, ttft: float, error: str | None = None
) -> Sample:
    return Sample(
        suite="s",
        item_id=f"c{level}/{item}",
        endpoint="e",
        completion_tokens=tokens,
        latency_s=t1 - t0,
        ttft_s=ttft,
        error=error,
        score=None if error else tokens / (t1 - t0),
        data={
            "concurrency": level,
            "effective_concurrency": level,
            "t_start": t0,
            "t_end": t1,
            "itl_s": [0.01, 0.02],
            "tpot_s": 0.015,
        },
    )


def test_level_throughput_is_tokens_over_wall_time() -> None:
    samples = [
        _s("a", 2, 0.0, 2.0, 64, 0.2),
        _s("b", 2, 0.0, 3.0, 64, 0.3),
        _s("c", 2, 2.0, 4.0, 64, 0.1),
        _s("d", 2, 3.0, 3.5, 0, 0.0, error="x"),
    ]
    m = level_metrics(samples)
    assert m["n"] == 3 and m["n_errors"] == 1
    assert m["wall_s"] == 4.0
    assert m["output_tok_s"] == pytest.approx(192 / 4.0)
    assert m["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert m["itl_ms"]["mean"] == pytest.approx(15.0)


def test_analyze_states_kv_and_throughput_gain() -> None:
    suite = SpeedSuite(SuiteSpec(name="s", kind="speed", params={"levels": [1, 4], "requests": 2}))
    base = [
        _s("a", 1, 0, 2, 64, 0.1),
        _s("b", 1, 2, 4, 64, 0.1),
        _s("a", 4, 0, 2, 64, 0.2),
        _s("b", 4, 0, 2, 64, 0.2),
    ]
    cand = [
        _s("a", 1, 0, 1, 64, 0.1),
        _s("b", 1, 1, 2, 64, 0.1),
        _s("a", 4, 0, 1.5, 64, 0.2),
        _s("b", 4, 0, 1.6, 64, 0.2),
    ]
    prov = (
        Provenance(kv_capacity_tokens=93184),
        Provenance(kv_capacity_tokens=186368, kv_cache_dtype="fp8"),
    )
    a = suite.analyze(base, cand, provenance=prov)
    assert a.details["kv_capacity"]["ratio"] == 2.0
    assert a.details["throughput_ratio"]["1"] == pytest.approx(2.0)
    assert a.details["throughput_ratio"]["4"] == pytest.approx(2.0 / 1.6)
    # The gated row's ratio is named apart from the throughput (issue 50: the table's
    # "Δ −0.208" per-request tokens/s beside a finding's "×0.97 throughput" read as a contradiction).
    outcome = evaluate_gate(a.baseline, a.candidate, metric="request_output_tok_s",
                            kind="ratio", margin=0.0)
    per_request = 1.0 + outcome.delta
    assert a.details["summary"] == (
        f"×2.0 KV capacity, ×{per_request:.2f} tokens/s per request (the gated row), "
        "×1.25 throughput at c=4 (all requests)"
    )
    assert per_request == pytest.approx(np.exp(np.mean(np.log(np.divide(a.candidate, a.baseline)))))
    assert len(a.baseline) == 4 and suite.bind_gate().kind == "ratio" and a.n_errors == 0


def test_gain_summary_without_capacity() -> None:
    assert gain_summary(None, {8: 1.3}) == "×1.30 throughput at c=8"
    assert gain_summary(None, {}) == "no comparable measurements"
    assert gain_summary(None, {4: 0.97}, 0.79) == (
        "×0.79 tokens/s per request (the gated row), ×0.97 throughput at c=4 (all requests)"
    )


def test_a_request_without_throughput_is_an_error_never_a_zero_for_the_ratio_gate() -> None:
    """A ratio gate needs positive values: no token or no measurable time is an error with its
    reason (the error budget sees it), never a 0 that stopped the run with a ValueError."""
    from evalsvc.suites.kinds.speed import request_throughput

    assert request_throughput(None, 64, 2.0) == (32.0, None)
    assert request_throughput("HTTP 500", 64, 2.0) == (None, "HTTP 500")
    score, error = request_throughput(None, 0, 2.0)
    assert score is None and error is not None and "no output tokens" in error
    score, error = request_throughput(None, 5, 0.0)
    assert score is None and error is not None and "latency" in error
