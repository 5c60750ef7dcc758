"""The web dashboard's use cases: what each page shows, as plain dicts (no HTML here).

Contract: functions take a ``Store`` and request values and return JSON-able dicts built from
the stored run (its report, gates, snapshots and samples); they never format HTML (the views in
``evalsvc.dashboard`` do, with escaping) and never build SQL (``Store.dashboard`` does). A run
that failed part-way or has no report yet still renders: missing pieces are ``None``/empty,
never an error. Numbers shown are the gate's own (from the report). What is particular to a
suite kind (its findings, flips, slices, prompts, its page's view model and template) comes
from the kind (``evalsvc.suites.Suite``), looked up in the registry by the stored kind name:
this module knows no kind by name.
"""

from __future__ import annotations

import logging
import math
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from evalsvc.db import RunFilters, Store
from evalsvc.domain import Provenance, RunInfo, RunStatus, Sample
from evalsvc.reports import is_threshold
from evalsvc.services import run_verdict
from evalsvc.suites import (
    PILOT_SUFFIX,
    Scored,
    Suite,
    SuiteSpec,
    ViewInput,
    prompt_text,
    suite_kinds,
)

_log = logging.getLogger(__name__)

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
)

_TOKEN = re.compile(r"\w+|[^\w\s]|\s+", re.UNICODE)


class NotFound(LookupError):
    """No such run (the views answer 404)."""


def _iso(t: datetime | None) -> str | None:
    return t.astimezone(UTC).isoformat() if t else None


def endpoint_name(name: str | None, url: str | None, model: str | None) -> str:
    """The one label every view gives an endpoint: its registered name, else host:port, with
    the engine's model name (``evalsvc.reports.endpoint_label``; URL userinfo redacted)."""
    from evalsvc.endpoints import redact_url
    from evalsvc.reports import endpoint_label

    return endpoint_label({"name": name, "url": redact_url(url) if url else "", "model": model})


def _roles(run: RunInfo) -> list[str]:
    return ["baseline", *(f"candidate:{i}" for i in range(len(run.spec.candidates)))]


def endpoint_labels(run: RunInfo, stored: dict[str, dict[str, str | None]]) -> dict[str, str]:
    """``{role: label}`` of a run's endpoints: from their snapshots (``stored``, with the
    served model) once the run has started, else from the spec."""
    out = {}
    for i, role in enumerate(_roles(run)):
        ref = run.spec.baseline if i == 0 else run.spec.candidates[i - 1]
        snap = stored.get(role) or {}
        out[role] = endpoint_name(snap.get("name") or ref.name, snap.get("url") or ref.url,
                                  snap.get("model") or ref.model)
    return out


def suite_label(requested: str) -> str:
    """A requested suite as a name: a file path (``--suite ./x.yaml``) shows its file's stem
    until the run has started and its snapshot gives the suite's own name."""
    if "/" in requested or "\\" in requested or requested.endswith((".yaml", ".yml")):
        stem = requested.replace("\\", "/").rsplit("/", 1)[-1]
        return stem.rsplit(".", 1)[0] if stem.endswith((".yaml", ".yml")) else stem
    return requested


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
    if verdict and verdict not in {"pass", "fail", "inconclusive", "error"}:
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


def _get(store: Store, run_id: str) -> RunInfo:
    run = store.get_run(run_id) if re.fullmatch(r"[0-9a-f]{1,64}", run_id) else None
    if run is None:
        raise NotFound(f"no run {run_id!r}")
    return run


def _boundary(s: dict[str, Any]) -> float | None:
    """Where the gate's null boundary sits on the Δ axis (GateOutcome's conventions)."""
    margin = s.get("margin")
    if margin is None:
        return None
    d = s.get("details") or {}
    # The gate's direction is in details.gate (the resolved gate); older payloads had it at top.
    hib = d.get("higher_is_better", (d.get("gate") or {}).get("higher_is_better", True))
    return -float(margin) if hib else float(margin)


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
        columns.append({"role": role, "label": labels[role], "url": ref.url, "values": prov})
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
    return {"columns": [{k: c[k] for k in ("role", "label", "url")} for c in columns],
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
        "provenance": _provenance(snapshots, run),
        "progress": _progress(run, stored, labels),
    }


def _with_flips(table: dict[str, Any]) -> dict[str, Any]:
    """The gates table's rows link to the flips page where the kind scores items right/wrong."""
    for row in (table or {}).get("rows") or []:
        row["shows_flips"] = kind_class(str(row.get("kind"))).shows_flips()
    return table


def _labels_of(store: Store, run: RunInfo) -> dict[str, str]:
    return endpoint_labels(run, store.dashboard.endpoints_of([run.id]).get(run.id, {}))


