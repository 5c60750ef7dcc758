"""Determinism findings through the runner, against the loopback fault server's "ok" mode (a
real HTTP server that answers chat without the logprobs the suite asks for)."""

from __future__ import annotations

import asyncio

import numpy as np

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.reports._findings import findings
from evalsvc.runner import execute
from evalsvc.runner._runner import gate_outcome
from evalsvc.suites import Analysis, load_suite
from tests.fixtures.faults import base_url, fault_server


def test_responses_without_logprobs_are_a_finding_and_smoke_says_underpowered() -> None:
    suite = load_suite("determinism-smoke")
    with fault_server() as srv:
        url = base_url(srv, "ok")

        async def sink(sample: Sample) -> None:
            pass

        result = asyncio.run(
            execute(run_id="t", baseline=EndpointRef(url=url), candidates=[EndpointRef(url=url)],
                    suites=[suite], options=RunOptions(), sink=sink)
        )
    res = result.candidates[0].suites[0]
    details = {**res.outcome.details, **res.details}
    missing = details["missing_logprobs"]
    assert missing["baseline"] > 0 and missing["candidate"] > 0
    text = "\n".join(findings({"kind": "determinism", "details": details}))
    assert "responses without the requested logprobs" in text
    assert res.outcome.metric == "unstable_rate"


def test_underpowered_gate_says_so() -> None:
    gate = load_suite("determinism-smoke").bind_gate()
    rng = np.random.default_rng(0)
    b = (rng.random(8) < 0.5).astype(float).tolist()
    out = gate_outcome(gate, Analysis(baseline=b, candidate=b), seed=0)
    assert out.verdict != "pass" and "underpowered" in out.details["underpowered"]
    big = (rng.random(400) < 0.5).astype(float).tolist()
    out = gate_outcome(gate, Analysis(baseline=big, candidate=big), seed=0)
    assert "underpowered" not in out.details
