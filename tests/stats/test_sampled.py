"""Sampled evaluation's statistics (``evalsvc.stats._sampled``), by seeded simulation and
exact computation:

- pass@k equals its binomial-ratio definition (Chen et al. 2021, eq. 1) and is unbiased for
  the probability that k fresh samples contain a correct one;
- the variance of an item's mean paired difference over k samples is σ²_B + σ²_W/k, and
  ``variance_components`` recovers both parts;
- the items ``required_items_sampled`` asks for reach the power asked (normal-theory test on
  per-item means), and at a fixed number of requests fewer samples per item is never worse;
- the gate a sampled suite gets (continuous, per-item means in (0, 1)) does not fail an equal
  candidate more often than α at k = 1, 4 and 10, at the sizes ``plan`` gives, and passes it
  with about the planned power (a few seeded runs here; the audit at 1,000 runs per cell is
  ``benchmarks/gate_calibration.py``, figures in docs/statistics.md).
"""

from __future__ import annotations

import math
from math import comb

import numpy as np
import pytest
from scipy import stats

from evalsvc.gates import evaluate_gate
from evalsvc.stats import (
    pass_at_k,
    required_items_sampled,
    samples_for_items,
    samples_knee,
    t_interval,
    variance_components,
)


def test_pass_at_k_is_the_binomial_ratio() -> None:
    for n in (1, 4, 10, 50):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - comb(n - c, k) / comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_pass_at_k_is_unbiased() -> None:
    rng = np.random.default_rng(7)
    p, n, k = 0.3, 10, 4
    c = rng.binomial(n, p, 20_000)
    est = np.mean([pass_at_k(n, int(x), k) for x in c])
    assert est == pytest.approx(1 - (1 - p) ** k, abs=0.01)


def _draw(rng: np.random.Generator, n: int, k: int, shift_sd: float) -> tuple[list, list, float]:
    """Per-item rates p (the same on both sides up to a per-item shift of sd ``shift_sd``), k
    Bernoulli samples per side; returns the samples and the true σ²_W."""
    p = 0.2 + 0.6 * rng.random(n)
    pc = np.clip(p + rng.normal(0, shift_sd, n), 0, 1)
    b = [list(rng.binomial(1, x, k).astype(float)) for x in p]
    c = [list(rng.binomial(1, x, k).astype(float)) for x in pc]
    return b, c, float(np.mean(p * (1 - p) + pc * (1 - pc)))


def test_unit_variance_is_between_plus_within_over_k() -> None:
    rng = np.random.default_rng(11)
    n = 4000
    for k in (1, 4, 10):
        b, c, within = _draw(rng, n, k, 0.1)
        d = np.array([np.mean(y) - np.mean(x) for x, y in zip(b, c, strict=True)])
        # σ²_B of the true per-item differences (the clipped normal shift), measured apart.
        p = 0.2 + 0.6 * rng.random(200_000)
        between = float(np.var(np.clip(p + rng.normal(0, 0.1, p.size), 0, 1) - p))
        assert np.var(d, ddof=1) == pytest.approx(between + within / k, rel=0.08)
        if k > 1:
            comp = variance_components(b, c)
            assert comp.within == pytest.approx(within, rel=0.05)
            assert comp.between == pytest.approx(between, rel=0.25)
            assert comp.unit_variance(k) == pytest.approx(np.var(d, ddof=1), rel=0.05)


def test_required_items_reach_the_power_by_simulation() -> None:
    # A normal-theory one-sided test on per-item mean differences at the planned n.
    rng = np.random.default_rng(5)
    margin, alpha, between, within = 0.05, 0.05, 0.01, 0.4
    z = stats.norm.isf(alpha)
    for k in (1, 4, 10):
        n = required_items_sampled(margin, between, within, k, alpha, 0.8)
        sd = math.sqrt(between + within / k)
        d = rng.normal(0.0, sd, (4000, n))
        lower = d.mean(axis=1) - z * d.std(axis=1, ddof=1) / math.sqrt(n)
        power = float(np.mean(lower > -margin))
        assert power == pytest.approx(0.8, abs=0.03), (k, n, power)


def test_more_items_beat_more_samples() -> None:
    between, within, margin = 0.01, 0.4, 0.05
    items = {k: required_items_sampled(margin, between, within, k) for k in (1, 2, 4, 8, 40)}
    requests = {k: n * k for k, n in items.items()}
    # Items shrink with k, but the requests (items × k) grow: at equal cost per request,
    # one sample per item is the cheapest design.
    assert list(items.values()) == sorted(items.values(), reverse=True)
    assert list(requests.values()) == sorted(requests.values())
    # Past the knee (σ²_W/k ≤ ¼ σ²_B) items barely fall: k = 160 is within 25% of the floor.
    knee = samples_knee(between, within)
    assert knee == 160
    floor = required_items_sampled(margin, between, 0.0, 1)
    assert required_items_sampled(margin, between, within, knee) <= 1.25 * floor + 1
    # With the items fixed, the samples that reach the power; none when σ²_B alone is too big.
    k = samples_for_items(items[4], margin, between, within)
    assert k is not None and k <= 4
    assert required_items_sampled(margin, between, within, k) <= items[4]
    assert samples_for_items(floor - 5, margin, between, within) is None
    assert samples_knee(0.0, within) is None


def test_t_interval_matches_scipy() -> None:
    x = [0.25, 0.5, 1.0, 0.75, 0.0, 1.0, 0.5]
    lo, hi = t_interval(x, alpha=0.1)
    ref = stats.t.interval(0.9, len(x) - 1, loc=np.mean(x), scale=stats.sem(x))
    assert (lo, hi) == pytest.approx(ref)


@pytest.mark.parametrize(("k", "n"), [(1, 227), (4, 57), (10, 23)])
def test_item_mean_gate_aa_few_false_fails_and_planned_power(k: int, n: int) -> None:
    """The gate a sampled suite uses, at the items plan asks for (``sampled_sizes`` in the
    audit), on an equal candidate: 40 seeded runs per k (the audit runs 1,000)."""
    rng = np.random.default_rng([13, k])
    verdicts = []
    for seed in range(40):
        p = 0.1 + 0.8 * rng.beta(0.7, 0.7, n)
        b = rng.binomial(k, p) / k
        c = rng.binomial(k, p) / k
        verdicts.append(evaluate_gate(b, c, metric="pass@1", kind="continuous", margin=0.1,
                                      seed=seed, value_range=(0.0, 1.0)).verdict)
    fails, passes = verdicts.count("fail"), verdicts.count("pass")
    # α = 0.05: at most 6 of 40 is P ≈ 0.01 under the nominal rate (binomial upper tail).
    assert fails <= 6
    # Planned for 80% power: the pass rate is near it (25 or more of 40: P ≈ 0.1 below).
    assert passes >= 25, (k, n, passes)
