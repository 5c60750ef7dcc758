"""The dataset kind's reference-free gate (agreement with the baseline), by seeded simulation.

Model of one run: n items, each with its own rate q_i of answers that differ from its modal
answer (greedy output that varies with the batch; q_i ~ Beta with mean ``q_mean``, so most items
are stable and a few vary a lot); a differing answer is one of three alternatives. The baseline's
first pass B1 is the reference. The gate pairs, per item, [B2 == B1] (the baseline's second
pass) with [C == B1] (the candidate). In an A/A run C is drawn exactly as B2 is; a planted
candidate also changes its answer on a share of the items.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalsvc.gates import evaluate_gate

MARGIN, ALPHA = 0.05, 0.05


def _answers(rng: np.random.Generator, q: np.ndarray, changed: np.ndarray | None = None) -> np.ndarray:
    differs = rng.random(q.size) < q
    out = np.where(differs, rng.integers(1, 4, q.size), 0)
    if changed is not None:
        out = np.where(changed, 4, out)  # the planted change: an answer the baseline never gives
    return out


def _verdict(
    rng: np.random.Generator, n: int, q_mean: float, planted: float = 0.0, second_pass: bool = True
) -> str:
    q = rng.beta(0.5, 0.5 / q_mean - 0.5, n)
    b1, b2 = _answers(rng, q), _answers(rng, q)
    c = _answers(rng, q, rng.random(n) < planted if planted else None)
    base = (b2 == b1).astype(float) if second_pass else np.ones(n)
    cand = (c == b1).astype(float)
    out = evaluate_gate(list(base), list(cand), metric="agreement", kind="binary", margin=MARGIN,
                        alpha=ALPHA, higher_is_better=True)
    return out.verdict


@pytest.mark.parametrize("q_mean", [0.02, 0.1, 0.3])
def test_aa_never_fails_beyond_alpha(q_mean: float) -> None:
    """bf16 against itself, however unstable: fails at most α of the time."""
    rng = np.random.default_rng(int(q_mean * 1000))
    runs = 200
    fails = sum(_verdict(rng, 100, q_mean) == "fail" for _ in range(runs))
    assert fails / runs <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / runs)


def test_without_the_second_pass_an_unstable_baseline_fails_itself() -> None:
    """Why the second pass: pairing against a baseline that agrees with itself by construction
    (all ones) fails an identical candidate most of the time once its answers vary."""
    rng = np.random.default_rng(7)
    runs = 100
    fails = sum(_verdict(rng, 100, 0.3, second_pass=False) == "fail" for _ in range(runs))
    assert fails / runs >= 0.5


def test_a_real_change_is_caught() -> None:
    """A candidate that changes 25% of its answers fails at n = 200 (power ≥ 0.9)."""
    rng = np.random.default_rng(11)
    runs = 100
    fails = sum(_verdict(rng, 200, 0.05, planted=0.25) == "fail" for _ in range(runs))
    assert fails / runs >= 0.9
