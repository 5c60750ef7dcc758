"""Latency and throughput of one load: percentiles, achieved rate, SLO attainment and goodput.

Contract: pure functions over ``RequestRecord`` lists. Definitions (``vllm bench serve``):
TTFT, TPOT = (E2E − TTFT)/(tokens − 1), ITL (gaps between streamed chunks), E2E latency;
percentiles with numpy's linear interpolation. **Goodput** is the number of requests that met
every objective of the SLO per second of the load's duration (vLLM PR #8886, ``--goodput``;
DistServe, Zhong et al., OSDI 2024); an errored request never meets it. **SLO attainment** is the
share of *all* sent requests that met it, so errors count against it.

**Achieved rate** is the completion rate between the first and the last completion,
``(n_ok − 1) / (last end − first end)``; **offered rate** is the realised arrival rate,
``(n − 1) / (last send − first send)`` (``scheduled_rps`` is the draw's own rate and
``send_lag_max_s`` how far the sender fell behind it). Below saturation completions mirror arrivals and
the two agree whatever the randomness of one draw; at saturation the server is busy throughout
and the achieved rate is its service rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._load import RequestRecord

PERCENTILES = (50, 90, 95, 99)


@dataclass(frozen=True)
class Slo:
    """Service-level objectives: per-request TTFT and TPOT bounds, met by ``attainment`` of
    requests (``None`` bounds are not checked)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None
    attainment: float = 0.9

    def __post_init__(self) -> None:
        if not 0.0 < self.attainment <= 1.0:
            raise ValueError("attainment must be in (0, 1]")
        for v in (self.ttft_ms, self.tpot_ms):
            if v is not None and v <= 0:
                raise ValueError("SLO bounds must be positive")

    def describe(self) -> str:
        parts = []
        if self.ttft_ms is not None:
            parts.append(f"TTFT ≤ {self.ttft_ms:g} ms")
        if self.tpot_ms is not None:
            parts.append(f"TPOT ≤ {self.tpot_ms:g} ms")
        return f"{' and '.join(parts) or 'no latency bound'} for {self.attainment:.0%} of requests"

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_ms": self.ttft_ms, "tpot_ms": self.tpot_ms, "attainment": self.attainment}


def slo_met(rec: RequestRecord, slo: Slo) -> bool:
    """Whether one request met every objective (an error never does)."""
    if rec.error is not None:
        return False
    if slo.ttft_ms is not None and (rec.ttft_s is None or rec.ttft_s * 1000.0 > slo.ttft_ms):
        return False
    tp = rec.tpot_s
    # A one-token answer has no TPOT: only its TTFT can be held against it.
    return not (slo.tpot_ms is not None and tp is not None and tp * 1000.0 > slo.tpot_ms)


def _duration(records: Sequence[RequestRecord]) -> float:
    return max(r.t_end for r in records) - min(r.t_start for r in records)


def goodput(records: Sequence[RequestRecord], slo: Slo) -> float | None:
    """Requests per second that met the SLO, over the load's duration."""
    if not records:
        return None
    dur = _duration(records)
    return sum(slo_met(r, slo) for r in records) / dur if dur > 0 else None


def _pct(values: Sequence[float], scale: float) -> dict[str, float]:
    if len(values) == 0:
        return {}
    arr = np.asarray(values, dtype=float) * scale
    out = {"mean": float(arr.mean())}
    for q, v in zip(PERCENTILES, np.percentile(arr, PERCENTILES), strict=True):
        out[f"p{q}"] = float(v)
    return out


def summarize(records: Sequence[RequestRecord], slo: Slo | None = None) -> dict[str, Any]:
    """Everything one load measured, JSON-ready."""
    n = len(records)
    ok = [r for r in records if r.error is None]
    out: dict[str, Any] = {"n": n, "n_ok": len(ok), "n_errors": n - len(ok)}
    out["error_rate"] = (n - len(ok)) / n if n else 0.0
    if n >= 2:
        # Offered = what the endpoint was sent: actual send times, so a load generator that fell
        # behind its schedule (a starved event loop) is not mistaken for a saturated endpoint.
        span = max(r.t_start for r in records) - min(r.t_start for r in records)
        out["offered_rps"] = (n - 1) / span if span > 0 else None
        sched = max(r.t_sched for r in records) - min(r.t_sched for r in records)
        out["scheduled_rps"] = (n - 1) / sched if sched > 0 else None
        out["send_lag_max_s"] = max(r.t_start - r.t_sched for r in records)
    if not ok:
        return out
    dur = _duration(ok)
    ends = sorted(r.t_end for r in ok)
    tokens = sum(r.output_tokens for r in ok)
    out.update(
        {
            "duration_s": dur,
            "ttft_ms": _pct([r.ttft_s for r in ok if r.ttft_s is not None], 1000.0),
            "tpot_ms": _pct([t for r in ok if (t := r.tpot_s) is not None], 1000.0),
            "itl_ms": _pct([x for r in ok for x in r.itl_s], 1000.0),
            "e2e_s": _pct([r.latency_s for r in ok], 1.0),
            "output_tokens": tokens,
            "output_tok_s": tokens / dur if dur > 0 else None,
            "request_rps": len(ok) / dur if dur > 0 else None,
            "achieved_rps": (len(ok) - 1) / (ends[-1] - ends[0])
            if len(ok) >= 2 and ends[-1] > ends[0]
            else None,
        }
    )
    if slo is not None:
        met = sum(slo_met(r, slo) for r in records)
        out["slo_attainment"] = met / n
        out["goodput_rps"] = met / _duration(records) if _duration(records) > 0 else None
    return out
