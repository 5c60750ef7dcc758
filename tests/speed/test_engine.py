"""The speed engine: arrivals, goodput, capacity at SLO, ABBA repetitions, and a rate sweep
against a real loopback server whose saturation rate is known in advance."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from evalsvc.domain import EndpointRef
from evalsvc.endpoints import EndpointClient
from evalsvc.speed import (
    MIN_REQUESTS,
    Outcome,
    RatePoint,
    RequestRecord,
    Send,
    Slo,
    SweepConfig,
    abba_order,
    arrival_offsets,
    capacity_at_slo,
    compare_repetitions,
    goodput,
    rate_sweep,
    run_counterbalanced,
    slo_met,
    summarize,
)


def rec(i: int, start: float, ttft: float, e2e: float, tokens: int = 11,
        error: str | None = None) -> RequestRecord:
    return RequestRecord(i, start, start, start + e2e, ttft, tokens, [], error)


def test_arrivals_poisson_and_gamma_follow_their_distributions() -> None:
    rate = 8.0
    pois = arrival_offsets(4001, rate, seed=3)
    gaps = np.diff(pois)
    assert pois[0] == 0.0
    # Exponential gaps with mean 1/rate (KS test against scipy's exponential).
    assert stats.kstest(gaps, "expon", args=(0, 1 / rate)).pvalue > 0.01
    bursty = np.diff(arrival_offsets(4001, rate, arrival="gamma", burstiness=0.25, seed=3))
    assert stats.kstest(bursty, "gamma", args=(0.25, 0, 1 / (rate * 0.25))).pvalue > 0.01
    # Same mean rate, burstier: coefficient of variation 1/sqrt(burstiness) = 2.
    assert bursty.mean() == pytest.approx(1 / rate, rel=0.1)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)
    # Same seed, same schedule (both endpoints get identical arrivals).
    assert np.array_equal(arrival_offsets(50, 3.0, seed=9), arrival_offsets(50, 3.0, seed=9))


def test_goodput_and_attainment_against_known_latencies() -> None:
    slo = Slo(ttft_ms=200, tpot_ms=50, attainment=0.9)
    records = [
        rec(0, 0.0, 0.100, 0.600),  # TPOT (0.6-0.1)/10 = 50 ms: meets both (bounds inclusive)
        rec(1, 1.0, 0.250, 0.500),  # TTFT 250 ms > 200: misses
        rec(2, 2.0, 0.150, 1.150),  # TPOT 100 ms > 50: misses
        rec(3, 3.0, 0.050, 0.250),  # meets
        rec(4, 4.0, 0.050, 0.250, error="HTTP 500"),  # an error never meets the SLO
        rec(5, 5.0, 0.010, 0.010, tokens=1),  # one token: no TPOT, TTFT meets
    ]
    assert [slo_met(r, slo) for r in records] == [True, False, False, True, False, True]
    duration = 5.010 - 0.0
    assert goodput(records, slo) == pytest.approx(3 / duration)
    s = summarize(records, slo)
    assert s["slo_attainment"] == pytest.approx(3 / 6)
    assert s["goodput_rps"] == pytest.approx(3 / duration)
    assert s["n_errors"] == 1 and s["error_rate"] == pytest.approx(1 / 6)
    ok_ttft_ms = [100, 250, 150, 50, 10]
    assert s["ttft_ms"]["p50"] == pytest.approx(np.percentile(ok_ttft_ms, 50))
    assert s["ttft_ms"]["p90"] == pytest.approx(np.percentile(ok_ttft_ms, 90))
    assert s["tpot_ms"]["p50"] == pytest.approx(np.percentile([50, 25, 100, 20], 50))
    assert s["e2e_s"]["p99"] == pytest.approx(np.percentile([0.6, 0.5, 1.15, 0.25, 0.01], 99))
    # Five good requests ended at 0.6, 1.5, 3.15, 3.25, 5.01: four gaps over 4.41 s.
    assert s["achieved_rps"] == pytest.approx(4 / (5.01 - 0.6))
    assert s["offered_rps"] == pytest.approx(5 / 5.0)  # rec() sends exactly on schedule
    assert s["scheduled_rps"] == pytest.approx(5 / 5.0) and s["send_lag_max_s"] == 0.0
    # Only TTFT bound: request 2 now meets it.
    assert summarize(records, Slo(ttft_ms=200))["slo_attainment"] == pytest.approx(4 / 6)


def point(rate: float, held: bool) -> RatePoint:
    return RatePoint(rate, {}, saturated=False, over_error_budget=False, slo_held=held)


def test_capacity_is_the_last_pass_below_the_first_failure() -> None:
    assert capacity_at_slo([point(1, True), point(2, True), point(4, False)]) == (2, False)
    # A lucky pass above a failure does not count.
    assert capacity_at_slo([point(1, True), point(2, False), point(4, True)]) == (1, False)
    assert capacity_at_slo([point(1, False), point(2, False)]) == (None, False)
    assert capacity_at_slo([point(1, True), point(2, True)]) == (2, True)  # a lower bound


async def test_abba_order_is_recorded() -> None:
    assert abba_order(1) == ["baseline", "candidate", "candidate", "baseline"]
    calls: list[tuple[str, int]] = []

    async def measure(role: str, rep: int) -> float:
        calls.append((role, rep))
        return 1.0

    out = await run_counterbalanced(2, measure)
    assert calls == [("baseline", 0), ("candidate", 0), ("candidate", 1), ("baseline", 1),
                     ("baseline", 2), ("candidate", 2), ("candidate", 3), ("baseline", 3)]
    assert [(r, k) for r, k, _ in out] == calls


def test_ratio_needs_enough_blocks_and_requests() -> None:
    one = compare_repetitions([10, 10], [20, 20])
    assert one.ratio is None and "block" in (one.reason or "")
    assert one.baseline_median == 10 and one.candidate_median == 20
    few = compare_repetitions([10, 10, 10, 10], [20, 20, 20, 20],
                              requests_per_point=MIN_REQUESTS - 1)
    assert few.ratio is None and "requests" in (few.reason or "")
    zero = compare_repetitions([10, 10, 10, 10], [20, None, 20, 20])
    assert zero.ratio is None and "missing" in (zero.reason or "")
    ok = compare_repetitions([10, 12, 11, 9], [20, 22, 21, 19])
    assert ok.ratio is not None and ok.ci_low is not None and ok.ci_high is not None
    assert ok.ci_low < ok.ratio < ok.ci_high
    assert ok.block_ratios == pytest.approx([21 / 11, 20 / 10])


def test_abba_interval_covers_and_cancels_linear_drift_by_simulation() -> None:
    """Seeded simulation: the machine slows linearly over the session (drift 3% per
    measurement) and each measurement has 5% log-normal noise. ABBA's 90% t-interval on block
    log-ratios covers the true ratio ~90% of the time; the naive order (B C B C ...) is biased."""
    rng = np.random.default_rng(20261201)
    true_ratio, blocks, sims, drift, noise = 1.3, 3, 4000, -0.03, 0.05
    covered, naive_bias, abba_bias = 0, [], []
    for _ in range(sims):
        t = np.arange(4 * blocks)
        machine = np.exp(drift * t + rng.normal(0, noise, size=t.size))
        order = abba_order(blocks)
        b = [100 * machine[i] for i, r in enumerate(order) if r == "baseline"]
        c = [100 * true_ratio * machine[i] for i, r in enumerate(order) if r == "candidate"]
        est = compare_repetitions(b, c)
        assert est.ci_low is not None and est.ci_high is not None and est.ratio is not None
        covered += est.ci_low <= true_ratio <= est.ci_high
        abba_bias.append(math.log(est.ratio / true_ratio))
        # Naive alternation B C B C: the candidate always runs later, on a slower machine.
        naive_b = [100 * machine[i] for i in range(0, 4 * blocks, 2)]
        naive_c = [100 * true_ratio * machine[i] for i in range(1, 4 * blocks, 2)]
        naive_bias.append(math.log(np.mean(naive_c) / np.mean(naive_b) / true_ratio))
    assert 0.87 <= covered / sims <= 0.93
    assert abs(np.mean(abba_bias)) < 0.005
    assert np.mean(naive_bias) == pytest.approx(drift, abs=0.005)


def client_send(client: EndpointClient, tag: str) -> Send:
    async def send(i: int) -> Outcome:
        out = await client.complete(f"{tag}-{i}", max_tokens=4, stream=True)
        return Outcome(out.ttft_s, out.completion_tokens or 0, out.itl_s, out.error)

    return send


@pytest.mark.parametrize("queue_server", [50.0], indirect=True)
async def test_rate_sweep_finds_the_known_saturation_rate(queue_server: str) -> None:
    """One FIFO server, 50 ms per request: it can serve at most 20 req/s (fewer on a loaded
    host, which only adds time). The sweep climbs by ×1.25 from 8 req/s and must stop at the
    first saturated point, reading the saturation off that point's achieved rate, never above
    what the server can serve. How close to 20 it lands is a speed, measured where speeds
    are: ``benchmarks/rate_sweep_saturation.py`` (docs/benchmarks.md); at a load of 13 on 2
    cores this host read 13.8, which an assertion of 20 ± 2 called a failure."""
    client = EndpointClient(EndpointRef(url=queue_server, model="queue-model"), concurrency=512)
    cfg = SweepConfig(
        slo=Slo(ttft_ms=250, attainment=0.9), start_rps=8.0, growth=1.25, max_points=10,
        requests=80, warmup=4, seed=7,
    )
    try:
        result = await rate_sweep(lambda tag: client_send(client, tag), cfg)
    finally:
        await client.aclose()
    seen = [(p.rate, p.summary.get("offered_rps"), p.summary.get("achieved_rps"),
             p.summary.get("send_lag_max_s")) for p in result.points]
    assert result.stop_reason.startswith("saturated"), (result.stop_reason, seen)
    last = result.points[-1]
    assert last.saturated and all(not p.saturated for p in result.points[:-1]), seen
    # The saturation is the achieved rate of the first saturated point, judged against the
    # realised arrival rate of that point's draw, and a FIFO of 50 ms cannot beat 20 req/s
    # (5% for the clock's edges over 80 requests).
    assert result.saturation_rps == pytest.approx(last.summary["achieved_rps"]), seen
    assert 0 < result.saturation_rps <= 20.0 * 1.05, seen
    assert last.summary["offered_rps"] > result.saturation_rps
    assert all(p.summary["n_errors"] == 0 for p in result.points)
    # The SLO (TTFT ≤ 250 ms for 90%) fails at saturation, where the queue grows: on any host,
    # since a loaded host only adds latency.
    assert not result.points[-1].slo_held, seen
    # The capacity is read off the measured points: the highest rate below the first that missed
    # the SLO. On an idle host that is a rate between 8 and 20 req/s; a host stalled by other
    # work (a CI run beside two vLLM servers on 2 cores) can miss it even at 40% utilisation,
    # and then there is no capacity, only its upper bound, the lowest rate.
    first_fail = next(i for i, p in enumerate(result.points) if not p.slo_held)
    assert result.capacity_upper_rps == result.points[first_fail].rate
    assert not result.capacity_is_lower_bound
    if first_fail == 0:
        assert result.capacity_rps is None
    else:
        assert result.capacity_rps == result.points[first_fail - 1].rate
        assert 8.0 <= result.capacity_rps < last.rate


def test_identical_repetitions_get_the_rate_grids_bracket_not_a_point() -> None:
    """Every repetition on the same rungs: the t-interval collapses; the bracket does not."""
    est = compare_repetitions([10, 10, 10, 10], [20, 20, 20, 20],
                              baseline_upper=[15, 15, 15, 15], candidate_upper=[30, 30, 30, 30])
    assert est.ratio == pytest.approx(2.0)
    assert est.resolution_limited
    assert (est.ci_low, est.ci_high) == pytest.approx((20 / 15, 30 / 10))
    # A candidate that never failed (no upper bound) leaves the interval open above: not widened.
    open_top = compare_repetitions([10, 10, 10, 10], [20, 20, 20, 20],
                                   baseline_upper=[15] * 4, candidate_upper=[None] * 4)
    assert open_top.ci_low == pytest.approx(20 / 15) and open_top.ci_high == pytest.approx(2.0)
    # Noisy repetitions whose t-interval is already wider keep it.
    wide = compare_repetitions([10, 14, 9, 15], [20, 20, 30, 12],
                               baseline_upper=[11, 15, 10, 16], candidate_upper=[21, 21, 31, 13])
    t_only = compare_repetitions([10, 14, 9, 15], [20, 20, 30, 12])
    assert wide.ci_low == pytest.approx(t_only.ci_low) and not wide.resolution_limited
