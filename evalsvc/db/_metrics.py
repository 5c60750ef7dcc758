"""The store's figures for ``/metrics``: one read transaction, a handful of aggregate queries.

Contract: ``metrics_snapshot(store)`` returns a ``MetricsSnapshot`` of plain values (no ORM
rows), read in one transaction at the time of the call, so that every API replica reports the
whole fleet (every worker, scheduler and in-process ``compare`` sharing the database). Database
errors surface as ``StoreError`` like every other store call. The queries are bounded:
- the latest gate per (baseline URL, candidate URL, suite): one window-function query over
  ``gate_results`` (a few rows per run), then the payloads of those rows only;
- duration and queue-wait histograms: one aggregate over ``runs`` (cumulative buckets in SQL);
- queue depth, oldest queued run, live workers: aggregates over ``runs`` (status-indexed);
- samples and endpoint errors by kind: over the samples of runs *created* in the last
  ``ERROR_WINDOW`` (the samples' ``run_id`` index), not the whole history;
- samples per second: samples written in the last ``RATE_WINDOW`` by runs that are running or
  finished within it;
- open alerts per (kind, severity): one aggregate over ``alerts`` (status-indexed).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from sqlalchemy.orm import aliased

from evalsvc.domain import RunStatus

from ._orm import AlertRow, EndpointSnapshotRow, GateResultRow, RunRow, SampleRow, utcnow
from ._queue import IN_PROCESS_PREFIX

if TYPE_CHECKING:
    from ._store import Store

#: Upper bounds (seconds) of the run-duration histogram: a smoke set takes minutes on the local
#: CPU endpoints, the release set about half an hour, long-context sets hours.
DURATION_BUCKETS = (30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0)
#: Upper bounds (seconds) of the queue-wait histogram (time from submission to first claim).
WAIT_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 14400.0)
ERROR_WINDOW = timedelta(hours=24)
RATE_WINDOW = timedelta(seconds=60)

#: Sample error strings start with what the endpoint client saw (``evalsvc.endpoints``):
#: ``HTTP <status>: ...``, ``timeout: ...``, ``<httpx error class>: ...``, ``malformed ...``,
#: ``stream error: ...``. Ordered: the first matching pattern names the kind.
ERROR_KINDS: tuple[tuple[str, str], ...] = (
    ("timeout", "timeout%"),
    ("http_429", "HTTP 429%"),
    ("http_5xx", "HTTP 5%"),
    ("http_4xx", "HTTP 4%"),
    ("malformed", "malformed%"),
    ("stream", "stream error%"),
    ("connection", "%Error:%"),
)
OK_KIND = "ok"
OTHER_KIND = "other"


@dataclass(frozen=True)
class GateFigure:
    """The latest gate of one candidate on one suite against one baseline."""

    baseline: str
    candidate: str
    suite: str
    metric: str
    verdict: str
    gated: bool
    """False for informational suites (speed): their verdict never decides the run."""
    delta: float | None
    ci_low: float | None
    ci_high: float | None
    margin: float | None
    n: int | None
    timestamp: float
    run_id: str


@dataclass(frozen=True)
class Histogram:
    """Cumulative bucket counts (``le`` upper bound → count), total count and sum."""

    buckets: tuple[tuple[float, int], ...]
    count: int
    sum: float


@dataclass(frozen=True)
class MetricsSnapshot:
    runs_by_status: dict[str, int]
    gates: list[GateFigure]
    run_duration: Histogram
    queue_wait: Histogram
    queue_depth: int
    oldest_queued_seconds: float
    """Age of the oldest queued run (0 when the queue is empty)."""
    live_workers: dict[str, int]
    """``worker`` (queue workers) and ``in_process`` (``evalsvc compare``) lease holders."""
    endpoint_samples: dict[tuple[str, str], int] = field(default_factory=dict)
    """(endpoint URL, kind) → samples in runs of the last ``ERROR_WINDOW``; kind ``ok`` or an
    error kind of ``ERROR_KINDS`` (or ``other``)."""
    samples_last_window: int = 0
    alerts_open: dict[tuple[str, str], int] = field(default_factory=dict)
    """(alert kind, severity) → open (unacknowledged) alerts (``evalsvc.services.alerts``)."""


def _seconds(dialect: str, later: Any, earlier: Any) -> sa.ColumnElement[float]:
    if dialect == "sqlite":
        # Stored as naive UTC text; julianday() is in days.
        return (sa.func.julianday(later) - sa.func.julianday(earlier)) * 86400.0
    return sa.cast(sa.extract("epoch", later - earlier), sa.Float)


def _histogram(row: Any, bounds: tuple[float, ...]) -> Histogram:
    count = int(row[0] or 0)
    total = float(row[1] or 0.0)
    return Histogram(
        buckets=tuple((b, int(row[2 + i] or 0)) for i, b in enumerate(bounds)),
        count=count,
        sum=total,
    )


def _histogram_columns(value: sa.ColumnElement[float], bounds: tuple[float, ...]) -> list[Any]:
    return [
        sa.func.count(value),
        sa.func.sum(value),
        *(sa.func.sum(sa.case((value <= b, 1), else_=0)) for b in bounds),
    ]


def _float(value: Any) -> float | None:
    try:
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def metrics_snapshot(store: Store, *, now: datetime | None = None) -> MetricsSnapshot:
    now = now or utcnow()
    db = store._db  # same package: the store's engine and session factory
    dialect = db.dialect
    with db.session(write=False) as session:
        counts = {s.value: 0 for s in RunStatus}
        counts.update(
            {
                str(s): int(n)
                for s, n in session.execute(
                    sa.select(RunRow.status, sa.func.count()).group_by(RunRow.status)
                )
            }
        )

        # --- latest gate per (baseline URL, candidate URL, suite)
        base = aliased(EndpointSnapshotRow)
        cand = aliased(EndpointSnapshotRow)
        ranked = (
            sa.select(
                GateResultRow.id.label("gate_id"),
                base.url.label("baseline"),
                cand.url.label("candidate"),
                sa.func.row_number()
                .over(
                    partition_by=(base.url, cand.url, GateResultRow.suite),
                    order_by=(GateResultRow.created_at.desc(), GateResultRow.id.desc()),
                )
                .label("rank"),
            )
            .join(base, sa.and_(base.run_id == GateResultRow.run_id, base.role == "baseline"))
            .join(
                cand,
                sa.and_(cand.run_id == GateResultRow.run_id, cand.role == GateResultRow.candidate),
            )
            .subquery()
        )
        latest = session.execute(
            sa.select(ranked.c.baseline, ranked.c.candidate, GateResultRow)
            .join(GateResultRow, GateResultRow.id == ranked.c.gate_id)
            .where(ranked.c.rank == 1)
        ).all()
        gates = []
        for baseline_url, candidate_url, g in latest:
            payload = g.payload or {}
            ci = payload.get("ci") or [None, None]
            n = payload.get("n")
            gates.append(
                GateFigure(
                    baseline=str(baseline_url),
                    candidate=str(candidate_url),
                    suite=g.suite,
                    metric=g.metric or "",
                    verdict=g.verdict or "error",
                    gated=bool(payload.get("gated", True)),
                    delta=g.delta,
                    ci_low=_float(ci[0]) if len(ci) > 0 else None,
                    ci_high=_float(ci[1]) if len(ci) > 1 else None,
                    margin=_float(payload.get("margin")),
                    n=int(n) if isinstance(n, int | float) else None,
                    timestamp=g.created_at.timestamp(),
                    run_id=g.run_id,
                )
            )

        # --- run duration (completed runs) and queue wait (every run that started)
        duration = _seconds(dialect, RunRow.finished_at, RunRow.started_at)
        row = session.execute(
            sa.select(*_histogram_columns(duration, DURATION_BUCKETS)).where(
                RunRow.status == RunStatus.completed.value,
                RunRow.started_at.is_not(None),
                RunRow.finished_at.is_not(None),
            )
        ).one()
        run_duration = _histogram(row, DURATION_BUCKETS)
        wait = _seconds(dialect, RunRow.started_at, RunRow.created_at)
        row = session.execute(
            sa.select(*_histogram_columns(wait, WAIT_BUCKETS)).where(RunRow.started_at.is_not(None))
        ).one()
        queue_wait = _histogram(row, WAIT_BUCKETS)

        # --- queue depth, oldest queued run, live lease holders
        depth, oldest = session.execute(
            sa.select(sa.func.count(), sa.func.min(RunRow.created_at)).where(
                RunRow.status == RunStatus.queued.value
            )
        ).one()
        oldest_dt = _aware(oldest)
        in_process = RunRow.lease_owner.startswith(IN_PROCESS_PREFIX, autoescape=True)
        holder = sa.case((in_process, "in_process"), else_="worker")
        live: dict[str, int] = dict(
            session.execute(
                sa.select(holder, sa.func.count(sa.distinct(RunRow.lease_owner)))
                .where(
                    RunRow.status == RunStatus.running.value,
                    RunRow.lease_owner.is_not(None),
                    RunRow.lease_expires_at > now,
                )
                .group_by(holder)
            ).all()
        )

        # --- samples and errors by endpoint and kind, over the recent runs
        recent = sa.select(RunRow.id).where(RunRow.created_at >= now - ERROR_WINDOW)
        kind = sa.case(
            (SampleRow.error.is_(None), OK_KIND),
            *((SampleRow.error.like(pattern), name) for name, pattern in ERROR_KINDS),
            else_=OTHER_KIND,
        )
        snap = aliased(EndpointSnapshotRow)
        per_kind = session.execute(
            sa.select(snap.url, kind, sa.func.count())
            .select_from(SampleRow)
            .join(snap, sa.and_(snap.run_id == SampleRow.run_id, snap.role == SampleRow.endpoint))
            .where(SampleRow.run_id.in_(recent))
            .group_by(snap.url, kind)
        ).all()

        # --- samples per second over the last RATE_WINDOW
        active = sa.select(RunRow.id).where(
            sa.or_(
                RunRow.status == RunStatus.running.value,
                RunRow.finished_at >= now - RATE_WINDOW,
            )
        )
        written = session.scalar(
            sa.select(sa.func.count()).where(
                SampleRow.run_id.in_(active), SampleRow.created_at >= now - RATE_WINDOW
            )
        )

        # --- open alerts per (kind, severity): the status index
        alerts_open = session.execute(
            sa.select(AlertRow.kind, AlertRow.severity, sa.func.count())
            .where(AlertRow.status == "open")
            .group_by(AlertRow.kind, AlertRow.severity)
        ).all()
    return MetricsSnapshot(
        runs_by_status=counts,
        gates=gates,
        run_duration=run_duration,
        queue_wait=queue_wait,
        queue_depth=int(depth or 0),
        oldest_queued_seconds=max(0.0, (now - oldest_dt).total_seconds()) if oldest_dt else 0.0,
        live_workers={"worker": int(live.get("worker", 0)), "in_process": int(live.get("in_process", 0))},
        endpoint_samples={(str(url), str(k)): int(n) for url, k, n in per_kind},
        samples_last_window=int(written or 0),
        alerts_open={(str(k), str(s)): int(n) for k, s, n in alerts_open},
    )


def _aware(value: datetime | None) -> datetime | None:
    # Aggregates (min) bypass the UTCDateTime decorator on some backends: normalise here.
    if value is None:
        return None
    if isinstance(value, str):  # SQLite returns aggregate datetimes as text
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
