"""Adaptive difficulty on the real local llama.cpp endpoints (issue 19's test, on the engine every
x86-64 host serves; ``test_calibration_endpoints.py`` is the vLLM-CPU twin, skipped where vLLM
is not prepared):

- calibration picks other reasoning levels for the f16 endpoint than for a loopback server that
  answers every item correctly (which must move to the hardest level), and f16 against itself
  never fails at the levels chosen for it;
- needle's ladder stops at the longest message llama.cpp's 4,096-token slot takes with the
  answer, as the probe reports it, and an item of that top rung, sized with llama.cpp's own
  ``/tokenize``, fits it.

Sizes are small (two families, 5 pilot items per rung, 12 gated items, 64-token answers:
about 40 requests to the endpoint, 218 s on the 2-core host while seven other sessions shared
its endpoints); only host-independent facts are asserted (the verdict may read inconclusive at
this n, and which levels the 135M model lands on is the host's).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner._runner import probe_all
from evalsvc.suites import SuiteSpec, pilot_seed, suite_kinds
from tests.fixtures.runs import execute_pair
from tests.runner.level_server import level_server

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(1200)]

SEED = 29
FAMILIES = ("arithmetic", "lists")


def _reasoning() -> Any:
    spec = SuiteSpec.model_validate({
        "name": "calib-llamacpp", "kind": "reasoning", "seed": SEED,
        "calibrate": {"pilot_n": 5},
        "params": {"n": 12, "max_tokens": 64,
                   "tasks": [{"family": f, "level": 1} for f in FAMILIES]},
    })
    return suite_kinds()["reasoning"](spec)


def _run(base: str, cand: str, suite: Any) -> tuple[Any, list[Sample]]:
    result, samples = execute_pair(base, cand, suite, run_id="calib-llamacpp")
    return result.candidates[0].suites[0], samples


def test_f16_calibrates_below_a_perfect_server_and_passes_itself(llamacpp_endpoints: Any) -> None:
    f16 = llamacpp_endpoints.baseline
    real, samples = _run(f16, f16, _reasoning())
    with level_server(dict.fromkeys(range(1, 6), 1.0), [SEED, pilot_seed(SEED)],
                      per_level=100) as perfect:
        ideal, _ = _run(perfect.url, perfect.url, _reasoning())
    assert ideal.details["calibration"]["chosen"] == [f"{f} L5" for f in FAMILIES]
    cal = real.details["calibration"]
    assert cal["chosen"] != ideal.details["calibration"]["chosen"]
    levels = [int(label.rsplit("L", 1)[1]) for label in cal["chosen"]]
    assert max(levels) < 5  # SmolLM2-135M does not solve level 5 of either family
    # The pilot went to the baseline alone, 5 items per rung tried, and the gated items are
    # the chosen levels' only.
    pilot = [s for s in samples if s.suite == "calib-llamacpp:pilot"]
    assert {s.endpoint for s in pilot} == {"baseline"}
    assert len(pilot) == cal["baseline_requests"] == 5 * len(cal["pilot"])
    gated = {(r["family"], r["level"]) for r in real.details["by_task"]}
    assert {f"{f} L{lvl}" for f, lvl in gated} == set(cal["chosen"])
    assert real.outcome.n == real.n_planned == 12
    assert real.n_errors == 0 and real.verdict != "fail"


def test_needle_ladder_stops_at_the_llama_cpp_slot(llamacpp_endpoints: Any) -> None:
    f16 = llamacpp_endpoints.baseline
    spec = SuiteSpec.model_validate({
        "name": "needle-slot", "kind": "needle", "seed": 5, "calibrate": "auto",
        "params": {"lengths": [1024], "depths": [0.5], "haystacks": 1, "max_tokens": 16},
    })
    suite = suite_kinds()["needle"](spec)

    async def probe_and_plan() -> tuple[Any, list[Any]]:
        clients, provs = await probe_all(EndpointRef(url=f16), [], RunOptions())
        try:
            ladder = suite.difficulty_ladder(provs[0])
            # The top rung's item, sized with llama.cpp's own /tokenize (no chat: a 4k-token
            # prompt costs minutes on a shared CPU endpoint), leaves the answer room in the slot.
            top = suite.at_difficulty([ladder[-1]])
            return provs[0], [ladder, await top.plan(clients[0], provs[0])]
        finally:
            await clients[0].aclose()

    prov, (ladder, items) = asyncio.run(probe_and_plan())
    assert prov.max_context == 4096  # the slot, not the server's total context
    assert [r.value for r in ladder] == [1024, 2048, 4096 - 16 - 64]
    (item,) = items
    tokens = int(item.metadata["context_tokens"])
    assert 4096 - 16 - 64 - 64 <= tokens <= 4096 - 16 - 64
