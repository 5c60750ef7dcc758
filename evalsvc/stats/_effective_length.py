"""Effective context length and a cluster-bootstrap test of its shift.

**Effective length** (after RULER, Hsieh et al. 2024, arXiv 2404.06654, §4, which calls a
model's context "effective" up to the longest length whose score stays above a reference): the
longest tested length ``L`` such that every tested length up to ``L`` keeps at least ``ratio``
(0.85 by default) of the score at the shortest length. Requiring *every* shorter length to pass
keeps one lucky long length after a collapse from counting. It is ``None`` when the short-length
score is 0 (nothing to keep) and *censored* when the longest length passes (the true effective
length is at least that).

**Shift test.** The statistic is ``S = eff_candidate / eff_baseline``. Its sampling distribution
is estimated by a paired percentile cluster bootstrap (Efron & Tibshirani 1993, ch. 13; clusters
resampled within each length stratum, the same draws for both endpoints, so item difficulty
stays paired). With a relative ``margin`` δ: ``pass`` when the ``alpha`` quantile of ``S`` is at
least ``1 − δ``; ``fail`` when the ``1 − alpha`` quantile is below ``1 − δ``; else
``inconclusive``. ``S`` is discrete (a ratio of grid lengths), so the test is checked by seeded
simulation (``tests/stats/test_effective_length.py``), not by an asymptotic argument.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalsvc.stats._common import as_vector, check_alpha

EFFECTIVE_RATIO = 0.85
"""Share of the short-context score a length must keep to count (the issue's definition; RULER
uses an absolute reference score instead: Llama-2-7B's at 4k)."""


def scores_by_length(lengths: Sequence[int], scores: Sequence[float]) -> dict[int, float]:
    """Mean score per length."""
    sums: dict[int, list[float]] = {}
    for length, s in zip(lengths, scores, strict=True):
        sums.setdefault(int(length), []).append(float(s))
    return {k: float(np.mean(v)) for k, v in sorted(sums.items())}


def effective_length(means: dict[int, float], ratio: float = EFFECTIVE_RATIO) -> int | None:
    """The longest length keeping ≥ ``ratio`` of the shortest length's score at every length up
    to it (module docstring); ``None`` when the shortest length scores 0 or nothing is given."""
    if not means:
        return None
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    order = sorted(means)
    short = means[order[0]]
    if not short > 0:
        return None
    eff = order[0]
    for length in order[1:]:
        if means[length] >= ratio * short - 1e-12:
            eff = length
        else:
            break
    return eff


@dataclass(frozen=True)
class EffectiveLengthTest:
    """The shift test's result (module docstring). ``shift`` is ``candidate / baseline − 1``
    (``nan`` when the baseline has no effective length); ``ci`` is the two-sided ``1 − 2·alpha``
    bootstrap interval of the ratio minus 1; ``p_pass`` the bootstrap share of ``S < 1 − δ``
    (small ⇒ evidence for pass), ``p_fail`` the share of ``S ≥ 1 − δ``."""

    baseline: int | None
    candidate: int | None
    shift: float
    ci: tuple[float, float]
    verdict: str
    p_pass: float
    p_fail: float
    margin: float
    alpha: float
    n: int
    n_boot: int
    censored: bool


def effective_length_test(
    lengths: Sequence[int],
    baseline: Sequence[float],
    candidate: Sequence[float],
    clusters: Sequence[str] | None = None,
    *,
    margin: float,
    alpha: float = 0.05,
    ratio: float = EFFECTIVE_RATIO,
    n_boot: int = 2000,
    seed: int = 0,
) -> EffectiveLengthTest:
    """Non-inferiority of the candidate's effective length at relative margin ``margin``
    (module docstring). Inputs are per paired item: its length, both scores in [0, 1] and its
    cluster (items sharing a haystack; ``None``: each item its own)."""
    alpha = check_alpha(alpha)
    if not 0.0 <= margin < 1.0:
        raise ValueError(f"margin must be a relative loss in [0, 1), got {margin}")
    b = as_vector(baseline, name="baseline")
    c = as_vector(candidate, name="candidate")
    ls = np.asarray([int(x) for x in lengths], dtype=np.int64)
    if not (b.size == c.size == ls.size):
        raise ValueError("one length, one baseline and one candidate score per pair")
    n = int(b.size)
    groups = list(clusters) if clusters is not None else [str(i) for i in range(n)]
    if len(groups) != n:
        raise ValueError("one cluster per pair")
    eff_b = effective_length(scores_by_length(ls.tolist(), b.tolist()), ratio)
    eff_c = effective_length(scores_by_length(ls.tolist(), c.tolist()), ratio)
    longest = int(ls.max()) if n else 0
    censored = eff_b == longest and eff_c == longest
    nan = float("nan")
    if eff_b is None or n == 0:
        return EffectiveLengthTest(eff_b, eff_c, nan, (nan, nan), "inconclusive", 1.0, 1.0,
                                   margin, alpha, n, 0, censored)

    # Cluster sums per length stratum: a bootstrap draw picks clusters with replacement within
    # each length and recomputes both endpoints' means from the same picks (paired).
    strata: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for length in sorted(set(ls.tolist())):
        idx = np.flatnonzero(ls == length)
        keys: dict[str, list[int]] = {}
        for i in idx:
            keys.setdefault(groups[i], []).append(int(i))
        members = list(keys.values())
        strata[length] = (
            np.array([b[m].sum() for m in members]),
            np.array([c[m].sum() for m in members]),
            np.array([len(m) for m in members], dtype=float),
        )
    rng = np.random.default_rng(seed)
    draws = np.empty(n_boot)
    for k in range(n_boot):
        mb: dict[int, float] = {}
        mc: dict[int, float] = {}
        for length, (sb, sc, size) in strata.items():
            pick = rng.integers(0, size.size, size.size)
            total = size[pick].sum()
            mb[length] = float(sb[pick].sum() / total)
            mc[length] = float(sc[pick].sum() / total)
        eb = effective_length(mb, ratio)
        ec = effective_length(mc, ratio)
        if eb is None:
            draws[k] = nan
        else:
            draws[k] = (ec or 0) / eb
    draws = draws[np.isfinite(draws)]
    shift = (eff_c or 0) / eff_b - 1.0
    if draws.size == 0:
        return EffectiveLengthTest(eff_b, eff_c, shift, (nan, nan), "inconclusive", 1.0, 1.0,
                                   margin, alpha, n, 0, censored)
    lo, hi = (float(x) for x in np.quantile(draws, [alpha, 1.0 - alpha]))
    bound = 1.0 - margin
    p_pass = float(np.mean(draws < bound - 1e-12))
    p_fail = float(np.mean(draws >= bound - 1e-12))
    if lo >= bound - 1e-12:
        verdict = "pass"
    elif hi < bound - 1e-12:
        verdict = "fail"
    else:
        verdict = "inconclusive"
    return EffectiveLengthTest(
        eff_b, eff_c, shift, (lo - 1.0, hi - 1.0), verdict, p_pass, p_fail, margin, alpha, n,
        int(draws.size), censored,
    )