# ---------------------------------------------------------------------------- kinds


def kind_class(kind: str) -> type[Suite]:
    """The registered class of ``kind``; the base class (generic parts only) when it is not
    installed (any more)."""
    return suite_kinds().get(kind, Suite)


def kind_template(kind: str) -> str | None:
    """The Jinja source of ``kind``'s dashboard section (shipped beside the kind), if any."""
    cls = suite_kinds().get(kind)
    return cls.template_source() if cls is not None else None


def _suite_of(snapshot: dict[str, Any]) -> Suite | None:
    """The suite as it ran, from its snapshot (for prompts rebuilt from the seed); ``None`` when
    its kind is not installed or the stored spec no longer validates."""
    cls = suite_kinds().get(str(snapshot.get("kind")))
    if cls is None:
        return None
    # The snapshot keeps the spec plus how it was gated (``resolved_gate``), which is not a
    # field of SuiteSpec.
    spec = {k: v for k, v in dict(snapshot.get("spec") or {}).items() if k != "resolved_gate"}
    try:
        return cls(SuiteSpec.model_validate(spec))
    except (ValueError, TypeError, KeyError) as exc:
        _log.info("suite %r: stored spec not usable for prompts: %s", snapshot.get("name"), exc)
        return None


def _suite_entry(report: dict[str, Any] | None, suite: str, role: str) -> dict[str, Any] | None:
    for cand in (report or {}).get("candidates") or []:
        if cand.get("role") == role:
            for s in cand.get("suites") or []:
                if s.get("suite") == suite:
                    return dict(s)
    return None


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
    }


def _findings(entry: dict[str, Any]) -> list[dict[str, Any]]:
    from evalsvc.reports import suite_findings

    return [f.to_dict() for f in suite_findings(entry)]


# ---------------------------------------------------------------------------- flips


def first_divergence(a: str, b: str) -> dict[str, Any]:
    """Split two outputs at their first differing token (words, punctuation and runs of
    whitespace; the endpoints' own token ids are not stored), for highlighting."""
    ta, tb = _TOKEN.findall(a), _TOKEN.findall(b)
    i = 0
    while i < min(len(ta), len(tb)) and ta[i] == tb[i]:
        i += 1

    def parts(tokens: list[str]) -> dict[str, str]:
        return {"same": "".join(tokens[:i]), "first": tokens[i] if i < len(tokens) else "",
                "rest": "".join(tokens[i + 1:])}

    return {"index": i, "baseline": parts(ta), "candidate": parts(tb)}


def _flipped_pairs(
    store: Store, run_id: str, suite: str, cls: type[Suite], role: str
) -> list[tuple[Scored, Scored]]:
    """The scored ``(baseline, candidate)`` pairs of ``role`` that may have flipped, by item and
    repeat: found by the database when the kind flips by a threshold (only flipped pairs are
    read), else every scored pair for the kind's own ``flip``."""
    if cls.flips_by_threshold():
        return [
            (("baseline", item, rep, sb, data), (role, item, rep, sc, data))
            for item, rep, sb, sc, data in store.dashboard.flipped_pairs(
                run_id, suite, role, cls.flip_threshold, cls.slice_fields
            )
        ]
    rows = store.dashboard.sample_scores(run_id, suite, cls.slice_fields)
    base = {(r[1], r[2]): r for r in rows if r[0] == "baseline"}
    cand = {(r[1], r[2]): r for r in rows if r[0] == role}
    return [(base[k], cand[k]) for k in sorted(base.keys() & cand.keys())
            if base[k][3] is not None and cand[k][3] is not None]


_WAYS = ("regression", "improvement")


