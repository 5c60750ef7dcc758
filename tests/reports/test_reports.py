"""The JSON report keeps the shape of docs/report.md; JUnit and Markdown render the same numbers."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np

from evalsvc.domain import EndpointRef, Provenance, RunOptions
from evalsvc.gates import SuiteGate, combine_candidates, decide, evaluate_gate
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
    decisions = []
    for c in cands:  # the runner's combination (evalsvc.runner._gate_all)
        d = decide([SuiteGate(s.suite, s.outcome, s.gated) for s in c.suites])
        for s, sd in zip(c.suites, d.suites, strict=True):
            s.outcome, s.reasons = sd.outcome, list(sd.reasons)
        c.verdict, c.reasons = d.verdict, list(d.reasons)
        decisions.append((c.role, d))
    verdict, reasons = combine_candidates(decisions)
    return RunResult(run_id="r1", verdict=verdict, baseline=EndpointRef(url="http://base/v1", model="b"),
                     baseline_provenance=prov, candidates=cands, options=RunOptions(),
                     reasons=list(reasons))


def test_json_report_contract() -> None:
    report = build_report(_result())
    json.dumps(report, allow_nan=False)  # strict JSON: no NaN/inf anywhere
    assert report["run_id"] == "r1" and report["verdict"] == "fail"
    assert report["baseline"] == {"url": "http://base/v1", "model": "b", "name": None,
                                  # host:port (no name) with the model: every view's label
                                  "label": "base (b)",
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


def test_markdown_says_where_and_how_much() -> None:
    """Each kind's findings reach the Markdown: heatmap, flips, KLD, both determinism rates, gain."""
    report = build_report(_result())
    suites = report["candidates"][1]["suites"]
    suites[0]["details"]["heatmap"] = {
        "baseline": [{"context_length": 1024, "depth": 0.5, "accuracy": 1.0, "n": 4}],
        "candidate": [{"context_length": 1024, "depth": 0.5, "accuracy": 0.25, "n": 4}],
    }
    base = dict(suites[0], details={})
    suites += [
        dict(base, suite="drift-x", kind="drift", details={
            "kld": {"mean": 0.19, "median": 0.11, "p99": 1.2, "p99.9": 2.5, "max": 4.8},
            "positions": 3740, "passages": 16, "top_k": 20, "same_top_p": 0.634,
            "perplexity": {"baseline": 20.0, "candidate": 27.4, "ratio": 1.37}}),
        dict(base, suite="det-x", kind="determinism", details={
            "baseline": {"overall": {"identical_rate": 0.5, "tie_flips": 3, "confident_flips": 1},
                         "conditions": {"mixed": {"identical_rate": 0.5}}},
            "candidate": {"overall": {"identical_rate": 0.25}, "conditions": {}}}),
        dict(base, suite="speed-x", kind="speed", gated=False, details={
            "summary": "×2.0 KV capacity, ×1.3 throughput at c=8",
            "levels": [{"concurrency": 8, "baseline": {"output_tok_s": 100.0},
                        "candidate": {"output_tok_s": 130.0}}]}),
        dict(base, suite="odd-x", kind="unknown-kind", details={}),
    ]
    md = to_markdown(report)
    assert "| 1024 | 100% / 25% |" in md  # the needle heatmap, baseline / candidate
    regressions = report["candidates"][1]["suites"][0]["details"]["counts"]["regressions"]
    assert f"Flips: {regressions} correct → incorrect" in md
    assert "mean 0.1900" in md and "Same top token: 63%" in md and "(×1.370)" in md
    assert "| mixed | 50% / — |" in md and "| **overall** | 50% / 25% |" in md
    assert "**×2.0 KV capacity, ×1.3 throughput at c=8**" in md and "100.0 / 130.0" in md
    assert "### speed-x (speed) — fail (not gated)" in md
    assert "### odd-x (unknown-kind)" in md  # unknown kinds still render their heading
    from evalsvc.reports import headline

    lines = {s["suite"]: headline(s) for s in report["candidates"][1]["suites"]}
    assert lines["speed-x"] == "×2.0 KV capacity, ×1.3 throughput at c=8"
    assert lines["det-x"] == (
        "unstable under load: baseline —, candidate — "
        "(identical to batch-1 output: 50% / 25%)"
    )
    assert lines["drift-x"].startswith("mean KLD 0.1900 nats")
    assert lines["needle-x"] == f"{regressions} correct → incorrect, 0 incorrect → correct"
    assert lines["odd-x"] is None


def test_junit_inconclusive_is_a_failure_and_error_an_error() -> None:
    """Only a pass is green: CI dashboards show a JUnit <skipped> as green."""
    report = build_report(_result())
    good, bad = report["candidates"]
    good["suites"][0]["verdict"] = "inconclusive"
    bad["suites"][0]["verdict"] = "error"
    root = ET.fromstring(to_junit(report).split("\n", 1)[1])
    (failure,) = root.findall(".//failure")
    assert failure.get("type") == "inconclusive" and failure.get("message", "").startswith("inconclusive")
    (error,) = root.findall(".//error")
    assert error.get("type") == "error"
    assert root.get("failures") == "1" and root.get("errors") == "1" and not root.findall(".//skipped")


