"""The run queue: claim, heartbeat, release, reap (query functions; ``session`` keyword-only).

Runs ARE the queue. A claim is one compare-and-set ``queued -> running`` that also takes a
lease (owner + expiry). The owner extends the lease by heartbeats; the reaper returns runs with
expired leases to ``queued`` (or marks them ``error`` after ``max_attempts``). Completion checks
the lease owner, so a worker that lost its lease cannot overwrite the next owner's result.

Concurrency control:
- PostgreSQL: candidate rows are selected ``FOR UPDATE SKIP LOCKED`` (workers never wait on each
  other's candidates). The per-endpoint budget is a cross-row rule that row locks cannot
  enforce, so a claim also takes transaction-scoped advisory try-locks on the run's endpoint
  URLs before counting running runs for them; a worker that cannot get the lock skips the run.
  Under READ COMMITTED the count, taken after the lock, sees every claim committed before.
- SQLite: the write session starts with ``BEGIN IMMEDIATE``, which holds the database's single
  writer lock for the whole claim, so the select-then-update cannot interleave.

Timestamps come from the worker's clock (UTC); workers on several hosts need synchronised clocks
(NTP), with lease lengths far above the expected skew.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from evalsvc.domain import RunInfo, RunStatus

from ._orm import LogUploadChunkRow, LogUploadRow, RunCandidateRow, RunRow, SweepRow, utcnow
from ._rows import run_info
from ._session import Database

QUEUED = "queued"
RUNNING = "running"
ERROR = "error"
#: Lease owners of in-process runs (``evalsvc compare``): ``cli:<host>:<pid>``. Such a run is never
#: handed to a worker when its lease expires; the process that ran it is gone, so it is an error.
IN_PROCESS_PREFIX = "cli:"

_CLAIM_BATCH = 20
_CLAIM_MAX_EXAMINED = 1000


def normalize_url(url: str) -> str:
    """Endpoint URLs compare without trailing slashes (``.../v1/`` is ``.../v1``)."""
    return url.rstrip("/")


def _run_urls(session: Session, run_ids: list[str]) -> dict[str, set[str]]:
    """Every endpoint URL (baseline and candidates) of each run."""
    urls: dict[str, set[str]] = {rid: set() for rid in run_ids}
    rows = session.execute(sa.select(RunRow.id, RunRow.baseline_url).where(RunRow.id.in_(run_ids)))
    for rid, url in rows:
        urls[rid].add(url)
    rows = session.execute(
        sa.select(RunCandidateRow.run_id, RunCandidateRow.url).where(
            RunCandidateRow.run_id.in_(run_ids)
        )
    )
    for rid, url in rows:
        urls[rid].add(url)
    return urls


def running_counts(session: Session, *, urls: Iterable[str] | None = None) -> Counter[str]:
    """How many running runs use each endpoint URL (a run counts once per distinct URL)."""
    ids = sa.select(RunRow.id).where(RunRow.status == RUNNING)
    per_run = sa.union(
        sa.select(RunRow.id.label("run_id"), RunRow.baseline_url.label("url")).where(
            RunRow.status == RUNNING
        ),
        sa.select(RunCandidateRow.run_id, RunCandidateRow.url).where(
            RunCandidateRow.run_id.in_(ids)
        ),
    ).subquery()
    stmt = sa.select(per_run.c.url, sa.func.count()).group_by(per_run.c.url)
    if urls is not None:
        stmt = stmt.where(per_run.c.url.in_(list(urls)))
    return Counter({url: int(n) for url, n in session.execute(stmt)})


def _try_lock_urls(session: Session, urls: set[str]) -> bool:
    """PostgreSQL: transaction-scoped advisory try-locks on each URL (sorted: fixed order)."""
    for url in sorted(urls):
        got = session.scalar(
            sa.select(sa.func.pg_try_advisory_xact_lock(sa.func.hashtextextended(url, 0)))
        )
        if not got:
            return False
    return True


def claim_next(
    session: Session,
    *,
    dialect: str,
    worker_id: str,
    lease_seconds: float,
    endpoint_max_runs: int,
    now: datetime,
) -> RunRow | None:
    """Claim the best queued run (priority desc, then oldest) within the endpoint budget.

    Returns the claimed run's row (already updated), or None when nothing is claimable now.
    """
    postgres = dialect == "postgresql"
    lease = _lease_values(worker_id=worker_id, lease_seconds=lease_seconds, now=now)
    if endpoint_max_runs <= 0:
        # No budget: one statement, UPDATE ... WHERE id = (SELECT ... SKIP LOCKED LIMIT 1).
        best = (
            sa.select(RunRow.id)
            .where(RunRow.status == QUEUED)
            .order_by(RunRow.priority.desc(), RunRow.created_at, RunRow.id)
            .limit(1)
        )
        if postgres:
            best = best.with_for_update(skip_locked=True)
        return session.scalars(
            sa.update(RunRow)
            .where(RunRow.id == best.scalar_subquery(), RunRow.status == QUEUED)
            .values(**lease)
            .returning(RunRow)
            .execution_options(synchronize_session=False)
        ).first()

    examined: list[str] = []
    counts: Counter[str] | None = None
    while len(examined) < _CLAIM_MAX_EXAMINED:
        stmt = (
            sa.select(RunRow.id)
            .where(RunRow.status == QUEUED)
            .order_by(RunRow.priority.desc(), RunRow.created_at, RunRow.id)
            .limit(_CLAIM_BATCH)
        )
        if examined:
            stmt = stmt.where(RunRow.id.not_in(examined))
        if postgres:
            stmt = stmt.with_for_update(skip_locked=True)
        batch = list(session.scalars(stmt))
        if not batch:
            return None
        examined.extend(batch)
        urls_by_run = _run_urls(session, batch)
        for run_id in batch:
            urls = urls_by_run[run_id]
            if postgres:
                if not _try_lock_urls(session, urls):
                    continue
                run_counts = running_counts(session, urls=urls)
            else:
                # SQLite: we hold the writer lock; one count for the whole claim suffices.
                counts = counts if counts is not None else running_counts(session)
                run_counts = counts
            if any(run_counts[u] >= endpoint_max_runs for u in urls):
                continue
            row = session.scalars(
                sa.update(RunRow)
                .where(RunRow.id == run_id, RunRow.status == QUEUED)
                .values(**lease)
                .returning(RunRow)
                .execution_options(synchronize_session=False)
            ).first()
            if row is not None:
                return row
    return None


def _lease_values(*, worker_id: str, lease_seconds: float, now: datetime) -> dict[str, object]:
    return {
        "status": RUNNING,
        "lease_owner": worker_id,
        "lease_expires_at": now + timedelta(seconds=lease_seconds),
        "attempts": RunRow.attempts + 1,
        "started_at": sa.func.coalesce(RunRow.started_at, now),
        "updated_at": now,
    }


def rowcount(result: sa.Result[object]) -> int:
    return int(getattr(result, "rowcount", 0))


def heartbeat(
    session: Session, *, run_id: str, worker_id: str, lease_seconds: float, now: datetime
) -> bool:
    """Extend the lease; False when the lease is lost (reaped, cancelled, finished)."""
    result = session.execute(
        sa.update(RunRow)
        .where(RunRow.id == run_id, RunRow.lease_owner == worker_id, RunRow.status == RUNNING)
        .values(lease_expires_at=now + timedelta(seconds=lease_seconds), updated_at=now)
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def release(session: Session, *, run_id: str, worker_id: str, now: datetime) -> bool:
    """Give a run back to the queue (graceful shutdown). The attempt is not counted: the
    worker left cleanly, so it is not evidence that the run kills workers."""
    result = session.execute(
        sa.update(RunRow)
        .where(RunRow.id == run_id, RunRow.lease_owner == worker_id, RunRow.status == RUNNING)
        .values(
            status=QUEUED,
            lease_owner=None,
            lease_expires_at=None,
            attempts=sa.case((RunRow.attempts > 0, RunRow.attempts - 1), else_=0),
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    return rowcount(result) == 1


def drop_uploads(session: Session, run_ids: Iterable[str]) -> None:
    """Drop the uploaded log files of runs that just ended without a worker gating them
    (``_uploads``): in the transaction that ends them, so their bytes are not kept."""
    ids = list(run_ids)
    if ids:
        session.execute(sa.delete(LogUploadChunkRow).where(LogUploadChunkRow.run_id.in_(ids)))
        session.execute(sa.delete(LogUploadRow).where(LogUploadRow.run_id.in_(ids)))


def reap_expired(session: Session, *, max_attempts: int, now: datetime) -> list[str]:
    """Expired leases: back to queued, or ``error`` once ``attempts >= max_attempts``.

    In-process runs (lease owner ``cli:…``) whose process stopped heartbeating become ``error``
    at once: only that process held their plan and progress. Each UPDATE re-checks its WHERE
    clause row by row after any lock wait, so concurrent reapers never both act on one run.
    """
    expired_any = sa.and_(
        RunRow.status == RUNNING,
        RunRow.lease_expires_at.is_not(None),
        RunRow.lease_expires_at < now,
    )
    in_process = RunRow.lease_owner.startswith(IN_PROCESS_PREFIX, autoescape=True)
    expired = sa.and_(expired_any, sa.not_(in_process))

    def to_error(where: sa.ColumnElement[bool], message: str) -> list[str]:
        result = session.execute(
            sa.update(RunRow)
            .where(where)
            .values(
                status=ERROR,
                verdict=ERROR,
                error=sa.literal(message),
                lease_expires_at=None,
                finished_at=now,
                updated_at=now,
            )
            .returning(RunRow.id)
            .execution_options(synchronize_session=False)
        )
        return list(result.scalars())

    ids = to_error(
        sa.and_(expired_any, in_process),
        "the evalsvc compare process running this run stopped without finishing it (killed?); "
        "its samples so far are kept",
    )
    ids += to_error(
        sa.and_(expired, RunRow.attempts >= max_attempts),
        f"worker lost: lease expired on each of {max_attempts} attempts; "
        "not retried again (max_attempts)",
    )
    drop_uploads(session, ids)  # ended: a log upload's files will never be gated
    requeued = session.execute(
        sa.update(RunRow)
        .where(expired, RunRow.attempts < max_attempts)
        .values(status=QUEUED, lease_owner=None, lease_expires_at=None, updated_at=now)
        .returning(RunRow.id)
        .execution_options(synchronize_session=False)
    )
    ids.extend(requeued.scalars())
    return ids


class QueueStore:
    """Runs as a queue: claims under leases, heartbeats, release, the reaper, the counts."""

    def __init__(self, db: Database, *, endpoint_max_runs: int) -> None:
        self._db = db
        self.endpoint_max_runs = endpoint_max_runs

    def claim_run(self, *, worker_id: str, lease_seconds: float) -> RunInfo | None:
        """Claim the next queued run (highest priority, then oldest) within the per-endpoint
        budget; None when nothing is claimable. See ``_queue`` for the locking."""
        now = utcnow()
        with self._db.session() as session:
            row = claim_next(
                session,
                dialect=self._db.dialect,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                endpoint_max_runs=self.endpoint_max_runs,
                now=now,
            )
            return run_info(row) if row is not None else None

    def heartbeat(self, run_id: str, *, worker_id: str, lease_seconds: float) -> bool:
        """Extend the lease. False: the lease is lost or the run cancelled; stop working on it."""
        with self._db.session() as session:
            return heartbeat(
                session,
                run_id=run_id,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                now=utcnow(),
            )

    def release_run(self, run_id: str, *, worker_id: str) -> None:
        """Put a run this worker holds back in the queue (graceful shutdown)."""
        with self._db.session() as session:
            release(session, run_id=run_id, worker_id=worker_id, now=utcnow())

    def reap_expired(self, *, max_attempts: int) -> list[str]:
        """Return runs with expired leases to the queue (or fail them after max_attempts)."""
        with self._db.session() as session:
            return reap_expired(session, max_attempts=max_attempts, now=utcnow())

    def count_runs_by_status(self) -> dict[str, int]:
        """Runs per status (every status present, 0 when none): one GROUP BY, for metrics."""
        with self._db.session(write=False) as session:
            rows = session.execute(
                sa.select(RunRow.status, sa.func.count()).group_by(RunRow.status)
            ).all()
        counts = {s.value: 0 for s in RunStatus}
        counts.update({str(status): int(n) for status, n in rows})
        return counts

    def busy_workers(self) -> int:
        """Queue workers holding an unexpired lease on a running run or sweep (distinct
        owners; in-process ``compare`` runs excluded): the ``evalsvc_workers_live`` count of
        ``/metrics``. An idle worker holds no lease, but it claims a queued run within its poll
        interval, so a run queued for longer than that with no busy worker has no worker alive
        to take it."""
        now = utcnow()
        owners: set[str | None] = set()
        with self._db.session(write=False) as session:
            for table in (RunRow, SweepRow):
                owners.update(
                    session.scalars(
                        sa.select(table.lease_owner).distinct().where(
                            table.status == RunStatus.running.value,
                            table.lease_owner.is_not(None),
                            table.lease_expires_at > now,
                        )
                    ).all()
                )
        return sum(1 for o in owners if o and not o.startswith(IN_PROCESS_PREFIX))

    def running_counts(self) -> dict[str, int]:
        """Running runs per endpoint URL (what the per-endpoint budget looks at)."""
        with self._db.session(write=False) as session:
            return dict(running_counts(session))
