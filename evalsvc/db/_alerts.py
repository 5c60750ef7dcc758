"""Alerts (``alerts``, migration 0008): raised once, listed, acknowledged, delivered once.

Contract:
- ``raise_alert`` inserts with ``ON CONFLICT (dedupe_key) DO NOTHING`` and returns the stored
  alert only to the caller whose insert won: two workers that finish runs at once and see the
  same event store one alert, and exactly one of them is told it raised it.
- ``claim_delivery`` is one compare-and-set (``pending`` → ``sending``, with an owner): exactly
  one process sends an alert's webhooks; ``finish_delivery`` records the outcome (owner checked).
  An alert left ``sending`` by a process that died is not sent again (at most once).
- Alerts leave this module as plain dicts (``ALERT_FIELDS``), never as ORM rows.
- ``finished_runs_of`` is the detection's read of an endpoint's recent outcomes (error streaks).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from evalsvc.domain import RunStatus

from ._orm import AlertRow, RunCandidateRow, RunRow, utcnow
from ._queue import normalize_url, rowcount
from ._rows import dialect_insert, new_id
from ._session import Database

#: What an alert dict holds (``GET /api/v1/alerts`` returns these fields).
ALERT_FIELDS = (
    "id", "kind", "severity", "status", "baseline_url", "candidate_url", "suite", "run_id",
    "previous_run_id", "message", "details", "created_at", "acknowledged_at", "acknowledged_by",
    "delivery", "delivered_at", "deliveries",
)
ALERT_STATUSES = ("open", "acknowledged")


def _alert(row: AlertRow) -> dict[str, Any]:
    out = {name: getattr(row, name) for name in ALERT_FIELDS}
    out["details"] = dict(row.details or {})
    out["deliveries"] = list(row.deliveries or [])
    return out


class AlertStore:
    """The ``alerts`` table and the reads that alert detection needs."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def raise_alert(
        self,
        *,
        dedupe_key: str,
        kind: str,
        severity: str,
        message: str,
        details: dict[str, Any],
        delivery: str,
        baseline_url: str | None = None,
        candidate_url: str | None = None,
        suite: str | None = None,
        run_id: str | None = None,
        previous_run_id: str | None = None,
    ) -> dict[str, Any] | None:
        """Store the alert unless one with ``dedupe_key`` exists; the stored alert, or ``None``
        when another caller (now or earlier) raised it."""
        alert_id = new_id()
        values: dict[str, Any] = {
            "id": alert_id, "dedupe_key": dedupe_key, "kind": kind, "severity": severity,
            "status": "open", "baseline_url": baseline_url, "candidate_url": candidate_url,
            "suite": suite, "run_id": run_id, "previous_run_id": previous_run_id,
            "message": message, "details": details, "created_at": utcnow(),
            "delivery": delivery, "deliveries": [],
        }
        stmt = dialect_insert(self._db, AlertRow.__table__).values(values)
        # RETURNING, not rowcount: psycopg reports no row count for ON CONFLICT DO NOTHING.
        stmt = stmt.on_conflict_do_nothing(index_elements=["dedupe_key"]).returning(
            AlertRow.__table__.c.id)
        with self._db.session() as session:
            if session.execute(stmt).scalar() is None:
                return None
            row = session.get(AlertRow, alert_id)
            return _alert(row) if row is not None else None

    def get_alert(self, alert_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.get(AlertRow, alert_id)
            return _alert(row) if row is not None else None

    def list_alerts(
        self, *, status: str | None = None, kind: str | None = None,
        run_ids: Sequence[str] | None = None, limit: int = 100,
    ) -> list[dict[str, Any]]:
        """Newest first, at most ``limit``; filtered by status, kind and run when given."""
        stmt = sa.select(AlertRow)
        if status is not None:
            stmt = stmt.where(AlertRow.status == status)
        if kind is not None:
            stmt = stmt.where(AlertRow.kind == kind)
        if run_ids is not None:
            stmt = stmt.where(AlertRow.run_id.in_(list(run_ids)))
        stmt = stmt.order_by(AlertRow.created_at.desc(), AlertRow.id.desc()).limit(limit)
        with self._db.session(write=False) as session:
            return [_alert(r) for r in session.scalars(stmt)]

    def acknowledge(self, alert_id: str, *, by: str | None) -> bool:
        """Mark an open alert acknowledged; False when it is not open (or does not exist)."""
        stmt = (
            sa.update(AlertRow)
            .where(AlertRow.id == alert_id, AlertRow.status == "open")
            .values(status="acknowledged", acknowledged_at=utcnow(), acknowledged_by=by)
        )
        with self._db.session() as session:
            return rowcount(session.execute(stmt)) == 1

    def open_counts(self) -> dict[tuple[str, str], int]:
        """Open alerts per ``(kind, severity)`` (``/metrics``)."""
        stmt = (
            sa.select(AlertRow.kind, AlertRow.severity, sa.func.count())
            .where(AlertRow.status == "open")
            .group_by(AlertRow.kind, AlertRow.severity)
        )
        with self._db.session(write=False) as session:
            return {(k, s): int(n) for k, s, n in session.execute(stmt)}

    def open_by_run(self, run_ids: Sequence[str]) -> dict[str, int]:
        """Open alerts per run among ``run_ids`` (the runs list's badge)."""
        if not run_ids:
            return {}
        stmt = (
            sa.select(AlertRow.run_id, sa.func.count())
            .where(AlertRow.status == "open", AlertRow.run_id.in_(list(run_ids)))
            .group_by(AlertRow.run_id)
        )
        with self._db.session(write=False) as session:
            return {str(r): int(n) for r, n in session.execute(stmt)}

    # ---- delivery ----------------------------------------------------------------------

    def pending_ids(self, *, limit: int = 50) -> list[str]:
        """Alerts raised but not yet claimed for delivery, oldest first."""
        stmt = (
            sa.select(AlertRow.id).where(AlertRow.delivery == "pending")
            .order_by(AlertRow.created_at, AlertRow.id).limit(limit)
        )
        with self._db.session(write=False) as session:
            return [str(x) for x in session.scalars(stmt)]

    def claim_delivery(self, alert_id: str, *, owner: str) -> bool:
        """``pending`` → ``sending`` under ``owner``: True for the one caller that wins."""
        stmt = (
            sa.update(AlertRow)
            .where(AlertRow.id == alert_id, AlertRow.delivery == "pending")
            .values(delivery="sending", delivery_owner=owner, delivery_started_at=utcnow())
        )
        with self._db.session() as session:
            return rowcount(session.execute(stmt)) == 1

    def finish_delivery(
        self, alert_id: str, *, owner: str, delivered: bool, deliveries: list[dict[str, Any]]
    ) -> bool:
        """Record the webhooks' outcome of a delivery ``owner`` claimed."""
        stmt = (
            sa.update(AlertRow)
            .where(AlertRow.id == alert_id, AlertRow.delivery == "sending",
                   AlertRow.delivery_owner == owner)
            .values(delivery="delivered" if delivered else "failed",
                    delivered_at=utcnow() if delivered else None, deliveries=deliveries)
        )
        with self._db.session() as session:
            return rowcount(session.execute(stmt)) == 1

    # ---- what detection reads -------------------------------------------------------------

    def finished_runs_of(
        self, url: str, *, until: datetime, limit: int
    ) -> list[tuple[str, str]]:
        """``[(run_id, verdict)]`` of the latest finished runs (completed or error, not
        cancelled) with ``url`` as baseline or candidate, finished at or before ``until``,
        newest first; a run that ended without a verdict reads ``error``."""
        url = normalize_url(url)
        as_candidate = sa.select(RunCandidateRow.run_id).where(
            sa.func.rtrim(RunCandidateRow.url, "/") == url
        )
        stmt = (
            sa.select(RunRow.id, RunRow.verdict)
            .where(
                RunRow.status.in_([RunStatus.completed.value, RunStatus.error.value]),
                RunRow.finished_at.is_not(None),
                RunRow.finished_at <= until,
                sa.or_(RunRow.baseline_url == url, RunRow.id.in_(as_candidate)),
            )
            .order_by(RunRow.finished_at.desc(), RunRow.id.desc())
            .limit(limit)
        )
        with self._db.session(write=False) as session:
            return [(str(r), str(v or "error")) for r, v in session.execute(stmt)]
