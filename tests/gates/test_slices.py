"""Slice gates: a collapsed slice fails the suite; A/A never fails at the family-wise α.

Layout of the catalog ``reasoning`` suite: 680 items over six family × level tasks with weights
2, 1, 1, 1, 1, 1 (194 + 5 × 97). Baseline accuracies are those measured on bf16 SmolLM2-135M
(docs/suites.md gives 15-60% per task); ψ ≈ 0.26 flips as the bf16-vs-fp8-kv pilot measured.
"""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.multitest import multipletests

from evalsvc.gates import evaluate_gate, slice_gates

TASKS = [("arithmetic L1", 194, 0.15), ("variable_tracking L1", 97, 0.5),
         ("variable_tracking L2", 97, 0.4), ("dates L1", 97, 0.33), ("lists L1", 97, 0.6),
         ("lists L2", 97, 0.3)]
MARGIN, ALPHA = 0.05, 0.05


def _layout() -> list[str]:
    return [name for name, n, _ in TASKS for _ in range(n)]


def _draw(
    rng: np.random.Generator, psi: float, delta: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Paired outcomes per task: the baseline at the task's accuracy p; a share ψ of items
    discordant, split so that E[candidate − baseline] = ``delta`` in every task (regressions
    (ψ − Δ)/2, improvements (ψ + Δ)/2; the concordant items keep the baseline's accuracy)."""
    bs, cs = [], []
    for _, n, p in TASKS:
        u = rng.random(n)
        reg, imp = (psi - delta) / 2, (psi + delta) / 2
        b = np.empty(n)
        c = np.empty(n)
        regression = u < reg
        improvement = (u >= reg) & (u < reg + imp)
        concordant = ~(regression | improvement)
        both_right = concordant & (rng.random(n) < (p - reg) / (1 - psi))
        b[regression], c[regression] = 1, 0
        b[improvement], c[improvement] = 0, 1
        b[concordant] = c[concordant] = both_right[concordant].astype(float)
        bs.append(b)
        cs.append(c)
    return np.concatenate(bs), np.concatenate(cs)


def _suite(b: np.ndarray, c: np.ndarray, labels: list[str], **kw: object) -> object:
    out = evaluate_gate(b, c, metric="accuracy", kind="binary", margin=MARGIN, alpha=ALPHA)
    return slice_gates(
        out, b, c, {"family × level": labels}, kind="binary", margin=MARGIN, alpha=ALPHA,
        higher_is_better=True, min_items=20, **kw,  # type: ignore[arg-type]
    )


def _step_down(p: list[float], w: list[float], alpha: float) -> list[bool]:
    """Weighted Holm by its definition: repeatedly reject the hypothesis with the smallest
    p/w if p ≤ α·w / Σ(weights not yet rejected); stop at the first that is not."""
    rejected = [False] * len(p)
    while not all(rejected):
        live = [i for i in range(len(p)) if not rejected[i]]
        total = sum(w[i] for i in live)
        i = min(live, key=lambda j: p[j] / w[j])
        if p[i] > alpha * w[i] / total:
            break
        rejected[i] = True
    return rejected


def test_weighted_holm_family_is_the_step_down_procedure() -> None:
    from evalsvc.gates._slices import SUITE_WEIGHT

    rng = np.random.default_rng(3)
    labels = _layout()
    for _ in range(5):
        b, c = _draw(rng, 0.26, -0.08)
        out = _suite(b, c, labels)
        info = out.details["slices"]  # type: ignore[attr-defined]
        raw = [out.details["p_inferiority_overall"]] + [r["p_inferiority"] for r in info["slices"]]  # type: ignore[attr-defined]
        got = [info["p_inferiority_overall_holm"]] + [r["p_inferiority_holm"] for r in info["slices"]]
        w = [SUITE_WEIGHT] + [(1 - SUITE_WEIGHT) / (len(raw) - 1)] * (len(raw) - 1)
        for alpha in (0.001, 0.01, 0.05, 0.1, 0.3):
            assert [g <= alpha for g in got] == _step_down(raw, w, alpha)
        assert out.details["p_inferiority"] == pytest.approx(min(got))  # type: ignore[attr-defined]
    # Equal weights are plain Holm, which statsmodels computes.
    from evalsvc.stats import weighted_holm

    p = rng.random(7) ** 3
    assert np.allclose(weighted_holm(p, np.ones(7)), multipletests(p, method="holm")[1])


def test_collapsed_dates_slice_fails_a_suite_whose_average_does_not() -> None:
    """fp8-kv at release size: dates L1 33% → 0% (32 of 32 solved items lost) while the suite's
    Δ stayed within reach of the margin."""
    rng = np.random.default_rng(7)
    labels = _layout()
    b, c = _draw(rng, 0.10)
    dates = np.flatnonzero(np.asarray(labels) == "dates L1")
    b[dates] = 0
    b[dates[:32]] = 1
    c[dates] = 0  # every solved dates item lost
    overall = evaluate_gate(b, c, metric="accuracy", kind="binary", margin=MARGIN)
    assert overall.verdict != "fail"  # the average hides it
    out = _suite(b, c, labels, keys=[f"i{i}" for i in range(b.size)],
                 first_tokens=[("Tuesday", "Monday")] * b.size)
    assert out.verdict == "fail"  # type: ignore[attr-defined]
    reason = out.details["reason"]  # type: ignore[attr-defined]
    assert "dates L1: 33% → 0%, 32 of 32 solved items lost" in reason
    (row,) = [r for r in out.details["slices"]["slices"] if r["verdict"] == "fail"]  # type: ignore[attr-defined]
    assert row["slice"] == "dates L1" and row["flipped_tokens"][0] == {
        "item": f"i{dates[0]}", "baseline": "Tuesday", "candidate": "Monday"}


def test_small_slices_are_not_tested() -> None:
    b = np.ones(30)
    c = np.zeros(30)
    labels = ["a"] * 10 + ["b"] * 20
    out = _suite(b, c, labels)
    rows = {r["slice"]: r for r in out.details["slices"]["slices"]}  # type: ignore[attr-defined]
    assert rows["a"]["verdict"] == "not tested" and rows["b"]["verdict"] == "fail"


@pytest.mark.parametrize("psi", [0.10, 0.26])
def test_aa_never_fails_beyond_family_wise_alpha(psi: float) -> None:
    """A/A (Δ = 0 in every slice): P(the suite or any slice fails) ≤ α (seeded, 200 runs)."""
    rng = np.random.default_rng(int(psi * 1000))
    labels = _layout()
    runs, fails, fails_overall = 200, 0, 0
    for _ in range(runs):
        b, c = _draw(rng, psi)
        out = _suite(b, c, labels)
        fails += out.verdict == "fail"  # type: ignore[attr-defined]
        fails_overall += out.details["p_inferiority_overall"] < ALPHA  # type: ignore[attr-defined]
    se = np.sqrt(ALPHA * (1 - ALPHA) / runs)
    assert fails / runs <= ALPHA + 2 * se
    assert fails <= fails_overall + runs * ALPHA  # slices add at most their share


def test_at_the_margin_family_wise_false_fail_is_bounded() -> None:
    """Every slice exactly at Δ = −δ (the hardest null): false fails ≤ α (seeded, 150 runs)."""
    rng = np.random.default_rng(11)
    labels = _layout()
    runs, fails = 150, 0
    for _ in range(runs):
        b, c = _draw(rng, 0.10, -MARGIN)
        fails += _suite(b, c, labels).verdict == "fail"  # type: ignore[attr-defined]
    assert fails / runs <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / runs)


def test_uniform_drop_still_fails() -> None:
    """Δ = −2δ in every slice at the planned n (ψ = 0.26): the suite still fails. The family
    costs some power (the suite alone fails ~0.8 of these; docs/statistics.md has the figures)."""
    rng = np.random.default_rng(13)
    labels = _layout()
    runs = 60
    fails = sum(
        _suite(*_draw(rng, 0.26, -2 * MARGIN), labels).verdict == "fail"  # type: ignore[attr-defined]
        for _ in range(runs)
    )
    assert fails / runs >= 0.6


def test_power_to_find_the_collapsed_slice() -> None:
    rng = np.random.default_rng(5)
    labels = _layout()
    dates = np.flatnonzero(np.asarray(labels) == "dates L1")
    runs, found = 40, 0
    for _ in range(runs):
        b, c = _draw(rng, 0.26)
        c[dates] = 0  # the candidate loses the whole family (baseline ~33% there)
        out = _suite(b, c, labels)
        rows = out.details["slices"]["slices"]  # type: ignore[attr-defined]
        found += any(r["slice"] == "dates L1" and r["verdict"] == "fail" for r in rows)
    assert found / runs >= 0.9


def test_a_continuous_slice_finding_gives_means_not_lost_items() -> None:
    """A similarity collapsing in one slice (a replay's short prompts) is reported as the
    slice's mean before and after with Δ, never as binary "solved items lost"."""
    rng = np.random.default_rng(5)
    n = 120
    labels = ["short"] * 40 + ["long"] * 80
    b = np.clip(rng.normal(0.97, 0.02, n), 0, 1)
    c = b.copy()
    c[:40] = np.clip(rng.normal(0.50, 0.05, 40), 0, 1)  # the short slice loses half its similarity
    out = evaluate_gate(b, c, metric="rouge_l", kind="continuous", margin=MARGIN, alpha=ALPHA,
                        value_range=(0.0, 1.0))
    res = slice_gates(out, b, c, {"prompt length": labels}, kind="continuous", margin=MARGIN,
                      alpha=ALPHA, higher_is_better=True, min_items=20, value_range=(0.0, 1.0))
    assert res.verdict == "fail"
    [row] = [r for r in res.details["slices"]["slices"] if r["slice"] == "short"]
    assert row["verdict"] == "fail"
    expected = f"short: mean {b[:40].mean():.3f} → {c[:40].mean():.3f} (Δ "
    assert row["finding"].startswith(expected), row["finding"]
    assert "solved items" not in res.details["reason"]
    assert row["finding"] in res.details["reason"]
