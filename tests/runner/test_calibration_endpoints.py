"""Adaptive difficulty on the real local endpoints (issue 19's test): calibration picks other
reasoning levels for the bf16 endpoint than for a loopback server that answers every item
correctly (which must move to the hardest levels), and bf16 against itself never fails at the
levels chosen for it. Skipped on hosts too slow for the endpoint tier (tests/conftest.py); the
sizes are small, so on such a run bf16 against itself may read inconclusive rather than pass.

A measurement of the model (which levels SmolLM2-135M solves on this host's bf16), so it runs in
the long tier (``make test-endpoints``; tests/conftest.py's ``_LONG_MEASUREMENTS``), like its
llama.cpp twin ``test_calibration_llamacpp.py``: 59 s of the second vLLM group's bf16 time under
a `.ci/run`. The calibration path it goes through (the pilot walking the levels, the band, the
move of a perfect baseline to the hardest level, the gate on the chosen levels only) is checked
in ``make test`` against loopback level servers of known accuracy by
``tests/runner/test_calibration_loopback.py``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import execute
from evalsvc.suites import SuiteSpec, pilot_seed, suite_kinds
from tests.runner.level_server import level_server

pytestmark = [pytest.mark.endpoints, pytest.mark.slow, pytest.mark.timeout(3600)]

SEED = 23
FAMILIES = ("arithmetic", "variable_tracking", "dates", "lists")


def _suite() -> Any:
    spec = SuiteSpec.model_validate({
        "name": "calib-real", "kind": "reasoning", "seed": SEED,
        "calibrate": {"pilot_n": 10},
        "params": {"n": 24, "max_tokens": 128,
                   "tasks": [{"family": f, "level": 1} for f in FAMILIES]},
    })
    return suite_kinds()["reasoning"](spec)


def _run(base: str, cand: str) -> Any:
    async def sink(sample: Sample) -> None:
        pass

    return asyncio.run(execute(
        run_id="calib", baseline=EndpointRef(url=base), candidates=[EndpointRef(url=cand)],
        suites=[_suite()], options=RunOptions(concurrency=4), sink=sink,
    ))


def test_bf16_calibrates_below_a_perfect_server_and_passes_itself(local_endpoints: Any) -> None:
    bf16 = local_endpoints.baseline
    real = _run(bf16, bf16).candidates[0].suites[0]
    with level_server(dict.fromkeys(range(1, 6), 1.0), [SEED, pilot_seed(SEED)],
                      per_level=200) as perfect:
        ideal = _run(perfect.url, perfect.url).candidates[0].suites[0]
    assert ideal.details["calibration"]["chosen"] == [f"{f} L5" for f in FAMILIES]
    chosen = real.details["calibration"]["chosen"]
    assert chosen != ideal.details["calibration"]["chosen"]
    levels = [int(label.rsplit("L", 1)[1]) for label in chosen]
    assert max(levels) < 5  # SmolLM2-135M does not solve level 5 of any family
    assert real.verdict != "fail" and real.n_errors == 0
