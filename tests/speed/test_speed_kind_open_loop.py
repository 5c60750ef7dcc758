"""The speed kind in open-loop mode (``rates``), through the runner, against two real loopback
queue servers with known service times: capacity at SLO per endpoint, goodput, the findings."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import execute
from evalsvc.suites import SuiteSpec
from evalsvc.suites.kinds.speed import SpeedSuite

from .conftest import queue_servers


@pytest.fixture
def two_queues() -> Iterator[tuple[str, str]]:
    # Saturation at 10 and 100 req/s: at the top rate (15 req/s) the fast one is 15% busy, so a
    # loaded host's scheduling delays cannot push it past the SLO (at 40% busy they once did).
    with queue_servers("100", "10") as (slow, fast):
        yield slow, fast


def test_open_loop_rates_give_capacity_at_slo(two_queues: tuple[str, str]) -> None:
    base, cand = two_queues
    suite = SpeedSuite(SuiteSpec(
        name="speed-open", kind="speed", seed=4,
        params={"rates": [3, 6, 15], "requests": 30, "max_tokens": 4, "prompt_chars": 200,
                "warmup": 2, "slo_ttft_ms": 500, "slo_attainment": 0.9},
        gate={"enabled": False},
    ))
    samples: list[Sample] = []

    async def sink(s: Sample) -> None:
        samples.append(s)

    result = asyncio.run(execute(
        run_id="open", baseline=EndpointRef(url=base, model="queue-model"),
        candidates=[EndpointRef(url=cand, model="queue-model")], suites=[suite],
        options=RunOptions(), sink=sink,
    ))
    res = result.candidates[0].suites[0]
    assert res.n_errors == 0 and res.n_planned == 90
    assert len([s for s in samples if s.endpoint == "baseline"]) == 90
    d = res.details
    cap = d["capacity"]
    # The 100 ms server cannot serve 15 req/s; the 10 ms one holds the SLO there (the loaded
    # test host's client tops out well above that).
    assert cap["baseline"] in (3, 6) and cap["candidate"] == 15
    assert cap["candidate_lower_bound"] and not cap["baseline_lower_bound"]
    assert cap["ratio"] == pytest.approx(cap["candidate"] / cap["baseline"])
    top = d["rates"][-1]
    assert top["baseline"]["saturated"] and not top["candidate"]["saturated"]
    assert top["candidate"]["goodput_rps"] > top["baseline"]["goodput_rps"]
    entry = {"details": d}
    assert suite.headline(entry) == d["summary"]
    assert d["summary"].startswith("capacity at SLO (TTFT ≤ 500 ms for 90% of requests)")
    md = "\n".join(suite.findings(entry)[0].markdown)
    assert "(saturated)" in md and "goodput" in md


def test_open_loop_withholds_the_ratio_below_the_minimum_sample() -> None:
    suite = SpeedSuite(SuiteSpec(name="s", kind="speed", params={"rates": [1.0], "requests": 5}))
    rec = [Sample(suite="s", item_id=f"r1/r{i}", endpoint=role, score=1.0, ttft_s=0.01,
                  latency_s=0.02, completion_tokens=4,
                  data={"rate": 1.0, "t_sched": i, "t_start": i, "t_end": i + 0.02})
           for role in ("baseline", "candidate") for i in range(5)]
    a = suite.analyze([s for s in rec if s.endpoint == "baseline"],
                      [s for s in rec if s.endpoint == "candidate"])
    assert a.details["capacity"]["ratio"] is None
    assert "5 requests per rate" in a.details["capacity"]["ratio_withheld"]
