"""Sample-size planning (``evalsvc plan``): how many items a suite needs before running it.

Contract: pure computation over the catalog and, when a pilot run is named, that run's stored
report (its measured discordance). Formulas live in ``evalsvc.stats`` (Nam 1997 for paired
binary outcomes, the normal approximation for continuous ones).
"""

from __future__ import annotations

from typing import Any

from evalsvc.db import Store
from evalsvc.domain import RunOptions
from evalsvc.services.runs import UsageError, bind_gates
from evalsvc.suites import SuiteError, resolve


def plan(
    *,
    suites: list[str],
    margin: float | None,
    alpha: float | None,
    power: float = 0.8,
    discordance: float | None = None,
    pilot_run: str | None = None,
    store: Store | None = None,
) -> list[dict[str, Any]]:
    """One row per suite: the items needed to pass a candidate as good as the baseline with
    ``power`` (which also fails a true drop of 2δ with at least that power; see
    ``evalsvc.stats.required_n``), beside the items the suite plans now and the MDE at that n."""
    try:
        resolved = resolve(suites, allow_paths=True)  # the CLI: files are the user's own
    except SuiteError as exc:
        raise UsageError(str(exc)) from exc
    pilot: dict[str, float] = {}
    if pilot_run is not None:
        report = store.get_report(pilot_run) if store is not None else None
        if report is None:
            raise UsageError(f"no report stored for run {pilot_run!r}")
        for cand in report["candidates"]:
            for s in cand["suites"]:
                d = (s.get("details") or {}).get("discordance")
                if d is not None:
                    pilot[s["suite"]] = max(pilot.get(s["suite"], 0.0), float(d))
    rows = []
    options = RunOptions(margin=margin, alpha=alpha)
    bind_gates(resolved, options)
    for suite in resolved:
        gate = suite.gate
        m, a = gate.margin, gate.alpha
        row: dict[str, Any] = {
            "suite": suite.name,
            "kind": suite.kind,
            "margin": m,
            "alpha": a,
            "power": power,
            "planned_items": suite.item_count(),
            "gate": gate.to_dict(),
        }
        stages = suite.stage_sizes()
        if stages:
            # Staged kinds (determinism) grow from the first stage to the cap until the gate
            # decides, each look at α/len(stages).
            row["stages"] = stages
            row["max_items"] = stages[-1]
        psi = discordance if discordance is not None else pilot.get(suite.name)
        if gate.threshold is not None:
            row["note"] = f"threshold gate ({gate.metric} vs {gate.threshold:g}): no margin to plan"
        elif gate.kind != "binary" or m is None:
            row["note"] = (
                "not a paired binary gate: plan from a pilot run's SD (evalsvc.stats.required_n_mean)"
            )
        elif m == 0:
            row["note"] = (
                "margin 0 is a superiority test: a candidate only as good as the baseline passes "
                "with probability α at any n"
            )
        elif psi is None:
            row["note"] = (
                "give --discordance or --pilot-run (the share of items on which the endpoints disagree)"
            )
        else:
            if discordance is None:
                # A pilot's discordance is an estimate (often 0 on a small pilot): smooth it as the
                # gate does for the MDE, (discordant + 1)/(n + 2), with the suite's planned n.
                n = (row["planned_items"] or 100) * suite.pairs_per_item()
                psi = (psi * n + 1) / (n + 2)
            row["discordance"] = psi
            # The gate's n counts pairs; a kind may draw several per item (determinism: one per
            # condition and repeat). Pairs of one item are correlated, so for such kinds the
            # item count below is a lower bound.
            per = suite.pairs_per_item()
            pairs = suite.required_pairs(m, psi, a, power)
            row["required_items"] = -(-pairs // per)
            if per != 1:
                row["pairs_per_item"] = per
                row["required_pairs"] = pairs
                row["note"] = (
                    f"{per} gated pairs per item, correlated within an item: a lower bound"
                )
            if row["planned_items"]:
                row["mde_at_planned"] = suite.mde_pairs(row["planned_items"] * per, psi, a, power)
            if stages:
                row["mde_at_cap"] = suite.mde_pairs(stages[-1] * per, psi, a, power)
                stage = next((s for s in stages if s >= row["required_items"]), None)
                row["note"] = (
                    f"{per} gated pairs per item, correlated within an item: a lower bound. "
                    f"Staged: the run gates after {', '.join(map(str, stages))} items and stops "
                    "once the gate decides; "
                    + (f"a candidate as good as the baseline should pass by the {stage}-item "
                       "stage" if stage else "beyond the cap it stays inconclusive")
                )
        rows.append(row)
    return rows
