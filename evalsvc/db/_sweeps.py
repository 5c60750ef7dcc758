"""The sweep aggregate: stored sweeps (queued by REST or a schedule), their queue side (claim,
heartbeat, release, reap, finish) and the runs each configuration made.

Contract: a sweep is a plain dict (``id``, ``status``, ``spec`` — the sweep spec as JSON —,
``report``, ``progress``, ``recommendation``, ``error``, ``runs`` [{``run_id``, ``config``}],
timestamps, ``attempts``, ``lease_owner``, ``submitted_by``, ``schedule_id``, ``fire_time``);
ORM rows never leave. The queue follows ``_queue``'s rules for runs, without the per-endpoint
budget (a sweep measures its configurations one at a time by itself): a claim is one
compare-and-set ``queued -> running`` under a lease (``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
the writer lock on SQLite); completion and heartbeats check the owner; the reaper returns
expired leases to the queue, or marks the sweep ``error`` after ``max_attempts``. Statuses are
the run statuses (``queued``, ``running``, ``completed``, ``error``, ``cancelled``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from evalsvc.domain import RunStatus

from . import _queue
from ._orm import SweepRow, SweepRunRow, utcnow
from ._rows import TERMINAL, new_id
from ._session import Database

QUEUED, RUNNING = RunStatus.queued.value, RunStatus.running.value

_FIELDS = (
    "id", "status", "spec", "report", "progress", "recommendation", "error", "attempts",
    "lease_owner", "lease_expires_at", "submitted_by", "schedule_id", "fire_time", "created_at",
    "started_at", "finished_at", "updated_at",
)


def _sweep_dict(row: SweepRow, runs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    out = {f: getattr(row, f) for f in _FIELDS}
    out["spec"] = dict(row.spec or {})
    out["progress"] = dict(row.progress or {})
    out["runs"] = runs or []
    return out


def add_sweep_row(
    session: Session,
    spec: dict[str, Any],
    *,
    now: datetime,
    submitted_by: str | None = None,
    schedule_id: str | None = None,
    fire_time: datetime | None = None,
) -> SweepRow:
    """Add a queued sweep in ``session`` (REST submission, a schedule's fire)."""
    row = SweepRow(
        id=new_id(), status=QUEUED, spec=spec, report=None, progress={}, attempts=0,
        submitted_by=submitted_by, schedule_id=schedule_id, fire_time=fire_time,
        created_at=now, updated_at=now,
    )
    session.add(row)
    session.flush()
    return row


def sweep_fire_exists(session: Session, *, schedule_id: str, fire_time: datetime) -> bool:
    stmt = sa.select(SweepRow.id).where(
        SweepRow.schedule_id == schedule_id, SweepRow.fire_time == fire_time
    )
    return session.scalar(stmt) is not None


class SweepStore:
    """Stored sweeps and their queue."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # ------------------------------------------------------------------ records

    def create_sweep(self, spec: dict[str, Any], *, submitted_by: str | None = None) -> dict[str, Any]:
        with self._db.session() as session:
            return _sweep_dict(add_sweep_row(session, spec, now=utcnow(), submitted_by=submitted_by))

    def get_sweep(self, sweep_id: str) -> dict[str, Any] | None:
        """The sweep by id, or by a unique id prefix (at least 6 characters)."""
        with self._db.session(write=False) as session:
            row = session.get(SweepRow, sweep_id)
            if row is None and len(sweep_id) >= 6:
                found = list(session.scalars(
                    sa.select(SweepRow).where(SweepRow.id.startswith(sweep_id, autoescape=True))
                    .limit(2)
                ))
                row = found[0] if len(found) == 1 else None
            if row is None:
                return None
            links = session.execute(
                sa.select(SweepRunRow.run_id, SweepRunRow.config)
                .where(SweepRunRow.sweep_id == row.id)
                .order_by(SweepRunRow.created_at)
            )
            return _sweep_dict(row, [{"run_id": r, "config": c} for r, c in links])

    def list_sweeps(self, *, limit: int = 50, status: str | None = None) -> list[dict[str, Any]]:
        """Sweeps, newest first (without their run links)."""
        stmt = sa.select(SweepRow).order_by(SweepRow.created_at.desc(), SweepRow.id).limit(limit)
        if status is not None:
            stmt = stmt.where(SweepRow.status == status)
        with self._db.session(write=False) as session:
            return [_sweep_dict(row) for row in session.scalars(stmt)]

    def link_run(self, sweep_id: str, run_id: str, *, config: str) -> None:
        """Record that configuration ``config`` of the sweep made run ``run_id``."""
        with self._db.session() as session:
            session.add(SweepRunRow(sweep_id=sweep_id, run_id=run_id, config=config,
                                    created_at=utcnow()))

    def update_progress(self, sweep_id: str, progress: dict[str, Any], *, worker_id: str) -> bool:
        """The sweep's progress (configurations done so far); only under the worker's lease."""
        with self._db.session() as session:
            result = session.execute(
                sa.update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.lease_owner == worker_id,
                       SweepRow.status == RUNNING)
                .values(progress=progress, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def finish_sweep(
        self,
        sweep_id: str,
        *,
        status: RunStatus,
        worker_id: str,
        report: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> bool:
        """Record the end of a sweep while ``worker_id`` holds its lease; False otherwise."""
        now = utcnow()
        rec = ((report or {}).get("recommendation") or {}).get("config")
        with self._db.session() as session:
            result = session.execute(
                sa.update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.lease_owner == worker_id,
                       SweepRow.status == RUNNING)
                .values(status=RunStatus(status).value, report=report, error=error,
                        recommendation=rec, finished_at=now, updated_at=now,
                        lease_expires_at=None)
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def cancel_sweep(self, sweep_id: str) -> bool:
        """Cancel a queued or running sweep (its worker stops at its next heartbeat, between
        two configurations)."""
        now = utcnow()
        with self._db.session() as session:
            result = session.execute(
                sa.update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.status.not_in(TERMINAL))
                .values(status=RunStatus.cancelled.value, finished_at=now, updated_at=now,
                        lease_expires_at=None)
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    # ------------------------------------------------------------------ the queue

    def claim_sweep(self, *, worker_id: str, lease_seconds: float) -> dict[str, Any] | None:
        """Claim the oldest queued sweep under a lease; None when there is none."""
        now = utcnow()
        best = sa.select(SweepRow.id).where(SweepRow.status == QUEUED).order_by(
            SweepRow.created_at, SweepRow.id
        ).limit(1)
        if self._db.dialect == "postgresql":
            best = best.with_for_update(skip_locked=True)
        with self._db.session() as session:
            row = session.scalars(
                sa.update(SweepRow)
                .where(SweepRow.id == best.scalar_subquery(), SweepRow.status == QUEUED)
                .values(status=RUNNING, lease_owner=worker_id,
                        lease_expires_at=now + timedelta(seconds=lease_seconds),
                        attempts=SweepRow.attempts + 1,
                        started_at=sa.func.coalesce(SweepRow.started_at, now), updated_at=now)
                .returning(SweepRow)
                .execution_options(synchronize_session=False)
            ).first()
            return _sweep_dict(row) if row is not None else None

    def heartbeat(self, sweep_id: str, *, worker_id: str, lease_seconds: float) -> bool:
        """Extend the lease; False when it is lost (reaped, cancelled, finished)."""
        now = utcnow()
        with self._db.session() as session:
            result = session.execute(
                sa.update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.lease_owner == worker_id,
                       SweepRow.status == RUNNING)
                .values(lease_expires_at=now + timedelta(seconds=lease_seconds), updated_at=now)
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def release_sweep(self, sweep_id: str, *, worker_id: str) -> bool:
        """Give a sweep back to the queue (worker shutdown); the attempt is not counted. Its
        progress is kept: the next attempt resumes after the configurations already finished
        (``services.sweeps.execute_stored_sweep``)."""
        with self._db.session() as session:
            result = session.execute(
                sa.update(SweepRow)
                .where(SweepRow.id == sweep_id, SweepRow.lease_owner == worker_id,
                       SweepRow.status == RUNNING)
                .values(status=QUEUED, lease_owner=None, lease_expires_at=None,
                        attempts=sa.case((SweepRow.attempts > 0, SweepRow.attempts - 1), else_=0),
                        updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def reap_expired(self, *, max_attempts: int) -> list[str]:
        """Expired leases: back to queued, or ``error`` once ``attempts >= max_attempts``."""
        now = utcnow()
        expired = sa.and_(SweepRow.status == RUNNING, SweepRow.lease_expires_at.is_not(None),
                          SweepRow.lease_expires_at < now)
        with self._db.session() as session:
            failed = session.execute(
                sa.update(SweepRow)
                .where(expired, SweepRow.attempts >= max_attempts)
                .values(status=RunStatus.error.value, lease_expires_at=None, finished_at=now,
                        updated_at=now,
                        error=f"worker lost: lease expired on each of {max_attempts} attempts")
                .returning(SweepRow.id)
                .execution_options(synchronize_session=False)
            )
            ids = list(failed.scalars())
            requeued = session.execute(
                sa.update(SweepRow)
                .where(expired, SweepRow.attempts < max_attempts)
                .values(status=QUEUED, lease_owner=None, lease_expires_at=None, updated_at=now)
                .returning(SweepRow.id)
                .execution_options(synchronize_session=False)
            )
            return ids + list(requeued.scalars())
