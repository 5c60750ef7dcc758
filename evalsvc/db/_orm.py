"""SQLAlchemy ORM models. Private to ``evalsvc.db``: rows are converted to domain objects
(``evalsvc.domain``) or plain dicts before they leave the package.

Every schema change here needs an Alembic revision under ``evalsvc/db/migrations/versions``; a test runs
autogenerate against this metadata and fails on any difference.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Deterministic constraint names, so that migrations can drop/alter constraints by name on
# every backend (SQLite batch mode needs names to recreate tables).
NAMING_CONVENTION: dict[str, str] = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ID_LEN = 32  # uuid4().hex


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on every backend.

    SQLite has no timezone type and returns naive values; comparing naive and aware datetimes
    raises in Python, so values are normalised to UTC on the way in and made aware on the way out.
    Stored as naive UTC on SQLite so that string comparison in SQL (lease expiry) stays correct.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Base(DeclarativeBase):
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {
        datetime: UTCDateTime(),
        dict[str, Any]: sa.JSON(),
        list[Any]: sa.JSON(),
    }


class EndpointRow(Base):
    """The endpoint registry: names usable instead of URLs on the command line."""

    __tablename__ = "endpoints"

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    url: Mapped[str] = mapped_column(sa.String(2000))
    model: Mapped[str | None] = mapped_column(sa.String(500))
    api_key_env: Mapped[str | None] = mapped_column(sa.String(200))
    tokenizer: Mapped[str | None] = mapped_column(sa.String(1000))
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ScheduleRow(Base):
    """A cron schedule that creates runs from a template RunSpec."""

    __tablename__ = "schedules"

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    cron: Mapped[str] = mapped_column(sa.String(200))
    template: Mapped[dict[str, Any]]
    enabled: Mapped[bool] = mapped_column(default=True)
    start_at: Mapped[datetime]
    """Fire times are strictly after this instant (creation time unless given)."""
    last_fire_time: Mapped[datetime | None]
    next_fire_time: Mapped[datetime | None]
    created_at: Mapped[datetime]
    last_error: Mapped[str | None] = mapped_column(sa.Text)
    """Why the last fire failed (cleared by the next successful one); migration 0002."""
    last_error_at: Mapped[datetime | None]
    kind: Mapped[str] = mapped_column(sa.String(16), default="run", server_default="run")
    """``run``: ``template`` is a RunSpec; ``sweep``: a sweep spec (migration 0004)."""


class RunRow(Base):
    """A run, and at the same time an entry of the work queue (status/lease columns)."""

    __tablename__ = "runs"
    __table_args__ = (
        # One run per schedule fire time, whatever the number of schedulers racing.
        sa.UniqueConstraint("schedule_id", "fire_time"),
        # The claim query: queued runs by priority, then age.
        sa.Index("ix_runs_claim", "status", "priority", "created_at"),
        sa.Index("ix_runs_status_lease", "status", "lease_expires_at"),
    )

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    status: Mapped[str] = mapped_column(sa.String(16))
    verdict: Mapped[str | None] = mapped_column(sa.String(16), index=True)
    priority: Mapped[int] = mapped_column(default=0)
    spec: Mapped[dict[str, Any]]
    baseline_url: Mapped[str] = mapped_column(sa.String(2000), index=True)
    """Normalised (no trailing slash) copy of ``spec.baseline.url`` for filters and budgets."""
    attempts: Mapped[int] = mapped_column(default=0)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(200))
    lease_expires_at: Mapped[datetime | None]
    progress: Mapped[dict[str, Any]]
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(index=True)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]
    schedule_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("schedules.id", ondelete="SET NULL"), index=True
    )
    fire_time: Mapped[datetime | None]
    submitted_by: Mapped[str | None] = mapped_column(sa.String(200))
    """The API token (its name) that queued the run through the REST API; None for runs
    queued by a schedule or by the CLI. Cancelling through the API is limited to it and admins."""


class RunCandidateRow(Base):
    """The candidates of a run, one row each, so runs can be found by candidate URL."""

    __tablename__ = "run_candidates"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    url: Mapped[str] = mapped_column(sa.String(2000), index=True)
    model: Mapped[str | None] = mapped_column(sa.String(500))
    name: Mapped[str | None] = mapped_column(sa.String(200))


class EndpointSnapshotRow(Base):
    """Which endpoint played which role in a run, and what the probe learned about it then."""

    __tablename__ = "endpoint_snapshots"
    __table_args__ = (sa.UniqueConstraint("run_id", "role"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(sa.String(64))
    url: Mapped[str] = mapped_column(sa.String(2000))
    model: Mapped[str | None] = mapped_column(sa.String(500))
    name: Mapped[str | None] = mapped_column(sa.String(200))
    api_key_env: Mapped[str | None] = mapped_column(sa.String(200))
    provenance: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    identity: Mapped[str | None] = mapped_column(sa.String(2000))
    """The endpoint as the operator names it (migration 0009, ``evalsvc.services.identity``):
    its registered name, or its normalized base URL; NULL on snapshots from before."""


class SuiteSnapshotRow(Base):
    """The exact suite spec (kind, version, parameters) a run used."""

    __tablename__ = "suite_snapshots"
    __table_args__ = (sa.UniqueConstraint("run_id", "name"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(sa.String(500))
    kind: Mapped[str] = mapped_column(sa.String(100))
    version: Mapped[str] = mapped_column(sa.String(100))
    spec: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class SampleRow(Base):
    """One endpoint's response to one item. Unique per (run, endpoint, suite, item, repeat)."""

    __tablename__ = "samples"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "endpoint", "suite", "item_id", "repeat"),
        sa.Index("ix_samples_run_suite", "run_id", "suite"),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    endpoint: Mapped[str] = mapped_column(sa.String(64))
    suite: Mapped[str] = mapped_column(sa.String(500))
    item_id: Mapped[str] = mapped_column(sa.String(500))
    repeat: Mapped[int] = mapped_column(default=0)
    output: Mapped[str] = mapped_column(sa.Text)
    score: Mapped[float | None]
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    latency_s: Mapped[float | None]
    ttft_s: Mapped[float | None]
    error: Mapped[str | None] = mapped_column(sa.Text)
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class GateResultRow(Base):
    """One gate outcome: a candidate on a suite. ``payload`` is the full GateOutcome dict."""

    __tablename__ = "gate_results"
    __table_args__ = (sa.UniqueConstraint("run_id", "candidate", "suite"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    candidate: Mapped[str] = mapped_column(sa.String(64))
    suite: Mapped[str] = mapped_column(sa.String(500))
    verdict: Mapped[str | None] = mapped_column(sa.String(16))
    metric: Mapped[str | None] = mapped_column(sa.String(200))
    delta: Mapped[float | None]
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class ReportRow(Base):
    """The JSON report of a finished run (docs/report.md)."""

    __tablename__ = "reports"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    report: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class ApiTokenRow(Base):
    """A bearer token for the REST API. Only a SHA-256 of the token is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    scopes: Mapped[list[Any]]
    created_at: Mapped[datetime]
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class SweepRow(Base):
    """A sweep (``evalsvc.services.sweeps``) queued through REST or a schedule, and its own
    queue entry (status/lease columns, like ``runs``); the report is the sweep's JSON."""

    __tablename__ = "sweeps"
    __table_args__ = (
        sa.UniqueConstraint("schedule_id", "fire_time"),
        sa.Index("ix_sweeps_claim", "status", "created_at"),
    )

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    status: Mapped[str] = mapped_column(sa.String(16))
    spec: Mapped[dict[str, Any]]
    report: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON())
    progress: Mapped[dict[str, Any]]
    recommendation: Mapped[str | None] = mapped_column(sa.String(200))
    error: Mapped[str | None] = mapped_column(sa.Text)
    attempts: Mapped[int] = mapped_column(default=0)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(200))
    lease_expires_at: Mapped[datetime | None]
    submitted_by: Mapped[str | None] = mapped_column(sa.String(200))
    schedule_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("schedules.id", ondelete="SET NULL"), index=True
    )
    fire_time: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(index=True)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class SweepRunRow(Base):
    """The quality runs a sweep made, one row per configuration's run."""

    __tablename__ = "sweep_runs"

    sweep_id: Mapped[str] = mapped_column(
        sa.ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True
    )
    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    config: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[datetime]


