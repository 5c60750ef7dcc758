"""The SQLAlchemy store: every read and write of evalsvc's persistent state.

Contract: methods take and return domain objects (``evalsvc.domain``) or plain dicts; ORM rows
never leave this package. Each method is one transaction (``Database.session``), and raises only
``evalsvc.db`` errors (``DatabaseUnavailable`` is the transient one worth retrying). Methods do
not retry by themselves; ``retry_transient`` and ``SampleWriter`` do, where a caller wants it.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import ValidationError
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from evalsvc.domain import (
    EndpointRef,
    Provenance,
    RunInfo,
    RunSpec,
    RunStatus,
    Sample,
    stored_spec,
)
from evalsvc.settings import Settings

from . import _migrate, _queue, _schedules
from ._dashboard_queries import DashboardQueries
from ._errors import (
    Conflict,
    DatabaseNotAtHead,
    DatabaseUnavailable,
    DatabaseWriteRefused,
    StoreError,
)
from ._orm import (
    ApiTokenRow,
    EndpointRow,
    EndpointSnapshotRow,
    GateResultRow,
    ReportRow,
    RunCandidateRow,
    RunRow,
    SampleRow,
    ScheduleRow,
    SuiteSnapshotRow,
    utcnow,
)
from ._session import Database, redact_url

_TERMINAL = (RunStatus.completed.value, RunStatus.error.value, RunStatus.cancelled.value)
R = TypeVar("R")
V = TypeVar("V")

API_SCOPES = frozenset({"read", "submit", "admin"})
_SAMPLE_KEY = ("run_id", "endpoint", "suite", "item_id", "repeat")
# Rows per INSERT statement: PostgreSQL allows 65535 bind parameters, SQLite 32766; a sample
# has 14 columns.
_SAMPLE_CHUNK = 500


log = logging.getLogger(__name__)
#: ``last_used_at`` of a token is recorded at most this often (one write per token per minute,
#: not one per request).
TOKEN_USE_RESOLUTION = timedelta(minutes=1)


def _new_id() -> str:
    return uuid.uuid4().hex


def _hash_token(token: str) -> str:
    # Tokens are 256-bit random strings, so an unsalted fast hash is not brute-forceable; it
    # lets verification be one indexed lookup.
    return hashlib.sha256(token.encode()).hexdigest()


def _run_info(row: RunRow) -> RunInfo:
    return RunInfo(
        id=row.id,
        status=RunStatus(row.status),
        spec=stored_spec(row.spec),  # a run stored before a bound is still readable
        verdict=row.verdict,
        error=row.error,
        created_at=row.created_at,
        started_at=row.started_at,
        finished_at=row.finished_at,
        attempts=row.attempts,
        lease_owner=row.lease_owner,
        lease_expires_at=row.lease_expires_at,
        progress=dict(row.progress or {}),
        schedule_id=row.schedule_id,
        submitted_by=row.submitted_by,
    )


def _sample(row: SampleRow) -> Sample:
    return Sample(
        suite=row.suite,
        item_id=row.item_id,
        endpoint=row.endpoint,
        repeat=row.repeat,
        output=row.output,
        score=row.score,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        latency_s=row.latency_s,
        ttft_s=row.ttft_s,
        error=row.error,
        data=dict(row.data or {}),
    )


def _endpoint_ref(row: EndpointRow) -> EndpointRef:
    return EndpointRef(url=row.url, model=row.model, name=row.name, api_key_env=row.api_key_env)


def _one_line_error(err: Exception) -> str:
    """A short, storable description of ``err`` (no NUL: PostgreSQL text cannot hold one)."""
    if isinstance(err, ValidationError):
        detail = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()[:5]
        )
    else:
        detail = str(err)
    text = f"{type(err).__name__}: {detail}".replace("\n", " ").replace("\x00", "\\x00")
    return text[:2000]


def _schedule_dict(row: ScheduleRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "cron": row.cron,
        "template": dict(row.template),
        "enabled": row.enabled,
        "start_at": row.start_at,
        "last_fire_time": row.last_fire_time,
        "next_fire_time": row.next_fire_time,
        "created_at": row.created_at,
        "last_error": row.last_error,
        "last_error_at": row.last_error_at,
    }


def _token_dict(row: ApiTokenRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "scopes": list(row.scopes),
        "created_at": row.created_at,
        "last_used_at": row.last_used_at,
        "revoked_at": row.revoked_at,
    }


class Store:
    """Persistent state of evalsvc on SQLite (embedded) or PostgreSQL (service)."""

    def __init__(self, url: str, *, endpoint_max_runs: int | None = None) -> None:
        self._db = Database(url)
        self.url = url
        self.endpoint_max_runs = (
            Settings().endpoint_max_runs if endpoint_max_runs is None else endpoint_max_runs
        )

    @classmethod
    def from_url(cls, url: str | None = None, *, endpoint_max_runs: int | None = None) -> Store:
        """A store for ``url`` (None: ``Settings().database_url``). Does not connect yet."""
        return cls(url or Settings().database_url, endpoint_max_runs=endpoint_max_runs)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    @property
    def display_url(self) -> str:
        return redact_url(self.url)

    @property
    def dashboard(self) -> DashboardQueries:
        """The web dashboard's read-only queries (``_dashboard_queries``)."""
        return DashboardQueries(self._db, _run_info, _sample)

    def close(self) -> None:
        self._db.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _insert(self, table: Any) -> Any:
        """A dialect INSERT supporting ON CONFLICT (both backends spell it the same way)."""
        return (postgresql.insert if self.dialect == "postgresql" else sqlite.insert)(table)

    # ------------------------------------------------------------------ migrations

    def current_revision(self) -> str | None:
        with self._db.connection() as conn:
            return _migrate.current_revision(conn)

    def head_revision(self) -> str:
        return _migrate.head_revision()

    def check_at_head(self) -> None:
        """Raise DatabaseNotAtHead unless the schema is at the migration head (connects)."""
        current, head = self.current_revision(), self.head_revision()
        self._refuse_unknown_revision(current, head)
        if current != head:
            raise DatabaseNotAtHead(
                f"database {self.display_url} at {current or 'no revision (empty)'}, head is "
                f"{head}: run `evalsvc db upgrade`"
            )

    def check_writable(self) -> None:
        """Raise ``DatabaseWriteRefused`` when the database refuses writes (read-only, disk
        full): a committed no-op update of the revision row, which needs the write path (lock,
        journal or WAL) but changes nothing. A writer holding the lock is not a refusal
        (``DatabaseUnavailable`` is swallowed: the database is busy, not broken)."""
        try:
            with self._db.session() as session:
                if self.dialect == "postgresql":  # never queue behind a migration for long
                    session.execute(sa.text("SET LOCAL lock_timeout = '2s'"))
                session.execute(sa.text("UPDATE alembic_version SET version_num = version_num"))
        except DatabaseUnavailable:
            return

    def check_known_revision(self) -> None:
        """Raise DatabaseNotAtHead when the database is at a revision this code does not know."""
        self._refuse_unknown_revision(self.current_revision(), self.head_revision())

    def _refuse_unknown_revision(self, current: str | None, head: str) -> None:
        if current is not None and current != head and not _migrate.is_known(current):
            raise DatabaseNotAtHead(
                f"database {self.display_url} is at revision {current}, which this evalsvc "
                f"does not know (its head is {head}): the database was migrated by a newer "
                "evalsvc; upgrade evalsvc instead of the database"
            )

    def upgrade(self, revision: str = "head") -> None:
        """Migrate the schema (``evalsvc db upgrade``); refuses a database newer than the code."""
        self._refuse_unknown_revision(self.current_revision(), self.head_revision())
        with self._db.connection() as conn:
            _migrate.upgrade(conn, revision)
            conn.commit()

    def downgrade(self, revision: str) -> None:
        with self._db.connection() as conn:
            _migrate.downgrade(conn, revision)
            conn.commit()

    def new_revision(self, message: str, *, autogenerate: bool = True) -> str:
        """(Developers) write a migration file, diffing the ORM against this database."""
        with self._db.connection() as conn:
            return _migrate.new_revision(conn, message, autogenerate=autogenerate)

    def is_empty(self) -> bool:
        """True when the database has no tables at all (never used by anything)."""
        with self._db.connection() as conn:
            return not sa.inspect(conn).get_table_names()

    def ensure_ready(self, *, upgrade_fresh_sqlite: bool = True) -> None:
        """Refuse a database not at head; first create the schema of a brand-new SQLite file.

        A fresh embedded database is created on the fly so that ``evalsvc compare`` works on
        first use. PostgreSQL and non-empty databases are never migrated implicitly: that is an
        operator's decision (``evalsvc db upgrade``).
        """
        if upgrade_fresh_sqlite and self.dialect == "sqlite" and self.is_empty():
            self.upgrade()
        self.check_at_head()

    def _insert_once(self, row: R, view: Callable[[R], V], taken: str) -> V:
        """Insert ``row`` and return ``view(row)``; ``Conflict(taken)`` when a unique key exists
        (the database's index decides, so concurrent inserts of one name cannot both win)."""
        try:
            with self._db.session() as session:
                session.add(row)
                session.flush()
                return view(row)
        except Conflict as err:
            raise Conflict(taken) from err

    # ------------------------------------------------------------------ runs

    def create_run(
        self,
        spec: RunSpec,
        *,
        status: RunStatus = RunStatus.queued,
        schedule_id: str | None = None,
        fire_time: datetime | None = None,
        lease_owner: str | None = None,
        lease_seconds: float | None = None,
        submitted_by: str | None = None,
    ) -> RunInfo:
        """Store a new run. ``status=running`` is for in-process runs; with ``lease_owner``
        (``cli:<host>:<pid>``) and ``lease_seconds`` the process keeps it alive with
        :meth:`heartbeat`, and the reaper marks it ``error`` if the process dies.
        ``submitted_by``: the API token's name that queued it."""
        now = utcnow()
        with self._db.session() as session:
            row = self._add_run(
                session, spec, status=status, now=now, schedule_id=schedule_id, fire_time=fire_time
            )
            row.submitted_by = submitted_by
            if lease_owner is not None and lease_seconds is not None:
                row.lease_owner = lease_owner
                row.lease_expires_at = now + timedelta(seconds=lease_seconds)
                session.flush()
            return _run_info(row)

    def _add_run(
        self,
        session: Session,
        spec: RunSpec,
        *,
        status: RunStatus,
        now: datetime,
        schedule_id: str | None,
        fire_time: datetime | None,
    ) -> RunRow:
        row = RunRow(
            id=_new_id(),
            status=status.value,
            priority=spec.priority,
            spec=spec.model_dump(mode="json"),
            baseline_url=_queue.normalize_url(spec.baseline.url),
            attempts=0,
            progress={},
            created_at=now,
            updated_at=now,
            started_at=now if status == RunStatus.running else None,
            finished_at=now if status.value in _TERMINAL else None,
            schedule_id=schedule_id,
            fire_time=fire_time,
        )
        session.add(row)
        session.flush()  # no ORM relationships: the run row must exist before its candidates
        for position, candidate in enumerate(spec.candidates):
            session.add(
                RunCandidateRow(
                    run_id=row.id,
                    position=position,
                    url=_queue.normalize_url(candidate.url),
                    model=candidate.model,
                    name=candidate.name,
                )
            )
        session.flush()
        return row

    def get_run(self, run_id: str) -> RunInfo | None:
        with self._db.session(write=False) as session:
            row = session.get(RunRow, run_id)
            return _run_info(row) if row is not None else None

    def find_run_ids(self, prefix: str, *, limit: int = 2) -> list[str]:
        """Ids of runs starting with ``prefix`` (hex only, so no LIKE wildcard can sneak in),
        at most ``limit`` of them: callers ask for 2 to tell "unique" from "ambiguous"."""
        if not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return []
        stmt = sa.select(RunRow.id).where(RunRow.id.startswith(prefix)).order_by(RunRow.id)
        with self._db.session(write=False) as session:
            return list(session.scalars(stmt.limit(limit)))

    def list_runs(
        self,
        *,
        limit: int = 50,
        status: RunStatus | None = None,
        verdict: str | None = None,
        endpoint_url: str | None = None,
        schedule_id: str | None = None,
    ) -> list[RunInfo]:
        """Newest first. ``endpoint_url`` matches the baseline or any candidate."""
        stmt = sa.select(RunRow).order_by(RunRow.created_at.desc(), RunRow.id.desc()).limit(limit)
        if status is not None:
            stmt = stmt.where(RunRow.status == RunStatus(status).value)
        if verdict is not None:
            stmt = stmt.where(RunRow.verdict == verdict)
        if schedule_id is not None:
            stmt = stmt.where(RunRow.schedule_id == schedule_id)
        if endpoint_url is not None:
            url = _queue.normalize_url(endpoint_url)
            as_candidate = sa.exists().where(
                RunCandidateRow.run_id == RunRow.id, RunCandidateRow.url == url
            )
            stmt = stmt.where(sa.or_(RunRow.baseline_url == url, as_candidate))
        with self._db.session(write=False) as session:
            return [_run_info(row) for row in session.scalars(stmt)]

    def update_progress(self, run_id: str, progress: dict[str, Any]) -> None:
        """Replace the run's progress dict (whatever the runner wants dashboards to show)."""
        with self._db.session() as session:
            session.execute(
                sa.update(RunRow)
                .where(RunRow.id == run_id)
                .values(progress=progress, updated_at=utcnow())
                .execution_options(synchronize_session=False)
            )

    def finish_run(
        self,
        run_id: str,
        *,
        status: RunStatus,
        verdict: str | None,
        error: str | None = None,
        worker_id: str | None = None,
    ) -> bool:
        """Record the end of a run; False when nothing was changed.

        With ``worker_id``: only while that worker holds the lease (status running). Without
        (in-process runs): only if the run is not already finished, so a cancel is never
        overwritten by a late completion.
        """
        now = utcnow()
        stmt = sa.update(RunRow).where(RunRow.id == run_id)
        if worker_id is not None:
            stmt = stmt.where(
                RunRow.lease_owner == worker_id, RunRow.status == RunStatus.running.value
            )
        else:
            stmt = stmt.where(RunRow.status.not_in(_TERMINAL))
        stmt = stmt.values(
            status=RunStatus(status).value,
            verdict=verdict,
            error=error,
            finished_at=now,
            updated_at=now,
            lease_expires_at=None,
        ).execution_options(synchronize_session=False)
        with self._db.session() as session:
            return _queue.rowcount(session.execute(stmt)) == 1

    def cancel_run(self, run_id: str) -> bool:
        """Cancel a queued or running run. A running run's worker learns it at its next
        heartbeat (which then returns False) and stops."""
        now = utcnow()
        with self._db.session() as session:
            result = session.execute(
                sa.update(RunRow)
                .where(
                    RunRow.id == run_id,
                    RunRow.status.in_([RunStatus.queued.value, RunStatus.running.value]),
                )
                .values(
                    status=RunStatus.cancelled.value,
                    finished_at=now,
                    updated_at=now,
                    lease_expires_at=None,
                )
                .execution_options(synchronize_session=False)
            )
            return _queue.rowcount(result) == 1

    def delete_run(self, run_id: str) -> bool:
        """Delete a run and everything stored with it (samples, snapshots, gates, report)."""
        with self._db.session() as session:
            result = session.execute(sa.delete(RunRow).where(RunRow.id == run_id))
            return _queue.rowcount(result) == 1

    # ------------------------------------------------------------------ samples

    def add_samples(self, run_id: str, samples: Sequence[Sample]) -> None:
        """Insert samples; idempotent on (run, endpoint, suite, item, repeat).

        A stored sample WITHOUT error is never overwritten (a resumed or duplicate writer
        cannot change recorded results). A stored errored sample is replaced: that is how a
        retried item's result lands.
        """
        if not samples:
            return
        now = utcnow()
        # Within one call, the last sample for a key wins (ON CONFLICT cannot touch a row twice
        # in one statement on PostgreSQL).
        unique = {s.key: s for s in samples}
        rows = [
            {
                "run_id": run_id,
                "endpoint": s.endpoint,
                "suite": s.suite,
                "item_id": s.item_id,
                "repeat": s.repeat,
                "output": s.output,
                "score": s.score,
                "prompt_tokens": s.prompt_tokens,
                "completion_tokens": s.completion_tokens,
                "latency_s": s.latency_s,
                "ttft_s": s.ttft_s,
                "error": s.error,
                "data": s.data,
                "created_at": now,
            }
            for s in unique.values()
        ]
        table = SampleRow.__table__
        with self._db.session() as session:
            for start in range(0, len(rows), _SAMPLE_CHUNK):
                stmt = self._insert(table).values(rows[start : start + _SAMPLE_CHUNK])
                replace = {
                    c: stmt.excluded[c]
                    for c in (
                        "output",
                        "score",
                        "prompt_tokens",
                        "completion_tokens",
                        "latency_s",
                        "ttft_s",
                        "error",
                        "data",
                        "created_at",
                    )
                }
                stmt = stmt.on_conflict_do_update(
                    index_elements=list(_SAMPLE_KEY),
                    set_=replace,
                    where=table.c.error.is_not(None),
                )
                session.execute(stmt)

    def get_samples(
        self, run_id: str, *, suite: str | None = None, endpoint: str | None = None
    ) -> list[Sample]:
        """Samples of a run in the order they were first written."""
        stmt = sa.select(SampleRow).where(SampleRow.run_id == run_id).order_by(SampleRow.id)
        if suite is not None:
            stmt = stmt.where(SampleRow.suite == suite)
        if endpoint is not None:
            stmt = stmt.where(SampleRow.endpoint == endpoint)
        with self._db.session(write=False) as session:
            return [_sample(row) for row in session.scalars(stmt)]

    def count_samples(self, run_id: str) -> dict[str, int]:
        """``{"total": n, "errors": m}`` without loading the samples."""
        stmt = sa.select(
            sa.func.count(),
            sa.func.count(SampleRow.error),
        ).where(SampleRow.run_id == run_id)
        with self._db.session(write=False) as session:
            total, errors = session.execute(stmt).one()
            return {"total": int(total), "errors": int(errors)}

    def done_keys(self, run_id: str) -> set[tuple[str, str, str, int]]:
        """``Sample.key`` of stored samples without error: what a resumed run can skip."""
        stmt = sa.select(
            SampleRow.endpoint, SampleRow.suite, SampleRow.item_id, SampleRow.repeat
        ).where(SampleRow.run_id == run_id, SampleRow.error.is_(None))
        with self._db.session(write=False) as session:
            return {(e, s, i, int(r)) for e, s, i, r in session.execute(stmt)}

    # ------------------------------------------------------------------ snapshots, gates, report

    def save_endpoint_snapshot(
        self, run_id: str, *, role: str, endpoint: EndpointRef, provenance: Provenance
    ) -> None:
        """Record (or replace) which endpoint played ``role`` and what the probe found."""
        values = {
            "run_id": run_id,
            "role": role,
            "url": endpoint.url,
            "model": endpoint.model,
            "name": endpoint.name,
            "api_key_env": endpoint.api_key_env,
            "provenance": provenance.model_dump(mode="json"),
            "created_at": utcnow(),
        }
        stmt = self._insert(EndpointSnapshotRow.__table__).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "role"],
            set_={k: stmt.excluded[k] for k in values if k not in ("run_id", "role")},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_endpoint_snapshots(self, run_id: str) -> dict[str, tuple[EndpointRef, Provenance]]:
        """``{role: (endpoint, provenance)}`` of a run."""
        stmt = sa.select(EndpointSnapshotRow).where(EndpointSnapshotRow.run_id == run_id)
        with self._db.session(write=False) as session:
            return {
                row.role: (
                    EndpointRef(
                        url=row.url, model=row.model, name=row.name, api_key_env=row.api_key_env
                    ),
                    Provenance.model_validate(row.provenance),
                )
                for row in session.scalars(stmt)
            }

    def save_suite_snapshot(
        self, run_id: str, *, name: str, kind: str, version: str, spec: dict[str, Any]
    ) -> None:
        """Record (or replace) the exact suite spec a run used."""
        values = {
            "run_id": run_id,
            "name": name,
            "kind": kind,
            "version": version,
            "spec": spec,
            "created_at": utcnow(),
        }
        stmt = self._insert(SuiteSnapshotRow.__table__).values(values)
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id", "name"],
            set_={k: stmt.excluded[k] for k in ("kind", "version", "spec", "created_at")},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_suite_snapshots(self, run_id: str) -> list[dict[str, Any]]:
        """``[{"name", "kind", "version", "spec"}]`` in the order they were saved."""
        stmt = (
            sa.select(SuiteSnapshotRow)
            .where(SuiteSnapshotRow.run_id == run_id)
            .order_by(SuiteSnapshotRow.id)
        )
        with self._db.session(write=False) as session:
            return [
                {"name": r.name, "kind": r.kind, "version": r.version, "spec": dict(r.spec)}
                for r in session.scalars(stmt)
            ]

    def save_gate_results(self, run_id: str, gates: list[dict[str, Any]]) -> None:
        """Replace the gate outcomes of a run. Each dict needs ``candidate`` and ``suite``;
        ``verdict``, ``metric`` and ``delta`` are copied into columns for queries and the whole
        dict is kept as the payload."""
        now = utcnow()
        with self._db.session() as session:
            session.execute(sa.delete(GateResultRow).where(GateResultRow.run_id == run_id))
            for gate in gates:
                delta = gate.get("delta")
                session.add(
                    GateResultRow(
                        run_id=run_id,
                        candidate=str(gate["candidate"]),
                        suite=str(gate["suite"]),
                        verdict=gate.get("verdict"),
                        metric=gate.get("metric"),
                        delta=float(delta) if delta is not None else None,
                        payload=gate,
                        created_at=now,
                    )
                )

    def get_gate_results(self, run_id: str) -> list[dict[str, Any]]:
        stmt = (
            sa.select(GateResultRow)
            .where(GateResultRow.run_id == run_id)
            .order_by(GateResultRow.id)
        )
        with self._db.session(write=False) as session:
            return [dict(row.payload) for row in session.scalars(stmt)]

    def save_report(self, run_id: str, report: dict[str, Any]) -> None:
        now = utcnow()
        stmt = self._insert(ReportRow.__table__).values(
            run_id=run_id, report=report, created_at=now, updated_at=now
        )
        stmt = stmt.on_conflict_do_update(
            index_elements=["run_id"],
            set_={"report": stmt.excluded.report, "updated_at": stmt.excluded.updated_at},
        )
        with self._db.session() as session:
            session.execute(stmt)

    def get_report(self, run_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.get(ReportRow, run_id)
            return dict(row.report) if row is not None else None

    # ------------------------------------------------------------------ queue

    def claim_run(self, *, worker_id: str, lease_seconds: float) -> RunInfo | None:
        """Claim the next queued run (highest priority, then oldest) within the per-endpoint
        budget; None when nothing is claimable. See ``_queue`` for the locking."""
        now = utcnow()
        with self._db.session() as session:
            row = _queue.claim_next(
                session,
                dialect=self.dialect,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                endpoint_max_runs=self.endpoint_max_runs,
                now=now,
            )
            return _run_info(row) if row is not None else None

    def heartbeat(self, run_id: str, *, worker_id: str, lease_seconds: float) -> bool:
        """Extend the lease. False: the lease is lost or the run cancelled; stop working on it."""
        with self._db.session() as session:
            return _queue.heartbeat(
                session,
                run_id=run_id,
                worker_id=worker_id,
                lease_seconds=lease_seconds,
                now=utcnow(),
            )

    def release_run(self, run_id: str, *, worker_id: str) -> None:
        """Put a run this worker holds back in the queue (graceful shutdown)."""
        with self._db.session() as session:
            _queue.release(session, run_id=run_id, worker_id=worker_id, now=utcnow())

    def reap_expired(self, *, max_attempts: int) -> list[str]:
        """Return runs with expired leases to the queue (or fail them after max_attempts)."""
        with self._db.session() as session:
            return _queue.reap_expired(session, max_attempts=max_attempts, now=utcnow())

    def count_runs_by_status(self) -> dict[str, int]:
        """Runs per status (every status present, 0 when none): one GROUP BY, for metrics."""
        with self._db.session(write=False) as session:
            rows = session.execute(
                sa.select(RunRow.status, sa.func.count()).group_by(RunRow.status)
            ).all()
        counts = {s.value: 0 for s in RunStatus}
        counts.update({str(status): int(n) for status, n in rows})
        return counts

    def running_counts(self) -> dict[str, int]:
        """Running runs per endpoint URL (what the per-endpoint budget looks at)."""
        with self._db.session(write=False) as session:
            return dict(_queue.running_counts(session))

    # ------------------------------------------------------------------ endpoint registry

    def upsert_endpoint(
        self, *, name: str, url: str, model: str | None = None, api_key_env: str | None = None
    ) -> EndpointRef:
        now = utcnow()
        with self._db.session() as session:
            row = session.scalar(sa.select(EndpointRow).where(EndpointRow.name == name))
            if row is None:
                row = EndpointRow(id=_new_id(), name=name, created_at=now, url=url)
                session.add(row)
            row.url, row.model, row.api_key_env, row.updated_at = url, model, api_key_env, now
            session.flush()
            return _endpoint_ref(row)

    def create_endpoint(
        self, *, name: str, url: str, model: str | None = None, api_key_env: str | None = None
    ) -> EndpointRef:
        """Register a new name; ``Conflict`` when it exists (the unique index decides, so two
        concurrent creates cannot both succeed)."""
        now = utcnow()
        row = EndpointRow(
            id=_new_id(),
            name=name,
            url=url,
            model=model,
            api_key_env=api_key_env,
            created_at=now,
            updated_at=now,
        )
        return self._insert_once(row, _endpoint_ref, f"an endpoint named {name!r} already exists")

    def get_endpoint(self, name: str) -> EndpointRef | None:
        with self._db.session(write=False) as session:
            row = session.scalar(sa.select(EndpointRow).where(EndpointRow.name == name))
            return _endpoint_ref(row) if row is not None else None

    def list_endpoints(self) -> list[EndpointRef]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(EndpointRow).order_by(EndpointRow.name))
            return [_endpoint_ref(row) for row in rows]

    def delete_endpoint(self, name: str) -> bool:
        with self._db.session() as session:
            result = session.execute(sa.delete(EndpointRow).where(EndpointRow.name == name))
            return _queue.rowcount(result) == 1

    # ------------------------------------------------------------------ schedules

    def add_schedule(
        self, *, name: str, cron: str, template: RunSpec, start_at: datetime | None = None
    ) -> dict[str, Any]:
        """Create a schedule; it first fires at the first cron time after ``start_at`` (now).

        Raises ValueError (croniter's message) for an invalid cron expression, Conflict (also
        a ValueError) when the name is taken.
        """
        _schedules.validate_cron(cron)
        now = utcnow()
        start = start_at or now
        row = ScheduleRow(
            id=_new_id(),
            name=name,
            cron=cron,
            template=template.model_dump(mode="json"),
            enabled=True,
            start_at=start,
            created_at=now,
            next_fire_time=_schedules.next_fire_time(cron, start),
        )
        return self._insert_once(row, _schedule_dict, f"a schedule named {name!r} already exists")

    def list_schedules(self) -> list[dict[str, Any]]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(ScheduleRow).order_by(ScheduleRow.name))
            return [_schedule_dict(row) for row in rows]

    def get_schedule(self, name_or_id: str) -> dict[str, Any] | None:
        with self._db.session(write=False) as session:
            row = session.scalar(
                sa.select(ScheduleRow).where(
                    sa.or_(ScheduleRow.name == name_or_id, ScheduleRow.id == name_or_id)
                )
            )
            return _schedule_dict(row) if row is not None else None

    def remove_schedule(self, name_or_id: str) -> bool:
        """Delete a schedule; its past runs stay (their schedule_id becomes NULL)."""
        with self._db.session() as session:
            result = session.execute(
                sa.delete(ScheduleRow).where(
                    sa.or_(ScheduleRow.name == name_or_id, ScheduleRow.id == name_or_id)
                )
            )
            return _queue.rowcount(result) >= 1

    def fire_due_schedules(self, *, now: datetime) -> list[RunInfo]:
        """Create the runs of due schedules (policy "catch-up: latest", see ``_schedules``).

        Idempotent on (schedule, fire_time): any number of schedulers may call this
        concurrently with any ``now``; each fire time yields at most one run. Each schedule
        fires in its own transaction: one that cannot be queued (its template no longer
        validates, the database refuses a value) is skipped until its next fire time with
        ``last_error`` set, and the others fire. Only ``DatabaseUnavailable`` propagates.
        """
        with self._db.session(write=False) as session:
            due = _schedules.due_schedule_ids(session, now=now)
        created: list[RunInfo] = []
        for schedule_id in due:
            try:
                run = self._fire_schedule(schedule_id, now=now)
            except DatabaseUnavailable:
                raise
            except Exception as err:  # noqa: BLE001 - any failure stays with its schedule
                self._record_schedule_error(schedule_id, now=now, err=err)
                continue
            if run is not None:
                created.append(run)
        return created

    def _fire_schedule(self, schedule_id: str, *, now: datetime) -> RunInfo | None:
        with self._db.session() as session:
            schedule = _schedules.lock_due_schedule(
                session, schedule_id, now=now, dialect=self.dialect
            )
            if schedule is None:  # fired by another scheduler meanwhile, disabled or removed
                return None
            anchor = max(t for t in (schedule.start_at, schedule.last_fire_time) if t)
            fire_time = _schedules.latest_fire_time(schedule.cron, after=anchor, now=now)
            if fire_time is None:
                schedule.next_fire_time = _schedules.next_fire_time(schedule.cron, anchor)
                return None
            run: RunInfo | None = None
            if not _schedules.fire_exists(session, schedule_id=schedule.id, fire_time=fire_time):
                spec = RunSpec.model_validate(schedule.template)
                row = self._add_run(
                    session,
                    spec,
                    status=RunStatus.queued,
                    now=utcnow(),
                    schedule_id=schedule.id,
                    fire_time=fire_time,
                )
                session.flush()  # a value the database refuses fails here, inside this schedule
                run = _run_info(row)
            schedule.last_fire_time = fire_time
            schedule.next_fire_time = _schedules.next_fire_time(schedule.cron, fire_time)
            schedule.last_error = None
            schedule.last_error_at = None
            return run

    def _record_schedule_error(self, schedule_id: str, *, now: datetime, err: Exception) -> None:
        """Keep the error on the schedule and skip it until its next fire time after ``now``
        (disable it when there is none to compute)."""
        message = _one_line_error(err)
        try:
            with self._db.session() as session:
                schedule = session.get(ScheduleRow, schedule_id)
                if schedule is None:
                    return
                schedule.last_error, schedule.last_error_at = message, now
                try:
                    schedule.next_fire_time = _schedules.next_fire_time(schedule.cron, now)
                except Exception:  # noqa: BLE001 - croniter cannot compute one: stop firing it
                    schedule.enabled, schedule.next_fire_time = False, None
                    schedule.last_error = f"{message} (schedule disabled: no next fire time)"
                log.warning("schedule %s not fired: %s", schedule.name, schedule.last_error)
        except StoreError as store_err:
            log.error(
                "schedule %s not fired (%s); could not record it: %s",
                schedule_id,
                message,
                store_err,
            )

    # ------------------------------------------------------------------ api tokens

    def create_api_token(self, *, name: str, scopes: Sequence[str]) -> tuple[str, dict[str, Any]]:
        """Create a bearer token; returns ``(token, info)``. The token is shown only now."""
        unknown = set(scopes) - API_SCOPES
        if unknown or not scopes:
            raise ValueError(f"scopes must be a non-empty subset of {sorted(API_SCOPES)}")
        token = "evs_" + secrets.token_urlsafe(32)
        row = ApiTokenRow(
            id=_new_id(),
            name=name,
            token_hash=_hash_token(token),
            scopes=sorted(set(scopes)),
            created_at=utcnow(),
        )
        info = self._insert_once(row, _token_dict, f"an API token named {name!r} already exists")
        return token, info

    def verify_api_token(self, token: str) -> dict[str, Any] | None:
        """The token's info (name, scopes) if it exists and is not revoked, else None.

        A read. ``last_used_at`` is then recorded best-effort, at most once a minute per token:
        a database that refuses writes (read-only, disk full) or is busy must not turn every
        authenticated read into a 503."""
        digest = _hash_token(token)
        with self._db.session(write=False) as session:
            row = session.scalar(sa.select(ApiTokenRow).where(ApiTokenRow.token_hash == digest))
            if row is None or row.revoked_at is not None:
                return None
            info = _token_dict(row)
        now = utcnow()
        last = info["last_used_at"]
        if last is None or last < now - TOKEN_USE_RESOLUTION:
            try:
                with self._db.session() as session:
                    session.execute(
                        sa.update(ApiTokenRow)
                        .where(ApiTokenRow.token_hash == digest)
                        .values(last_used_at=now)
                    )
                info["last_used_at"] = now
            except (DatabaseWriteRefused, DatabaseUnavailable) as err:
                log.warning("token %s: last use not recorded: %s", info["name"], err)
        return info

    def list_api_tokens(self) -> list[dict[str, Any]]:
        with self._db.session(write=False) as session:
            rows = session.scalars(sa.select(ApiTokenRow).order_by(ApiTokenRow.name))
            return [_token_dict(row) for row in rows]

    def revoke_api_token(self, name: str) -> bool:
        with self._db.session() as session:
            result = session.execute(
                sa.update(ApiTokenRow)
                .where(ApiTokenRow.name == name, ApiTokenRow.revoked_at.is_(None))
                .values(revoked_at=utcnow())
            )
            return _queue.rowcount(result) == 1
