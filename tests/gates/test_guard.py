"""Informative-baseline guard: 0% vs 0% cannot pass; a valid pass stays a pass (seeded A/A)."""

from __future__ import annotations

import numpy as np
import pytest

from evalsvc.gates import apply_guard, baseline_guard, evaluate_gate, min_informative_correct
from evalsvc.stats import tango_test


def _gate(b: np.ndarray, c: np.ndarray, margin: float = 0.05, **kw: object) -> str:
    out = evaluate_gate(b, c, metric="accuracy", kind="binary", margin=margin, **kw)  # type: ignore[arg-type]
    guard = baseline_guard(
        b, margin=margin, alpha=0.05, higher_is_better=True, paired=True, clusters=kw.get("clusters")
    )
    return apply_guard(out, guard).verdict


def test_zero_vs_zero_is_inconclusive_not_pass() -> None:
    zeros = np.zeros(200)
    raw = evaluate_gate(zeros, zeros, metric="accuracy", kind="binary", margin=0.05)
    assert raw.verdict == "pass"  # the hole: no discordance, tight interval
    guard = baseline_guard(zeros, margin=0.05, alpha=0.05, higher_is_better=True, paired=True)
    out = apply_guard(raw, guard)
    assert out.verdict == "inconclusive"
    assert not guard["informative"] and "uninformative baseline" in out.details["reason"]
    assert out.details["baseline_guard"]["baseline_good"] == 0
    assert out.details["verdict_before_guard"] == "pass"


def test_too_few_solved_items_for_the_margin() -> None:
    # 3 of 100 solved: losing all of them is a drop of 0.03 < margin 0.05, never a fail.
    b = np.zeros(100)
    b[:3] = 1
    assert _gate(b, b.copy()) == "inconclusive"
    # A wide margin with a weak baseline: 0.9 can never be shown on 40 items at 0%.
    assert _gate(np.zeros(40), np.zeros(40), margin=0.9) == "inconclusive"


def test_min_informative_correct_matches_the_worst_case_gate() -> None:
    for n, margin in ((40, 0.10), (100, 0.05), (680, 0.05), (16, 0.15)):
        k = min_informative_correct(n, margin, 0.05)
        assert k is not None and k > margin * n  # more than margin × n: the drop must be *shown*
        fail_at = tango_test(0, k, n, -margin, corrected=True).p_less
        below = tango_test(0, k - 1, n, -margin, corrected=True).p_less
        assert fail_at < 0.05 <= below
        # The guard uses the gate; it agrees with the bisection at and below the boundary.
        b = np.zeros(n)
        b[:k] = 1
        assert baseline_guard(b, margin=margin, alpha=0.05, higher_is_better=True, paired=True)[
            "informative"
        ]
        b[k - 1] = 0
        assert not baseline_guard(b, margin=margin, alpha=0.05, higher_is_better=True, paired=True)[
            "informative"
        ]


def test_floor_at_chance() -> None:
    rng = np.random.default_rng(1)
    b = (rng.random(400) < 0.25).astype(float)  # four-way multiple choice guessed
    guard = baseline_guard(
        b, margin=0.05, alpha=0.05, higher_is_better=True, paired=True, floor=float(b.mean())
    )
    assert not guard["informative"] and "floor" in guard["reason"]


def test_guard_never_creates_a_fail() -> None:
    b = np.zeros(50)
    c = np.zeros(50)
    out = evaluate_gate(b, c, metric="a", kind="binary", margin=0.05)
    guard = baseline_guard(b, margin=0.05, alpha=0.05, higher_is_better=True, paired=True)
    assert apply_guard(out, guard).verdict != "fail"
    b = np.ones(300)
    c = np.zeros(300)
    out = evaluate_gate(b, c, metric="a", kind="binary", margin=0.05)
    guard = baseline_guard(b, margin=0.05, alpha=0.05, higher_is_better=True, paired=True)
    assert guard["informative"] and apply_guard(out, guard).verdict == "fail"


@pytest.mark.parametrize(("p_base", "psi", "n"), [(0.5, 0.1, 294), (0.3, 0.26, 680), (0.6, 0.05, 187)])
def test_aa_pass_rate_unchanged_and_false_fail_bounded(p_base: float, psi: float, n: int) -> None:
    """A/A at the planned n: the guard removes no valid pass, and false fails stay ≤ α."""
    rng = np.random.default_rng(12)
    runs = 400
    passes_raw = passes_guarded = fails = 0
    for _ in range(runs):
        # Δ = 0: a share ψ of items discordant, half each way; the rest keep accuracy p_base.
        u = rng.random(n)
        b = (rng.random(n) < (p_base - psi / 2) / (1 - psi)).astype(float)
        c = b.copy()
        b[u < psi / 2], c[u < psi / 2] = 1, 0
        both = (u >= psi / 2) & (u < psi)
        b[both], c[both] = 0, 1
        raw = evaluate_gate(b, c, metric="a", kind="binary", margin=0.05)
        guard = baseline_guard(b, margin=0.05, alpha=0.05, higher_is_better=True, paired=True)
        out = apply_guard(raw, guard)
        passes_raw += raw.verdict == "pass"
        passes_guarded += out.verdict == "pass"
        fails += out.verdict == "fail"
    assert passes_guarded == passes_raw
    assert fails / runs <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / runs)


def test_unpaired_and_lower_is_better() -> None:
    zeros = np.zeros(64)
    g = baseline_guard(
        zeros, n_candidate=64, margin=0.10, alpha=0.05, higher_is_better=True, paired=False
    )
    assert not g["informative"]
    # Lower is better (an error rate): a baseline that is always wrong (1.0) is uninformative.
    g = baseline_guard(np.ones(100), margin=0.05, alpha=0.05, higher_is_better=False, paired=True)
    assert not g["informative"]
    g = baseline_guard(np.zeros(300), margin=0.05, alpha=0.05, higher_is_better=False, paired=True)
    assert g["informative"]
