"""The runs list (filters, cursor paging, live progress) and the run page (gates, CI bars,
provenance side by side, the previous run of the same pair), and comparing two runs.

See the package docstring for the contract every page keeps.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any, get_args

from evalsvc.db import RunFilters, Store
from evalsvc.domain import Provenance, RunInfo, RunStatus, RunVerdict
from evalsvc.services import history, run_verdict
from evalsvc.suites import PILOT_SUFFIX

from ._common import (
    _boundary,
    _findings,
    _get,
    _iso,
    _labels_of,
    _roles,
    endpoint_labels,
    kind_class,
    suite_label,
)

#: Provenance fields shown side by side on the run page (the issue's list, then the rest).
PROVENANCE_FIELDS = (
    "model",
    "engine",
    "version",
    "kv_cache_dtype",
    "quantization",
    "kv_capacity_tokens",
    "max_context",
    "block_size",
    "num_gpu_blocks",
    "prefix_caching",
    "root",
    "tokenizer_fingerprint",
    # What the comparability guard compares (a differing row explains a non-comparable verdict).
    "chat_template_fingerprint",
    "model_family",
    "generation_defaults",
    "reasoning",
)


def encode_cursor(run: RunInfo) -> str:
    return f"{run.created_at.astimezone(UTC).isoformat()}~{run.id}"


def decode_cursor(value: str | None) -> tuple[datetime, str] | None:
    """``"<iso time>~<run id>"`` back to a keyset cursor; None for empty or malformed input."""
    if not value or "~" not in value:
        return None
    when, _, rid = value.rpartition("~")
    try:
        t = datetime.fromisoformat(when)
    except ValueError:
        return None
    if not re.fullmatch(r"[0-9a-f]{1,64}", rid):
        return None
    return (t if t.tzinfo else t.replace(tzinfo=UTC)), rid


def parse_filters(
    *,
    endpoint: str | None = None,
    suite: str | None = None,
    verdict: str | None = None,
    status: str | None = None,
    label: str | None = None,
    since: str | None = None,
    until: str | None = None,
) -> tuple[RunFilters, list[str]]:
    """Query-string values to ``RunFilters``, and the problems found (bad values are ignored
    with a message shown on the page, never a 500)."""
    problems: list[str] = []

    def day(value: str | None, what: str) -> datetime | None:
        if not value:
            return None
        try:
            return datetime.fromisoformat(value).replace(tzinfo=UTC)
        except ValueError:
            problems.append(f"{what}: {value!r} is not a date (YYYY-MM-DD)")
            return None

    if status and status not in {s.value for s in RunStatus}:
        problems.append(f"status: unknown value {status!r}")
        status = None
    if verdict and verdict not in get_args(RunVerdict):
        problems.append(f"verdict: unknown value {verdict!r}")
        verdict = None
    pair: tuple[str, str] | None = None
    if label:
        key, eq, value = label.partition("=")
        if eq and key.strip():
            pair = (key.strip(), value.strip())
        else:
            problems.append(f"label: {label!r} is not key=value")
    start = day(since, "from")
    end = day(until, "to")
    if end is not None:
        try:
            end += timedelta(days=1)  # "to" is inclusive
        except OverflowError:  # 9999-12-31: the day after is past datetime's range
            problems.append(f"to: {until!r} is past the last date this dashboard can filter on")
            end = None
    return (
        RunFilters(
            endpoint=endpoint or None,
            suite=suite or None,
            verdict=verdict or None,
            status=status or None,
            label=pair,
            since=start,
            until=end,
        ),
        problems,
    )


def _progress(
    run: RunInfo, stored: dict[str, dict[str, list[int]]], labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Items done / planned per suite and endpoint, and where the run is: "suite 2 of 5".

    Done counts are the stored samples (live for every run); planned comes from the worker's
    progress record (``{"suites": [...], "items": {suite: n}}``). Suites are planned one after
    the other, so a share of the items planned so far overstates progress; ``fraction`` weighs
    every suite of the run equally instead (a suite not planned yet counts 0), and is None when
    the run's suite list is unknown (records written before it was kept)."""
    record = run.progress or {}
    planned: dict[str, int] = dict(record.get("items") or {})
    order = [str(x) for x in record.get("suites") or []]
    suites = list(dict.fromkeys([*order, *planned, *stored]))
    spec_roles = _roles(run)
    rows: list[dict[str, Any]] = []
    done_total = planned_total = 0
    share: dict[str, float] = {}
    for suite in suites:
        per = stored.get(suite, {})
        roles = [*spec_roles, *sorted(set(per) - set(spec_roles))]
        if suite.endswith(PILOT_SUFFIX):  # a calibration pilot runs on the baseline alone
            roles = ["baseline"]
        p = planned.get(suite)
        done_suite = 0
        for role in roles:
            n, errors = per.get(role, [0, 0])
            rows.append({"suite": suite, "endpoint": role, "done": n, "errors": errors,
                         "planned": p, "label": (labels or {}).get(role, role)})
            done_total += n
            done_suite += min(n, p or 0)
            planned_total += p or 0
        share[suite] = done_suite / (p * len(roles)) if p else 0.0
    current = None
    if order:
        started = [s for s in order if s in planned]
        current = started[-1] if started else None
    summary = None
    fraction: float | None
    if order:
        fraction = sum(share.get(x, 0.0) for x in order) / len(order)
        if current is None:
            summary = f"{len(order)} suites, none planned yet"
        else:
            k = order.index(current) + 1
            per_role = [int(r["done"]) for r in rows if r["suite"] == current]
            done_now = min(per_role) if per_role else 0
            summary = (f"suite {k} of {len(order)} · {current} "
                       f"{done_now}/{planned[current]} items")
    else:
        fraction = min(1.0, done_total / planned_total) if planned_total else None
    return {
        "rows": rows,
        "done": done_total,
        "planned": planned_total or None,
        "fraction": fraction,
        "suite_count": len(order) or None,
        "current": current,
        "summary": summary,
    }


