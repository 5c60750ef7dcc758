"""The runner's comparability hook: which candidates differ from the baseline in more than the
quantization, found after the probe and before any item is sent.

Contract: :func:`incomparable` reads the probed provenance and the suites' own declarations
(their ``comparability: {allow: [...]}`` and, for a shorter candidate context, their
``preflight`` on the candidate's provenance) and returns, per candidate role, the differences
that make it ``non-comparable`` and the ones allowed (by ``RunOptions.comparability``,
``--allow-difference``, or by every suite of the run). The comparison itself is
``evalsvc.gates`` (pure); the runner sends no item to a non-comparable candidate and gates it
as ``non-comparable`` (``_runner._gate_all``). :func:`refusals` does the same after the run for
one suite whose sides refused unequal numbers of items.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evalsvc.domain import Provenance, RunOptions, Sample
from evalsvc.gates import (
    Difference,
    Reason,
    blocking,
    context_difference,
    is_refusal,
    provenance_differences,
    refusal_difference,
    suite_allows,
)
from evalsvc.suites import Suite


@dataclass
class Comparability:
    """One candidate's differences from the baseline: the ones that make it non-comparable
    and the ones the run or its suites allow (reported, never deciding)."""

    differences: list[Difference] = field(default_factory=list)
    allowed: list[Difference] = field(default_factory=list)

    @property
    def comparable(self) -> bool:
        return not self.differences

    def to_dict(self) -> dict[str, object]:
        return {
            "comparable": self.comparable,
            "differences": [d.to_dict() for d in self.differences],
            "allowed": [d.to_dict() for d in self.allowed],
        }


def allowed_reasons(found: Comparability) -> tuple[Reason, ...]:
    """One ``allowed_difference`` reason per allowed difference: it decides nothing, but the
    verdict rests on it, so it is said beside the verdict's other reasons (never silent)."""
    return tuple(
        Reason("allowed_difference", f"{d.field} differs, as the run or its suites allow: "
               f"{d.message}", d.suite)
        for d in found.allowed
    )


def run_allows(options: RunOptions) -> list[str]:
    return list(options.comparability.allow) if options.comparability is not None else []


def _suite_allow(suite: Suite) -> list[str]:
    policy = suite.spec.comparability
    return list(policy.allow) if policy is not None else []


async def incomparable(
    suites: Sequence[Suite], provs: Sequence[Provenance], options: RunOptions
) -> list[Comparability]:
    """One :class:`Comparability` per candidate (``provs[1:]``), in order (module contract)."""
    base = provs[0]
    base_dump = base.model_dump()
    # Kinds that score answers split a trace from the answer in one place, whichever way the
    # engine sends it (evalsvc.suites._thinking): then only reasoning or not differs.
    split = all(s.scores_answers for s in suites)
    out = []
    for prov in provs[1:]:
        found = provenance_differences(base_dump, prov.model_dump(), reasoning_split=split)
        shorter = prov.max_context is not None and (
            base.max_context is None or prov.max_context < base.max_context
        )
        if shorter:
            for suite in suites:
                if suite.calibration(options.calibrate) is not None:
                    continue  # its ladder is sized to the baseline's context by its pilot
                problems = await suite.preflight(prov)
                diff = context_difference(suite.name, problems, base.max_context, prov.max_context)
                if diff is not None:
                    found.append(diff)
        own = suite_allows(found, {s.name: _suite_allow(s) for s in suites})
        keep, allowed = blocking(
            own, run_allows=run_allows(options), suites_allow=[_suite_allow(s) for s in suites]
        )
        out.append(Comparability(keep, allowed + [d for d in found if d not in own]))
    return out


def refusals(
    suite: Suite,
    planned: int,
    baseline: Sequence[Sample],
    candidate: Sequence[Sample],
    options: RunOptions,
    *,
    counts: tuple[int, int] | None = None,
    examples: Sequence[str] = (),
    allowed: list[Difference] | None = None,
) -> Difference | None:
    """A ``sample_counts`` difference for ``suite`` when one side refused more items than the
    other beyond the error budget (``evalsvc.gates.refusal_difference``), unless the run or the
    suite allows it: then it is appended to ``allowed`` (the report's basis names it) and None
    is returned. ``counts`` (baseline, candidate) replaces counting ``baseline`` and
    ``candidate`` for a streaming suite, which keeps only its error examples: its errors count
    as refusals when every example is one."""
    found = _unequal_refusals(suite, planned, baseline, candidate, options, counts, examples)
    if found is not None and (
        "sample_counts" in run_allows(options) or "sample_counts" in _suite_allow(suite)
    ):
        if allowed is not None:
            allowed.append(found)
        return None
    return found


def _unequal_refusals(
    suite: Suite,
    planned: int,
    baseline: Sequence[Sample],
    candidate: Sequence[Sample],
    options: RunOptions,
    counts: tuple[int, int] | None,
    examples: Sequence[str],
) -> Difference | None:
    if counts is not None:
        if not examples or not all(is_refusal(e) for e in examples):
            return None
        n_base, n_cand = counts
        seen = list(examples)
    else:
        n_base = sum(1 for s in baseline if is_refusal(s.error))
        n_cand = sum(1 for s in candidate if is_refusal(s.error))
        seen = [str(s.error) for s in [*baseline, *candidate] if is_refusal(s.error)]
    return refusal_difference(
        suite.name, planned, n_base, n_cand, options.max_error_rate, seen
    )