def flips_view(
    store: Store,
    run_id: str,
    *,
    suite: str | None = None,
    role: str | None = None,
    slice_: str | None = None,
    direction: str | None = None,
    query: str | None = None,
    limit: int = 200,
) -> dict[str, Any]:
    """Items whose outcome flipped between baseline and candidate (``Suite.flip``), with both
    outputs and the prompt (``Suite.prompt``): regressions (correct → incorrect) first.
    ``query`` keeps the items whose id, prompt, expected answer or either output contains it
    (case-insensitive)."""
    run = _get(store, run_id)
    snaps = store.get_suite_snapshots(run_id)
    flipping = [s for s in snaps if kind_class(s["kind"]).shows_flips()]
    roles = [f"candidate:{i}" for i in range(len(run.spec.candidates))]
    role = role if role in roles else (roles[0] if roles else None)
    chosen = [s for s in flipping if suite in (None, "", s["name"])]
    needle = (query or "").strip().casefold()
    found: list[tuple[dict[str, Any], Scored, str, str]] = []
    slices: set[str] = set()
    counts = Counter[str]()
    for snap in chosen:
        cls = kind_class(snap["kind"])
        for rb, rc in _flipped_pairs(store, run_id, snap["name"], cls, role or ""):
            way: str | None = cls.flip(float(rb[3]), float(rc[3]))  # type: ignore[arg-type]
            if way is None:
                continue
            sl = cls.slice_label(rb[4]) or "all"
            slices.add(sl)
            counts[way] += 1
            if direction in _WAYS and way != direction:
                continue
            if slice_ and sl != slice_:
                continue
            found.append((snap, rb, way, sl))
    # Regressions first (what blocks a rollout), then by suite and item order.
    found.sort(key=lambda f: _WAYS.index(f[2]))
    rows: list[dict[str, Any]] = []
    matched = 0
    samples: dict[tuple[str, str, str, int], Sample] = {}
    suites_by_name: dict[str, Suite | None] = {}
    # A search reads every flipped pair's text; without one, only the page shown.
    wanted = found if needle else found[:limit]
    for name in dict.fromkeys(f[0]["name"] for f in wanted):
        ids = [f[1][1] for f in wanted if f[0]["name"] == name]
        for x in store.dashboard.samples_of_items(run_id, name, ids):
            samples[(name, x.endpoint, x.item_id, x.repeat)] = x
    for snap, rb, way, sl in wanted:
        name = snap["name"]
        sb = samples.get((name, "baseline", rb[1], rb[2]))
        sc = samples.get((name, role or "", rb[1], rb[2]))
        if sb is None or sc is None:
            continue
        if name not in suites_by_name:
            suites_by_name[name] = _suite_of(snap)
        runnable = suites_by_name[name]
        try:
            prompt = (runnable.prompt(sb.item_id, sb.data) if runnable is not None
                      else prompt_text(sb.data.get("prompt")))
        except Exception:  # a plugin's bug loses the prompt, never the page
            _log.exception("suite %r: prompt of %r failed", name, sb.item_id)
            prompt = None
        expected = sb.data.get("expected")
        expected_text = (expected if isinstance(expected, (str, int, float)) or expected is None
                         else ", ".join(str(e) for e in expected))
        if needle:
            hay = " ".join(str(x) for x in (sb.item_id, prompt or "", expected_text or "",
                                            sb.output, sc.output)).casefold()
            if needle not in hay:
                continue
        matched += 1
        if len(rows) >= limit:
            continue
        rows.append({
            "suite": name,
            "kind": snap["kind"],
            "item_id": sb.item_id,
            "repeat": sb.repeat,
            "direction": way,
            "slice": sl,
            "expected": expected_text,
            "prompt": prompt,
            "baseline_output": sb.output,
            "candidate_output": sc.output,
            "diff": first_divergence(sb.output, sc.output),
        })
    return {
        "run_id": run_id,
        "role": role,
        "roles": roles,
        "labels": _labels_of(store, run),
        "suites": [s["name"] for s in flipping],
        "suite": suite or "",
        "slices": sorted(slices),
        "slice": slice_ or "",
        "direction": direction or "",
        "query": query or "",
        "counts": dict(counts),
        "total": matched if needle else len(found),
        "rows": rows,
    }


# ---------------------------------------------------------------------------- all samples

#: The samples browser's outcomes of an item (one repeat) between baseline and a candidate.
OUTCOMES = ("regression", "improvement", "unchanged", "scored", "error", "unpaired")
#: Items per page of the samples browser (its largest page: the store reads outputs only for
#: the page shown).
SAMPLES_PAGE_MAX = 200


def _outcome(cls: type[Suite], binary: bool, b: Any, c: Any) -> str:
    """``b``/``c``: ``(score, errored, fields)`` of the baseline's and the candidate's sample;
    ``binary``: the kind scores items right/wrong (``Suite.shows_flips``)."""
    if b is None or c is None:
        return "unpaired"
    if b[1] or c[1] or b[0] is None or c[0] is None:
        return "error"
    if not binary:  # scores that are not right/wrong (KLD, determinism, speed)
        return "scored"
    return cls.flip(float(b[0]), float(c[0])) or "unchanged"


def _side(x: Sample | None, cls: type[Suite]) -> dict[str, Any] | None:
    if x is None:
        return None
    try:
        logprobs = cls.sample_logprobs(x.data)
    except Exception:  # a plugin's bug loses the logprobs, never the page
        _log.exception("kind %r: sample_logprobs of %r failed", cls.kind, x.item_id)
        logprobs = None
    return {"output": x.output, "score": x.score, "error": x.error, "latency_s": x.latency_s,
            "prompt_tokens": x.prompt_tokens, "completion_tokens": x.completion_tokens,
            "logprobs": logprobs}