def _run_row(
    run: RunInfo, gates: list[dict[str, Any]], stored: Any,
    ends: dict[str, dict[str, str | None]], suites: list[str],
) -> dict[str, Any]:
    spec = run.spec
    labels = endpoint_labels(run, ends)
    return {
        "id": run.id,
        "status": run.status.value,
        "verdict": run.verdict,
        "error": run.error,
        "created_at": _iso(run.created_at),
        "finished_at": _iso(run.finished_at),
        "baseline": labels["baseline"],
        "baseline_url": spec.baseline.url,
        "candidates": [labels[f"candidate:{i}"] for i in range(len(spec.candidates))],
        "candidate_urls": [c.url for c in spec.candidates],
        # The suites' own names (their snapshots) once run, never the file path they came from.
        "suites": suites or [suite_label(x) for x in spec.suites],
        "labels": dict(spec.labels),
        "schedule_id": run.schedule_id,
        "gates": [
            {"candidate": labels.get(str(g.get("candidate")), g.get("candidate")),
             "suite": g.get("suite"), "verdict": g.get("verdict")}
            for g in gates
        ],
        "progress": _progress(run, stored, labels)
        if run.status in (RunStatus.queued, RunStatus.running)
        else None,
    }


def runs_list(
    store: Store,
    filters: RunFilters,
    *,
    older: str | None = None,
    newer: str | None = None,
    limit: int = 50,
) -> dict[str, Any]:
    """One page of the runs list with its total and the cursors of the neighbouring pages."""
    older_c, newer_c = decode_cursor(older), decode_cursor(newer)
    runs, total, more = store.dashboard.runs_page(
        filters, limit=limit, older_than=older_c, newer_than=None if older_c else newer_c
    )
    ids = [r.id for r in runs]
    live = [r.id for r in runs if r.status in (RunStatus.queued, RunStatus.running)]
    gates = store.dashboard.gate_rows(ids)
    stored = store.dashboard.sample_progress(live)
    ends = store.dashboard.endpoints_of(ids)
    names = store.dashboard.suite_names(ids)
    paging_newer = newer_c is not None and older_c is None
    return {
        "rows": [_run_row(r, gates.get(r.id, []), stored.get(r.id, {}), ends.get(r.id, {}),
                          names.get(r.id, [])) for r in runs],
        "total": total,
        # Keyset paging: "older" continues after the last row, "newer" before the first.
        "older": encode_cursor(runs[-1]) if runs and (more or paging_newer) else None,
        "newer": encode_cursor(runs[0]) if runs and (older_c or (paging_newer and more)) else None,
    }


def live_status(store: Store, run_ids: list[str]) -> dict[str, Any]:
    """Status, verdict and progress of a few runs (the pages poll this while runs are live)."""
    out: dict[str, Any] = {}
    ids = list(dict.fromkeys(run_ids))[:200]
    stored = store.dashboard.sample_progress(ids)
    ends = store.dashboard.endpoints_of(ids)
    for rid in ids:
        run = store.get_run(rid)
        if run is None:
            continue
        labels = endpoint_labels(run, ends.get(rid, {}))
        out[rid] = {
            "status": run.status.value,
            "verdict": run.verdict,
            "error": run.error,
            "progress": _progress(run, stored.get(rid, {}), labels),
        }
    return out


