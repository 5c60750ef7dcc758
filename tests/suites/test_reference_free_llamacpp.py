"""A production replay judged on the real local llama.cpp endpoints (the plumbing, for real).

``suites from-requests --judge`` writes a replay suite; ``evalsvc compare`` (the service) runs it,
f16 baseline against the q8_0-kv candidate, with the f16 endpoint registered as its own judge.
SmolLM2-135M is far too weak a judge, and the report must say so: what is asserted is that every
item was answered and judged in both orders, that the judge's figures (position consistency, A/A,
controls) are in the report and the suite snapshot holds the judge's prompt, and that a judge the
report calls uninformative never gives a pass. The figures are printed (``pytest -rA``) for
docs/suites.md. Four conversations (6 judge requests each) keep it small.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalsvc.db import Store
from evalsvc.domain import EndpointRef, RunOptions, RunSpec
from evalsvc.reports import to_markdown
from evalsvc.services import runs
from evalsvc.services.replay import suite_from_requests

pytestmark = [pytest.mark.llamacpp, pytest.mark.timeout(900)]

QUESTIONS = [
    "Name a fruit that is yellow.",
    "What is the opposite of cold?",
    "What color is the sky on a clear day?",
    "How many legs does a dog have?",
    "What do bees make?",
    "What is the capital of Italy?",
]


def test_replay_judged_by_the_baseline_on_llamacpp(
    llamacpp_endpoints: Any, tmp_path: Path
) -> None:
    log = tmp_path / "requests.jsonl"
    log.write_text("".join(
        json.dumps({"model": "prod", "user": f"u{i}", "max_tokens": 32, "messages": [
            {"role": "system", "content": "Answer in one short sentence."},
            {"role": "user", "content": q}]}) + "\n"
        for i, q in enumerate(QUESTIONS)))
    summary = suite_from_requests(log, tmp_path / "replay.yaml", n=4, judge="judge-f16")
    assert summary.compare == "judge"
    # A short verdict is enough (and the judge's 135M model decodes on one CPU thread).
    suite_yaml = tmp_path / "replay.yaml"
    spec_text = yaml.safe_load(suite_yaml.read_text())
    spec_text["params"]["judge"]["max_tokens"] = 64
    suite_yaml.write_text(yaml.safe_dump(spec_text))
    base = llamacpp_endpoints.baseline
    cand = llamacpp_endpoints.candidates["q8_0-kv"]
    with Store.from_url(f"sqlite:///{tmp_path / 'r.db'}") as store:
        store.upgrade()
        store.upsert_endpoint(name="judge-f16", url=base)
        spec = RunSpec(baseline=EndpointRef(url=base), candidates=[EndpointRef(url=cand)],
                       suites=[str(tmp_path / "replay.yaml")], options=RunOptions(concurrency=4))
        report = runs.compare(spec, store=store)
        (snapshot,) = store.get_suite_snapshots(report["run_id"])
        samples = store.get_samples(report["run_id"])
    entry = report["candidates"][0]["suites"][0]
    judge = entry["details"]["judge"]
    print("verdict", entry["verdict"], "delta", entry["delta"], "ci", entry["ci"])
    print("judge", json.dumps(judge))
    print("changed answers", entry["details"]["changed_answers"])
    print("similarity", entry["details"]["similarity"])
    assert entry["metric"] == "judge_not_worse" and entry["n_planned"] == 4
    # Every item judged in both orders (the candidate pair and the A/A pair), and the controls.
    assert judge["candidate"]["n"] + entry["n_errors"] == 4 and judge["aa"]["n"] >= 1
    assert judge["controls"] == 4 and judge["model"] == "smollm2-135m-gguf-f16"
    cand_samples = [s for s in samples if s.endpoint == "candidate:0"]
    assert all(len(s.data["judge"]["verdicts"]) == 2 for s in cand_samples if "judge" in s.data)
    assert snapshot["spec"]["judge"]["prompt"].startswith("[Request]")
    assert snapshot["spec"]["judge"]["endpoint"] == "judge-f16"
    # A weak judge is reported as such, and then the gate cannot pass.
    if not judge["informative"]:
        assert entry["verdict"] == "inconclusive" and judge["problems"]
    assert entry["verdict"] in ("pass", "fail", "inconclusive")
    text = to_markdown(report)
    assert "judge" in text.lower()
