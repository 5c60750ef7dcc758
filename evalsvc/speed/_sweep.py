"""A rate sweep to saturation and the capacity at an SLO read from it.

Contract: ``rate_sweep`` sends ``requests`` open-loop arrivals at each offered rate in turn
(``rates`` or a geometric ladder from ``start_rps``) and stops after the first point where the
endpoint **saturated** (achieved rate below ``(1 − saturation_tolerance)`` × offered, the
criterion of GuideLLM's sweep and of vllm-project/guidellm#242) or where the **error rate**
exceeded ``error_budget``. Each point has its own arrival seed and prompt tag (so no point reuses
another's prefix cache); the same config gives two endpoints identical arrival schedules.

``capacity_at_slo`` is the highest offered rate at which the SLO held (attainment ≥ p, the endpoint
not saturated, errors within budget) *below the first rate where it did not* — a later lucky pass
above a failure is ignored. With ``refine`` > 0 the sweep bisects between those two rates. When no
tested rate failed, the capacity is a lower bound (``capacity_is_lower_bound``).
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ._load import RequestRecord, Send, arrival_offsets, closed_loop, open_loop
from ._metrics import Slo, summarize

MakeSend = Callable[[str], Send]
"""``make_send(tag)``: a sender whose prompts carry ``tag`` (fresh per point and per warm-up)."""


@dataclass(frozen=True)
class SweepConfig:
    slo: Slo = field(default_factory=Slo)
    rates: tuple[float, ...] = ()
    """Offered rates (requests/s), ascending; empty: the ladder below."""
    start_rps: float = 1.0
    growth: float = 1.5
    max_points: int = 12
    requests: int = 40
    """Requests per rate point."""
    warmup: int = 4
    """Unrecorded requests (closed loop, concurrency ``warmup``) before the sweep."""
    arrival: Literal["poisson", "gamma"] = "poisson"
    burstiness: float = 1.0
    seed: int = 0
    saturation_tolerance: float = 0.1
    error_budget: float = 0.05
    refine: int = 0
    """Bisection steps between the last rate that held the SLO and the first that did not."""

    def __post_init__(self) -> None:
        if self.rates and any(b <= a for a, b in zip(self.rates, self.rates[1:], strict=False)):
            raise ValueError("rates must be strictly ascending")
        if any(r <= 0 for r in self.rates) or self.start_rps <= 0:
            raise ValueError("rates must be positive")
        if self.growth <= 1.0:
            raise ValueError("growth must be above 1")
        if self.requests < 2 or self.max_points < 1:
            raise ValueError("need at least 2 requests per point and 1 point")

    def ladder(self) -> list[float]:
        if self.rates:
            return list(self.rates)
        return [self.start_rps * self.growth**k for k in range(self.max_points)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "slo": self.slo.to_dict(),
            "rates": list(self.rates),
            "start_rps": self.start_rps,
            "growth": self.growth,
            "max_points": self.max_points,
            "requests": self.requests,
            "warmup": self.warmup,
            "arrival": self.arrival,
            "burstiness": self.burstiness,
            "seed": self.seed,
            "saturation_tolerance": self.saturation_tolerance,
            "error_budget": self.error_budget,
            "refine": self.refine,
        }


@dataclass
class RatePoint:
    rate: float
    summary: dict[str, Any]
    saturated: bool
    over_error_budget: bool
    slo_held: bool
    records: list[RequestRecord] = field(default_factory=list, repr=False)

    def to_dict(self, with_records: bool = False) -> dict[str, Any]:
        out = {
            "rate": self.rate,
            "saturated": self.saturated,
            "over_error_budget": self.over_error_budget,
            "slo_held": self.slo_held,
            "summary": self.summary,
        }
        if with_records:
            out["records"] = [r.to_dict() for r in self.records]
        return out


@dataclass
class SweepResult:
    config: SweepConfig
    points: list[RatePoint]
    stop_reason: str
    capacity_rps: float | None
    capacity_is_lower_bound: bool
    saturation_rps: float | None
    """The achieved rate at the first saturated point: the endpoint's service rate."""
    max_achieved_rps: float | None
    capacity_upper_rps: float | None = None
    """The first tested rate that did not hold the SLO: the capacity lies in
    [capacity_rps, capacity_upper_rps), the resolution of the rate grid."""

    def to_dict(self, with_records: bool = False) -> dict[str, Any]:
        return {
            "config": self.config.to_dict(),
            "points": [p.to_dict(with_records) for p in sorted(self.points, key=lambda p: p.rate)],
            "stop_reason": self.stop_reason,
            "capacity_rps": self.capacity_rps,
            "capacity_is_lower_bound": self.capacity_is_lower_bound,
            "saturation_rps": self.saturation_rps,
            "max_achieved_rps": self.max_achieved_rps,
            "capacity_upper_rps": self.capacity_upper_rps,
        }


