"""Combining suite gates into a candidate's and a run's verdict, with the reasons for each.

The rule (docs/statistics.md §1, "Several gates"), in one place:

* Only **gated** suites count; a not-gated suite (speed with its gate off) never changes a
  verdict, whatever its own outcome.
* The gated suites of one candidate are one family. Each suite's **fail call** is its own
  verdict ``fail``; Holm's step-down correction (Holm 1979, Scand. J. Statist. 6:65–70) runs
  over the family's inferiority p-values, where a suite that made no fail call (``pass`` or
  ``inconclusive``, including a gate that could not decide: below the kind's minimum n, no
  items, one cluster) counts as p = 1. A suite stays ``fail`` only if its call survives
  (adjusted p < the family α, by default the smallest gate α); otherwise it becomes
  ``inconclusive`` with ``verdict_before_holm: "fail"`` and a ``holm_adjusted`` reason. Raising
  p-values never adds Holm rejections, so the family-wise rate of wrongly failed suites stays
  ≤ α; and an undecided gate's p-value, which its own test did not trust, is never used.
* A suite that **ended in error** (``errored``: its requests errored past the budget, or its
  pilot, planning or run failed; ``evalsvc.runner._isolation``) has no verdict: it makes no
  fail call (p = 1 in the Holm family, whatever its partial numbers say) and cannot pass.
* The **candidate** is ``fail`` if any of its suites is (after Holm) — a fail is certain
  whatever an errored suite would have said, since an errored suite only ever counts as p = 1
  —, else ``error`` if a gated suite ended in error (its evidence is incomplete: no pass),
  else ``pass`` if every gated suite passes (an intersection–union test, Berger 1982,
  Technometrics 24:295–300: each gate at level α already bounds the chance of passing a
  candidate too bad on that metric), else ``inconclusive`` (also when nothing is gated).
* A candidate the comparability guard (``_comparability``) finds **non-comparable** (it differs
  from the baseline in more than the quantization) reads ``non-comparable`` whatever its gates
  say: it never passes, and a fail of its gates is no evidence about quantization either.
* The **run** summarises its candidates: ``non-comparable`` if any candidate is, else ``fail``
  if any fails, else ``error`` if any is, else ``inconclusive`` if any is, else ``pass``. A
  non-comparable candidate ranks above a failing one as a run-level infrastructure ``error``
  (an endpoint unreachable at the probe: no candidate was gated at all) does: both say that
  part of the run answers no quantization question, and the fix (compare the right endpoints,
  or allow the difference) comes before reading any verdict of the run.
  Each candidate is its own release decision, so its verdict does not depend on which other
  candidates shared the run.

Every verdict carries :class:`Reason` objects saying why, passes included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, get_args

from evalsvc.gates._outcome import GateOutcome, Verdict
from evalsvc.stats import holm

__all__ = [
    "REASON_CODES",
    "CandidateDecision",
    "CandidateVerdict",
    "Reason",
    "ReasonCode",
    "SuiteDecision",
    "SuiteGate",
    "combine_candidates",
    "combine_verdicts",
    "decide",
    "holm_inferiority",
]

ReasonCode = Literal[
    "non_comparable",  # the candidate differs from the baseline in more than the quantization
    "passed",  # a gate (or every gate of a candidate) passed
    "failed_gate",  # the suite as a whole is worse than the margin allows
    "failed_slice",  # a slice (family, length, condition) is worse than the margin allows
    "failed_bound",  # a suite's bound (thinking length ratio, truncation rise) is exceeded
    "holm_adjusted",  # a fail call that does not survive a multiplicity correction
    "underpowered",  # the MDE at this n is above the margin: this size can rarely pass
    "uninformative_baseline",  # the baseline cannot show a drop of the margin
    "uninformative_judge",  # the suite's judge cannot tell (consistency, discrimination)
    "judge_addressed",  # a pass would rest on answers that address the judge
    "meaning_unchecked",  # a replay's answers changed and nothing here tells what they mean
    "insufficient_data",  # the gate cannot decide at all (no items, n below the minimum, ...)
    "ci_includes_margin",  # the data cannot tell: the CI straddles the margin boundary
    "not_gated",  # reported, never part of the verdict
    "skipped",  # a suite of the run that could not run on these endpoints: not covered
    "no_gated_suites",  # nothing was gated, so nothing can pass
    "error_budget",  # too many items errored: no verdict (run verdict ``error``)
    "suite_error",  # the suite could not finish (its pilot, planning or run failed): no verdict
    "infrastructure_error",  # the run reached no verdict (endpoint unreachable, cancelled, ...)
    "allowed_difference",  # a difference beyond quantization the run or its suites allowed
]

#: Every reason code, in the order a reader should see them (blocking ones first).
REASON_CODES: tuple[str, ...] = get_args(ReasonCode)


@dataclass(frozen=True)
class Reason:
    """Why a verdict is what it is. ``suite`` is None for a reason about the whole candidate;
    ``candidate`` (a role, ``candidate:N``) is set on run-level reasons."""

    code: str
    message: str
    suite: str | None = None
    candidate: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "suite": self.suite, "message": self.message}
        if self.candidate is not None:
            out["candidate"] = self.candidate
        return out


@dataclass(frozen=True)
class SuiteGate:
    """One suite's gate outcome for one candidate, as the runner computed it."""

    suite: str
    outcome: GateOutcome
    gated: bool = True


