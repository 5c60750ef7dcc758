"""The reference-free ``dataset`` judge gate by seeded simulation: per item the judge's combined
preference (−1 worse, 0 same or order-inconsistent, +1 better) is coded as the paired binary
pair ``(baseline not beaten, candidate not worse)``, so Δ = P(better) − P(worse) and Tango's
paired test at the margin decides (``evalsvc.suites.kinds.dataset``). At Δ exactly −margin the
false pass rate must stay at or below α; a candidate as good as the baseline (better and worse
equally likely) must mostly pass at the planned size."""

from __future__ import annotations

import numpy as np

from evalsvc.gates import evaluate_gate

MARGIN, ALPHA, RUNS = 0.10, 0.05, 300


def verdicts(p_better: float, p_worse: float, n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(RUNS):
        pref = rng.choice([1, -1, 0], size=n, p=[p_better, p_worse, 1 - p_better - p_worse])
        b = [0.0 if p > 0 else 1.0 for p in pref]
        c = [0.0 if p < 0 else 1.0 for p in pref]
        out.append(evaluate_gate(b, c, metric="judge_not_worse", kind="binary", margin=MARGIN,
                                 alpha=ALPHA, higher_is_better=True, paired=True,
                                 seed=int(rng.integers(1 << 30))).verdict)
    return out


def test_false_pass_at_the_margin_stays_below_alpha() -> None:
    # A judge that prefers either side often (30% of items decided), net −10 points.
    v = verdicts(p_better=0.10, p_worse=0.20, n=200, seed=42)
    false_pass = v.count("pass") / RUNS
    # α plus 2 binomial standard errors of the Monte Carlo estimate at 300 runs.
    assert false_pass <= ALPHA + 2 * (ALPHA * (1 - ALPHA) / RUNS) ** 0.5, false_pass
    print(f"false pass at the margin: {false_pass:.3f} ({RUNS} runs of 200 items)")


def test_an_equally_good_candidate_passes_at_the_planned_size() -> None:
    v = verdicts(p_better=0.15, p_worse=0.15, n=300, seed=7)
    assert v.count("fail") / RUNS <= ALPHA
    assert v.count("pass") / RUNS >= 0.7, v.count("pass") / RUNS
    print(f"pass rate of an equal candidate: {v.count('pass') / RUNS:.3f} (300 items, 30% decided)")
