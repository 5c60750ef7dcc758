"""The comparability guard through the real runner, on vLLM-shaped loopback servers
(``tests/runner/level_server.py``): a candidate that differs from the baseline in more than the
quantization is sent nothing and reads ``non-comparable`` with the reason and its fix, unless the
run or its suites allow that difference; one that refuses more items than the baseline past the
error budget reads ``non-comparable`` after the run; the same model stays comparable.
"""

from __future__ import annotations

import asyncio
from typing import Any

from evalsvc.domain import ComparabilityOptions, EndpointRef, RunOptions, Sample
from evalsvc.reports import build_report, to_junit, to_markdown
from evalsvc.runner import execute
from evalsvc.runner._runner import RunResult
from evalsvc.suites import Suite, SuiteSpec, suite_kinds
from tests.runner.level_server import LevelServer, level_server

SEED = 5
GOOD = dict.fromkeys(range(1, 6), 0.8)
TASKS = [{"family": "arithmetic", "level": 1}, {"family": "lists", "level": 1}]


def _reasoning(n: int = 20, name: str = "r", **extra: Any) -> Suite:
    spec = SuiteSpec(name=name, kind="reasoning", seed=SEED,
                     params={"n": n, "tasks": TASKS, "max_tokens": 16}, **extra)
    return suite_kinds()["reasoning"](spec)


def _run(base: str, cands: list[str], suites: list[Suite], options: RunOptions) -> RunResult:
    async def sink(sample: Sample) -> None:
        pass

    return asyncio.run(execute(
        run_id="t", baseline=EndpointRef(url=base), candidates=[EndpointRef(url=c) for c in cands],
        suites=suites, options=options, sink=sink,
    ))


def _items_seen(server: LevelServer) -> int:
    return len(server.seen)  # reasoning items answered (the probe's "Say OK." is not one)


def test_the_same_model_stays_comparable_and_records_what_was_compared() -> None:
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30) as cand:
        result = _run(base.url, [cand.url], [_reasoning()], RunOptions(concurrency=4))
    prov = result.candidates[0].provenance
    assert prov.chat_template_fingerprint == result.baseline_provenance.chat_template_fingerprint
    assert prov.chat_template_source == "/tokenize messages + /detokenize"
    assert result.candidates[0].comparability.comparable
    assert result.verdict != "non-comparable" and _items_seen(cand) == 20


def test_another_chat_template_is_non_comparable_and_sent_nothing() -> None:
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, chat_template="llama3") as cand:
        result = _run(base.url, [cand.url], [_reasoning()], RunOptions(concurrency=4))
        sent = _items_seen(cand)
    assert result.verdict == "non-comparable" and result.error is None
    cand_result = result.candidates[0]
    assert cand_result.verdict == "non-comparable" and cand_result.suites == []
    assert sent == 0, "a non-comparable candidate is sent no item"
    (reason,) = [r for r in cand_result.reasons if r.code == "non_comparable"]
    assert "renders a fixed conversation differently" in reason.message
    assert "--allow-difference chat_template if the template change is what you are testing" in (
        reason.message)
    report = build_report(result)
    assert report["candidates"][0]["comparability"]["differences"][0]["field"] == "chat_template"
    junit = to_junit(report)
    assert 'type="non-comparable"' in junit and 'name="comparability"' in junit
    assert "`non_comparable`" in to_markdown(report)


def test_another_tokenizer_names_the_tokenizer_only() -> None:
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, tokenizer_offset=7) as cand:
        result = _run(base.url, [cand.url], [_reasoning()], RunOptions(concurrency=4))
    fields = [d.field for d in result.candidates[0].comparability.differences]
    assert fields == ["tokenizer"] and result.verdict == "non-comparable"


def test_a_difference_the_run_or_every_suite_allows_is_reported_not_deciding() -> None:
    allow = ComparabilityOptions(allow=["chat_template"])
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, chat_template="llama3") as cand:
        by_run = _run(base.url, [cand.url], [_reasoning()],
                      RunOptions(concurrency=4, comparability=allow))
        by_suite = _run(base.url, [cand.url], [_reasoning(comparability=allow)],
                        RunOptions(concurrency=4))
        # One suite of two allows it: the other still compares nothing of this candidate.
        partly = _run(base.url, [cand.url],
                      [_reasoning(comparability=allow), _reasoning(name="r2")],
                      RunOptions(concurrency=4))
    for result in (by_run, by_suite):
        assert result.verdict != "non-comparable", result.reasons
        assert [d.field for d in result.candidates[0].comparability.allowed] == ["chat_template"]
        allowed = [w for w in result.warnings if "as the run or its suites allow" in w]
        # Named by its label, never by its role (candidate:0).
        assert allowed and all(w.startswith("candidate ") and "candidate:0" not in w
                               for w in allowed)
    assert partly.verdict == "non-comparable"


