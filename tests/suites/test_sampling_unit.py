"""The ``sampling`` block of a suite spec (``evalsvc.suites._sampling``): refused where it
cannot mean anything, with the fix; the gate and the counts a sampled suite gets; the per-item
unit from per-sample pairs; and a sampled ``dataset`` suite (one send loop: its baseline's
second pass and its samples are both ``repeats``) on a real loopback server."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest

from evalsvc.domain import EndpointRef, RunOptions, Sample, SamplingOptions
from evalsvc.gates import GatePolicyError
from evalsvc.runner import execute
from evalsvc.suites import Analysis, SuiteSpec, suite_kinds
from evalsvc.suites._sampling import SamplingPolicy, item_means
from tests.fixtures.loopback import JSONHandler, LoopbackHTTPServer, serving


def _reasoning(sampling: dict[str, Any] | None) -> Any:
    return suite_kinds()["reasoning"](SuiteSpec(name="r", kind="reasoning", sampling=sampling,
                                                params={"n": 10}))


def test_policy_refuses_copies_of_the_greedy_answer_and_pass_at_above_k() -> None:
    with pytest.raises(ValueError, match="set a temperature"):
        SamplingPolicy(k=4)
    with pytest.raises(ValueError, match="raise sampling.k"):
        SamplingPolicy(k=2, temperature=0.6, pass_at=[4])
    with pytest.raises(ValueError):
        SamplingPolicy(k=65, temperature=0.6)


@pytest.mark.parametrize("kind", ["speed", "determinism", "drift"])
def test_kinds_that_score_no_answer_refuse_the_block(kind: str) -> None:
    with pytest.raises(ValueError, match="cannot be sampled"):
        suite_kinds()[kind](SuiteSpec(name="x", kind=kind,
                                      sampling={"k": 2, "temperature": 0.6}))


def test_a_dataset_without_a_reference_cannot_take_k_samples(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"q": "2+2?"}\n')
    spec = SuiteSpec(name="d", kind="dataset", sampling={"k": 2, "temperature": 0.6},
                     params={"path": str(data), "prompt": {"template": "{q}"}})
    with pytest.raises(ValueError, match="needs a reference column"):
        suite_kinds()["dataset"](spec)


def test_sampled_gate_is_continuous_and_counts_items() -> None:
    greedy = _reasoning(None)
    greedy.bind_gate(RunOptions())
    assert greedy.gate.kind == "binary" and greedy.samples_per_item == 1
    sampled = _reasoning({"k": 4, "temperature": 0.6})
    sampled.bind_gate(RunOptions())
    assert sampled.gate.kind == "continuous" and sampled.gate.margin == greedy.gate.margin
    items = [object()] * 10
    assert sampled.expected_samples(items) == 40  # type: ignore[arg-type]
    assert sampled.gated_pairs(items) == 10  # type: ignore[arg-type]
    assert list(sampled.repeats("baseline")) == [0, 1, 2, 3]


def test_run_options_override_and_refuse_with_the_fix() -> None:
    suite = _reasoning(None)
    suite.bind_gate(RunOptions(sampling=SamplingOptions(k=3, temperature=0.8)))
    assert suite.sampling.k == 3 and suite.gate.kind == "continuous"
    bad = _reasoning(None)
    with pytest.raises(GatePolicyError, match="set a temperature"):
        bad.bind_gate(RunOptions(sampling=SamplingOptions(k=3)))
    # A kind that scores no answer ignores the run's decoding.
    speed = suite_kinds()["speed"](SuiteSpec(name="s", kind="speed"))
    speed.bind_gate(RunOptions(sampling=SamplingOptions(k=3, temperature=0.8)))
    assert speed.spec.sampling is None and speed.samples_per_item == 1


def test_item_means_collapse_samples_to_items() -> None:
    a = Analysis(
        baseline=[1, 0, 1, 1, 1, 1],
        candidate=[0, 0, 1, 1, 0, 1],
        keys=["a", "a#1", "a#2", "b", "b#1", "b#2"],
        slices={"family": ["x"] * 3 + ["y"] * 3},
        first_tokens=[("4", "5"), None, None, None, ("7", "8"), None],
        n_errors=3,
    )
    out = item_means(a, SamplingPolicy(k=3, temperature=0.6, pass_at=[1, 3]))
    assert out.keys == ["a", "b"]
    assert out.baseline == pytest.approx([2 / 3, 1.0])
    assert out.candidate == pytest.approx([1 / 3, 2 / 3])
    assert out.slices == {"family": ["x", "y"]}
    assert out.first_tokens == [("4", "5"), ("7", "8")]
    assert out.value_range == (0.0, 1.0) and out.n_errors == 1
    s = out.details["sampling"]
    assert s["pass@1_baseline"]["value"] == pytest.approx(5 / 6)
    at3 = s["pass_at_k"][1]
    assert at3["k"] == 3 and at3["baseline"] == 1.0 and at3["candidate"] == 1.0


class _Handler(JSONHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802
        self._reply({"data": [{"id": "m"}]} if self.path.endswith("/models") else {})

    def do_POST(self) -> None:  # noqa: N802
        body = self._json_body()
        with self.server.lock:
            self.server.bodies.append(body)
            n = len(self.server.bodies)
        # Sampled: every third answer is wrong; greedy: always right.
        text = "5" if body.get("temperature", 0) > 0 and n % 3 == 0 else "4"
        if "messages" in body:
            self._reply({"choices": [{"message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
        else:
            self._reply({"choices": [{"text": text, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 1}})


class _Server(LoopbackHTTPServer):
    def __init__(self) -> None:
        super().__init__(_Handler)
        self.lock = threading.Lock()
        self.bodies: list[dict[str, Any]] = []


def test_sampled_dataset_suite_on_a_loopback_server(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"q": f"What is {i} + 4 - {i}?", "a": "4"}) + "\n"
                            for i in range(6)))
    spec = SuiteSpec(name="d", kind="dataset", sampling={"k": 3, "temperature": 0.7},
                     params={"path": str(data), "prompt": {"template": "{q}"},
                             "reference": "a", "scorer": "numeric", "api": "chat"})
    kept: list[Sample] = []

    async def sink(sample: Sample) -> None:
        kept.append(sample)

    with serving(_Server()) as srv:
        url = f"{srv.origin}/v1"
        result = asyncio.run(execute(
            run_id="t", baseline=EndpointRef(url=url), candidates=[EndpointRef(url=url)],
            suites=[suite_kinds()["dataset"](spec)], options=RunOptions(concurrency=2),
            sink=sink,
        ))
    res = result.candidates[0].suites[0]
    assert len(kept) == 2 * 6 * 3 and {s.repeat for s in kept} == {0, 1, 2}
    assert res.outcome.n == res.n_planned == 6 and res.n_errors == 0
    assert res.details["sampling"]["samples"] == {"baseline": 18, "candidate": 18}
    # The baseline's first answers keep the prompt (dataset's own emit), once per item.
    assert sum("prompt" in s.data for s in kept) == 6


def test_server_item_bound_counts_items_times_samples(monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    from evalsvc.domain import RunSpec
    from evalsvc.services.runs import UsageError, check_server_items, load_suites

    monkeypatch.setenv("EVALSVC_MAX_ITEMS", "100")
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nkind: reasoning\nsampling: {k: 4, temperature: 0.6}\n"
                     "params: {n: 40}\n")
    spec = RunSpec(baseline=EndpointRef(url="http://127.0.0.1:9/v1"),
                   candidates=[EndpointRef(url="http://127.0.0.1:9/v1")], suites=[str(suite)])
    suites = load_suites(spec, allow_paths=True)
    with pytest.raises(UsageError, match=r"s \(items × 4 samples\) plans 160"):
        check_server_items(spec, suites)
    spec.options = RunOptions(sampling=SamplingOptions(k=2))
    check_server_items(spec, load_suites(spec, allow_paths=True))  # 80 ≤ 100


def test_a_sampled_baseline_that_solves_nothing_cannot_pass() -> None:
    from evalsvc.runner._runner import gate_outcome

    suite = _reasoning({"k": 4, "temperature": 0.6})
    suite.bind_gate(RunOptions())
    zeros = [0.0] * 400
    keys = [f"i{i // 4}" + (f"#{i % 4}" if i % 4 else "") for i in range(400)]
    analysis = suite.units(Analysis(zeros, zeros, keys=keys))
    outcome = gate_outcome(suite.gate, analysis, seed=0)
    assert outcome.verdict == "inconclusive"
    assert outcome.details["baseline_guard"]["informative"] is False
    assert "uninformative baseline" in outcome.details["reason"]
    # A baseline that solves items is informative: the same size passes an equal candidate.
    ones = [1.0] * 400
    solved = suite.units(Analysis(ones, ones, keys=keys))
    assert gate_outcome(suite.gate, solved, seed=0).verdict == "pass"


def test_a_runs_k_is_refused_for_a_dataset_without_a_reference(tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"q": "2+2?"}\n')
    suite = suite_kinds()["dataset"](SuiteSpec(name="d", kind="dataset",
                                               params={"path": str(data),
                                                       "prompt": {"template": "{q}"}}))
    with pytest.raises(GatePolicyError, match="needs a reference column"):
        suite.bind_gate(RunOptions(sampling=SamplingOptions(k=2, temperature=0.6)))


@pytest.mark.parametrize("kind", ["toolcalls", "structured"])
def test_greedy_answer_kinds_refuse_the_block_and_pass_a_runs_k_by(kind: str) -> None:
    """Tool calls and structured output pair one greedy answer per item in their two gates:
    the block is refused with the reason, and a run's --sampling-k leaves them greedy and
    binary (it would otherwise count an item's k samples as k independent pairs)."""
    cls = suite_kinds()[kind]
    with pytest.raises(ValueError, match="greedy answer per item"):
        cls(SuiteSpec(name="t", kind=kind, sampling={"k": 3, "temperature": 0.6}))
    suite = cls(SuiteSpec(name="t", kind=kind))
    gate = suite.bind_gate(RunOptions(sampling=SamplingOptions(k=3, temperature=0.8)))
    assert suite.spec.sampling is None and suite.samples_per_item == 1
    assert gate.kind == "binary"
