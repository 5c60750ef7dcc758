"""evaluate_gate / threshold_gate: verdict semantics, orientation, edge cases, report shape."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from evalsvc.gates import MIN_N_CONTINUOUS, GateOutcome, evaluate_gate, threshold_gate
from evalsvc.stats import tango_ci

REPORT_FIELDS = {
    "verdict",
    "metric",
    "baseline",
    "candidate",
    "delta",
    "ci",
    "p_value",
    "margin",
    "alpha",
    "n",
    "mde",
    "test",
    "method",
    "details",
}


def _paired_binary(
    both: int, regressions: int, improvements: int, neither: int
) -> tuple[np.ndarray, np.ndarray]:
    base = np.r_[np.ones(both), np.ones(regressions), np.zeros(improvements), np.zeros(neither)]
    cand = np.r_[np.ones(both), np.zeros(regressions), np.ones(improvements), np.zeros(neither)]
    return base, cand


def _strict_json(outcome: GateOutcome) -> dict[str, object]:
    text = json.dumps(outcome.to_dict(), allow_nan=False)
    data = json.loads(text)
    assert set(data) == REPORT_FIELDS
    return data


def test_binary_pass_fail_inconclusive() -> None:
    # 800 items, 10% flips split evenly: Δ = 0, well inside a 5-point margin.
    base, cand = _paired_binary(600, 40, 40, 120)
    out = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=0.05)
    assert out.verdict == "pass"
    assert out.ci[0] > -0.05 and out.p_value is not None and out.p_value < 0.05
    assert out.details["flips"] == {
        "baseline_correct_candidate_wrong": 40,
        "baseline_wrong_candidate_correct": 40,
    }
    assert out.details["mcnemar_p"] == pytest.approx(1.0)
    assert out.n == 800 and out.delta == 0.0
    assert out.baseline == pytest.approx(640 / 800) and out.candidate == pytest.approx(640 / 800)
    data = _strict_json(out)
    assert data["details"]["p_inferiority"] == pytest.approx(1 - out.p_value)

    # 15-point drop: clear fail.
    base, cand = _paired_binary(500, 130, 10, 160)
    out = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=0.05)
    assert out.verdict == "fail"
    assert out.ci[1] < -0.05 and out.details["p_inferiority"] < 0.05
    assert out.details["mcnemar_p"] < 1e-10

    # Drop of exactly the margin: inconclusive.
    base, cand = _paired_binary(300, 30, 10, 60)
    out = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=0.05)
    assert out.verdict == "inconclusive"
    assert out.ci[0] < -0.05 < out.ci[1]


def test_binary_ci_is_the_corrected_tango_interval_at_two_alpha() -> None:
    base, cand = _paired_binary(59, 16, 6, 80)
    out = evaluate_gate(base, cand, metric="acc", kind="binary", margin=0.1, alpha=0.025)
    assert out.ci == pytest.approx(tango_ci(6, 16, 161, alpha=0.05, corrected=True))
    assert out.details["ci_level"] == pytest.approx(0.95)


def test_lower_is_better_mirrors_higher_is_better() -> None:
    base, cand = _paired_binary(500, 30, 12, 258)
    hib = evaluate_gate(base, cand, metric="acc", kind="binary", margin=0.05)
    # The same data as error indicators (1 = wrong), lower is better.
    lib = evaluate_gate(
        1 - base, 1 - cand, metric="err", kind="binary", margin=0.05, higher_is_better=False
    )
    assert lib.verdict == hib.verdict
    assert lib.delta == pytest.approx(-hib.delta)
    assert lib.ci == pytest.approx((-hib.ci[1], -hib.ci[0]))
    assert lib.p_value == pytest.approx(hib.p_value)
    assert lib.details["p_inferiority"] == pytest.approx(hib.details["p_inferiority"])

    rng = np.random.default_rng(0)
    b = rng.normal(0, 1, 200)
    c = b + rng.normal(-0.02, 0.2, 200)
    up = evaluate_gate(b, c, metric="score", kind="continuous", margin=0.05, seed=1)
    down = evaluate_gate(
        -b, -c, metric="loss", kind="continuous", margin=0.05, seed=1, higher_is_better=False
    )
    assert down.verdict == up.verdict
    assert down.ci == pytest.approx((-up.ci[1], -up.ci[0]), abs=1e-12)
    assert down.p_value == pytest.approx(up.p_value, abs=1e-12)


def test_no_discordance_does_not_crash_and_needs_enough_items() -> None:
    for n, expected in ((10, "inconclusive"), (60, "inconclusive"), (120, "pass")):
        out = evaluate_gate(np.ones(n), np.ones(n), metric="acc", kind="binary", margin=0.05)
        assert out.verdict == expected, n
        assert out.delta == 0.0 and out.ci[0] < 0 < out.ci[1]
        assert out.details["discordance"] == 0.0
        assert out.mde is not None and out.mde > 0  # smoothed, never a misleading 0
        _strict_json(out)


def test_empty_input_is_inconclusive_with_reason() -> None:
    out = evaluate_gate([], [], metric="acc", kind="binary", margin=0.05)
    assert out.verdict == "inconclusive" and out.n == 0 and out.p_value is None
    assert "no paired items" in out.details["reason"]
    data = _strict_json(out)
    assert data["ci"] == [None, None]
    unpaired = evaluate_gate([1, 0], [], metric="rate", kind="binary", margin=0.1, paired=False)
    assert unpaired.verdict == "inconclusive" and "no items" in unpaired.details["reason"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"baseline": [1, float("nan")], "candidate": [1, 1]}, "NaN"),
        ({"baseline": [1, 1], "candidate": [1, float("inf")]}, "infinite"),
        ({"baseline": [1, 0, 1], "candidate": [1, 1]}, "per item"),
        ({"baseline": [1, 0.5], "candidate": [1, 1]}, "0/1"),
        ({"baseline": [1, 1], "candidate": [1, 1], "margin": -0.1}, "margin"),
        ({"baseline": [1, 1], "candidate": [1, 1], "alpha": 0.6}, "alpha"),
        ({"baseline": [1, 1], "candidate": [1, 1], "kind": "ordinal"}, "kind"),
        ({"baseline": [1, 1], "candidate": [1, 1], "clusters": [1]}, "one label per item"),
        ({"baseline": [1, 1], "candidate": [1, 1], "clusters": [1, 2], "paired": False}, "paired"),
        ({"baseline": [1.0, 2.0], "candidate": [0.0, 2.0], "kind": "ratio"}, "positive"),
    ],
)
def test_invalid_input_raises(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"metric": "m", "kind": "binary", "margin": 0.05, **kwargs}
    with pytest.raises(ValueError, match=message):
        evaluate_gate(**args)  # type: ignore[arg-type]


def test_continuous_small_n_is_inconclusive_and_degenerate_handled() -> None:
    x = np.linspace(0, 1, MIN_N_CONTINUOUS - 1)
    out = evaluate_gate(x, x + 0.5, metric="s", kind="continuous", margin=0.1)
    assert out.verdict == "inconclusive" and "minimum" in out.details["reason"]
    # Identical scores on enough items: zero observed variance is no evidence about the spread
    # (a point interval would pass at any n), so without the scores' range it is inconclusive.
    x = np.linspace(0, 1, 50)
    out = evaluate_gate(x, x, metric="s", kind="continuous", margin=0.1)
    assert out.verdict == "inconclusive" and "zero observed variance" in out.details["reason"]
    assert out.ci == (-np.inf, np.inf) and out.method is not None
    assert _strict_json(out)["ci"] == [None, None]
    # With the range, the exact bound for a bounded mean: the differences lie in [-1, 1], so
    # p = ((−δ + 1)/1)^n = 0.9^50 and the lower bound is −1 + 0.05^(1/50).
    ranged = evaluate_gate(x, x, metric="s", kind="continuous", margin=0.1, value_range=(0, 1))
    assert ranged.verdict == "pass" and ranged.method == "exact bound for a bounded mean with " \
        "no spread observed"
    assert ranged.p_value == pytest.approx(0.9**50)
    assert ranged.ci[0] == pytest.approx(-1 + 0.05 ** (1 / 50)) and ranged.ci[0] < 0
    assert _strict_json(ranged)["method"] == ranged.method


def test_continuous_gate_reports_methods_and_wilcoxon() -> None:
    rng = np.random.default_rng(3)
    b = rng.uniform(0, 1, 300)
    c = np.clip(b + rng.normal(-0.01, 0.05, 300), 0, 1)
    out = evaluate_gate(b, c, metric="f1", kind="continuous", margin=0.03, seed=4)
    assert out.verdict == "pass"
    d = c - b
    assert out.delta == pytest.approx(d.mean())
    for key in ("bca_ci", "bootstrap_t_ci", "student_t_ci"):
        lo, hi = out.details[key]
        assert out.ci[0] <= lo and hi <= out.ci[1]
    assert out.details["wilcoxon"]["p_greater"] == pytest.approx(
        stats.wilcoxon(d + 0.03, alternative="greater").pvalue
    )
    assert out.mde == pytest.approx(
        (stats.norm.isf(0.05) + stats.norm.ppf(0.8)) * d.std(ddof=1) / math.sqrt(300)
    )
    again = evaluate_gate(b, c, metric="f1", kind="continuous", margin=0.03, seed=4)
    assert again == out  # reproducible given the seed


def test_ratio_gate_with_an_astronomic_interval_stays_finite_and_undecided() -> None:
    """Two pairs a factor 1e6 apart in opposite directions: the t interval on the log scale
    runs past exp()'s range (a speed run on a loaded host raised OverflowError and lost the run).
    The interval saturates at the largest float, the report stays valid JSON, and no verdict
    rests on it."""
    import json

    base = np.array([1.0, 1e6])
    cand = np.array([1e6, 1.0])
    out = evaluate_gate(base, cand, metric="throughput", kind="ratio", margin=0.05)
    assert out.verdict == "inconclusive"
    assert math.isfinite(out.ci[1]) and out.ci[1] > 1e300 and out.ci[0] >= -1.0
    json.dumps(out.ci, allow_nan=False)


def test_ratio_gate_transforms_log_scale() -> None:
    rng = np.random.default_rng(5)
    base = rng.lognormal(3.0, 0.3, 120)
    cand = base * np.exp(rng.normal(np.log(1.10), 0.05, 120))  # ~10% faster
    out = evaluate_gate(base, cand, metric="throughput", kind="ratio", margin=0.0)
    assert out.verdict == "pass"
    log_ratio = np.log(cand) - np.log(base)
    assert out.delta == pytest.approx(math.expm1(log_ratio.mean()))
    assert out.candidate / out.baseline - 1 == pytest.approx(out.delta)
    lo, hi = out.details["log_ratio"]["ci"]
    assert out.ci == pytest.approx((math.expm1(lo), math.expm1(hi)))
    assert out.ci[0] > 0.0
    # 10% slower with a 5% relative margin: fail.
    slow = evaluate_gate(base, base * 0.9, metric="throughput", kind="ratio", margin=0.05)
    assert slow.verdict == "fail"
    assert slow.details["null_boundary"] == pytest.approx(-0.05)
    # Latency (lower is better): 3% higher with a 10% margin passes.
    lat = evaluate_gate(
        base,
        base * 1.03 * np.exp(rng.normal(0, 0.02, 120)),
        metric="latency",
        kind="ratio",
        margin=0.10,
        higher_is_better=False,
    )
    assert lat.verdict == "pass" and lat.ci[1] < 0.10


def test_clusters_widen_binary_interval_when_failures_cluster() -> None:
    rng = np.random.default_rng(6)
    n_docs, per_doc = 40, 10
    base = np.ones(n_docs * per_doc)
    cand = np.ones(n_docs * per_doc)
    # Whole documents fail together on the candidate; a few improve together.
    bad_docs = rng.choice(n_docs, 3, replace=False)
    for doc in bad_docs:
        cand[doc * per_doc : (doc + 1) * per_doc] = 0
    good_doc = [d for d in range(n_docs) if d not in bad_docs][0]
    base[good_doc * per_doc : (good_doc + 1) * per_doc] = 0
    clusters = np.repeat(np.arange(n_docs), per_doc)
    plain = evaluate_gate(base, cand, metric="acc", kind="binary", margin=0.1)
    clustered = evaluate_gate(
        base, cand, metric="acc", kind="binary", margin=0.1, clusters=clusters
    )
    assert clustered.details["cluster"]["design_effect"] > 5
    assert clustered.ci[0] < plain.ci[0] and clustered.ci[1] > plain.ci[1]
    assert plain.verdict == "pass" and clustered.verdict == "inconclusive"
    one = evaluate_gate(
        base, cand, metric="acc", kind="binary", margin=0.1, clusters=np.zeros(base.size)
    )
    assert one.verdict == "inconclusive" and "clusters" in one.details["reason"]


def test_clustered_continuous_uses_cluster_robust_t() -> None:
    rng = np.random.default_rng(8)
    ids = np.repeat(np.arange(30), 8)
    d = rng.normal(0.0, 0.05, 30)[ids] + rng.normal(0, 0.05, ids.size)
    b = rng.uniform(0, 1, ids.size)
    out = evaluate_gate(b, b + d, metric="s", kind="continuous", margin=0.1, clusters=ids)
    assert "cluster-robust" in out.test
    assert out.details["cluster"]["n_clusters"] == 30
    assert out.details["cluster"]["design_effect"] > 1.5


def test_unpaired_rate_gate() -> None:
    rng = np.random.default_rng(9)
    base = (rng.random(300) < 0.9).astype(int)
    cand = (rng.random(250) < 0.88).astype(int)
    out = evaluate_gate(
        base, cand, metric="identical_rate", kind="binary", margin=0.10, paired=False
    )
    assert out.verdict == "pass"
    assert "Miettinen" in out.test
    assert out.details["n_baseline"] == 300 and out.details["n_candidate"] == 250
    assert out.n == 250
    worse = evaluate_gate(
        base,
        (rng.random(250) < 0.6).astype(int),
        metric="identical_rate",
        kind="binary",
        margin=0.10,
        paired=False,
    )
    assert worse.verdict == "fail"


def test_threshold_gate_binary_matches_exact_binomial() -> None:
    values = np.r_[np.ones(97), np.zeros(3)]
    out = threshold_gate(values, metric="top1_agreement", threshold=0.9, higher_is_better=True)
    assert out.verdict == "pass"
    assert out.p_value == pytest.approx(
        stats.binomtest(97, 100, 0.9, alternative="greater").pvalue, rel=1e-12
    )
    cp = stats.binomtest(97, 100).proportion_ci(confidence_level=0.9, method="exact")
    assert out.details["ci_metric"] == pytest.approx([cp.low, cp.high])
    assert out.baseline == 0.9 and out.candidate == pytest.approx(0.97)
    assert out.ci == pytest.approx((cp.low - 0.9, cp.high - 0.9))
    low = threshold_gate(
        np.r_[np.ones(70), np.zeros(30)], metric="a", threshold=0.9, higher_is_better=True
    )
    assert low.verdict == "fail"
    tiny = threshold_gate([1, 1, 1], metric="a", threshold=0.5, higher_is_better=True)
    assert tiny.verdict == "inconclusive"  # 3/3 is not enough evidence for > 0.5 at α = 0.05
    _strict_json(out)


def test_threshold_gate_continuous_lower_is_better() -> None:
    rng = np.random.default_rng(10)
    kld = rng.gamma(0.5, 0.004, 400)  # mean 0.002, right-skewed
    out = threshold_gate(kld, metric="kld_mean", threshold=0.01, higher_is_better=False)
    assert out.verdict == "pass" and out.details["ci_metric"][1] < 0.01
    big = threshold_gate(kld + 0.02, metric="kld_mean", threshold=0.01, higher_is_better=False)
    assert big.verdict == "fail"
    zeros = threshold_gate(
        np.zeros(50), metric="kld_mean", threshold=0.01, higher_is_better=False, kind="continuous"
    )
    assert zeros.verdict == "inconclusive" and "zero observed variance" in zeros.details["reason"]
    # A KL divergence is unbounded above: no exact bound exists from 50 zeros either.
    unbounded = threshold_gate(np.zeros(50), metric="kld_mean", threshold=0.01,
                               higher_is_better=False, kind="continuous",
                               value_range=(0.0, np.inf))
    assert unbounded.verdict == "inconclusive" and unbounded.ci[1] == np.inf
    # Bounded by 0.05: the exact upper bound 0.05·(1 − 0.05^(1/50)) ≈ 0.0029 is below 0.01.
    bounded = threshold_gate(np.zeros(50), metric="kld_mean", threshold=0.01,
                             higher_is_better=False, kind="continuous", value_range=(0.0, 0.05))
    assert bounded.verdict == "pass"
    assert bounded.details["ci_metric"][1] == pytest.approx(0.05 * (1 - 0.05 ** (1 / 50)))
    empty = threshold_gate([], metric="kld_mean", threshold=0.01, higher_is_better=False)
    assert empty.verdict == "inconclusive" and empty.baseline == 0.01
    with pytest.raises(ValueError, match="NaN"):
        threshold_gate([0.1, float("nan")], metric="k", threshold=0.2, higher_is_better=False)
