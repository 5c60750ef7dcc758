"""Sweeps rank by answers per second when the quality suites report thinking: a configuration
1.3× faster per token that thinks 1.5× longer serves fewer answers than one 1.0× that thinks
as long as the baseline. The thinking data come from real runs (the runner against loopback
servers with planted thinking, ``tests/runner/thinking_server.py``) turned into reports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.reports import build_report
from evalsvc.runner import execute
from evalsvc.services import sweeps
from evalsvc.suites import SuiteSpec, suite_kinds
from tests.runner.thinking_server import thinking_server

ACC = dict.fromkeys(range(1, 6), 0.7)


def _quality(base_words: int, cand_words: int) -> dict[str, Any]:
    suite = suite_kinds()["reasoning"](SuiteSpec(
        name="r", kind="reasoning", seed=5,
        params={"n": 20, "tasks": [{"family": "arithmetic", "level": 1}], "max_tokens": 64},
    ))
    suite.bind_gate()

    async def sink(sample: Sample) -> None:
        pass

    with (
        thinking_server(ACC, [5], think_words=base_words) as base,
        thinking_server(ACC, [5], think_words=cand_words) as cand,
    ):
        result = asyncio.run(execute(
            run_id="t", baseline=EndpointRef(url=base.url), candidates=[EndpointRef(url=cand.url)],
            suites=[suite], options=RunOptions(concurrency=4), sink=sink, done=set(),
        ))
    quality = sweeps._quality(build_report(result))
    quality["verdict"] = "pass"  # what this checks is the ranking among passing configurations
    return quality


def test_sweeps_rank_by_answers_when_thinking_was_measured() -> None:
    longer, same = _quality(100, 150), _quality(100, 100)
    assert longer["tokens_per_answer"]["ratio"] == pytest.approx(1.5, rel=0.1)
    assert same["tokens_per_answer"]["ratio"] == pytest.approx(1.0, rel=0.05)

    def cfg(name: str, quality: dict[str, Any], ratio: float) -> dict[str, Any]:
        cap = {"ratio": ratio, "ci": [ratio - 0.05, ratio + 0.05], "reason": None,
               "candidate_median": 10.0 * ratio}
        return {"name": name, "status": "measured", "quality": quality,
                "speed": {"capacity": cap}}

    fast_but_long, plain = cfg("fast-long", longer, 1.3), cfg("plain", same, 1.0)
    rec = sweeps.recommend([fast_but_long, plain], True)
    assert rec["config"] == "plain" and "per answer ×1.0" in rec["reason"]
    assert sweeps.per_answer_capacity(fast_but_long) == pytest.approx(1.3 / 1.5, rel=0.1)
    assert sweeps.per_answer_capacity(fast_but_long) < 1.0
    # Without thinking data the same capacities rank per token, as before.
    bare = [cfg("fast-long", {"verdict": "pass"}, 1.3), cfg("plain", {"verdict": "pass"}, 1.0)]
    assert sweeps.recommend(bare, True)["config"] == "fast-long"
    report = _report(fast_but_long, plain)
    assert report["recommendation"]["config"] == "plain"
    by = {c["name"]: c for c in report["configs"]}
    assert by["fast-long"]["answers_capacity_ratio"] < by["plain"]["answers_capacity_ratio"]
    # What GET /sweeps/{id} and the sweep page read.
    from evalsvc.services import sweep_views

    results = {c["name"]: sweep_views._config(c, report["frontier"]) for c in report["configs"]}
    assert results["fast-long"]["answers_capacity_ratio"] == pytest.approx(
        by["fast-long"]["answers_capacity_ratio"])


def _report(*configs: dict[str, Any]) -> dict[str, Any]:
    from evalsvc.services.sweeps import SweepSpec

    spec = SweepSpec.model_validate({"baseline": "http://127.0.0.1:9/v1", "suites": ["r"],
                                     "configs": [{"name": c["name"], "kind": "existing",
                                                  "url": "http://127.0.0.1:9/v1"}
                                                 for c in configs]})
    return sweeps._report(spec, list(configs), 1.0)