def test_one_comparable_and_one_non_comparable_candidate() -> None:
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30) as same, \
            level_server(GOOD, [SEED], per_level=30, chat_template="gemma") as other:
        result = _run(base.url, [same.url, other.url], [_reasoning()], RunOptions(concurrency=4))
        assert _items_seen(same) == 20 and _items_seen(other) == 0
    first, second = result.candidates
    assert first.verdict in ("pass", "inconclusive") and second.verdict == "non-comparable"
    # The run ranks non-comparable above any gate verdict (docs/statistics.md).
    assert result.verdict == "non-comparable"
    assert result.reasons[0].candidate == "candidate:1"


def test_refusals_on_one_side_past_the_budget_are_non_comparable() -> None:
    with level_server(GOOD, [SEED], per_level=30) as base, \
            level_server(GOOD, [SEED], per_level=30, refuse=0.3) as cand:
        result = _run(base.url, [cand.url], [_reasoning()], RunOptions(concurrency=4))
        allowed = _run(base.url, [cand.url], [_reasoning()], RunOptions(
            concurrency=4, comparability=ComparabilityOptions(allow=["sample_counts"])))
    cres = result.candidates[0]
    assert result.verdict == "non-comparable" and cres.verdict == "non-comparable"
    (diff,) = cres.comparability.differences
    assert diff.field == "sample_counts" and diff.suite == "r"
    assert "the candidate refused 6 of 20 items, the other side 0" in diff.message
    assert "HTTP 400" in diff.message
    assert result.error is None  # not an outage: nothing to retry
    # Allowed, the refusals are errors again, and past the budget no verdict rests on them.
    failure = allowed.candidates[0].suites[0].error
    assert allowed.verdict == "error" and failure is not None
    assert "6 of 20 items errored" in failure.cause and failure.counts == {"refused": 6}
    # The allowed difference is never silent: recorded with its suite, and a reason of its own.
    (let,) = allowed.candidates[0].comparability.allowed
    assert let.field == "sample_counts" and let.suite == "r"
    assert [r.code for r in allowed.candidates[0].reasons].count("allowed_difference") == 1


def test_a_candidate_context_shorter_than_a_suite_needs() -> None:
    spec = SuiteSpec(name="n", kind="needle", seed=SEED,
                     params={"lengths": [3000], "depths": [0.5], "haystacks": 1, "max_tokens": 16})
    needle = suite_kinds()["needle"](spec)
    with level_server(GOOD, [SEED], per_level=10) as base, \
            level_server(GOOD, [SEED], per_level=10, max_len=2048) as cand:
        result = _run(base.url, [cand.url], [needle], RunOptions(concurrency=2))
        assert cand.prompts <= 1  # the probe's chat only
    (diff,) = result.candidates[0].comparability.differences
    assert diff.field == "max_context" and diff.suite == "n"
    assert "the candidate's 2048 tokens (the baseline serves 8192)" in diff.message
    assert result.verdict == "non-comparable"


def assert_quantized_pairs_stay_comparable(baseline: str, candidates: list[str]) -> None:
    """Probe the real endpoints as a run does: every quantized candidate of the same model is
    comparable, and the guard had something to compare (both fingerprints recorded)."""
    from evalsvc.runner._comparable import incomparable
    from evalsvc.runner._runner import probe_all

    async def probed() -> list[Any]:
        clients, provs = await probe_all(
            EndpointRef(url=baseline), [EndpointRef(url=c) for c in candidates], RunOptions()
        )
        await asyncio.gather(*(c.aclose() for c in clients))
        return provs

    provs = asyncio.run(probed())
    for prov in provs:
        assert prov.tokenizer_fingerprint and prov.chat_template_fingerprint, prov
    found = asyncio.run(incomparable([_reasoning()], provs, RunOptions()))
    assert [f.differences for f in found] == [[] for _ in candidates]


def test_the_local_quantized_endpoints_stay_comparable(serving_endpoints: Any) -> None:
    """vLLM bf16 against fp8-kv/w8a8/w4a16, or llama.cpp F16 against q8_0-kv: the same model,
    tokenizer and template; the quantization differs and is the point."""
    assert_quantized_pairs_stay_comparable(
        serving_endpoints.baseline, list(serving_endpoints.candidates.values())
    )
