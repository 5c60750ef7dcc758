"""Stored sweeps as the views show them: one reading for the REST API and the dashboard.

Contract: ``summary(sweep)`` and ``detail(sweep)`` turn a stored sweep (``store.sweeps``' dict)
into plain dicts — the REST shapes ``SweepSummaryRead`` / ``SweepRead`` and the dashboard's
context — with per configuration the verdict, the worst quality Δ with its CI, the capacity
ratio at SLO with its CI, the KV capacity gain, whether it is on the frontier and its run;
``page(store, id)`` adds what the dashboard page draws: the per-suite rows and the scatter
(``sweep_plot.scatter_svg``). Nothing here computes a verdict or a frontier: they are read from
the report ``run_sweep`` stored.
"""

from __future__ import annotations

from typing import Any

from evalsvc.db import Store
from evalsvc.services.sweep_plot import scatter_svg


def summary(sweep: dict[str, Any]) -> dict[str, Any]:
    report = sweep.get("report") or {}
    rec = (report.get("recommendation") or {}).get("config")
    return {
        "id": sweep["id"], "status": sweep["status"], "created_at": sweep["created_at"],
        "started_at": sweep.get("started_at"), "finished_at": sweep.get("finished_at"),
        "recommendation": rec if report else sweep.get("recommendation"),
        "error": sweep.get("error"), "submitted_by": sweep.get("submitted_by"),
        "schedule_id": sweep.get("schedule_id"),
        "configs": len((sweep.get("spec") or {}).get("configs") or []),
    }


def _config(c: dict[str, Any], frontier: list[str]) -> dict[str, Any]:
    speed = c.get("speed") or {}
    cap = speed.get("capacity") or {}
    quality = c.get("quality") or {}
    return {
        "name": c["name"], "kind": c.get("kind", ""), "status": c.get("status", ""),
        "error": c.get("error"), "verdict": quality.get("verdict"),
        "quality_delta": c.get("quality_delta"), "quality_ci": c.get("quality_ci"),
        "quality_suite": c.get("quality_suite"),
        "capacity_ratio": cap.get("ratio"), "capacity_ci": cap.get("ci"),
        "capacity_reason": cap.get("reason"),
        # Capacity per answer, when the quality suites report thinking (the ranking's measure).
        "answers_capacity_ratio": c.get("answers_capacity_ratio"),
        "baseline_capacity": cap.get("baseline_median"),
        "candidate_capacity": cap.get("candidate_median"),
        "kv_capacity_ratio": (speed.get("kv_capacity") or {}).get("ratio"),
        "run_id": quality.get("run_id"), "frontier": c["name"] in frontier,
        "suites": quality.get("suites") or [],
    }


def detail(sweep: dict[str, Any]) -> dict[str, Any]:
    report = sweep.get("report") or {}
    frontier = list(report.get("frontier") or [])
    rec = report.get("recommendation") or {}
    return {
        **summary(sweep),
        "attempts": sweep.get("attempts", 0), "spec": sweep.get("spec") or {},
        "progress": sweep.get("progress") or {}, "runs": sweep.get("runs") or [],
        "results": [_config(c, frontier) for c in report.get("configs") or []],
        "frontier": frontier, "reason": rec.get("reason"), "slo": report.get("slo"),
        "report": report or None,
    }


def page(store: Store, sweep_id: str) -> dict[str, Any] | None:
    """The dashboard's sweep page: ``detail`` plus the scatter SVG (None: no such sweep)."""
    found = store.sweeps.get_sweep(sweep_id)
    if found is None:
        return None
    view = detail(found)
    view["svg"] = scatter_svg(view["report"]) if view["report"] else None
    return view


def listing(store: Store, *, limit: int = 100) -> list[dict[str, Any]]:
    """The dashboard's sweeps list, newest first."""
    return [summary(s) for s in store.sweeps.list_sweeps(limit=limit)]
