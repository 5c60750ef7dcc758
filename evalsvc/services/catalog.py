"""The suite catalog as rows: what ``evalsvc suites list`` prints and ``GET /api/v1/suites`` returns,
and one entry in full (``evalsvc suites show``).

Contract: ``suite_rows`` reads the catalog (``evalsvc.suites.catalog``) and returns one plain dict
per suite or suite set, each with its gate (margin or threshold), what it needs from an endpoint
(``Suite.requires``) and its cost before any request: items (a staged or calibrated suite's
range) and requests per endpoint, from the same sizing ``evalsvc plan`` uses
(``planning.calibration_plan``, ``Suite.stage_sizes``, ``Suite.pairs_per_item``). A broken
catalog file is left out with a warning (``catalog``). ``suite_detail`` is one entry with its
YAML text, its resolved gate and ``plan``'s rows; it raises ``SuiteError`` for an unknown name.
No formatting, no I/O beyond reading the catalog.
"""

from __future__ import annotations

from typing import Any

from evalsvc.domain import RunOptions
from evalsvc.suites import Suite, SuiteSet, catalog


def _gate_text(suite: Suite) -> tuple[float | None, str]:
    gate = suite.gate
    if not gate.gated:
        return None, "informational (not gated)"
    if gate.threshold is not None:
        sign = ">" if gate.higher_is_better else "<"
        return gate.threshold, f"{gate.metric} {sign} {gate.threshold:g} (threshold)"
    if gate.recovery_min is not None:
        return gate.margin, f"recovery of {gate.metric} ≥ {gate.recovery_min:g}"
    return gate.margin, f"{gate.metric}, margin {gate.margin:g}"


def sizing(suite: Suite) -> dict[str, Any]:
    """What the suite sends before talking to an endpoint: ``items`` ``[fewest, most]`` (a
    staged suite grows until its gate decides; a calibrated one runs at levels a pilot picks),
    ``pilot_requests`` ``[fewest, most]`` on the baseline (calibrated suites),
    ``answers_per_item`` (the gated pairs one item yields: determinism's conditions × repeats)
    and ``answers`` per endpoint ``[fewest, most]`` (items × answers per item, plus the pilot
    on the baseline). A kind's own extra traffic (determinism's background load, lm-eval's one
    request per choice) is not counted. ``None`` where only planning against the endpoint
    knows (an lm-eval task from the hub without ``n``)."""
    from evalsvc.services.planning import calibration_plan

    count = suite.item_count()
    items: list[int] | None = None if count is None else [count, count]
    stages = suite.stage_sizes()
    if stages:
        items = [stages[0], stages[-1]]
    pilot: list[int] | None = None
    policy = suite.calibration(None)
    if policy is not None:
        cal = calibration_plan(suite, policy, None)
        if "pilot_requests" in cal:
            pilot = list(cal["pilot_requests"])
            items = list(cal["main_items"])
    per = suite.pairs_per_item()
    answers = None
    if items is not None:
        extra = pilot or [0, 0]
        answers = [items[0] * per + extra[0], items[1] * per + extra[1]]
    return {"items": items, "pilot_requests": pilot, "answers_per_item": per, "answers": answers}


def _span(pair: list[int] | None) -> str:
    if pair is None:
        return "?"
    lo, hi = pair
    return f"{lo:,}" if lo == hi else f"{lo:,}–{hi:,}"


def cost_text(cost: dict[str, Any]) -> str:
    """A row's cost in words: ``1,260 items + 40–200 pilot``, ``12–96 items × 10 answers``."""
    if cost.get("items") is None:
        return "known after planning"
    text = f"{_span(cost['items'])} items"
    if (cost.get("answers_per_item") or 1) > 1:
        text += f" × {cost['answers_per_item']} answers"
    if cost.get("pilot_requests"):
        text += f" + {_span(cost['pilot_requests'])} pilot"
    return text


def _suite_row(entry: Suite) -> dict[str, Any]:
    entry.bind_gate(RunOptions())
    margin, gate = _gate_text(entry)
    cost = sizing(entry)
    return {
        "name": entry.name,
        "kind": entry.kind,
        "version": entry.version,
        "items": entry.item_count(),
        "description": entry.spec.description or entry.description,
        "margin": margin,
        "gate": gate,
        "needs": sorted(entry.requires),
        "calibrates": entry.calibration(None) is not None,
        "cost": {**cost, "text": cost_text(cost)},
    }