class LogUploadRow(Base):
    """The logs of a ``POST /gate-logs`` upload, waiting for a worker to gate them (migration
    0006): the gate options as given, and the files' names, roles and sizes. The bytes are in
    ``log_upload_chunks``. Deleted with the run, and by the worker once the run has ended."""

    __tablename__ = "log_uploads"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    submitted_by: Mapped[str | None] = mapped_column(sa.String(200), index=True)
    params: Mapped[dict[str, Any]]
    files: Mapped[list[Any]]
    """``[{"role", "name", "size"}]`` in upload order; a file's index is its ``file_no``."""
    total_bytes: Mapped[int] = mapped_column(sa.BigInteger())
    created_at: Mapped[datetime]


class LogUploadChunkRow(Base):
    """One chunk (at most 1 MiB) of one uploaded file: stored and read back a chunk at a time,
    so neither the API nor a worker holds a whole upload in memory."""

    __tablename__ = "log_upload_chunks"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("log_uploads.run_id", ondelete="CASCADE"), primary_key=True
    )
    file_no: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    seq: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    data: Mapped[bytes] = mapped_column(sa.LargeBinary())


class BlessedBaselineRow(Base):
    """A blessed baseline (migration 0007; ``evalsvc.services.baselines``): the baseline samples
    of ``run_id`` for ``suite`` are the reference for every later run whose baseline has the same
    ``fingerprint`` (endpoint provenance, suite snapshot, seed, items). ``key`` holds the hashed
    parts, so a mismatch names what changed; ``run_ids`` every run aggregated (the first is
    ``run_id``) and ``noise`` the between-run noise floor measured across them."""

    __tablename__ = "blessed_baselines"

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    fingerprint: Mapped[str] = mapped_column(sa.String(64), index=True)
    suite: Mapped[str] = mapped_column(sa.String(200))
    endpoint_url: Mapped[str] = mapped_column(sa.String(2000))
    key: Mapped[dict[str, Any]]
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    run_ids: Mapped[list[Any]]
    items: Mapped[int]
    noise: Mapped[dict[str, Any] | None]
    note: Mapped[str | None] = mapped_column(sa.Text)
    blessed_by: Mapped[str | None] = mapped_column(sa.String(200))
    created_at: Mapped[datetime] = mapped_column(index=True)
    revoked_at: Mapped[datetime | None]
    revoked_by: Mapped[str | None] = mapped_column(sa.String(200))
    endpoint: Mapped[str | None] = mapped_column(sa.String(2000))
    """The identity of the endpoint the blessed samples were measured on (migration 0009);
    NULL on blessings from before, which are never reused."""