@dataclass(frozen=True)
class SuiteDecision:
    """A suite's final verdict (after the candidate-level Holm correction) and its reasons."""

    suite: str
    outcome: GateOutcome
    gated: bool
    reasons: tuple[Reason, ...]

    @property
    def verdict(self) -> Verdict:
        return self.outcome.verdict


#: A candidate's (and the run's) verdict: a suite's, or ``non-comparable`` (``_comparability``).
CandidateVerdict = Literal["pass", "fail", "inconclusive", "error", "non-comparable"]


@dataclass(frozen=True)
class CandidateDecision:
    """A candidate's verdict over its suites, the suites' final verdicts and the reasons."""

    verdict: CandidateVerdict
    reasons: tuple[Reason, ...]
    suites: tuple[SuiteDecision, ...] = field(default_factory=tuple)
    family_alpha: float | None = None


def _family_alpha(outcomes: Sequence[GateOutcome], alpha: float | None) -> float:
    # Gates may carry different alphas; the strictest one is the family level unless the caller
    # sets it, which keeps the family-wise guarantee for every gate's own α.
    return float(alpha) if alpha is not None else min(o.alpha for o in outcomes)


def holm_inferiority(outcomes: Sequence[GateOutcome], *, alpha: float | None = None) -> list[float]:
    """Holm-adjusted inferiority p-values of ``outcomes`` as given, one per gate, in input order.

    Gates without an inferiority p-value (no items) count as 1.0: no evidence of a drop.
    (:func:`decide` passes 1.0 for every gate that made no fail call.)
    """
    del alpha  # the adjustment itself does not depend on α; kept for a symmetric signature
    raw = [o.p_inferiority if o.p_inferiority is not None else 1.0 for o in outcomes]
    return [float(p) for p in holm(raw)] if raw else []


def _g(x: float | None, digits: int = 3) -> str:
    return "—" if x is None else f"{x:.{digits}g}"


