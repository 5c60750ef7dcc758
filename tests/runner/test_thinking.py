"""Thinking traces end to end on real loopback servers with planted thinking
(``tests/runner/thinking_server.py``): the client reads ``reasoning_content`` / ``reasoning``
whole and streamed, the runner splits ``<think>`` blocks, scores the answer only, and reports
the paired thinking-length ratio, truncation, loops and leaks; the suite's bounds fail a
candidate that thinks twice as long or is cut at the budget on 30% of its answers."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample
from evalsvc.endpoints import EndpointClient
from evalsvc.runner import execute
from evalsvc.runner._runner import RunResult
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from tests.fixtures.runs import execute_pair
from tests.runner.thinking_server import thinking_server

SEED = 5
ACC = dict.fromkeys(range(1, 6), 0.7)
TASKS = [{"family": "arithmetic", "level": 1}, {"family": "lists", "level": 1}]


def _suite(n: int = 60, thinking: dict[str, Any] | None = None) -> Suite:
    spec = SuiteSpec(name="r", kind="reasoning", seed=SEED, thinking=thinking,
                     params={"n": n, "tasks": TASKS, "max_tokens": 64})
    suite = suite_kinds()["reasoning"](spec)
    suite.bind_gate()
    return suite


def _entry(result: RunResult) -> Any:
    return result.candidates[0].suites[0]


@pytest.mark.parametrize("mode", ["reasoning_content", "reasoning", "markers"])
@pytest.mark.parametrize("stream", [False, True])
def test_client_reads_the_trace(mode: str, stream: bool) -> None:
    with thinking_server(ACC, [SEED], mode=mode, think_words=20, usage_reasoning=True) as srv:
        words = len(srv.plant("hello", "")[0].split())

        async def ask() -> Any:
            async with EndpointClient(EndpointRef(url=srv.url)) as client:
                return await client.chat([{"role": "user", "content": "hello"}],
                                         max_tokens=50, stream=stream)

        out = asyncio.run(ask())
    assert out.ok and out.finish_reason == "stop"
    if mode == "markers":  # the transport does not split markers: the suites do
        assert out.reasoning is None and out.text.startswith("<think>t")
    else:
        assert out.reasoning is not None and len(out.reasoning.split()) == words
        assert out.text == "I do not know."
    assert out.reasoning_tokens == words and out.completion_tokens == words + 4


def test_twice_the_thinking_at_equal_accuracy_is_reported_and_fails_the_bound() -> None:
    with (
        thinking_server(ACC, [SEED], think_words=40) as base,
        thinking_server(ACC, [SEED], think_words=80, mode="markers") as cand,
    ):
        result, kept = execute_pair(base.url, cand.url, _suite())
        bounded, _ = execute_pair(base.url, cand.url, _suite(thinking={"max_length_ratio": 1.5}))
    res = _entry(result)
    # Scored on the answer alone: the markers' trace does not change a single score.
    assert res.outcome.baseline == res.outcome.candidate == pytest.approx(0.7)
    length = res.details["thinking"]["length"]
    # Tokens are estimated from characters (the answer's share included), so about 2.
    assert length["ratio"] == pytest.approx(2.0, rel=0.06)
    assert 1.7 < length["ci"][0] < length["ratio"] < length["ci"][1] < 2.3
    assert length["n"] == 60 and length["tokens_source"] == ["estimate"]
    assert result.verdict != "fail"
    cand_samples = [s for s in kept if s.endpoint != "baseline"]
    assert all("<think>" not in s.output for s in cand_samples)
    assert {s.data["thinking"]["tokens_source"] for s in cand_samples} == {"estimate"}
    # The bound on: the same pair fails, and says why.
    assert bounded.verdict == "fail"
    reasons = [r for r in bounded.candidates[0].reasons if r.code == "failed_bound"]
    assert reasons and "above the bound ×1.5" in reasons[0].message


def test_truncating_thirty_percent_at_the_budget_fails_the_truncation_bound() -> None:
    with (
        thinking_server(ACC, [SEED]) as base,
        thinking_server(ACC, [SEED], truncate_wrong=True) as cand,
    ):
        result, kept = execute_pair(base.url, cand.url, _suite(thinking={"max_truncation_increase": 0.1}))
    res = _entry(result)
    tr = res.details["thinking"]["truncation"]
    assert tr["baseline"] == 0 and tr["candidate"] == pytest.approx(0.3)
    assert tr["ci"][0] > 0.1
    assert result.verdict == "fail"
    codes = {r.code for r in result.candidates[0].reasons}
    assert "failed_bound" in codes and "failed_gate" not in codes
    cut = [s for s in kept if s.endpoint != "baseline" and s.data["thinking"]["budget_exhausted"]]
    assert len(cut) == 18 and all(s.data["thinking"]["finish_reason"] == "length" for s in cut)


def test_leaked_markup_and_loops_are_counted() -> None:
    with (
        thinking_server(ACC, [SEED]) as base,
        thinking_server(ACC, [SEED], leak=True, loop=True, think_words=300) as cand,
    ):
        result, kept = execute_pair(base.url, cand.url, _suite(n=20))
    t = _entry(result).details["thinking"]
    assert t["leaks"] == {"baseline": 0, "candidate": 20,
                          "examples": ["<|channel|>", "<|message|>"]}
    assert t["loops"]["baseline"] == 0 and t["loops"]["candidate"] == 1.0
    assert t["loops"]["ci"][0] > 0


def test_every_view_shows_the_traces() -> None:
    import xml.etree.ElementTree as ET

    import jsonschema

    from evalsvc.cli._common import err
    from evalsvc.cli._report import print_headlines
    from evalsvc.reports import build_report, report_schema, to_junit, to_markdown

    with (
        thinking_server(ACC, [SEED], think_words=40) as base,
        thinking_server(ACC, [SEED], think_words=80, leak=True) as cand,
    ):
        result, _ = execute_pair(base.url, cand.url, _suite(thinking={"max_length_ratio": 1.5}))
    report = build_report(result)
    jsonschema.validate(report, report_schema())
    entry = report["candidates"][0]["suites"][0]
    found = {f["title"]: f for f in entry["findings"]}
    assert found["thinking traces"]["severity"] == "fail"
    assert found["thinking traces"]["data"]["leaks"]["candidate"] == 60
    assert "thinking ×" in entry["headline"] and "leaked markup in 60 answers" in entry["headline"]
    assert [r["code"] for r in entry["reasons"] if r["code"] == "failed_bound"]
    md = to_markdown(report)
    assert "**Thinking traces**" in md and "`<|channel|>`" in md and "failed_bound" in md
    root = ET.fromstring(to_junit(report).split("\n", 1)[1])
    failure = root.find(".//failure")
    assert failure is not None and "above the bound ×1.5" in (failure.get("message") or "")
    with err.capture() as captured:
        print_headlines(report)
    text = captured.get()
    assert "thinking ×" in text and "failed_bound" in text


def test_answers_per_second_beside_a_speed_suite() -> None:
    speed = suite_kinds()["speed"](SuiteSpec(
        name="s", kind="speed", seed=SEED,
        params={"levels": [1, 2], "requests": 6, "max_tokens": 16, "warmup": 0},
    ))
    speed.bind_gate()
    thinking = _suite(n=20)
    kept: list[Sample] = []

    async def sink(sample: Sample) -> None:
        kept.append(sample)

    with (
        thinking_server(ACC, [SEED], think_words=40) as base,
        thinking_server(ACC, [SEED], think_words=80) as cand,
    ):
        result = asyncio.run(execute(
            run_id="t", baseline=EndpointRef(url=base.url), candidates=[EndpointRef(url=cand.url)],
            suites=[speed, thinking], options=RunOptions(concurrency=4), sink=sink, done=set(),
        ))
    by = {s.suite: s for s in result.candidates[0].suites}
    aps = by["r"].details["answers_per_second"]
    assert aps["speed_suite"] == "s" and aps["what"] == "output tokens/s at concurrency 2"
    level = [r for r in by["s"].details["levels"] if r["concurrency"] == 2][0]
    assert aps["tokens_per_s"]["baseline"] == level["baseline"]["output_tok_s"]
    tpa = by["r"].details["thinking"]["tokens_per_answer"]
    assert tpa["ratio"] == pytest.approx(2.0, rel=0.1)
    # Answers per second = tokens/s ÷ tokens per answer on each side (whatever the speed was).
    assert aps["baseline"] == pytest.approx(aps["tokens_per_s"]["baseline"] / tpa["baseline"])
    assert aps["ratio"] == pytest.approx(aps["tokens_per_s"]["ratio"] / tpa["ratio"])
    assert "speed" not in by["s"].details.get("thinking", {})  # the speed suite scores no answer


def test_per_answer_speed_of_the_issue_example() -> None:
    from evalsvc.suites._thinking import per_answer_speed

    # 1.3× faster per token, 1.5× the tokens per answer: slower per answer.
    out = per_answer_speed({"tokens_per_answer": {"baseline": 1000.0, "candidate": 1500.0}},
                           {"baseline": 100.0, "candidate": 130.0, "suite": "s", "what": "x"})
    assert out is not None and out["ratio"] == pytest.approx(1.3 / 1.5) and out["ratio"] < 1
    assert per_answer_speed({}, {"baseline": 1.0, "candidate": 1.0}) is None


def test_thinking_counted_by_the_endpoints_tokenize() -> None:
    # The level server's /tokenize counts whitespace words: the exact thinking length.
    with thinking_server(ACC, [SEED], mode="markers") as srv:
        result, kept = execute_pair(srv.url, srv.url, _suite(n=10, thinking={"count": "tokenize"}))
    assert {s.data["thinking"]["tokens_source"] for s in kept} == {"tokenize"}
    counted = Counter(s.data["thinking"]["tokens"] for s in kept)
    # Every sample's count is a trace the server sent (the probe's chat requests are the rest).
    assert sum(counted.values()) == 20 and not counted - Counter(srv.planted)
    assert _entry(result).details["thinking"]["length"]["ratio"] == pytest.approx(1.0)


def test_client_ignores_reasoning_that_is_not_text() -> None:
    from evalsvc.endpoints import Completion
    from evalsvc.endpoints._client import _merge_chunk, _parse_response

    for junk in ({"x": 1}, ["a"], 5, None, ""):
        out = _parse_response({"choices": [{"message": {"content": "hi", "reasoning_content": junk,
                                                        "reasoning": junk}}],
                               "usage": {"completion_tokens_details": {"reasoning_tokens": "7"}}},
                              200)
        assert out.ok and out.text == "hi" and out.reasoning is None and out.reasoning_tokens is None
    streamed = Completion()
    _merge_chunk(streamed, {"choices": [], "usage": {"completion_tokens": 9,
                                                     "completion_tokens_details": {"reasoning_tokens": 4}}})
    assert streamed.reasoning_tokens == 4 and streamed.completion_tokens == 9
