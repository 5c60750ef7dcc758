"""Several paired non-inferiority gates read as one suite gate (the ``toolcalls`` and
``structured`` kinds' ``Analysis.gate_test``).

Contract: each named pair of per-item arrays gets ``evaluate_gate`` at the suite's resolved
margin and α (binary: the paired Tango score test; continuous: the paired bootstrap with the
scores' range (0, 1), ``Analysis.value_range``), a binary one also the informative-baseline guard.
The suite fails when any gate fails, passes when all pass, and is inconclusive otherwise; the
outcome returned is the deciding gate's (the failing one with the smallest inferiority p, else
the weakest pass), with every gate's numbers in ``details["tool_gates"]`` for the findings and the
dashboard. Holm's correction across the run's gates still applies to the returned outcome; the
gates inside one suite are not corrected against each other, so each is read at α (a suite
that fails either way is a failure of the thing the gate protects, as a two-endpoint check).
"""

from __future__ import annotations

from typing import Literal

from evalsvc.gates import GateOutcome, ResolvedGate, apply_guard, baseline_guard, evaluate_gate

#: Why a suite gated here refuses a ``sampling`` block: its gates test one answer per item
#: and endpoint (per-item means over k samples are not wired into them yet).
_NO_SAMPLING = (
    "sampling: kind {kind!r} gates one greedy answer per item (trigger, validity) and is not "
    "sampled yet; remove the block"
)

Arrays = dict[str, tuple[list[float], list[float], Literal["binary", "continuous"]]]


def paired_gates(arrays: Arrays, gate: ResolvedGate, seed: int, *, n_pairs: int) -> GateOutcome:
    """The suite's outcome over ``arrays`` (see the module contract); an empty pair is left
    out (a suite with none at all is inconclusive over no items). The outcome's ``n`` is
    ``n_pairs``, every scored pair of the suite (the runner counts planned pairs missing from it
    as errors); a gate over fewer of them (schema-valid calls: the items that expect one) keeps its own ``n`` in
    ``details["tool_gates"]``."""
    assert gate.margin is not None
    outcomes: dict[str, GateOutcome] = {}
    # No scored pair at all (every answer of a side errored): the first gate is evaluated
    # anyway, inconclusive over no items, and the runner's error budget says why (an exception
    # here ended the whole run).
    first = next(iter(arrays), None)
    for name, (b, c, kind) in arrays.items():
        if not b and (name != first or any(pair[0] for pair in arrays.values())):
            continue
        o = evaluate_gate(
            b, c, metric=name, kind=kind, margin=gate.margin, alpha=gate.alpha,
            higher_is_better=True, seed=seed,
            value_range=(0.0, 1.0) if kind == "continuous" else None,
        )
        if kind == "binary":
            guard = baseline_guard(
                b, n_candidate=len(c), margin=gate.margin, alpha=gate.alpha,
                higher_is_better=True, paired=True, floor=gate.baseline_floor, seed=seed,
            )
            o = apply_guard(o, guard)
        outcomes[name] = o
    summary = {
        name: {"verdict": o.verdict, "baseline": o.baseline, "candidate": o.candidate,
               "delta": o.delta, "ci": list(o.ci), "p_value": o.p_value, "n": o.n,
               "reason": o.details.get("reason")}
        for name, o in outcomes.items()
    }
    failed = [o for o in outcomes.values() if o.verdict == "fail"]
    if failed:
        deciding = min(failed, key=lambda o: o.details.get("p_inferiority") or 1.0)
    elif all(o.verdict == "pass" for o in outcomes.values()):
        deciding = max(outcomes.values(), key=lambda o: o.p_value or 0.0)
    else:
        deciding = next(o for o in outcomes.values() if o.verdict != "pass")
    return GateOutcome(
        verdict=deciding.verdict, metric=deciding.metric, baseline=deciding.baseline,
        candidate=deciding.candidate, delta=deciding.delta, ci=deciding.ci,
        p_value=deciding.p_value, margin=deciding.margin, alpha=deciding.alpha,
        n=max(n_pairs, deciding.n),
        mde=deciding.mde, test=deciding.test,
        details={**deciding.details, "tool_gates": summary}, method=deciding.method,
    )