async def measure_point(make_send: MakeSend, rate: float, cfg: SweepConfig, k: int) -> RatePoint:
    """One open-loop load at ``rate``; ``k`` numbers the point (its seed and prompt tag)."""
    offsets = arrival_offsets(
        cfg.requests, rate, arrival=cfg.arrival, burstiness=cfg.burstiness, seed=cfg.seed * 1009 + k
    )
    records = await open_loop(make_send(f"p{k}"), offsets.tolist())
    summary = summarize(records, cfg.slo)
    achieved, offered = summary.get("achieved_rps"), summary.get("offered_rps")
    saturated = bool(
        offered and (achieved is None or achieved < (1.0 - cfg.saturation_tolerance) * offered)
    )
    over = summary["error_rate"] > cfg.error_budget
    held = (
        not saturated
        and not over
        and summary.get("slo_attainment", 0.0) >= cfg.slo.attainment
    )
    return RatePoint(rate, summary, saturated, over, held, records)


def capacity_at_slo(points: Sequence[RatePoint]) -> tuple[float | None, bool]:
    """(capacity, is_lower_bound): the highest rate that held the SLO below the first that did
    not; (None, False) when the lowest rate already failed."""
    best: float | None = None
    for p in sorted(points, key=lambda p: p.rate):
        if not p.slo_held:
            return best, False
        best = p.rate
    return best, True


async def rate_sweep(
    make_send: MakeSend,
    cfg: SweepConfig,
    *,
    on_point: Callable[[RatePoint], Awaitable[None] | None] | None = None,
) -> SweepResult:
    """Warm up, then raise the offered rate until saturation, the error budget or the ladder's end."""
    if cfg.warmup:
        await closed_loop(make_send("warmup"), cfg.warmup, cfg.warmup)
    points: list[RatePoint] = []
    stop = "ladder exhausted before saturation"

    async def run(rate: float) -> RatePoint:
        point = await measure_point(make_send, rate, cfg, len(points))
        points.append(point)
        if on_point is not None:
            res = on_point(point)
            if res is not None:
                await res
        return point

    for rate in cfg.ladder():
        point = await run(rate)
        if point.over_error_budget:
            stop = (
                f"error rate {point.summary['error_rate']:.0%} above the budget "
                f"{cfg.error_budget:.0%} at {rate:.3g} req/s"
            )
            break
        if point.saturated:
            stop = (
                f"saturated at {rate:.3g} req/s offered: achieved "
                f"{point.summary.get('achieved_rps') or 0:.3g} req/s"
            )
            break
    for _ in range(cfg.refine):
        ordered = sorted(points, key=lambda p: p.rate)
        first_fail = next((i for i, p in enumerate(ordered) if not p.slo_held), None)
        if first_fail is None or first_fail == 0:
            break
        lo, hi = ordered[first_fail - 1].rate, ordered[first_fail].rate
        if hi / lo < 1.02:  # finer than the noise of one point
            break
        await run(math.sqrt(lo * hi))
    capacity, lower = capacity_at_slo(points)
    upper = next((p.rate for p in sorted(points, key=lambda p: p.rate) if not p.slo_held), None)
    sat = next((p for p in sorted(points, key=lambda p: p.rate) if p.saturated), None)
    achieved = [a for p in points if (a := p.summary.get("achieved_rps")) is not None]
    return SweepResult(
        config=cfg,
        points=sorted(points, key=lambda p: p.rate),
        stop_reason=stop,
        capacity_rps=capacity,
        capacity_is_lower_bound=lower,
        saturation_rps=sat.summary.get("achieved_rps") if sat is not None else None,
        max_achieved_rps=max(achieved) if achieved else None,
        capacity_upper_rps=upper,
    )