def _set_row(entry: SuiteSet, members: dict[str, dict[str, Any]]) -> dict[str, Any]:
    rows = [members[name] for name in entry.suites if name in members]
    needs = sorted({cap for r in rows for cap in r["needs"]})
    cost: dict[str, Any] = {"items": None, "pilot_requests": None, "answers": None}
    if rows and all(r["cost"]["items"] is not None for r in rows):
        for key in ("items", "answers", "pilot_requests"):
            parts = [r["cost"][key] for r in rows if r["cost"][key] is not None]
            if parts:
                cost[key] = [sum(p[0] for p in parts), sum(p[1] for p in parts)]
    return {
        "name": entry.name,
        "kind": "set",
        "items": None,
        "description": entry.description,
        "suites": entry.suites,
        "needs": needs,
        "cost": {**cost, "text": cost_text(cost)},
    }


def suite_rows() -> list[dict[str, Any]]:
    """One dict per catalog entry.

    Suites: ``name``, ``kind``, ``version``, ``items`` (None when only known after planning),
    ``description``, ``margin`` (or threshold; None when not gated), ``gate`` (in words),
    ``needs`` (capabilities), ``calibrates``, ``cost`` (:func:`sizing`, with ``text``). Sets:
    ``name``, ``kind="set"``, ``items=None``, ``description``, ``suites``, ``needs`` (the union
    of its suites') and ``cost`` (their sum).
    """
    entries = catalog(for_listing=True)
    members = {e.name: _suite_row(e) for e in entries if isinstance(e, Suite)}
    return [
        _set_row(e, members) if isinstance(e, SuiteSet) else members[e.name] for e in entries
    ]


def _gate_detail(suite: Suite) -> dict[str, Any]:
    """A suite's resolved gate with why: the kind default's rationale, prefixed, where the
    suite's own policy changed the margin, with the margin it set (``suites show gpu`` read "a
    tighter 3-point margin is affordable" beside its margin 0.05)."""
    gate = suite.gate.to_dict()
    default = suite.default_gate()
    why = default.rationale or ""
    origin = (gate.get("origin") or {}).get("margin")
    if origin == "suite policy" and gate.get("margin") != default.margin:
        why = (f"margin {gate.get('margin'):g} set by this suite (its description says why; the "
               f"{suite.kind} default is {default.margin:g}: {why})")
    return {**gate, "rationale": why, "sources": list(default.sources)}


def suite_detail(name: str, *, allow_paths: bool = False) -> dict[str, Any]:
    """One catalog entry in full: ``row`` (as in :func:`suite_rows`), ``yaml`` (the file's
    text), ``path``, ``gates`` (each suite's resolved gate with its rationale and sources) and
    ``plan`` (``evalsvc plan``'s rows: items needed, planned, calibration). With
    ``allow_paths`` (the local CLI: the files are the user's own) ``name`` may be a suite file's
    path, as ``compare`` and ``plan`` take one. ``SuiteError`` for a name that is neither."""
    from pathlib import Path

    from evalsvc.services.planning import plan
    from evalsvc.suites import resolve
    from evalsvc.suites._registry import catalog_path

    as_file = Path(name).expanduser()
    is_file = allow_paths and as_file.suffix in (".yaml", ".yml") and as_file.is_file()
    if allow_paths and as_file.suffix in (".yaml", ".yml") and not is_file:
        from evalsvc.suites import SuiteError

        raise SuiteError(f"no suite file {name!r} (give a catalog name, `evalsvc suites list`, "
                         "or the path of a suite file)")
    path = as_file if is_file else catalog_path(name)
    suites = resolve([name], allow_paths=is_file)
    members = {s.name: _suite_row(s) for s in suites}
    loaded = [] if is_file else [e for e in catalog() if e.name == name]
    entry = loaded[0] if loaded else None
    own = suites[0].name if is_file else name  # a file names its suite inside it
    row = _set_row(entry, members) if isinstance(entry, SuiteSet) else members[own]
    return {
        "name": name,
        "path": str(path),
        "yaml": path.read_text(encoding="utf-8"),
        "row": row,
        "suites": [members[s.name] for s in suites],
        "gates": {s.name: _gate_detail(s) for s in suites},
        "plan": plan(suites=[name], margin=None, alpha=None),
    }