class CalibrationAdoptionRow(Base):
    """A calibration (an A/A run) whose noise floor gates and ``plan`` use (migration 0009):
    adopted by an admin, or run by an admin or the local operator. A calibration without a row
    is stored and shown, never used."""

    __tablename__ = "calibration_adoptions"

    run_id: Mapped[str] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="CASCADE"), primary_key=True
    )
    adopted_by: Mapped[str | None] = mapped_column(sa.String(200))
    adopted_at: Mapped[datetime]


class AlertRow(Base):
    """An alert raised after a run finished (``evalsvc.services.alerts``; migration 0008): a
    verdict change, a Δ crossing the margin, an endpoint error streak, a stale blessed baseline.
    ``dedupe_key`` is unique, so two workers that see the same event store it once; the
    ``delivery`` columns are the webhook delivery's own compare-and-set (at most once)."""

    __tablename__ = "alerts"

    id: Mapped[str] = mapped_column(sa.String(ID_LEN), primary_key=True)
    dedupe_key: Mapped[str] = mapped_column(sa.String(64), unique=True)
    kind: Mapped[str] = mapped_column(sa.String(32))
    severity: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16), index=True)
    """``open`` or ``acknowledged``."""
    baseline_url: Mapped[str | None] = mapped_column(sa.String(2000))
    candidate_url: Mapped[str | None] = mapped_column(sa.String(2000))
    suite: Mapped[str | None] = mapped_column(sa.String(500))
    run_id: Mapped[str | None] = mapped_column(
        sa.ForeignKey("runs.id", ondelete="SET NULL"), index=True
    )
    previous_run_id: Mapped[str | None] = mapped_column(sa.String(ID_LEN))
    message: Mapped[str] = mapped_column(sa.Text)
    details: Mapped[dict[str, Any]]
    created_at: Mapped[datetime] = mapped_column(index=True)
    acknowledged_at: Mapped[datetime | None]
    acknowledged_by: Mapped[str | None] = mapped_column(sa.String(200))
    delivery: Mapped[str] = mapped_column(sa.String(16))
    """``pending`` → ``sending`` (claimed by one process) → ``delivered`` | ``failed``; ``none``
    when no webhook was configured when it was raised."""
    delivery_owner: Mapped[str | None] = mapped_column(sa.String(200))
    delivery_started_at: Mapped[datetime | None]
    delivered_at: Mapped[datetime | None]
    deliveries: Mapped[list[Any]]
    """One entry per webhook: ``{"webhook", "format", "status", "attempts", "error"}``."""