def samples_view(
    store: Store,
    run_id: str,
    suite: str,
    *,
    role: str | None = None,
    slice_: str | None = None,
    outcome: str | None = None,
    query: str | None = None,
    offset: int = 0,
    limit: int = 50,
) -> dict[str, Any]:
    """Every item of one suite, paged (``query``: only items whose id or either side's output
    contains the text, case-insensitive): its slice and outcome (``OUTCOMES``) between the
    baseline and ``role``, and for the page shown both sides' output, score, error and timing,
    the prompt, the expected answer and what the kind stored of the logprobs
    (``Suite.sample_logprobs``). The filters read one light index query (scores, error
    flags and the kind's slice fields: no text); outputs are read for the page's items only."""
    run = _get(store, run_id)
    snaps = {s["name"]: s for s in store.get_suite_snapshots(run_id)}
    if suite not in snaps:
        raise NotFound(f"run {run_id} has no suite {suite!r}")
    roles = [f"candidate:{i}" for i in range(len(run.spec.candidates))]
    role = role or (roles[0] if roles else None)
    if role not in roles:
        raise NotFound(f"run {run_id} has no candidate {role!r}")
    snap = snaps[suite]
    cls = kind_class(snap["kind"])
    outcome = outcome if outcome in OUTCOMES else None  # an unknown value filters nothing
    limit = max(1, min(int(limit), SAMPLES_PAGE_MAX))
    offset = max(0, int(offset))
    sides: dict[str, dict[tuple[str, int], tuple[Any, bool, dict[str, Any]]]] = {
        "baseline": {}, role: {}}
    order: dict[tuple[str, int], None] = {}
    for endpoint, item, rep, score, errored, fields in store.dashboard.sample_index(
        run_id, suite, cls.slice_fields
    ):
        if endpoint in sides:
            sides[endpoint][(item, rep)] = (score, errored, fields)
            order[(item, rep)] = None
    query = (query or "").strip()[:200] or None
    matching = (store.dashboard.items_matching(run_id, suite, query, ["baseline", role])
                if query else None)
    binary = cls.shows_flips()
    entries: list[tuple[str, int, str, str]] = []
    counts = Counter[str]()
    slices: set[str] = set()
    for key in order:
        b, c = sides["baseline"].get(key), sides[role].get(key)
        way = _outcome(cls, binary, b, c)
        sl = cls.slice_label((b or c or (None, False, {}))[2]) or "all"
        slices.add(sl)
        if slice_ and sl != slice_:
            continue
        if matching is not None and key[0] not in matching:
            continue
        counts[way] += 1  # within the chosen slice: the outcome menu says what it would show
        if outcome and way != outcome:
            continue
        entries.append((key[0], key[1], way, sl))
    shown = entries[offset:offset + limit]
    full: dict[tuple[str, str, int], Sample] = {}
    ids = list(dict.fromkeys(e[0] for e in shown))
    for x in store.dashboard.samples_of_items(run_id, suite, ids) if ids else []:
        full[(x.endpoint, x.item_id, x.repeat)] = x
    runnable = _suite_of(snap) if shown else None
    rows = []
    for item, rep, way, sl in shown:
        sb, sc = full.get(("baseline", item, rep)), full.get((role, item, rep))
        data = (sb or sc).data if (sb or sc) is not None else {}  # type: ignore[union-attr]
        try:
            prompt = (runnable.prompt(item, data) if runnable is not None
                      else prompt_text(data.get("prompt")))
        except Exception:  # a plugin's bug loses the prompt, never the page
            _log.exception("suite %r: prompt of %r failed", suite, item)
            prompt = None
        expected = data.get("expected")
        if expected is not None and not isinstance(expected, (str, int, float)):
            expected = ", ".join(str(e) for e in expected)
        rows.append({"item_id": item, "repeat": rep, "outcome": way, "slice": sl,
                     "prompt": prompt, "expected": expected,
                     "baseline": _side(sb, cls), "candidate": _side(sc, cls)})
    labels = _labels_of(store, run)
    return {
        "run_id": run_id,
        "suite": suite,
        "kind": snap["kind"],
        "role": role,
        "roles": roles,
        "labels": labels,
        "slices": sorted(slices),
        "slice": slice_ or "",
        "outcomes": [o for o in OUTCOMES if counts.get(o)],
        "outcome": outcome or "",
        "query": query or "",
        "counts": dict(counts),
        "total": len(entries),
        "offset": offset,
        "limit": limit,
        "previous": max(0, offset - limit) if offset > 0 else None,
        "next": offset + limit if offset + limit < len(entries) else None,
        "rows": rows,
    }


# ---------------------------------------------------------------------------- trends, compare


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
