"""Recovery (candidate mean ÷ baseline mean) beside Δ, and the recovery-floor gate.

Quantized-model publishers report per-task recovery as a point estimate. Here it gets a
two-sided ``1 − 2α`` interval whose ends are the one-sided level-α bounds a floor is tested
against, as the union of two intervals that must agree:

* Fieller's interval for a ratio of paired means and its dual t test
  (:func:`evalsvc.stats.fieller_ratio_ci`, :func:`evalsvc.stats.ratio_test`);
* the paired bootstrap's BCa interval of the ratio (:func:`evalsvc.stats.bootstrap_ratio_ci`).

Why both: on 0/1 scores whose flips all go one way (a candidate that only loses items), the
contrasts ``c − ρ0·b`` are very skewed and Fieller's t-based bound is anti-conservative — at a
true recovery equal to the floor (0.95, 3% of items lost, none gained) it passed 11.1% of the
time at n = 200 and 8.2% at n = 500 for a nominal 5%, the BCa bound 2.6% and 4.7% (seeded
simulation, docs/statistics.md §recovery). Requiring both bounds is never worse than the better
one, as in the paired continuous gate.

No loss observed. When the candidate matches the baseline on every item (all-ones 0/1 scores on
both sides, say) the contrasts ``c − ρ0·b`` have no spread, Fieller's t is infinite and the
bootstrap interval is a point: 20 items without a lost one passed a true recovery of exactly
0.9 12% of the time (benchmarks/gate_calibration.py). For scores ≥ 0 the least favourable way to
lose a share ``1 − ρ`` of the baseline's total is to lose whole items, so seeing no loss among the
``K`` items the baseline scores on has probability at most ``ρ^K`` — the exact (Clopper–Pearson
1934) bound with no event. The pass p-value is floored at ``ρ0^K`` (and the fail p-value at
``(1 − ρ0)^K``), the interval's ends at ``α^{1/K}`` and ``1 − α^{1/K}``: a pass needs at least
``ln α / ln ρ0`` scored baseline items (29 at ρ0 = 0.9, 59 at 0.95), and
``GateOutcome.method`` says when that exact bound decided.

Decision (the floor ρ0 = ``recovery_min``, one-sided level α): ``pass`` when the union's lower
bound is above ρ0 and Fieller's dual test rejects ρ ≤ ρ0; ``fail`` when the union's upper bound
is below ρ0 or the dual test rejects ρ ≥ ρ0; else ``inconclusive`` — an unbounded interval (a
baseline mean not significantly above 0) is always inconclusive.

So that every view reads one way, the outcome's ``delta``/``ci``/``margin`` are the recovery
interval and floor expressed in metric units at the observed baseline mean ``b̄``:
``ci = b̄·(R − 1)``, ``margin = (1 − ρ0)·b̄``; pass ⇔ ``ci[0] > −margin``. The recovery itself is
``details["recovery"]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from evalsvc.gates._outcome import GateOutcome, Verdict
from evalsvc.stats import (
    as_vector,
    bootstrap_ratio_ci,
    check_alpha,
    fieller_ratio_ci,
    ratio_test,
)

__all__ = ["RECOVERY_RESAMPLES", "recovery_gate", "recovery_min_items", "recovery_summary"]

#: Bootstrap resamples of the recovery interval (≈ ±0.002 Monte Carlo error on a 5% tail, as
#: ``BOOTSTRAP_RESAMPLES`` in the margin gates).
RECOVERY_RESAMPLES = 9999
METHOD_FIELLER = "Fieller's t and the paired bootstrap BCa"
METHOD_EXACT = "exact zero-loss bound (Clopper-Pearson, no item lost)"
_TEST = "recovery floor (Fieller's interval and dual t test ∧ paired bootstrap BCa of the ratio)"


def recovery_summary(
    baseline: Any, candidate: Any, *, alpha: float = 0.05, seed: int = 0
) -> dict[str, Any] | None:
    """Recovery with its ``1 − 2α`` interval (union of Fieller and paired-bootstrap BCa), for
    reporting beside Δ. ``None`` when it is undefined (fewer than 2 pairs, or a baseline mean
    ≤ 0); ``ci`` holds ``None`` ends when the interval is unbounded."""
    alpha = check_alpha(alpha)
    b = as_vector(baseline, name="baseline")
    c = as_vector(candidate, name="candidate")
    if b.size < 2 or b.size != c.size or float(b.mean()) <= 0:
        return None
    fieller = fieller_ratio_ci(b, c, alpha=2 * alpha)
    boot = bootstrap_ratio_ci(b, c, alpha=2 * alpha, n_resamples=RECOVERY_RESAMPLES, seed=seed)
    bounded = fieller.bounded and boot.bounded
    # The exact zero-loss floor (module docstring): no interval narrower than Clopper-Pearson's
    # with no item lost among the k items the baseline scores on.
    k = int(np.count_nonzero(b > 0))
    cp = alpha ** (1.0 / k) if k else 1.0
    ci = (
        (min(fieller.ci[0], boot.ci[0], cp), max(fieller.ci[1], boot.ci[1], 1.0 - cp))
        if bounded
        else (-math.inf, math.inf)
    )
    return {
        "estimate": fieller.estimate,
        "ci": [ci[0] if math.isfinite(ci[0]) else None, ci[1] if math.isfinite(ci[1]) else None],
        "ci_level": 1.0 - 2.0 * alpha,
        "bounded": bounded,
        "fieller": fieller.to_dict(),
        "bootstrap": {**boot.to_dict(), "n_resamples": RECOVERY_RESAMPLES, "seed": seed},
        "method": "union of Fieller's interval and the paired bootstrap BCa interval, "
        "floored by the exact zero-loss bound",
        "scored_items": k,
        "n": int(b.size),
    }


def recovery_gate(
    baseline: Any,
    candidate: Any,
    *,
    metric: str,
    recovery_min: float,
    alpha: float = 0.05,
    seed: int = 0,
) -> GateOutcome:
    """Is the candidate's mean at least ``recovery_min`` × the baseline's? (see module doc)."""
    alpha = check_alpha(alpha)
    r0 = float(recovery_min)
    if not (math.isfinite(r0) and 0.0 < r0 <= 1.0):
        raise ValueError(f"recovery_min must be in (0, 1], got {recovery_min!r}")
    b = as_vector(baseline, name="baseline")
    c = as_vector(candidate, name="candidate")
    if b.size != c.size:
        raise ValueError(
            f"a recovery gate needs one baseline and one candidate score per item: got "
            f"{b.size} and {c.size}"
        )
    nan = float("nan")
    base_mean = float(b.mean()) if b.size else nan
    cand_mean = float(c.mean()) if c.size else nan
    summary = recovery_summary(b, c, alpha=alpha, seed=seed) if b.size else None
    details: dict[str, Any] = {
        "recovery": summary,
        "recovery_min": r0,
        "ci_level": 1.0 - 2.0 * alpha,
        "higher_is_better": True,
        "paired": True,
        "kind": "recovery",
        "ci_note": "delta's CI and margin are the recovery interval and floor at the observed "
        "baseline mean: b̄·(R − 1) and (1 − recovery_min)·b̄",
    }
    reason: str | None = None
    method: str | None = None
    p_ni: float | None = None
    p_inf: float | None = None
    if summary is None:
        reason = (
            "no paired items"
            if b.size == 0
            else "recovery is undefined: fewer than 2 pairs or a baseline mean of 0"
        )
    else:
        t = ratio_test(b, c, r0)
        k = int(summary["scored_items"])
        exact_ni = r0**k
        exact_inf = (1.0 - r0) ** k
        p_ni, p_inf = max(t.p_greater, exact_ni), max(t.p_less, exact_inf)
        # The exact bound decided when Fieller's t degenerated (contrasts without spread) or
        # would have passed alone where the bound does not.
        method = (
            METHOD_EXACT
            if exact_ni > t.p_greater
            and (not math.isfinite(t.statistic) or t.p_greater < alpha <= exact_ni)
            else METHOD_FIELLER
        )
        details["fieller_test"] = {
            "statistic": t.statistic,
            "p_greater": t.p_greater,
            "p_less": t.p_less,
        }
        details["exact_floor"] = {
            "scored_items": k,
            "p_greater": exact_ni,
            "p_less": exact_inf,
            "min_items_to_pass": recovery_min_items(r0, alpha),
        }
        if not summary["bounded"]:
            reason = (
                "the recovery interval is unbounded: the baseline's mean score is not "
                "significantly above 0 at this n"
            )
    details["p_inferiority"] = p_inf
    verdict: Verdict = "inconclusive"
    lo = hi = nan
    if summary is not None and summary["bounded"]:
        lo, hi = summary["ci"]
        assert p_ni is not None and p_inf is not None
        if reason is None and p_ni < alpha and lo > r0:
            verdict = "pass"
        elif p_inf < alpha or hi < r0:
            verdict = "fail"
    need = recovery_min_items(r0, alpha)
    if verdict == "inconclusive" and reason is None and summary is not None and (
        need is None or int(summary["scored_items"]) < need
    ):
        details["underpowered"] = (
            f"underpowered: the baseline scores on {summary['scored_items']} items, and even "
            + (
                "a perfect candidate cannot show a recovery of exactly 1"
                if need is None
                else f"with no loss at all a pass needs at least {need} (the exact bound "
                f"α^(1/K) on the recovery must exceed {r0:g})"
            )
        )
    if reason is not None:
        details["reason"] = reason
    margin = (1.0 - r0) * base_mean if math.isfinite(base_mean) else 0.0
    return GateOutcome(
        verdict=verdict,
        metric=metric,
        baseline=base_mean,
        candidate=cand_mean,
        delta=cand_mean - base_mean,
        ci=(base_mean * (lo - 1.0), base_mean * (hi - 1.0)),
        p_value=p_ni,
        margin=margin,
        alpha=alpha,
        n=int(b.size),
        mde=None,
        test=_TEST,
        details=details,
        method=method,
    )


def recovery_min_items(recovery_min: float, alpha: float = 0.05) -> int | None:
    """Fewest items the baseline must score on for a candidate without any loss to pass the
    floor ``recovery_min`` (``ρ0^K < α``: 29 at 0.9); ``None`` when no number does (ρ0 = 1)."""
    if recovery_min >= 1.0:
        return None
    return math.floor(math.log(alpha) / math.log(recovery_min)) + 1

