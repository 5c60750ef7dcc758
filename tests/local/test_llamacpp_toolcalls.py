"""Tool calls and structured output on the real llama.cpp endpoints (``f16`` baseline,
``q8_0-kv`` candidate; tests/conftest.py), kept small (docs/local-endpoints.md, "Tool calls and
structured output", has the measured figures):

- the probe finds that SmolLM2's chat template cannot serve tools on llama.cpp (``tool_choice:
  required`` comes back as plain text) and that ``response_format`` JSON schemas work;
- a toolcalls suite is refused before any item, naming ``tools`` and its fix;
- a small structured suite runs on both: every answer scored, and the shapes whose constraints
  llama.cpp's schema grammar enforces (types, enums, ``minItems``: flat, enum, array) are valid
  JSON of their schema on both sides. Which values the model gets right is the host's, never
  asserted.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import CapabilityError, execute
from evalsvc.runner._runner import probe_all
from evalsvc.suites import SuiteSpec, load_suite, suite_kinds

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(1800)]


def _refs(endpoints: Any) -> tuple[EndpointRef, list[EndpointRef]]:
    return (
        EndpointRef(url=endpoints.baseline, name="f16"),
        [EndpointRef(url=u, name=n) for n, u in endpoints.candidates.items()],
    )


def test_probe_finds_no_tools_and_json_schema(llamacpp_endpoints: Any) -> None:
    base, cands = _refs(llamacpp_endpoints)
    _, provs = asyncio.run(probe_all(base, cands, RunOptions(),
                                     optional=("tools", "json_schema")))
    for prov in provs:
        assert prov.capabilities["tools"] is False
        assert prov.capabilities["json_schema"] is True


def test_toolcalls_is_refused_with_the_reason(llamacpp_endpoints: Any) -> None:
    base, cands = _refs(llamacpp_endpoints)
    sent: list[Sample] = []

    async def sink(sample: Sample) -> None:
        sent.append(sample)

    with pytest.raises(CapabilityError) as err:
        asyncio.run(execute(run_id="tc", baseline=base, candidates=cands,
                            suites=[load_suite("toolcalls-smoke")], options=RunOptions(),
                            sink=sink))
    assert "needs tools" in str(err.value) and "--jinja" in str(err.value)
    assert not sent


def test_structured_runs_and_enforced_shapes_are_valid(llamacpp_endpoints: Any) -> None:
    base, cands = _refs(llamacpp_endpoints)
    # One item per shape: every enforced shape is checked, at half the six items' 46 CPU-s
    # (a `make test` on an AVX2 host; 96-token JSON answers decode on one thread per server).
    spec = SuiteSpec(name="structured-tiny", kind="structured", seed=5,
                     params={"n": 3, "shapes": ["flat", "enum", "array"], "max_tokens": 96})
    suite = suite_kinds()["structured"](spec)
    samples: list[Sample] = []

    async def sink(sample: Sample) -> None:
        samples.append(sample)

    result = asyncio.run(execute(run_id="st", baseline=base, candidates=cands, suites=[suite],
                                 options=RunOptions(concurrency=2), sink=sink))
    assert len(samples) == 6 and all(s.error is None and s.score is not None for s in samples)
    assert all(s.data["valid"] for s in samples), [(s.item_id, s.data["errors"]) for s in samples]
    (res,) = result.candidates[0].suites
    assert set(res.outcome.details["tool_gates"]) == {"valid", "field_accuracy"}
    assert res.verdict in ("pass", "fail", "inconclusive")
