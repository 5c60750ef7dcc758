"""A suite's page: the kind's own view model and template, its findings.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

from typing import Any

from evalsvc.db import Store
from evalsvc.suites import ViewInput, thinking_charts, thinks

from ._common import (
    NotFound,
    _findings,
    _get,
    _labels_of,
    _log,
    _suite_entry,
    kind_class,
    kind_template,
)


def suite_view(store: Store, run_id: str, suite: str, role: str) -> dict[str, Any]:
    """The page of one suite for one candidate: the gate, and the kind's own view model
    (``Suite.view_model``) for its template (``kind_template``)."""
    run = _get(store, run_id)
    snaps = {s["name"]: s for s in store.get_suite_snapshots(run_id)}
    if suite not in snaps:
        raise NotFound(f"run {run_id} has no suite {suite!r}")
    kind = snaps[suite]["kind"]
    roles = [f"candidate:{i}" for i in range(len(run.spec.candidates))]
    if role not in roles:
        raise NotFound(f"run {run_id} has no candidate {role!r}")
    report = store.get_report(run_id)
    entry = _suite_entry(report, suite, role)
    details = (entry or {}).get("details") or {}
    cls = kind_class(kind)
    labels = _labels_of(store, run)
    alpha = float((entry or {}).get("alpha") or run.spec.options.alpha or 0.05)
    source = ViewInput(
        suite=suite,
        role=role,
        entry=entry,
        alpha=alpha,
        scores=lambda fields: store.dashboard.sample_scores(run_id, suite, fields),
        samples=lambda: store.get_samples(run_id, suite=suite),
    )
    try:
        kind_view = cls.view_model(source)
    except Exception:  # a plugin's bug shows the generic page, with the problem logged
        _log.exception("suite %r (%s): view model failed", suite, kind)
        kind_view = {"problem": f"the {kind} kind could not build its view"}
    return {
        "run_id": run_id,
        "suite": suite,
        "kind": kind,
        "role": role,
        "candidate": labels[role],
        "roles": roles,
        "labels": labels,
        "gate": entry,
        "details": details,
        "findings": _findings(entry) if entry else [],
        "template": f"kinds/{kind}" if kind_template(kind) else None,
        "shows_flips": cls.shows_flips(),
        "kind_view": kind_view,
        # Any kind that scores answers: its thinking, drawn beside the kind's own view.
        "thinking_charts": thinking_charts(details),
        "thinking_title": "Thinking traces" if thinks(details) else "Answers cut, looping or leaking",
    }
