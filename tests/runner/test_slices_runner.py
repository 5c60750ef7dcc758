"""The runner gates the slices a kind declares and the report names a failed one."""

from __future__ import annotations

from evalsvc.domain import RunOptions, Sample
from evalsvc.reports._findings import findings
from evalsvc.runner._runner import _gate_one
from evalsvc.suites import SuiteSpec, suite_kinds


def _samples(role: str, scores: dict[str, float], outputs: dict[str, str]) -> list[Sample]:
    out = []
    for item, score in scores.items():
        family, level, _ = item.split("-")
        out.append(Sample(suite="r", item_id=item, endpoint=role, score=score, output=outputs[item],
                          data={"family": family, "level": int(level[1:])}))
    return out


def test_reasoning_slice_collapse_fails_with_a_named_finding() -> None:
    suite = suite_kinds()["reasoning"](SuiteSpec(name="r", kind="reasoning", params={"n": 300}))
    base: dict[str, float] = {}
    cand: dict[str, float] = {}
    outs_b: dict[str, str] = {}
    outs_c: dict[str, str] = {}
    for k in range(100):
        for fam, acc in (("arithmetic", 0.5), ("lists", 0.6), ("dates", 0.33)):
            item = f"{fam}-L1-{k}"
            solved = float(k < acc * 100)
            base[item] = solved
            cand[item] = 0.0 if fam == "dates" else solved
            outs_b[item] = "The answer is Tuesday." if fam == "dates" else "The answer is 4."
            outs_c[item] = "The answer is Monday." if fam == "dates" else "The answer is 4."
    b_s = _samples("baseline", base, outs_b)
    c_s = _samples("candidate:0", cand, outs_c)
    analysis = suite.analyze(b_s, c_s)
    assert analysis.slices and set(analysis.slices["family × level"]) == {
        "arithmetic L1", "lists L1", "dates L1"}
    suite.bind_gate(RunOptions())  # the service layer's step (evalsvc.services.runs.bind_gates)
    res = _gate_one(suite, analysis, RunOptions(), 300, b_s, c_s)
    assert res.verdict == "fail"
    d = res.outcome.details
    assert "dates L1: 33% → 0%, 33 of 33 solved items lost" in d["reason"]
    (row,) = [r for r in d["slices"]["slices"] if r["verdict"] == "fail"]
    assert row["flipped_tokens"][0]["baseline"] == "Tuesday"
    assert row["flipped_tokens"][0]["candidate"] == "Monday"
    report_entry = {"kind": "reasoning", "details": {**d, **res.details}}
    text = "\n".join(findings(report_entry))
    assert "Slice failed: dates L1: 33% → 0%" in text and "'Tuesday'" in text


def test_needle_declares_length_depth_slices() -> None:
    suite = suite_kinds()["needle"](SuiteSpec(name="n", kind="needle"))
    s = Sample(suite="n", item_id="x", endpoint="baseline", score=1.0,
               data={"context_length": 2048, "depth": 0.5})
    assert suite.slice_of(s) == {
        "length": "2048 tokens", "depth": "depth 0.5", "length × depth": "2048 tokens at depth 0.5"}