def _ci_bar(s: dict[str, Any]) -> dict[str, Any] | None:
    """Geometry of the Δ/CI bar against the margin line, in percent of the drawing's width."""
    ci = s.get("ci") or [None, None]
    delta, bound = s.get("delta"), _boundary(s)
    values = [v for v in (*ci, delta, bound, 0.0) if isinstance(v, (int, float))]
    if delta is None or len(values) < 3 or (ci[0] is None and ci[1] is None):
        return None
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.1 or 0.01
    lo, hi = lo - pad, hi + pad
    # A one-sided interval (threshold gates) is open on one end: draw it to the edge.
    ci = [lo if ci[0] is None else ci[0], hi if ci[1] is None else ci[1]]

    def x(v: float) -> float:
        return round(100 * (v - lo) / (hi - lo), 2)

    return {
        "lo": x(ci[0]),
        "hi": x(ci[1]),
        "delta": x(delta),
        "zero": x(0.0),
        "margin": x(bound) if bound is not None else None,
        "range": [lo, hi],
    }


def _provenance(snapshots: dict[str, tuple[Any, Provenance]], run: RunInfo) -> dict[str, Any]:
    """Baseline and candidates side by side; a field differs when any endpoint's value does."""
    roles = _roles(run)
    labels = endpoint_labels(run, {
        role: {"name": ref.name, "url": ref.url, "model": ref.model or prov.model}
        for role, (ref, prov) in snapshots.items()
    })
    columns: list[dict[str, Any]] = []
    for i, role in enumerate(roles):
        ref = run.spec.baseline if i == 0 else run.spec.candidates[i - 1]
        prov = snapshots[role][1].model_dump(mode="json") if role in snapshots else {}
        # The subtitle people read: the side, never the role key (``candidate:0``).
        side = "baseline" if i == 0 else (
            "candidate" if len(roles) == 2 else f"candidate {i} of {len(roles) - 1}")
        columns.append({"role": role, "label": labels[role], "url": ref.url, "values": prov,
                        "side": side})
    rows = []
    for name in PROVENANCE_FIELDS:
        vals = [c["values"].get(name) for c in columns]
        if all(v is None for v in vals):
            continue
        shown = ["—" if v is None else str(v) for v in vals]
        rows.append({"field": name, "values": shown, "differs": len(set(shown)) > 1})
    caps = sorted({k for c in columns for k in (c["values"].get("capabilities") or {})})
    for cap in caps:
        shown = [str((c["values"].get("capabilities") or {}).get(cap, "—")) for c in columns]
        rows.append({"field": f"capability: {cap}", "values": shown,
                     "differs": len(set(shown)) > 1})
    return {"columns": [{k: c[k] for k in ("role", "label", "url", "side")} for c in columns],
            "rows": rows}


def _previous_of_pair(store: Store, run: RunInfo) -> str | None:
    """The latest completed run before this one with the same baseline and candidate URLs."""
    want = [c.url.rstrip("/") for c in run.spec.candidates]
    older, _, _ = store.dashboard.runs_page(
        RunFilters(endpoint=run.spec.baseline.url, status=RunStatus.completed.value),
        limit=50,
        older_than=(run.created_at, run.id),
        with_total=False,
    )
    for other in older:
        same_base = other.spec.baseline.url.rstrip("/") == run.spec.baseline.url.rstrip("/")
        if same_base and [c.url.rstrip("/") for c in other.spec.candidates] == want:
            return other.id
    return None


