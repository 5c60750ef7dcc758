"""The verdict combination rule (evalsvc.gates._combine), checked over random gate outcomes.

Properties, for any mix of suites (verdict, inferiority p, α, gated or not):
* a candidate fails only if one of its gated suites reads ``fail`` after the Holm correction,
  and that suite's own gate failed with a Holm-adjusted p below the family α (statsmodels);
* it passes exactly when every gated suite passes; otherwise it is inconclusive;
* a not-gated suite and the p-value of a gate that made no fail call never change anything;
* every verdict (candidate and suite) has reasons; the run is a function of its candidates.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from statsmodels.stats.multitest import multipletests

from evalsvc.gates import (
    REASON_CODES,
    GateOutcome,
    SuiteGate,
    combine_candidates,
    decide,
)


@pytest.fixture(autouse=True, scope="module")
def _no_full_gc_per_holm() -> Iterator[None]:
    # statsmodels' Holm branch ends with gc.collect(): in a full test session (browsers, servers,
    # every module loaded) that is ~1 s per example. Its arithmetic is what the tests compare
    # against, so only the collection is skipped.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gc, "collect", lambda *a, **k: 0)  # multipletests imports gc when it runs
        yield


_P = st.one_of(st.none(), st.floats(min_value=0.0, max_value=1.0, allow_nan=False))


@st.composite
def _gate(draw: st.DrawFn, index: int) -> SuiteGate:
    verdict = draw(st.sampled_from(["pass", "fail", "inconclusive"]))
    p_inf = draw(_P)
    alpha = draw(st.sampled_from([0.01, 0.05, 0.1]))
    details: dict[str, object] = {"p_inferiority": p_inf}
    if verdict == "inconclusive" and draw(st.booleans()):
        # A gate that declined to decide (the drift case: n below the kind's minimum) may have
        # any p-value, including a tiny one.
        details["reason"] = "n = 6 is below the minimum of 10 for a continuous gate"
    if verdict != "fail" and draw(st.booleans()):
        details["underpowered"] = "underpowered: the MDE at n = 6 is 0.2, larger than the margin"
    outcome = GateOutcome(
        verdict=verdict,  # type: ignore[arg-type]
        metric="m",
        baseline=0.5,
        candidate=0.45,
        delta=-0.05,
        ci=(-0.1, 0.0),
        p_value=draw(_P),
        margin=0.05,
        alpha=alpha,
        n=draw(st.integers(min_value=0, max_value=1000)),
        mde=0.05,
        test="t",
        details=details,
    )
    return SuiteGate(f"suite-{index}", outcome, gated=draw(st.booleans()) or index == 0)


@st.composite
def _gates(draw: st.DrawFn) -> list[SuiteGate]:
    n = draw(st.integers(min_value=0, max_value=7))
    return [draw(_gate(i)) for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(_gates())
def test_candidate_verdict_follows_its_gates(gates: list[SuiteGate]) -> None:
    decision = decide(gates)
    assert [s.suite for s in decision.suites] == [g.suite for g in gates]
    gated = [(g, s) for g, s in zip(gates, decision.suites, strict=True) if g.gated]

    # Holm over the fail calls, others at p = 1, checked against statsmodels.
    if gated:
        fam_alpha = min(g.outcome.alpha for g, _ in gated)
        raw = [
            (g.outcome.p_inferiority if g.outcome.p_inferiority is not None else 1.0)
            if g.outcome.verdict == "fail"
            else 1.0
            for g, _ in gated
        ]
        adjusted = multipletests(raw, method="holm")[1]
        for (g, s), p_adj in zip(gated, adjusted, strict=True):
            survives = g.outcome.verdict == "fail" and p_adj < fam_alpha
            assert (s.verdict == "fail") == survives
            if g.outcome.verdict == "fail" and not survives:
                assert s.verdict == "inconclusive"
                assert s.outcome.details["verdict_before_holm"] == "fail"
                assert "holm_adjusted" in {r.code for r in s.reasons}
            if g.outcome.verdict != "fail":
                assert s.verdict == g.outcome.verdict  # only fail calls are adjusted
            if g.outcome.verdict == "fail":
                assert np.isclose(s.outcome.details["p_inferiority_holm"], p_adj)

    verdicts = [s.verdict for _, s in gated]
    if "fail" in verdicts:
        assert decision.verdict == "fail"
    elif verdicts and all(v == "pass" for v in verdicts):
        assert decision.verdict == "pass"
    else:
        assert decision.verdict == "inconclusive"
    # A failing candidate has a failing gate that failed on its own.
    if decision.verdict == "fail":
        assert any(g.outcome.verdict == "fail" for g, _ in gated)
        codes = {r.code for r in decision.reasons}
        assert codes & {"failed_gate", "failed_slice"}

    # Reasons everywhere, with known codes; suite reasons name their suite.
    assert decision.reasons
    for s in decision.suites:
        assert s.reasons and all(r.suite == s.suite for r in s.reasons)
        assert all(r.code in REASON_CODES for r in s.reasons)
        if not s.gated:
            assert s.reasons[0].code == "not_gated"
    assert all(r.code in REASON_CODES for r in decision.reasons)


@settings(max_examples=150, deadline=None)
@given(_gates(), st.data())
def test_ungated_suites_and_undecided_p_values_change_nothing(
    gates: list[SuiteGate], data: st.DataObject
) -> None:
    before = decide(gates)
    changed = []
    for g in gates:
        if not g.gated:
            # Anything at all about a not-gated suite: its verdict, its p-value.
            verdict = data.draw(st.sampled_from(["pass", "fail", "inconclusive"]))
            p = data.draw(_P)
            o = replace(g.outcome, verdict=verdict, details={**g.outcome.details, "p_inferiority": p})
            changed.append(replace(g, outcome=o))
        elif g.outcome.verdict != "fail":
            # The p-value of a gate that made no fail call (e.g. below the kind's minimum n).
            p = data.draw(_P)
            o = replace(g.outcome, details={**g.outcome.details, "p_inferiority": p})
            changed.append(replace(g, outcome=o))
        else:
            changed.append(g)
    after = decide(changed)
    assert after.verdict == before.verdict
    assert [s.verdict for s in after.suites if s.gated] == [
        s.verdict for s in before.suites if s.gated
    ]


@settings(max_examples=100, deadline=None)
@given(st.lists(_gates(), min_size=0, max_size=4))
def test_run_verdict_is_a_function_of_its_candidates(candidates: list[list[SuiteGate]]) -> None:
    decisions = [(f"candidate:{i}", decide(g)) for i, g in enumerate(candidates)]
    verdict, reasons = combine_candidates(decisions)
    vs = [d.verdict for _, d in decisions]
    expected = "fail" if "fail" in vs else "inconclusive" if ("inconclusive" in vs or not vs) else "pass"
    assert verdict == expected
    assert reasons
    if decisions:
        assert {r.candidate for r in reasons} <= {role for role, _ in decisions}


def test_the_drift_case_of_issue_16() -> None:
    """reasoning inconclusive, drift-smoke pass, a drift gate at n = 6 inconclusive (below the
    kind's minimum n) with a tiny inferiority p: the candidate is inconclusive, not fail."""

    def gate(name: str, verdict: str, p_inf: float, reason: str | None = None) -> SuiteGate:
        details: dict[str, object] = {"p_inferiority": p_inf}
        if reason:
            details["reason"] = reason
        o = GateOutcome(
            verdict=verdict,  # type: ignore[arg-type]
            metric="m", baseline=0.0, candidate=0.0, delta=0.0, ci=(0.0, 0.0), p_value=0.5,
            margin=0.05, alpha=0.05, n=6, mde=None, test="t", details=details,
        )
        return SuiteGate(name, o)

    d = decide(
        [
            gate("reasoning-smoke", "inconclusive", 0.4),
            gate("drift-smoke", "pass", 0.99),
            gate("drift-strict", "inconclusive", 1e-6, "n = 6 is below the minimum of 10"),
        ]
    )
    assert d.verdict == "inconclusive"
    codes = [(r.suite, r.code) for r in d.reasons]
    assert ("drift-strict", "insufficient_data") in codes
    assert ("reasoning-smoke", "ci_includes_margin") in codes
    assert all(s != "drift-smoke" for s, _ in codes)  # a passing suite does not block
