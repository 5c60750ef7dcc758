"""Slice gates: a collapsed slice must not hide inside a suite average.

Each suite kind declares its slices (reasoning: family × level; needle: context length, depth and
length × depth; determinism: condition). Every slice with at least ``min_items`` paired items
gets the suite's own paired non-inferiority test at the suite's margin. The family of
hypotheses is {the whole suite} ∪ {every tested slice}; the *weighted* Holm step-down procedure
over their inferiority p-values (Holm 1979, Scand. J. Statist. 6:65–70, §5) keeps the chance that
*any* of them is wrongly failed at or below α under any dependence between them. The whole suite
carries weight 0.8 and the slices share 0.2: the suite's own fail call keeps most of its power
(it is first tested at 0.8α, and at the full α once a slice has failed), while a collapsed slice,
whose p-value is tiny, is still found — slices overlap the whole
suite, and needle's dimensions overlap each other. The suite fails when any member's adjusted
p-value is below α (for a slice: "significantly worse than the baseline by more than the
margin"), and its ``p_inferiority`` becomes the smallest adjusted value, so the Holm correction
across suites in :func:`evalsvc.gates.combine_verdicts` stays valid.

Slices only ever add fail calls: a suite still passes when its overall gate passes and no slice
fails (requiring every small slice to *pass* would make a pass nearly impossible). The cost is a
slightly more conservative overall fail call (its p-value is Holm-adjusted with the slices'); a
uniform drop large enough to matter still fails at the planned n (tests/gates/test_slices.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from evalsvc.gates._gate import GateKind, evaluate_gate
from evalsvc.gates._outcome import GateOutcome
from evalsvc.stats import weighted_holm

__all__ = ["slice_gates"]

_MAX_TOKEN_EXAMPLES = 5
#: Weight of the whole suite's hypothesis in the family (the slices share the rest equally).
SUITE_WEIGHT = 0.8


def _finding(
    label: str, b: np.ndarray, c: np.ndarray, higher: bool, p_adj: float, kind: GateKind
) -> str:
    if kind != "binary":
        # A continuous score (a similarity, a KL divergence) has means, not solved items: a
        # count of items "lost" would read a similarity of 0.49 as a lost answer.
        return (
            f"{label}: mean {b.mean():.3f} → {c.mean():.3f} (Δ {c.mean() - b.mean():+.3f}, "
            f"n = {b.size}, Holm-adjusted p = {p_adj:.2g})"
        )
    solved = int(b.sum()) if higher else int((1 - b).sum())
    lost = int(((b > 0.5) & (c < 0.5)).sum()) if higher else int(((b < 0.5) & (c > 0.5)).sum())
    what = "solved items" if higher else "good outcomes"
    return (
        f"{label}: {b.mean():.0%} → {c.mean():.0%}, {lost} of {solved} {what} lost "
        f"(n = {b.size}, Holm-adjusted p = {p_adj:.2g})"
    )


def slice_gates(
    outcome: GateOutcome,
    baseline: Sequence[float],
    candidate: Sequence[float],
    slices: Mapping[str, Sequence[str]],
    *,
    kind: GateKind,
    margin: float,
    alpha: float,
    higher_is_better: bool,
    min_items: int,
    clusters: Sequence[str] | None = None,
    keys: Sequence[str] | None = None,
    first_tokens: Sequence[tuple[str | None, str | None] | None] | None = None,
    seed: int = 0,
    value_range: tuple[float, float] | None = None,
) -> GateOutcome:
    """The suite's outcome with its slices gated (``details["slices"]``).

    ``slices`` maps a dimension name (``"family × level"``) to one label per paired item, aligned
    with ``baseline``/``candidate`` (and ``clusters``, ``keys``, ``first_tokens``). A slice with
    fewer than ``min_items`` items is listed but not tested. A failing slice turns the suite's
    verdict into ``fail`` with ``details["reason"]`` naming it; flips in a failed slice list the
    first divergent token on both sides when ``first_tokens`` is given.
    """
    b_all = np.asarray(baseline, dtype=float)
    c_all = np.asarray(candidate, dtype=float)
    rows: list[dict[str, Any]] = []
    tested: list[tuple[dict[str, Any], np.ndarray]] = []
    for dim, labels in slices.items():
        if len(labels) != b_all.size:
            raise ValueError(f"slice dimension {dim!r} has {len(labels)} labels for {b_all.size} items")
        lab = np.asarray(labels, dtype=object)
        for value in sorted(set(labels), key=str):
            idx = np.flatnonzero(lab == value)
            row: dict[str, Any] = {"dimension": dim, "slice": str(value), "n": int(idx.size)}
            row["baseline"] = float(b_all[idx].mean())
            row["candidate"] = float(c_all[idx].mean())
            if idx.size < min_items:
                row["verdict"] = "not tested"
                rows.append(row)
                continue
            cl = None
            if clusters is not None:
                sub = [clusters[int(i)] for i in idx]
                cl = sub if len(set(sub)) < len(sub) else None
            out = evaluate_gate(
                b_all[idx],
                c_all[idx],
                metric=outcome.metric,
                kind=kind,
                margin=margin,
                alpha=alpha,
                higher_is_better=higher_is_better,
                clusters=cl,
                paired=True,
                seed=seed,
                value_range=value_range,
            )
            row.update(
                {
                    "delta": out.delta,
                    "ci": list(out.ci),
                    "p_inferiority": out.p_inferiority,
                    "raw_verdict": out.verdict,
                }
            )
            rows.append(row)
            tested.append((row, idx))
    info: dict[str, Any] = {
        "min_items": min_items,
        "tested": len(tested),
        "family": (
            f"the whole suite (weight {SUITE_WEIGHT:g}) and every tested slice (sharing "
            f"{1 - SUITE_WEIGHT:g}); weighted Holm across them"
        ),
        "slices": rows,
    }
    if not tested:
        return replace(outcome, details={**outcome.details, "slices": info})

    overall_p = outcome.p_inferiority
    raw = [1.0 if overall_p is None else overall_p] + [
        1.0 if r["p_inferiority"] is None else float(r["p_inferiority"]) for r, _ in tested
    ]
    weights = [SUITE_WEIGHT] + [(1.0 - SUITE_WEIGHT) / len(tested)] * len(tested)
    adjusted = [float(p) for p in weighted_holm(raw, weights)]
    failed: list[str] = []
    for (row, idx), p_adj in zip(tested, adjusted[1:], strict=True):
        row["p_inferiority_holm"] = p_adj
        fails = p_adj < alpha and row["raw_verdict"] == "fail"
        row["verdict"] = "fail" if fails else row["raw_verdict"]
        if fails and row["raw_verdict"] == "fail":
            label = f"{row['slice']}" if len(slices) == 1 else f"{row['dimension']} {row['slice']}"
            row["finding"] = _finding(
                label, b_all[idx], c_all[idx], higher_is_better, p_adj, kind
            )
            failed.append(row["finding"])
            if first_tokens is not None:
                examples = []
                for i in (int(j) for j in idx):
                    flipped = (b_all[i] > 0.5) != (c_all[i] > 0.5)
                    tok = first_tokens[i]
                    if flipped and tok is not None:
                        examples.append(
                            {
                                "item": keys[i] if keys is not None else int(i),
                                "baseline": tok[0],
                                "candidate": tok[1],
                            }
                        )
                    if len(examples) >= _MAX_TOKEN_EXAMPLES:
                        break
                row["flipped_tokens"] = examples
        elif row["verdict"] == "fail":  # failed alone but not after Holm
            row["verdict"] = "inconclusive"
    info["p_inferiority_overall_holm"] = adjusted[0]
    details = {
        **outcome.details,
        "slices": info,
        "p_inferiority_overall": overall_p,
        # The suite-level p of "within the margin everywhere": combine_verdicts' Holm uses it.
        "p_inferiority": min(adjusted),
    }
    verdict = outcome.verdict
    if outcome.verdict == "fail" and adjusted[0] >= alpha and not failed:
        verdict = "inconclusive"  # the overall fail does not survive the slice family
        details["reason"] = (
            f"the suite's fail call does not survive Holm's correction with its "
            f"{len(tested)} slices (adjusted p = {adjusted[0]:.3g})"
        )
    if failed:
        prefix = "the suite as a whole and " if verdict == "fail" and adjusted[0] < alpha else ""
        verdict = "fail"
        details["reason"] = (
            f"{prefix}{'a slice' if len(failed) == 1 else 'slices'} significantly worse beyond "
            "the margin: " + "; ".join(failed)
        )
    return replace(outcome, verdict=verdict, details=details)