def _f(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _is_threshold(o: GateOutcome) -> bool:
    return "threshold" in o.details


def _what(o: GateOutcome) -> str:
    """The gate's numbers in words: 'metric 0.031 [0.020, 0.044] vs threshold 0.05' or
    'accuracy Δ −0.012 [−0.040, 0.015] vs margin 0.05'."""
    if _is_threshold(o):
        ci = o.details.get("ci_metric") or [None, None]
        return (
            f"{o.metric} {_f(o.candidate)} [{_f(ci[0])}, {_f(ci[1])}] against the threshold "
            f"{_g(o.details.get('threshold'))}"
        )
    return f"{o.metric} Δ {_f(o.delta)} [{_f(o.ci[0])}, {_f(o.ci[1])}] against the margin {_g(o.margin)}"


def _own_reasons(suite: str, o: GateOutcome) -> list[Reason]:
    """Why the suite's own gate reads what it reads (before any run-level correction)."""
    d = o.details
    out: list[Reason] = []
    reason_text = d.get("reason")
    hib = d.get("higher_is_better", True)
    if o.verdict == "pass":
        side = "below" if _is_threshold(o) and not hib else "above"
        if _is_threshold(o):
            msg = (
                f"{_what(o)}: its one-sided {1 - o.alpha:.0%} bound is {side} the threshold "
                f"(p = {_g(o.p_value)} < α {o.alpha:g})"
            )
        else:
            msg = (
                f"{_what(o)}: the candidate is no worse than the margin allows "
                f"(non-inferiority p = {_g(o.p_value)} < α {o.alpha:g}, n = {o.n})"
            )
        out.append(Reason("passed", msg, suite))
        if d.get("judge_addressed_note"):
            out.append(Reason("judge_addressed", f"{d['judge_addressed_note']}; the pass holds "
                                                 "with all of them counted worse", suite))
    elif o.verdict == "fail":
        slices = (d.get("slices") or {}).get("slices") or []
        failed = [r for r in slices if r.get("verdict") == "fail" and r.get("finding")]
        overall_adj = (d.get("slices") or {}).get("p_inferiority_overall_holm")
        overall_p = d.get("p_inferiority_overall", d.get("p_inferiority"))
        bounds = [str(x) for x in d.get("failed_bounds") or []]
        own_failed = d.get("verdict_before_bounds", "fail") == "fail"
        if own_failed and (not failed or (overall_adj is not None and overall_adj < o.alpha)):
            out.append(
                Reason(
                    "failed_gate",
                    f"{_what(o)}: worse than the gate allows (inferiority p = {_g(overall_p)}"
                    f" < α {o.alpha:g}, n = {o.n})",
                    suite,
                )
            )
        for row in failed:
            out.append(Reason("failed_slice", f"slice {row['finding']}", suite))
        for bound in bounds:
            out.append(Reason("failed_bound", bound, suite))
    else:
        judged = _judge_reasons(suite, d)
        out += judged
        if judged and (
            (d.get("judge") or {}).get("informative") is False
            or d.get("verdict_before_meaning") == "pass"
            or d.get("verdict_before_addressed") == "pass"
        ):
            # The interval is not what is missing: more items make no judge informative, and
            # a degeneration check that passed needs a meaning check, not more of itself.
            return out
        if "verdict_before_guard" in d or (
            (d.get("baseline_guard") or {}).get("informative") is False
        ):
            text = (d.get("baseline_guard") or {}).get("reason") or reason_text
            out.append(Reason("uninformative_baseline", str(text), suite))
        elif reason_text and "does not survive Holm" in str(reason_text):
            out.append(Reason("holm_adjusted", str(reason_text), suite))
        elif reason_text:
            out.append(Reason("insufficient_data", f"cannot decide: {reason_text}", suite))
        else:
            out.append(
                Reason(
                    "ci_includes_margin",
                    f"{_what(o)}: the interval includes the "
                    f"{'threshold' if _is_threshold(o) else 'margin boundary'}, so the data "
                    f"cannot tell (non-inferiority p = {_g(o.p_value)}, n = {o.n})",
                    suite,
                )
            )
    if d.get("underpowered") and o.verdict != "fail":
        out.append(Reason("underpowered", str(d["underpowered"]), suite))
    return out


def _judge_reasons(suite: str, d: dict[str, Any]) -> list[Reason]:
    """An inconclusive suite's reasons that come from its judge or its missing one: a judge
    that is not informative (with its figures and the fix), a pass that answers addressing the
    judge would carry, a replay whose changed answers nothing could check."""
    out: list[Reason] = []
    judge = d.get("judge") if isinstance(d.get("judge"), dict) else None
    if judge is not None and judge.get("informative") is False:
        who = " at ".join(f"{x}" for x in (judge.get("model"), judge.get("endpoint")) if x)
        figures = (
            f"position consistency {_pct(judge.get('consistency'))} (needs "
            f"{_pct(judge.get('min_consistency'))}), discrimination "
            f"{_pct(judge.get('discrimination'))} (needs {_pct(judge.get('min_discrimination'))})"
        )
        out.append(Reason(
            "uninformative_judge",
            f"the judge{' ' + who if who else ''} is not informative: {figures}; its verdicts "
            "cannot decide at any number of items: judge with a stronger model (the suite's "
            "judge.endpoint and judge.model)",
            suite,
        ))
    if d.get("judge_addressed"):
        out.append(Reason("judge_addressed", str(d["judge_addressed"]), suite))
    elif d.get("judge_addressed_note"):
        out.append(Reason("judge_addressed", f"{d['judge_addressed_note']}: read them (flips "
                                             "page)", suite))
    if d.get("meaning_unchecked") and not out:
        out.append(Reason(
            "meaning_unchecked",
            f"{d['meaning_unchecked']}: add a judge (judge.endpoint, a model stronger than the "
            "ones under test) or a reference column",
            suite,
        ))
    return out


def _pct(x: Any) -> str:
    return "—" if not isinstance(x, (int, float)) else f"{x:.0%}"


def decide(
    gates: Sequence[SuiteGate],
    *,
    alpha: float | None = None,
    errored: Mapping[str, Reason] | None = None,
) -> CandidateDecision:
    """One candidate's verdict over its suites by the module's rule, with reasons.

    Returns the suites in input order with their final outcome: a ``fail`` that does not survive
    Holm becomes ``inconclusive`` (``details.verdict_before_holm``); every gated fail call gets
    ``details.p_inferiority_holm`` and ``details.holm_family`` (the family size). ``errored``:
    the suites that ended in error, by name, each with the reason that says why (its outcome is
    returned as given, its reasons are that one).
    """
    errored = errored or {}
    family = [i for i, g in enumerate(gates) if g.gated]
    fam_alpha = _family_alpha([gates[i].outcome for i in family], alpha) if family else None
    # A suite that made no fail call contributes p = 1: it cannot fail the candidate, and its
    # own p-value (maybe from a test that declined to decide) never helps another suite fail.
    # An errored suite makes none either, whatever its partial numbers say.
    raw = [
        (o.p_inferiority if o.p_inferiority is not None else 1.0)
        if o.verdict == "fail" and gates[i].suite not in errored
        else 1.0
        for i, o in ((i, gates[i].outcome) for i in family)
    ]
    adjusted = dict(zip(family, (float(p) for p in holm(raw)) if raw else [], strict=True))
    m = len(family)

    suites: list[SuiteDecision] = []
    for index, g in enumerate(gates):
        o = g.outcome
        if g.suite in errored:
            suites.append(SuiteDecision(g.suite, o, g.gated, (errored[g.suite],)))
            continue
        if not g.gated:
            own = _own_reasons(g.suite, o)
            msg = f"{_what(o)}: reported, not gated (reads {o.verdict}); it never changes the verdict"
            suites.append(SuiteDecision(g.suite, o, False, (Reason("not_gated", msg, g.suite), *own)))
            continue
        reasons = _own_reasons(g.suite, o)
        if o.verdict == "fail":
            assert fam_alpha is not None
            p_adj = adjusted[index]
            details = {**o.details, "p_inferiority_holm": p_adj, "holm_family": m}
            if p_adj < fam_alpha:
                if m > 1:
                    reasons.append(
                        Reason(
                            "holm_adjusted",
                            f"the fail call survives Holm's correction across the candidate's {m} "
                            f"gated suites (adjusted p = {_g(p_adj)} < α {fam_alpha:g})",
                            g.suite,
                        )
                    )
                o = replace(o, details=details)
            else:
                details["verdict_before_holm"] = "fail"
                o = replace(o, verdict="inconclusive", details=details)
                reasons = [
                    Reason(
                        "holm_adjusted",
                        f"fails on its own (inferiority p = {_g(g.outcome.p_inferiority)}) but not "
                        f"after Holm's correction across the candidate's {m} gated suites "
                        f"(adjusted p = {_g(p_adj)} ≥ α {fam_alpha:g}), so it is inconclusive",
                        g.suite,
                    ),
                    *reasons,
                ]
        suites.append(SuiteDecision(g.suite, o, True, tuple(reasons)))

    gated = [s for s in suites if s.gated and s.suite not in errored]
    informational = [r for s in suites if not s.gated for r in s.reasons if r.code == "not_gated"]
    failed_in_error = [s.reasons[0] for s in suites if s.suite in errored and s.gated]
    informational += [s.reasons[0] for s in suites if s.suite in errored and not s.gated]
    verdict: CandidateVerdict
    if any(s.verdict == "fail" for s in gated):
        # Certain whatever the errored suites would say: they count as p = 1 in the family.
        verdict = "fail"
        failing = [s for s in gated if s.verdict == "fail"]
        others = [s for s in gated if s.verdict == "inconclusive"]
        reasons_out = [r for s in failing for r in s.reasons if r.code != "holm_adjusted"]
        reasons_out += failed_in_error
        reasons_out += [r for s in others for r in s.reasons]
        reasons_out += informational
    elif failed_in_error:
        # No pass rests on incomplete evidence; the other suites' reasons still say theirs.
        verdict = "error"
        reasons_out = [*failed_in_error]
        reasons_out += [r for s in gated if s.verdict != "pass" for r in s.reasons]
        reasons_out += [r for s in gated if s.verdict == "pass" for r in s.reasons]
        reasons_out += informational
    elif not gated:
        verdict = "inconclusive"
        reasons_out = [
            Reason("no_gated_suites", "no suite is gated, so nothing can pass"),
            *informational,
        ]
    elif all(s.verdict == "pass" for s in gated):
        verdict = "pass"
        names = ", ".join(s.suite for s in gated)
        reasons_out = [
            Reason(
                "passed",
                f"every gated suite passes ({len(gated)} of {len(gated)}: {names})",
            ),
            *informational,
        ]
    else:
        verdict = "inconclusive"
        blocking = [s for s in gated if s.verdict != "pass"]
        reasons_out = [r for s in blocking for r in s.reasons]
        reasons_out += informational
    return CandidateDecision(verdict, tuple(reasons_out), tuple(suites), fam_alpha)


def combine_candidates(
    decisions: Sequence[tuple[str, CandidateDecision]],
) -> tuple[CandidateVerdict, tuple[Reason, ...]]:
    """The run's verdict over ``(role, decision)`` pairs: non-comparable if any candidate is,
    else fail if any fails, else error if any suite of a candidate ended in error, else
    inconclusive if any is (or there is none), else pass; the
    reasons are the candidates', labelled with their role (the worst candidate's first)."""
    if not decisions:
        return "inconclusive", (Reason("no_gated_suites", "no candidate was compared"),)
    order = {"non-comparable": 0, "fail": 1, "error": 2, "inconclusive": 3, "pass": 4}
    ranked = sorted(decisions, key=lambda rd: order[rd[1].verdict])
    verdict = ranked[0][1].verdict
    reasons = tuple(replace(r, candidate=role) for role, d in ranked for r in d.reasons)
    return verdict, reasons


def combine_verdicts(outcomes: Sequence[GateOutcome], *, alpha: float | None = None) -> Verdict:
    """The verdict of :func:`decide` over gated ``outcomes`` (one candidate's suites × metrics)."""
    gates = [SuiteGate(f"gate {i}", o) for i, o in enumerate(outcomes)]
    verdict = decide(gates, alpha=alpha).verdict
    # decide() says neither without errored suites or the comparability guard.
    assert verdict != "non-comparable" and verdict != "error"
    return verdict
