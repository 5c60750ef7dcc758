"""The verdict of a reference-free replay (``dataset``'s ``compare: quality``): quality, not wording.

Contract: :func:`quality_outcome` turns the per-item evidence ``dataset``'s analysis collected
into one ``GateOutcome``; pure (the statistics are ``evalsvc.gates.evaluate_gate``'s). Two checks:

1. **Degeneration** (gated, the outcome's own numbers): per item 1 where the answer is not
   degenerate (``_degeneration``: empty, looping, leaked template markup, gibberish), the
   candidate's answer paired with the baseline's first, paired binary non-inferiority at the
   gate's margin (0.05). It fails a candidate whose answers degenerate more often than the
   baseline's beyond the margin; its pass is evidence of **no more degeneration only**.
2. **Meaning**: do the changed answers say the same? With a judge, its pairwise verdicts (both
   orders, ``_judge``; margin ``JUDGE_MARGIN``, guarded: a judge that is not informative, or
   whose pass depends on answers that address it, cannot pass it). Without one, only identical
   answers are evidence: exact agreement (under the suite's scorer) with the baseline's first
   answer, paired with the baseline's own second pass, margin ``AGREEMENT_MARGIN``; its fail
   is **never** a fail of the verdict (a changed answer is not a worse one), only "cannot tell".

Verdict: ``fail`` when degeneration fails, or the judge finds the candidate worse beyond its
margin; ``pass`` when degeneration passes and the meaning check passes; else ``inconclusive``,
with ``details["meaning_unchecked"]`` saying what is missing (which judge, which reference)
when the answers changed and nothing could tell whether they mean the same. ``details["checks"]``
holds both checks' figures (a meaning check by agreement that shows changed answers reads
``changed``, never ``fail``), ``details["gates"]`` says what each one gates.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from evalsvc.gates import GateOutcome, evaluate_gate
from evalsvc.suites.kinds._judge import judge_outcome

JUDGE_MARGIN = 0.10
"""The judge check's margin: the ``compare: judge`` gate's (a judge is a noisier instrument)."""
AGREEMENT_MARGIN = 0.05

GATES = (
    "degeneration: the share of answers that are empty, loop, leak template markup or are "
    "not language, the candidate's against the baseline's (a pass says no more degenerate "
    "answers, nothing about what they say); meaning: {meaning}"
)
_MEANING = {
    "judge": "the judge's pairwise verdicts on the changed answers (both orders)",
    "agreement": "identical answers only (no judge, no reference): changed answers are not checked",
}


def _brief(o: GateOutcome) -> dict[str, Any]:
    return {
        "metric": o.metric,
        "verdict": o.verdict,
        "baseline": o.baseline,
        "candidate": o.candidate,
        "delta": o.delta,
        "ci": list(o.ci),
        "p_value": o.p_value,
        "margin": o.margin,
        "n": o.n,
        **({"reason": o.details["reason"]} if o.details.get("reason") else {}),
    }


def quality_outcome(
    baseline: list[float],
    candidate: list[float],
    *,
    agreement: tuple[list[float], list[float]],
    judged: tuple[list[float], list[float], list[bool]],
    judge: dict[str, Any] | None,
    gate: Any,
    seed: int,
) -> GateOutcome:
    """The replay's verdict from both checks (module docstring). ``baseline``/``candidate``:
    1 where the answer is not degenerate; ``agreement``: the second pass's and the candidate's
    agreement with the baseline's first answer; ``judged``: the judge's per-item scores and
    which pairs address the judge (empty without a judge); ``judge``: its summary."""
    margin = gate.margin if gate.margin is not None else 0.05
    deg = evaluate_gate(
        baseline, candidate, metric=gate.metric, kind="binary", margin=margin,
        alpha=gate.alpha, higher_is_better=True, paired=True, seed=seed,
    )
    by = "judge" if judge is not None else "agreement"
    if judge is not None:
        jb, jc, flags = judged
        meaning = judge_outcome(jb, jc, flags, judge, metric="judge_not_worse",
                                margin=JUDGE_MARGIN, alpha=gate.alpha, seed=seed)
    else:
        meaning = evaluate_gate(
            agreement[0], agreement[1], metric="agreement", kind="binary",
            margin=AGREEMENT_MARGIN, alpha=gate.alpha, higher_is_better=True, paired=True,
            seed=seed,
        )
    changed = sum(x < 0.5 for x in agreement[1])
    meaning_brief = {"by": by, **_brief(meaning)}
    if by == "agreement" and meaning.verdict == "fail":
        # Changed answers are no fail of the verdict: the check shows they changed, not that
        # they got worse (the views must not read "meaning: fail").
        meaning_brief["verdict"] = "changed"
    extra: dict[str, Any] = {
        "checks": {"degeneration": _brief(deg), "meaning": meaning_brief},
        "gates": GATES.format(meaning=_MEANING[by]),
    }
    details: dict[str, Any] = {**deg.details, **extra}
    for key in ("judge", "judge_overrode", "judge_addressed"):
        if key in meaning.details:
            details[key] = meaning.details[key]
    if deg.verdict == "fail":
        return replace(deg, details=details)
    if by == "judge" and meaning.verdict == "fail":
        # The judge found the candidate worse beyond its margin: its outcome is the verdict's.
        # Its own p-values (Holm's family uses them), not the degeneration check's.
        return replace(meaning, details={**meaning.details, **extra})
    if deg.verdict == "pass" and meaning.verdict == "pass":
        return replace(deg, details=details)
    if meaning.verdict != "pass":
        if by == "agreement" and changed:
            details["meaning_unchecked"] = (
                f"{changed} of {len(agreement[1])} answers changed from the baseline's and "
                "nothing here can tell whether they mean the same: no judge and no reference; "
                "degeneration alone is no evidence of the same answers"
            )
        elif not (judge or {}).get("informative", True) or "judge_addressed" in details:
            details["meaning_unchecked"] = (
                "the judge cannot tell whether the changed answers mean the same: "
                + "; ".join([*((judge or {}).get("problems") or []),
                             *([str(details["judge_addressed"])]
                               if "judge_addressed" in details else [])])
            )
    if deg.verdict == "pass":
        details["verdict_before_meaning"] = "pass"
    return replace(deg, verdict="inconclusive", details=details)
