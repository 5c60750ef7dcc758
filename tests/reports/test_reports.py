"""The JSON report keeps DESIGN.md's shape; JUnit and Markdown render the same numbers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np

from evalsvc.domain import EndpointRef, Provenance, RunOptions
from evalsvc.gates import evaluate_gate
from evalsvc.reports import build_report, to_junit, to_markdown
from evalsvc.runner import CandidateResult, RunResult, SuiteResult


def _result() -> RunResult:
    rng = np.random.default_rng(0)
    base = (rng.random(200) < 0.9).astype(float)
    good = base.copy()
    bad = base * (rng.random(200) < 0.7)  # a real drop of ~27 points
    prov = Provenance(model="m", kv_capacity_tokens=1000, capabilities={"chat": True})
    cands = []
    for name, cand in (("good", good), ("bad", bad)):
        outcome = evaluate_gate(base, cand, metric="accuracy", kind="binary", margin=0.05)
        cands.append(CandidateResult(
            role=f"candidate:{len(cands)}", endpoint=EndpointRef(url=f"http://{name}/v1", model=name),
            provenance=prov, verdict=outcome.verdict,
            suites=[SuiteResult(suite="needle-x", kind="needle", version="1", outcome=outcome,
                                n_errors=0, n_planned=200, gated=True, details={"heatmap": []})]))
    return RunResult(run_id="r1", verdict="fail", baseline=EndpointRef(url="http://base/v1", model="b"),
                     baseline_provenance=prov, candidates=cands, options=RunOptions())


def test_json_report_contract() -> None:
    report = build_report(_result())
    json.dumps(report, allow_nan=False)  # strict JSON: no NaN/inf anywhere
    assert report["run_id"] == "r1" and report["verdict"] == "fail"
    assert report["baseline"] == {"url": "http://base/v1", "model": "b", "name": None,
                                  "provenance": report["baseline"]["provenance"]}
    good, bad = report["candidates"]
    assert good["verdict"] == "pass" and bad["verdict"] == "fail"
    s = bad["suites"][0]
    for key in ("suite", "kind", "verdict", "metric", "baseline", "candidate", "delta", "ci",
                "p_value", "margin", "n", "n_errors", "test", "details"):
        assert key in s
    assert s["delta"] < -0.05 and s["ci"][1] < -0.05
    assert s["details"]["heatmap"] == []  # the runner's details are merged with the gate's
    assert s["details"]["counts"]["regressions"] > 0


def test_junit_marks_failures_and_markdown_has_rows() -> None:
    report = build_report(_result())
    root = ET.fromstring(to_junit(report).split("\n", 1)[1])
    assert root.get("failures") == "1" and root.get("tests") == "2"
    failed = root.findall(".//failure")
    assert len(failed) == 1 and "needle-x" in ET.tostring(root, encoding="unicode")
    md = to_markdown(report)
    assert "verdict: **fail**" in md and md.count("| needle-x |") == 2
