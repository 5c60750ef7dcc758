"""Informative-baseline guard: a gate cannot pass when the baseline could not show a drop.

A paired non-inferiority gate only sees the items on which the two endpoints disagree. When the
baseline solves (almost) nothing, nothing can flip from right to wrong, the interval is tight
around 0 and the gate says ``pass`` — for *any* candidate, including one that answers nothing. A
misconfigured baseline (wrong chat template, wrong model, an endpoint that returns blanks) would
then wave every candidate through.

The rule is the gate itself, asked about the worst candidate the data allow: the one that gets
every item wrong (binary, higher is better; every item "bad" in general). If even that candidate
would not be *failed* at the gate's margin and α, the suite cannot discriminate at this n and a
``pass`` means nothing, so it becomes ``inconclusive`` with the reason. This is the exact version
of "fewer correct baseline items than margin × n requires for a drop of the margin to be
detectable": it uses the same test (Tango / Miettinen–Nurminen, clusters included), so it adds no
approximation of its own. Separately, a baseline rate at or below the suite's ``baseline_floor``
(a score at chance, e.g. 0.25 for four-way multiple choice) is uninformative whatever the n.

The guard only ever turns ``pass`` into ``inconclusive``: it never creates a fail, so the A/A
false-fail rate is unchanged, and for a baseline that solves enough items it never triggers, so a
valid pass stays a pass (tests/gates/test_guard.py simulates both).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Literal

import numpy as np

from evalsvc.gates._outcome import GateOutcome
from evalsvc.stats import tango_test

__all__ = ["baseline_guard", "apply_guard", "min_informative_correct"]


def min_informative_correct(n: int, margin: float, alpha: float) -> int | None:
    """Smallest number of baseline-correct items out of ``n`` (no clusters) for which losing all
    of them would fail the paired gate at ``margin`` and one-sided ``alpha``; ``None`` if none.

    Monotone in the count, so a bisection over 0..n finds it (Tango's corrected score test, the
    test the gate uses).
    """
    if n <= 0:
        return None

    def fails(k: int) -> bool:
        if k == 0:
            return False
        return tango_test(0.0, float(k), float(n), -margin, corrected=True).p_less < alpha

    if not fails(n):
        return None
    lo, hi = 0, n  # fails(lo) is False, fails(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi


def baseline_guard(
    baseline: Any,
    *,
    n_candidate: int | None = None,
    margin: float,
    alpha: float,
    higher_is_better: bool,
    paired: bool,
    clusters: Any = None,
    floor: float | None = None,
    seed: int = 0,
    kind: Literal["binary", "continuous"] = "binary",
) -> dict[str, Any]:
    """Is the baseline informative for a binary non-inferiority gate at ``margin``?

    ``kind="continuous"``: the same rule for scores in [0, 1] gated as means (a sampled
    suite's per-item pass rates): the worst candidate scores 0 on every item, and the
    continuous gate with ``value_range`` (0, 1) must fail it; ``baseline_good`` is then the
    baseline's summed score (items' worth of solved samples).

    Returns ``{"informative": bool, "reason": str | None, ...}`` with the numbers behind the
    call: the baseline's good count and rate, the worst-case candidate's verdict, and (unclustered)
    the good count the suite would need. ``n_candidate`` sizes the worst candidate when unpaired.
    """
    from evalsvc.gates._gate import evaluate_gate  # the guard asks the gate itself

    b = np.asarray(baseline, dtype=float)
    n = int(b.size)
    good = b if higher_is_better else 1.0 - b
    k = int(round(float(good.sum())))
    rate = k / n if n else math.nan
    out: dict[str, Any] = {
        "informative": True,
        "reason": None,
        "baseline_good": k,
        "n": n,
        "baseline_rate": rate if n else None,
        "floor": floor,
        "rule": (
            "the worst candidate (every item wrong) must be failed by the gate itself at this "
            "margin, α and n; and the baseline's rate must be above the suite's floor"
        ),
    }
    if n == 0:
        return out  # the gate is already inconclusive (no items)
    what = "solves" if higher_is_better else "has good outcomes on"
    if floor is not None and rate <= floor:
        out["informative"] = False
        out["reason"] = (
            f"uninformative baseline: it {what} {k} of {n} items ({rate:.0%}), at or below the "
            f"suite's floor of {floor:.0%} (chance); a pass would mean nothing"
        )
        return out
    worst_value = 0.0 if higher_is_better else 1.0
    worst = np.full(n if paired else int(n_candidate or n), worst_value)
    outcome = evaluate_gate(
        b,
        worst,
        metric="guard",
        kind=kind,
        margin=margin,
        alpha=alpha,
        higher_is_better=higher_is_better,
        clusters=clusters if paired else None,
        paired=paired,
        seed=seed,
        value_range=(0.0, 1.0) if kind == "continuous" else None,
    )
    out["worst_case_verdict"] = outcome.verdict
    if paired and kind == "binary":
        out["needed_good"] = min_informative_correct(n, margin, alpha)
    if outcome.verdict != "fail":
        needed = out.get("needed_good")
        need = (
            f"; at this n the suite needs at least {needed} solved items"
            if needed is not None
            else "; no number of solved items suffices at this n"
        )
        out["informative"] = False
        out["reason"] = (
            f"uninformative baseline: it {what} only {k} of {n} items ({rate:.0%}); even a "
            f"candidate that lost all of them could not be shown worse than the margin "
            f"{margin:g}{need if paired else ''}, so a pass would mean nothing"
        )
    return out


def apply_guard(outcome: GateOutcome, guard: dict[str, Any]) -> GateOutcome:
    """The outcome with the guard recorded; a ``pass`` on an uninformative baseline becomes
    ``inconclusive`` with ``details["reason"]`` (fail and inconclusive stay what they are)."""
    details = {**outcome.details, "baseline_guard": guard}
    if guard.get("informative", True) or outcome.verdict == "fail":
        return replace(outcome, details=details)
    if outcome.verdict == "inconclusive":
        details.setdefault("reason", guard["reason"])
        return replace(outcome, details=details)
    details["reason"] = guard["reason"]
    details["verdict_before_guard"] = "pass"
    return replace(outcome, verdict="inconclusive", details=details)
