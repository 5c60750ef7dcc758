"""The determinism gate on excess instability under load, by seeded simulation.

Model of one run of the catalog suite: P probe prompts × K gated samples each (conditions ×
repeats), of which a share is sent while other requests are in flight. Each prompt has its own
rate of answers that differ from its modal answer under batching, q_p ~ Beta (prompts differ a
lot: some never vary, some often), the same for both endpoints (A/A: the baseline's own batch
variance is the noise floor). The planted candidate additionally changes its answer on a share of
the concurrent requests. Samples of one prompt are clustered.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalsvc.gates import evaluate_gate

MARGIN, ALPHA = 0.10, 0.05


def _run(
    rng: np.random.Generator, probes: int, per: int, q_mean: float, alter: float,
    concurrent: float = 0.8,
) -> str:
    q = rng.beta(1.0, 1.0 / q_mean - 1.0, probes)
    b, c, cl = [], [], []
    for p in range(probes):
        for k in range(per):
            xb = rng.random() < q[p]
            xc = rng.random() < q[p]
            if k < per * concurrent and rng.random() < alter:
                xc = True  # the planted change: an unstable answer
            b.append(float(xb))
            c.append(float(xc))
            cl.append(f"p{p}")
    out = evaluate_gate(b, c, metric="unstable_rate", kind="binary", margin=MARGIN,
                        alpha=ALPHA, higher_is_better=False, clusters=cl)
    return out.verdict


@pytest.mark.parametrize("q_mean", [0.1, 0.3, 0.5])
def test_aa_never_fails_beyond_alpha(q_mean: float) -> None:
    """bf16 against itself: the baseline's own batch variance never fails the gate (≤ α)."""
    rng = np.random.default_rng(int(q_mean * 100))
    runs = 200
    fails = sum(_run(rng, 16, 10, q_mean, 0.0) == "fail" for _ in range(runs))
    assert fails / runs <= ALPHA + 2 * np.sqrt(ALPHA * (1 - ALPHA) / runs)


@pytest.mark.parametrize(
    ("probes", "q_mean", "alter"), [(12, 0.05, 0.5), (12, 0.05, 0.3), (21, 0.3, 0.5)]
)
def test_planted_candidate_fails_at_the_planned_size(probes: int, q_mean: float, alter: float) -> None:
    """A candidate that changes 30% or 50% of its concurrent answers fails at the catalog's 12
    probes when the baseline barely varies (as measured here); with a baseline that varies a lot
    (discordance 0.3) the 50% case fails at the 21 probes `evalsvc plan` asks for."""
    rng = np.random.default_rng(9)
    runs = 100
    fails = sum(_run(rng, probes, 10, q_mean, alter) == "fail" for _ in range(runs))
    assert fails / runs >= 0.8