def run_page(store: Store, run_id: str) -> dict[str, Any]:
    """Everything the run page shows: status, gates with CI geometry, findings, provenance."""
    from evalsvc.reports import endpoint_label, headline

    run = _get(store, run_id)
    report = store.get_report(run_id)
    snapshots = store.get_endpoint_snapshots(run_id)
    labels = _labels_of(store, run)
    suites = store.get_suite_snapshots(run_id)
    kinds = {s["name"]: s["kind"] for s in suites}
    stored = store.dashboard.sample_progress([run_id]).get(run_id, {})
    gates: list[dict[str, Any]] = []
    if report:
        for cand in report.get("candidates") or []:
            for s in cand.get("suites") or []:
                d = s.get("details") or {}
                gates.append({
                    "candidate": labels.get(str(cand.get("role"))) or endpoint_label(cand),
                    "role": cand.get("role"),
                    "suite": s.get("suite"),
                    "kind": s.get("kind"),
                    "verdict": s.get("verdict"),
                    "gated": s.get("gated", True),
                    "metric": s.get("metric"),
                    "baseline": s.get("baseline"),
                    "candidate_value": s.get("candidate"),
                    "delta": s.get("delta"),
                    "ci": s.get("ci"),
                    "margin": s.get("margin"),
                    "boundary": _boundary(s),
                    "p_value": s.get("p_value"),
                    "n": s.get("n"),
                    "n_planned": s.get("n_planned"),
                    "n_errors": s.get("n_errors"),
                    "mde": s.get("mde"),
                    "test": s.get("test"),
                    "bar": _ci_bar(s),
                    "headline": headline(s),
                    "findings": (found := _findings(s)),
                    # Failing findings are open: the reader sees first what blocks a rollout.
                    "open": s.get("verdict") == "fail"
                    or any(f["severity"] == "fail" for f in found),
                    "shows_flips": kind_class(str(s.get("kind"))).shows_flips(),
                    "error_examples": d.get("error_examples") or [],
                    "reason": d.get("reason"),
                })
    return {
        "previous": _previous_of_pair(store, run),
        "run": {
            "id": run.id,
            "status": run.status.value,
            "verdict": run.verdict,
            "error": run.error,
            "created_at": _iso(run.created_at),
            "started_at": _iso(run.started_at),
            "finished_at": _iso(run.finished_at),
            "labels": dict(run.spec.labels),
            "suites_requested": list(run.spec.suites),
            "options": run.spec.options.model_dump(mode="json"),
            "baseline_url": run.spec.baseline.url,
            "candidate_urls": [c.url for c in run.spec.candidates],
            "schedule_id": run.schedule_id,
            # A queued run: how many workers are alive, and how to start one when none is.
            "queue_note": (waiting.message
                           if (waiting := history.queue_state(store, run)) else None),
        },
        "warnings": (report or {}).get("warnings") or [],
        "has_report": report is not None,
        "suites": [{"name": s["name"], "kind": s["kind"], "version": s["version"]}
                   for s in suites],
        "kinds": kinds,
        "candidates": [{"role": f"candidate:{i}", "label": labels[f"candidate:{i}"]}
                       for i in range(len(run.spec.candidates))],
        "labels": labels,
        "gates": gates,
        # The decision banner and the gates table on one scale (evalsvc.services.run_verdict).
        "banner": run_verdict.banner(store, run, report),
        "gate_table": _with_flips(run_verdict.gate_table(report)),
        # What the verdict rests on (docs/report.md, Basis): one line per suite and per
        # allowed difference; the allowed ones are also flagged in the banner.
        "basis": _basis(report),
        "provenance": _provenance(snapshots, run),
        "progress": _progress(run, stored, labels),
    }


def _basis(report: dict[str, Any] | None) -> dict[str, Any] | None:
    if report is None:
        return None
    from evalsvc.reports import basis, basis_lines

    b = basis(report)
    return {"lines": basis_lines(b), "allowed": b.get("allowed_differences") or []}


def _with_flips(table: dict[str, Any]) -> dict[str, Any]:
    """The gates table's rows link to the flips page where the kind scores items right/wrong."""
    for row in (table or {}).get("rows") or []:
        row["shows_flips"] = kind_class(str(row.get("kind"))).shows_flips()
    return table


def compare_runs(store: Store, a: str, b: str) -> dict[str, Any]:
    """Two runs side by side: gates matched by (candidate URL, suite), provenance per role."""
    pa, pb = run_page(store, a), run_page(store, b)
    warnings = []
    if pa["run"]["baseline_url"] != pb["run"]["baseline_url"]:
        warnings.append("the runs have different baselines")
    if pa["run"]["candidate_urls"] != pb["run"]["candidate_urls"]:
        warnings.append("the runs have different candidates")

    def key(g: dict[str, Any], page: dict[str, Any]) -> tuple[str, str]:
        idx = int(str(g.get("role") or "candidate:0").split(":")[-1])
        urls = page["run"]["candidate_urls"]
        return (urls[idx] if idx < len(urls) else str(g.get("role")), str(g.get("suite")))

    ga = {key(g, pa): g for g in pa["gates"]}
    gb = {key(g, pb): g for g in pb["gates"]}
    rows = []
    for k in list(dict.fromkeys([*ga, *gb])):
        x, y = ga.get(k), gb.get(k)
        dx = (x or {}).get("delta")
        dy = (y or {}).get("delta")
        rows.append({
            "candidate_url": k[0],
            # The label the run pages show (name, else host:port, with the model), never a role.
            "candidate": (y or x or {}).get("candidate") or k[0],
            "suite": k[1],
            "a": x,
            "b": y,
            "delta_change": dy - dx if isinstance(dx, (int, float)) and isinstance(
                dy, (int, float)) else None,
            "verdict_changed": (x or {}).get("verdict") != (y or {}).get("verdict"),
        })
    prov = []
    for ra, rb in zip(pa["provenance"]["rows"], pb["provenance"]["rows"], strict=False):
        if ra["field"] == rb["field"]:
            prov.append({"field": ra["field"], "a": ra["values"], "b": rb["values"],
                         "changed": ra["values"] != rb["values"]})
    return {"a": pa["run"], "b": pb["run"], "rows": rows, "provenance": prov,
            "warnings": warnings}