def test_candidates_are_labelled_by_name_else_host_port_with_the_model() -> None:
    from evalsvc.reports import endpoint_label

    same_model = [
        {"url": "http://10.0.0.1:8000/v1", "model": "llama-8b", "name": None},
        {"url": "http://10.0.0.2:8000/v1", "model": "llama-8b", "name": None},
    ]
    labels = [endpoint_label(c) for c in same_model]
    assert labels == ["10.0.0.1:8000 (llama-8b)", "10.0.0.2:8000 (llama-8b)"]
    assert endpoint_label({"url": "http://u:p@h:1/v1", "model": None, "name": None}) == "h:1"
    assert endpoint_label({"url": "http://h:1/v1", "model": "m", "name": "prod-fp8"}) == "prod-fp8 (m)"


def test_every_verdict_says_why_in_every_view() -> None:
    """Run, candidate and suite carry reasons (issue 16); the schema, Markdown and JUnit show them."""
    import jsonschema

    from evalsvc.reports import report_schema

    report = build_report(_result())
    jsonschema.validate(report, report_schema())
    good, bad = report["candidates"]
    assert [r["code"] for r in good["reasons"]] == ["passed"]
    assert [r["code"] for r in bad["reasons"]] == ["failed_gate"]
    assert bad["reasons"][0]["suite"] == "needle-x"
    assert good["suites"][0]["reasons"][0]["code"] == "passed"
    # The run's reasons are its candidates', failing candidate first, each labelled.
    assert [(r["candidate"], r["code"]) for r in report["reasons"]] == [
        ("candidate:1", "failed_gate"),
        ("candidate:0", "passed"),
    ]
    md = to_markdown(report)
    assert "Why:" in md and "`failed_gate`" in md and "`passed`" in md
    root = ET.fromstring(to_junit(report).split("\n", 1)[1])
    (failure,) = root.findall(".//failure")
    assert failure.get("message", "").startswith("gate failed: failed_gate: accuracy")
    props = [(p.get("name"), p.get("value")) for p in root.iter("property")]
    assert ("verdict", "fail") in props
    # A suite's reason is said once, on its testcase; the candidate's own ones as properties.
    assert not any(n == "reason" and "failed_gate" in str(v) for n, v in props)
    assert ("reason", "passed: every gated suite passes (1 of 1: needle-x)") in props


def test_threshold_gates_show_the_metric_the_threshold_and_its_own_ci() -> None:
    """Drift's KLD gate: no 'baseline = threshold', no 'Δ = KLD − threshold' (issue 16, item 5)."""
    from evalsvc.gates import threshold_gate
    from evalsvc.reports import summary_rows

    rng = np.random.default_rng(1)
    outcome = threshold_gate(rng.gamma(2.0, 0.01, 60), metric="kld_mean", threshold=0.05,
                             higher_is_better=False)
    res = _result()
    res.candidates[0].suites.append(SuiteResult(
        suite="drift-x", kind="drift", version="1", outcome=outcome, n_errors=0, n_planned=60,
        gated=True, details={"gate": {"gate": "threshold", "threshold": 0.05,
                                      "higher_is_better": False}}))
    report = build_report(res)
    (row,) = [r for r in summary_rows(report) if r["suite"] == "drift-x"]
    ci = outcome.details["ci_metric"]
    assert row["baseline"] == "—" and row["delta"] == "—"
    assert row["candidate_value"] == f"{outcome.candidate:.3f}"
    assert row["ci"] == f"[{ci[0]:.3f}, {ci[1]:.3f}]" and row["margin"] == "threshold < 0.05"
    md = to_markdown(report)
    assert "| drift-x | kld_mean | — |" in md and "Threshold gates" in md


def test_a_one_sided_interval_reads_as_one() -> None:
    """An exact one-sided bound (a sampled or determinism gate: the other end infinite, None in
    the JSON) is written as a half-open interval, never ``[—, 0.015]``."""
    from evalsvc.reports._gatecols import gate_view, interval

    assert interval([None, 0.015]) == "(-∞, 0.015]"
    assert interval([-0.02, None]) == "[-0.020, +∞)"
    assert interval([-0.02, 0.015]) == "[-0.020, 0.015]"
    assert interval([None, None]) == interval(None) == "—"
    entry = {"suite": "s", "metric": "unstable_rate", "baseline": 0.0, "candidate": 0.0,
             "delta": 0.0, "ci": [None, 0.015], "margin": 0.1, "p_value": 0.01}
    assert gate_view(entry)["ci"] == "(-∞, 0.015]"
