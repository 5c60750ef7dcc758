"""Sample-size planning (``evalsvc plan``): how many items a suite needs before running it.

Contract: pure computation over the catalog and, when a pilot run is named, that run's stored
report (its measured discordance). Formulas live in ``evalsvc.stats`` (Nam 1997 for paired
binary outcomes, the normal approximation for continuous ones).

A suite that calibrates (``calibrate: auto``, or ``calibrate=True`` as ``--calibrate``) runs at
levels a pilot on the baseline picks, which plan cannot know without the endpoint. Its row says
so (``calibration``): the pilot's baseline requests (one rung per group up to the whole ladder),
the main run's item range over the choices the pilot can make, and, when no discordance is
given or measured, the run is sized at the **band's bound**: a candidate as accurate as a
baseline scoring p flips at most ψ = 2p(1 − p) of the items when its errors are not negatively
correlated with the baseline's (independent errors), largest over the band at the p closest
to ½. A discordance taken from a pilot run is flagged when that run was not calibrated (it was
measured at other levels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from evalsvc.domain import Provenance, RunOptions
from evalsvc.suites import CalibrationPolicy, Suite, SuiteError, resolve

if TYPE_CHECKING:  # the store and the run service are loaded by plan() alone: `suites list`
    from evalsvc.db import Store  # sizes every catalog suite with calibration_plan, quickly
    from evalsvc.gates import NoiseFloor


def band_discordance(band: tuple[float, float]) -> float:
    """The most a same-accuracy candidate with errors not negatively correlated with the
    baseline's can flip when the baseline scores p in ``band``: max 2p(1 − p) over the band
    (P(both right) ≥ p² gives ψ = 2(p − P(both right)) ≤ 2p(1 − p))."""
    lo, hi = band
    p = min(max(0.5, lo), hi)
    return 2.0 * p * (1.0 - p)


def calibration_plan(
    suite: Suite, policy: CalibrationPolicy, max_context: int | None
) -> dict[str, Any]:
    """What a calibrated suite will send before and during its main run, from its ladder alone
    (the module docstring): pilot requests and main items, each as ``[fewest, most]``."""
    ladder = suite.difficulty_ladder(Provenance(max_context=max_context))
    groups: dict[str, list[Any]] = {}
    for rung in ladder:
        groups.setdefault(rung.group, []).append(rung)
    out: dict[str, Any] = {
        "band": list(policy.band),
        "pilot_n": policy.pilot_n,
        "ladder": [r.label for r in ladder],
        "groups": len(groups),
        "max_context": max_context,
    }
    if not ladder:
        out["note"] = "the ladder is empty at this max context: the suite runs as written"
        return out
    # The walk costs one rung per group for a baseline below the band at the easiest rung, the
    # whole ladder for one that solves everything.
    out["pilot_requests"] = [len(groups) * policy.pilot_n, len(ladder) * policy.pilot_n]
    keep = policy.max_rungs or suite.calibration_keep()
    fewest = [sorted(rs, key=lambda r: r.level)[0] for rs in groups.values()]
    most = [
        r for rs in groups.values() for r in sorted(rs, key=lambda r: r.level)[: keep or len(rs)]
    ]
    out["main_items"] = [
        suite.at_difficulty(fewest).item_count(),
        suite.at_difficulty(most).item_count(),
    ]
    return out


def plan(
    *,
    suites: list[str],
    margin: float | None,
    alpha: float | None,
    power: float = 0.8,
    discordance: float | None = None,
    pilot_run: str | None = None,
    store: Store | None = None,
    calibrate: bool | None = None,
    max_context: int | None = None,
    floors: Mapping[str, NoiseFloor] | None = None,
) -> list[dict[str, Any]]:
    """One row per suite: the items needed to pass a candidate as good as the baseline with
    ``power`` (which also fails a true drop of 2δ with at least that power; see
    ``evalsvc.stats.required_n``), beside the items the suite plans now and the MDE at that n.
    ``calibrate`` is ``--calibrate``/``--no-calibrate`` (None: each suite's YAML);
    ``max_context`` the baseline's, for ladders that rise to it (needle); ``floors`` the
    endpoint's calibrated noise floors by suite (``evalsvc.services.calibration``), whose
    discordance sizes a suite unless ``discordance`` is given. Each sized row says where its
    discordance came from (``discordance_source``, ``discordance_note``)."""
    from evalsvc.services.runs import UsageError, bind_gates

    try:
        resolved = resolve(suites, allow_paths=True)  # the CLI: files are the user's own
    except SuiteError as exc:
        raise UsageError(str(exc)) from exc
    pilot: dict[str, float] = {}
    pilot_levels: dict[str, list[str] | None] = {}
    pilot_var: dict[str, tuple[float, float]] = {}
    if pilot_run is not None:
        if store is not None:  # an id or a unique 8+ character prefix, as everywhere
            from evalsvc.services.history import AmbiguousRunId, RunNotFound, find_run

            try:
                pilot_run = find_run(store, pilot_run).id
            except (RunNotFound, AmbiguousRunId) as exc:
                raise UsageError(f"--pilot-run: {exc} (list them: evalsvc runs list)") from None
        report = store.get_report(pilot_run) if store is not None else None
        if report is None:
            raise UsageError(f"no report stored for run {pilot_run!r}")
        for cand in report["candidates"]:
            for s in cand["suites"]:
                details = s.get("details") or {}
                d = details.get("discordance")
                if d is not None:
                    pilot[s["suite"]] = max(pilot.get(s["suite"], 0.0), float(d))
                    pilot_levels[s["suite"]] = (details.get("calibration") or {}).get("chosen")
                var = (details.get("sampling") or {}).get("variance")
                if isinstance(var, dict) and var.get("within") is not None:
                    old = pilot_var.get(s["suite"], (0.0, 0.0))
                    pilot_var[s["suite"]] = (
                        max(old[0], float(var.get("between") or 0.0)),
                        max(old[1], float(var["within"])),
                    )
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
        source = "given" if discordance is not None else "pilot run" if psi is not None else None
        floor = (floors or {}).get(suite.name)
        if psi is None and floor is not None and floor.discordance is not None:
            # Measured A/A on this endpoint; smoothed as the gate smooths for its MDE,
            # (discordant + 1)/(pairs + 2), so that a calibration without a flip is not ψ = 0.
            psi = (floor.discordance * floor.pairs + 1) / (floor.pairs + 2)
            source = "calibration"
            row["noise_floor"] = floor.to_dict()
        policy = suite.calibration(calibrate)
        cal = None
        if policy is not None:
            cal = row["calibration"] = calibration_plan(suite, policy, max_context)
            if source == "pilot run":
                levels = pilot_levels.get(suite.name)
                cal["pilot_run_levels"] = levels
                if not levels:
                    cal["warning"] = (
                        f"run {pilot_run} did not calibrate {suite.name}: its discordance was "
                        "measured at the levels as written, not at the ones a pilot picks"
                    )
            elif source is None and "pilot_requests" in cal and gate.kind == "binary" \
                    and gate.threshold is None and m:
                psi, source = band_discordance(policy.band), "band bound"
        need: int | None = None
        if gate.threshold is None and gate.kind == "binary" and m is not None:
            # The smallest n that can pass at all: a run with no loss (no flip, no lost stable
            # answer) is the strongest evidence there is, and below this even it reads
            # inconclusive (docs/statistics.md, "No pass without evidence").
            need = row["min_items_to_pass"] = suite.min_items_to_pass(m, a)
            largest = stages[-1] if stages else row["planned_items"]
            if largest and (need is None or largest < need):
                row["cannot_pass"] = (
                    f"inconclusive: underpowered - {largest} items cannot pass at margin {m:g} "
                    "unless the candidate measures better than the baseline: "
                    + ("no size can" if need is None else
                       f"with no loss (and no gain) a pass needs at least {need}")
                )
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
                "give --discordance or --pilot-run (the share of items on which the endpoints "
                "disagree), or --endpoint for a calibrated one (evalsvc calibrate)"
            )
        else:
            if source == "pilot run":
                # A pilot's discordance is an estimate (often 0 on a small pilot): smooth it as the
                # gate does for the MDE, (discordant + 1)/(n + 2), with the suite's planned n.
                n = (row["planned_items"] or 100) * suite.pairs_per_item()
                psi = (psi * n + 1) / (n + 2)
            row["discordance"] = psi
            row["discordance_source"] = source
            row["discordance_note"] = _discordance_note(psi, source, floor, pilot_run)
            # The gate's n counts pairs; a kind may draw several per item (determinism: one per
            # condition and repeat). Pairs of one item are correlated, so for such kinds the
            # item count below is a lower bound.
            per = suite.pairs_per_item()
            try:
                pairs = suite.required_pairs(m, psi, a, power)
            except ValueError as exc:  # a discordance the kind's model cannot take (> 0.5)
                row["note"] = f"cannot size at discordance {psi:.3g}: {exc}"
                rows.append(row)
                continue
            row["required_items"] = -(-pairs // per)
            if need is not None:
                # No run smaller than the exact minimum can pass, whatever the discordance.
                row["required_items"] = max(row["required_items"], need)
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
        if suite.samples_per_item > 1 and m and gate.threshold is None:
            row["sampling"] = sampled_plan(
                suite.samples_per_item, row["planned_items"], m, a, power,
                pilot_var.get(suite.name),
            )
            row["required_items"] = row["sampling"]["required_items"]
            row["note"] = row["sampling"]["note"]
        if "cannot_pass" in row:
            row["note"] = " ".join(x for x in (row["cannot_pass"] + ".", row.get("note")) if x)
        if cal is not None:
            row["note"] = " ".join(
                x for x in (row.get("note"), _calibration_note(cal, source)) if x
            )
        rows.append(row)
    return rows


#: σ²_W of one sample's paired difference is at most ½ for 0/1 scores (each side's Bernoulli
#: variance p(1 − p) ≤ ¼): the bound a sampled suite is sized at without a pilot run.
WITHIN_BOUND = 0.5


def sampled_plan(
    k: int,
    planned: int | None,
    margin: float,
    alpha: float,
    power: float,
    measured: tuple[float, float] | None,
) -> dict[str, Any]:
    """How a suite sampled ``k`` times per item is sized (``evalsvc.stats._sampled``): items
    for ``power`` at ``margin`` with Var(item mean difference) = σ²_B + σ²_W/k, from a pilot
    run's measured components (``measured``: (σ²_B, σ²_W)) or the bound σ²_W ≤ ½, σ²_B = 0
    (an equal candidate's); the same at other k, the requests each costs, and where more
    samples stop helping (the knee, σ²_W/k = ¼ σ²_B) or how many the planned items need."""
    from evalsvc.stats import required_items_sampled, samples_for_items, samples_knee

    between, within = measured if measured is not None else (0.0, WITHIN_BOUND)
    source = "pilot run" if measured is not None else "bound (σ²_W ≤ ½ for 0/1 scores, σ²_B = 0)"
    within = max(within, 1e-9)
    need = required_items_sampled(margin, between, within, k, alpha, power)
    by_k = []
    for kk in sorted({1, 2, 4, 8, 16, k}):
        n = required_items_sampled(margin, between, within, kk, alpha, power)
        by_k.append({"k": kk, "items": n, "requests": n * kk})
    knee = samples_knee(between, within)
    out: dict[str, Any] = {
        "k": k,
        "between": between,
        "within": within,
        "source": source,
        "required_items": need,
        "requests_per_endpoint": need * k,
        "by_k": by_k,
        "knee": knee,
    }
    note = (
        f"sampled: {need} items × {k} samples ({need * k} requests per endpoint) at "
        f"σ²_B = {between:.3g}, σ²_W = {within:.3g} ({source}); an item's mean varies as "
        f"σ²_B + σ²_W/k, so at equal cost per request more items beat more samples "
        f"(k = 1: {by_k[0]['items']} items, {by_k[0]['requests']} requests)"
    )
    if knee is not None:
        note += f"; past k ≈ {knee} more samples barely help (within 25% of the floor σ²_B)"
    if planned:
        enough = samples_for_items(planned, margin, between, within, alpha, power)
        out["samples_for_planned"] = enough
        note += (
            f"; the {planned} planned items need k ≥ {enough}" if enough is not None
            else f"; the {planned} planned items cannot reach it at any k: add items"
        )
    out["note"] = note
    return out


def _discordance_note(
    psi: float, source: str | None, floor: NoiseFloor | None, pilot_run: str | None
) -> str:
    """Where the discordance that sized a row came from, in words (``plan``'s output)."""
    if source == "calibration" and floor is not None:
        return (
            f"discordance {psi:.3g} measured by calibration {floor.calibration} on "
            f"{floor.measured_at[:10]} ({floor.pairs} A/A pairs, smoothed)"
        )
    if source == "pilot run":
        return f"discordance {psi:.3g} from pilot run {pilot_run} (smoothed)"
    if source == "given":
        return f"discordance {psi:.3g} given (--discordance)"
    return f"discordance {psi:.3g} assumed ({source}): calibrate the endpoint to measure it"


def _calibration_note(cal: dict[str, Any], source: str | None) -> str:
    lo, hi = cal["band"]
    if "pilot_requests" not in cal:
        return f"calibrates: {cal['note']}."
    few, most = cal["pilot_requests"]
    lo_items, hi_items = cal["main_items"]
    items = f"{lo_items}" if lo_items == hi_items else f"{lo_items}–{hi_items}"
    pilot = f"{few}" if few == most else f"{few}–{most}"
    text = (
        f"Calibrates first: a pilot of {pilot} baseline requests picks the levels where the "
        f"baseline scores {lo:.0%}–{hi:.0%}; the main run then has {items} items."
    )
    if source == "band bound":
        text += (
            " Sized at the band's bound ψ ≤ 2p(1 − p) for a candidate as accurate as the baseline "
            "with errors not negatively correlated with its own (an upper bound on the items)."
        )
    if cal.get("warning"):
        text += f" {cal['warning']}."
    return text
