"""The speed measurement engine: load generation, latency metrics, rate sweeps, repetitions.

Contract: pure except for time and the one ``send`` coroutine the caller hands in (the engine
never opens a socket, reads a setting or touches the store; suites and services own those).

- ``open_loop`` / ``closed_loop`` drive ``send(i)`` and time every request (``RequestRecord``).
- ``summarize`` gives TTFT/TPOT/ITL/E2E percentiles, throughput, achieved rate and goodput
  against an ``Slo``.
- ``rate_sweep`` raises the offered rate until the endpoint saturates (achieved rate falls behind
  offered) or errors pass a budget, and ``capacity_at_slo`` reads the headline figure from it.
- ``abba_order`` / ``compare_repetitions`` give counterbalanced repetitions and the ratio's CI
  from the repetitions; below ``MIN_BLOCKS`` or ``MIN_REQUESTS`` no ratio is reported.
"""

from ._load import Outcome, RequestRecord, Send, arrival_offsets, closed_loop, open_loop
from ._metrics import Slo, goodput, slo_met, summarize
from ._repeat import (
    MIN_BLOCKS,
    MIN_REQUESTS,
    RatioEstimate,
    abba_order,
    compare_repetitions,
    run_counterbalanced,
)
from ._sweep import RatePoint, SweepConfig, SweepResult, capacity_at_slo, rate_sweep

__all__ = [
    "MIN_BLOCKS",
    "MIN_REQUESTS",
    "Outcome",
    "RatePoint",
    "RatioEstimate",
    "RequestRecord",
    "Send",
    "Slo",
    "SweepConfig",
    "SweepResult",
    "abba_order",
    "arrival_offsets",
    "capacity_at_slo",
    "closed_loop",
    "compare_repetitions",
    "goodput",
    "open_loop",
    "rate_sweep",
    "run_counterbalanced",
    "slo_met",
    "summarize",
]
