"""Trends of one (baseline, candidate) pair over time, on a real time axis.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

import math
from typing import Any

from evalsvc.db import Store
from evalsvc.reports import is_threshold

from ._common import _boundary, _iso, endpoint_name


def _url_labels(store: Store, run_id: str | None, baseline_url: str,
                candidate_url: str) -> tuple[str, str]:
    """The labels of a (baseline URL, candidate URL) pair as one of its runs stored them: the
    one label of every view (``endpoint_name``), host:port when no snapshot matches."""
    stored = store.dashboard.endpoints_of([run_id]).get(run_id, {}) if run_id else {}

    def label(url: str, roles: list[str]) -> str:
        want = url.rstrip("/")
        snap = next((stored[r] for r in roles
                     if str(stored[r].get("url") or "").rstrip("/") == want), {})
        return endpoint_name(snap.get("name"), url, snap.get("model"))

    cands = sorted(r for r in stored if r != "baseline")
    return label(baseline_url, ["baseline"] if "baseline" in stored else []), label(
        candidate_url, cands)


def trend_pairs(store: Store) -> list[dict[str, Any]]:
    out = []
    for p in store.dashboard.gate_pairs():
        b, c = _url_labels(store, p.get("run_id"), p["baseline_url"], p["candidate_url"])
        out.append({**p, "last": _iso(p["last"]), "baseline_label": b, "candidate_label": c})
    return out


def trend(
    store: Store, *, baseline_url: str, candidate_url: str, suite: str,
    scheduled_only: bool = False,
) -> dict[str, Any]:
    """Δ with its CI and the verdict of every completed run of this (baseline, candidate,
    suite), oldest first; ``scheduled_only`` keeps the runs that schedules created."""
    points = []
    kept = []
    want = candidate_url.rstrip("/")
    for row in store.dashboard.gate_history(baseline_url=baseline_url, suite=suite):
        p = row["payload"]
        if str(p.get("candidate_url") or "").rstrip("/") != want:
            continue
        if scheduled_only and row["schedule_id"] is None:
            continue
        kept.append(row)
        ci = p.get("ci") or [None, None]
        points.append({
            "run_id": row["run_id"],
            "time": _iso(row["created_at"]),
            "delta": p.get("delta"),
            "ci_low": ci[0],
            "ci_high": ci[1],
            "boundary": _boundary(p),
            "verdict": p.get("verdict"),
            "n": p.get("n"),
            "scheduled": row["schedule_id"] is not None,
        })
    metric = next((str(r["payload"].get("metric")) for r in reversed(kept) if
                   r["payload"].get("metric")), None)
    threshold = any(is_threshold(r["payload"]) for r in kept)
    labels = _url_labels(store, kept[-1]["run_id"] if kept else None, baseline_url, candidate_url)
    return {"baseline_url": baseline_url, "candidate_url": candidate_url, "suite": suite,
            "baseline_label": labels[0], "candidate_label": labels[1],
            "scheduled_only": scheduled_only, "points": points,
            "metric": metric,
            # What the y-axis shows: the paired difference, or for a threshold gate the metric's
            # distance to its threshold.
            "y_name": (f"{metric or 'metric'} − threshold" if threshold
                       else f"Δ {metric or ''} (candidate − baseline)".replace("  ", " ")),
            "y_range": _trend_range(points)}


def _trend_range(points: list[dict[str, Any]]) -> list[float] | None:
    """The trend's y-axis range: every estimate and CI end, 0 and every margin boundary inside
    it (a chart fitted to the data alone can leave the margin off-screen), padded by 8%."""
    values = [float(v) for p in points for v in (p["delta"], p["ci_low"], p["ci_high"],
                                                 p["boundary"])
              if isinstance(v, (int, float)) and math.isfinite(v)]
    if not values:
        return None
    values.append(0.0)
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 0.01
    return [lo - pad, hi + pad]
