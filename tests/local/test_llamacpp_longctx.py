"""A ``longctx`` task end to end on the real llama.cpp F16 endpoint against itself: items sized
with llama.cpp's ``/tokenize``, answered by SmolLM2-135M, scored, analysed and gated by the
runner. An endpoint against itself never fails (its scores are the host's: never asserted).

Kept small (four items at 256 and 512 tokens) so that it stays well under two minutes; the
measured levels of the catalog's ``longctx-4k`` suites are in docs/benchmarks.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import execute
from evalsvc.suites import SuiteSpec, suite_kinds

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(600)]


def test_variable_tracking_on_f16_against_itself_does_not_fail(llamacpp_endpoints: Any) -> None:
    lengths = [256, 512]
    spec = SuiteSpec(
        name="longctx-vt-llamacpp-tiny",
        kind="longctx",
        seed=5,
        params={"task": "variable_tracking", "lengths": lengths, "languages": ["en"],
                "depths": [0.3], "haystacks": 2, "num_hops": 2, "max_tokens": 32},
    )
    suite = suite_kinds()["longctx"](spec)
    samples: list[Sample] = []

    async def sink(sample: Sample) -> None:
        samples.append(sample)

    base = EndpointRef(url=llamacpp_endpoints.baseline, name="f16")
    result = asyncio.run(execute(
        run_id="llamacpp-longctx", baseline=base,
        candidates=[EndpointRef(url=llamacpp_endpoints.baseline, name="f16-again")],
        suites=[suite], options=RunOptions(concurrency=2), sink=sink,
    ))
    assert len(samples) == 8 and all(s.error is None for s in samples)
    assert result.baseline_provenance.tokenizer_source == "endpoint /tokenize (llama.cpp)"
    (cand,) = result.candidates
    (res,) = cand.suites
    assert res.n_errors == 0 and res.verdict != "fail"
    # Sized in llama.cpp's own tokens: at most the target, and close to it.
    for s in samples:
        assert s.data["context_length"] - 8 <= s.data["context_tokens"] <= s.data["context_length"]
