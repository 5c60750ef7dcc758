"""Counterbalanced repetitions (A B B A) and the ratio's confidence interval from them.

Contract: ``abba_order(blocks)`` is the measurement order, baseline first: each block is
baseline, candidate, candidate, baseline, so a drift of the machine that is linear over a block
cancels from the block's ratio (the counterbalanced rerun of vllm-project/vllm-ascend#17160
showed a claimed regression to be run-order drift). ``run_counterbalanced`` executes it and
records the order. ``compare_repetitions`` takes one value per measurement (e.g. capacity at
SLO), forms one ratio per block, mean(candidate) / mean(baseline), and gives the geometric mean
of the block ratios with a Student-t interval on their logs (df = blocks − 1): the spread between
repetitions, not the spread between requests of one load, is what the interval reflects. Medians
of each side are reported beside it. No ratio when there are fewer than ``MIN_BLOCKS`` blocks,
when a measurement has fewer than ``MIN_REQUESTS`` requests per point, or when a value is missing
or zero (the reason is given instead).

Capacity is read off a grid of rates, so a measurement only brackets it: [capacity, first rate
that failed). When repetitions land on the same rungs their spread is zero and the t-interval
collapses to a point, overstating the precision; given the brackets (``*_upper``), the interval
is widened to at least the ratio's bracket from the medians, [median c / median upper b,
median upper c / median b], and ``resolution_limited`` says so.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

MIN_BLOCKS = 2
"""Two blocks are the fewest that give the repetitions' spread (df = 1, a wide interval)."""
MIN_REQUESTS = 20
"""Requests per rate point below which one load's attainment is too coarse (steps of > 5%)."""

T = TypeVar("T")


def abba_order(blocks: int) -> list[str]:
    if blocks < 1:
        raise ValueError("at least one block")
    return ["baseline", "candidate", "candidate", "baseline"] * blocks


async def run_counterbalanced(
    blocks: int, measure: Callable[[str, int], Awaitable[T]]
) -> list[tuple[str, int, T]]:
    """Call ``measure(role, repetition)`` in ABBA order; return (role, repetition, result) in
    the order run (repetition counts per role from 0)."""
    seen = {"baseline": 0, "candidate": 0}
    out: list[tuple[str, int, T]] = []
    for role in abba_order(blocks):
        rep = seen[role]
        seen[role] += 1
        out.append((role, rep, await measure(role, rep)))
    return out


@dataclass
class RatioEstimate:
    baseline_median: float | None
    candidate_median: float | None
    ratio: float | None
    ci_low: float | None
    ci_high: float | None
    confidence: float
    blocks: int
    block_ratios: list[float]
    reason: str | None = None
    resolution_limited: bool = False
    """The interval is the rate grid's bracket, wider than the repetitions' t-interval."""
    """Why no ratio is reported (``ratio`` is None then)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "baseline_median": self.baseline_median,
            "candidate_median": self.candidate_median,
            "ratio": self.ratio,
            "ci": [self.ci_low, self.ci_high] if self.ratio is not None else None,
            "confidence": self.confidence,
            "blocks": self.blocks,
            "block_ratios": self.block_ratios,
            "reason": self.reason,
            "resolution_limited": self.resolution_limited,
        }


def _median(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def compare_repetitions(
    baseline: Sequence[float | None],
    candidate: Sequence[float | None],
    *,
    confidence: float = 0.9,
    min_blocks: int = MIN_BLOCKS,
    requests_per_point: int | None = None,
    baseline_upper: Sequence[float | None] | None = None,
    candidate_upper: Sequence[float | None] | None = None,
) -> RatioEstimate:
    """Ratio candidate/baseline from ABBA measurements: ``baseline[2k], baseline[2k+1]`` and
    ``candidate[2k], candidate[2k+1]`` are block ``k``'s."""
    import scipy
    if len(baseline) != len(candidate) or len(baseline) % 2:
        raise ValueError("ABBA needs two measurements per side per block")
    blocks = len(baseline) // 2
    est = RatioEstimate(
        _median(baseline), _median(candidate), None, None, None, confidence, blocks, []
    )
    if requests_per_point is not None and requests_per_point < MIN_REQUESTS:
        est.reason = f"{requests_per_point} requests per rate point (< {MIN_REQUESTS})"
        return est
    if blocks < min_blocks:
        est.reason = f"{blocks} ABBA block(s) (< {min_blocks}): no spread between repetitions"
        return est
    logs = []
    for k in range(blocks):
        b = baseline[2 * k : 2 * k + 2]
        c = candidate[2 * k : 2 * k + 2]
        if any(v is None or v <= 0 for v in (*b, *c)):
            est.reason = f"block {k + 1} has a missing or zero measurement"
            return est
        r = (sum(c) / 2) / (sum(b) / 2)  # type: ignore[arg-type]
        est.block_ratios.append(r)
        logs.append(math.log(r))
    arr = np.asarray(logs)
    mean = float(arr.mean())
    sem = float(arr.std(ddof=1)) / math.sqrt(blocks)
    half = float(scipy.stats.t.ppf(0.5 + confidence / 2, df=blocks - 1)) * sem
    est.ratio, est.ci_low, est.ci_high = math.exp(mean), math.exp(mean - half), math.exp(mean + half)
    if baseline_upper is not None and candidate_upper is not None:
        ub, uc = _median(baseline_upper), _median(candidate_upper)
        mb, mc = est.baseline_median, est.candidate_median
        # A missing upper bound (no tested rate failed) leaves that side open: no widening there.
        lo = mc / ub if mc is not None and ub else None
        hi = uc / mb if uc is not None and mb else None
        if lo is not None and lo < est.ci_low:
            est.ci_low, est.resolution_limited = lo, True
        if hi is not None and hi > est.ci_high:
            est.ci_high, est.resolution_limited = hi, True
    return est
