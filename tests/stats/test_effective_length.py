"""Effective length and its shift test, checked by definition cases and seeded simulation."""

from __future__ import annotations

import numpy as np
import pytest

from evalsvc.stats import effective_length, effective_length_test, scores_by_length

LENGTHS = (1024, 2048, 3072, 4096)


def test_definition_cases() -> None:
    assert effective_length({1024: 0.8, 2048: 0.7, 3072: 0.5, 4096: 0.9}) == 2048
    # 0.68 = 0.85 x 0.8 is kept; a later recovery after a failed length does not count.
    assert effective_length({1024: 0.8, 2048: 0.68, 3072: 0.6}) == 2048
    assert effective_length({1024: 0.5, 2048: 0.5}) == 2048
    assert effective_length({1024: 0.0, 2048: 0.5}) is None
    assert effective_length({}) is None
    assert effective_length({1024: 0.5, 2048: 0.3}, ratio=0.5) == 2048
    assert scores_by_length([2, 1, 2], [1.0, 0.0, 0.0]) == {1: 0.0, 2: 0.5}
    with pytest.raises(ValueError):
        effective_length({1: 1.0}, ratio=0.0)


def _draw(rng: np.random.Generator, curve: dict[int, float], per: int, clusters: int
          ) -> tuple[list[int], np.ndarray, list[str]]:
    lengths, p, groups = [], [], []
    for n, acc in curve.items():
        for i in range(per):
            lengths.append(n)
            p.append(acc)
            groups.append(f"{n}-{i % clusters}")
    return lengths, np.asarray(p), groups


def test_estimate_recovers_the_true_effective_length() -> None:
    # True curve: 0.8 at 1k; 2k keeps 94% (in), 3k 62% (out): effective length 2048.
    curve = {1024: 0.8, 2048: 0.75, 3072: 0.5, 4096: 0.3}
    rng = np.random.default_rng(20)
    hits = 0
    reps = 400
    for _ in range(reps):
        lengths, p, _ = _draw(rng, curve, 200, 20)
        scores = (rng.random(p.size) < p).astype(float)
        hits += effective_length(scores_by_length(lengths, scores.tolist())) == 2048
    # With 200 items per length the 2k step (0.75 vs the 0.68 bound) is kept in ~95% of runs
    # and 3k (0.5) never; misses are the 2k step's sampling error, not bias.
    assert hits / reps > 0.9


def _paired(rng: np.random.Generator, curve_b: dict[int, float], curve_c: dict[int, float],
            per: int, flip: float) -> tuple[list[int], np.ndarray, np.ndarray, list[str]]:
    """Paired binary outcomes: the candidate keeps the baseline's outcome except with
    probability ``flip``, and is shifted to its own curve where the curves differ."""
    lengths, pb, groups = _draw(rng, curve_b, per, 10)
    pc = np.asarray([curve_c[n] for n in lengths])
    u = rng.random(pb.size)
    b = (u < pb).astype(float)
    c = (u < pc).astype(float)
    noise = rng.random(b.size) < flip
    c[noise] = (rng.random(int(noise.sum())) < pc[noise]).astype(float)
    return lengths, b, c, groups


def test_the_gate_rarely_fails_an_equal_candidate() -> None:
    # Both endpoints on the same flat curve (a long-context-capable model), with 10% of outcomes
    # redrawn on the candidate (non-deterministic serving): a false fail needs 95% of the
    # bootstrap ratios below 0.8.
    curve = {n: 0.7 for n in LENGTHS}
    rng = np.random.default_rng(21)
    verdicts = []
    for k in range(60):
        lengths, b, c, groups = _paired(rng, curve, curve, 40, 0.1)
        t = effective_length_test(lengths, b, c, groups, margin=0.2, n_boot=300, seed=k)
        verdicts.append(t.verdict)
    assert verdicts.count("fail") / len(verdicts) <= 0.05
    lengths, b, _, groups = _paired(rng, curve, curve, 40, 0.0)
    same = effective_length_test(lengths, b, b, groups, margin=0.2, n_boot=300)
    assert same.verdict == "pass" and same.shift == 0.0 and same.ci == (0.0, 0.0)


def test_the_gate_finds_a_loss_at_the_longest_length() -> None:
    # The candidate collapses at 4k only (0.7 → 0.2): the effective length drops one step,
    # 4096 → 3072 (−25%, beyond the 20% margin). The test never passes it; it fails it about
    # half the time at 200 items per length (measured: 11 of 20 with these seeds, 2 of 20 at
    # 100 per length), because the baseline's own effective length is uncertain on a flat
    # curve: the effective-length gate needs large suites, docs/suites.md says so.
    base = {n: 0.7 for n in LENGTHS}
    cand = {**base, 4096: 0.2}
    rng = np.random.default_rng(22)
    verdicts = []
    for k in range(20):
        lengths, b, c, groups = _paired(rng, base, cand, 200, 0.0)
        t = effective_length_test(lengths, b, c, groups, margin=0.2, n_boot=300, seed=k)
        verdicts.append(t.verdict)
        assert t.candidate is not None and t.candidate <= 3072
    assert verdicts.count("fail") >= 6
    assert "pass" not in verdicts


def test_no_effective_length_without_a_short_score() -> None:
    t = effective_length_test([1, 2], [0.0, 0.0], [0.0, 1.0], margin=0.2)
    assert t.baseline is None and t.verdict == "inconclusive"
    with pytest.raises(ValueError):
        effective_length_test([1], [1.0], [1.0], margin=1.0)
