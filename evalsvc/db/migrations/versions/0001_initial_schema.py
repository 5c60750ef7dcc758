"""Initial schema: endpoints, runs (= the queue), samples, snapshots, gates, reports, schedules,
api tokens.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scopes", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_used_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "endpoints",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("model", sa.String(length=500), nullable=True),
        sa.Column("api_key_env", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoints")),
        sa.UniqueConstraint("name", name=op.f("uq_endpoints_name")),
    )
    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=False),
        sa.Column("template", sa.JSON(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("start_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_fire_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_fire_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
        sa.UniqueConstraint("name", name=op.f("uq_schedules_name")),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("baseline_url", sa.String(length=2000), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("schedule_id", sa.String(length=32), nullable=True),
        sa.Column("fire_time", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_runs_schedule_id_schedules"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("schedule_id", "fire_time", name=op.f("uq_runs_schedule_id_fire_time")),
    )
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_runs_baseline_url"), ["baseline_url"], unique=False)
        batch_op.create_index("ix_runs_claim", ["status", "priority", "created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_created_at"), ["created_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_schedule_id"), ["schedule_id"], unique=False)
        batch_op.create_index("ix_runs_status_lease", ["status", "lease_expires_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_runs_verdict"), ["verdict"], unique=False)

    op.create_table(
        "endpoint_snapshots",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("role", sa.String(length=64), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("model", sa.String(length=500), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("api_key_env", sa.String(length=200), nullable=True),
        sa.Column("provenance", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_endpoint_snapshots_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_endpoint_snapshots")),
        sa.UniqueConstraint("run_id", "role", name=op.f("uq_endpoint_snapshots_run_id_role")),
    )
    op.create_table(
        "gate_results",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("candidate", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=500), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("metric", sa.String(length=200), nullable=True),
        sa.Column("delta", sa.Double(), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_gate_results_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gate_results")),
        sa.UniqueConstraint(
            "run_id", "candidate", "suite", name=op.f("uq_gate_results_run_id_candidate_suite")
        ),
    )
    op.create_table(
        "reports",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("report", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_reports_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_reports")),
    )
    op.create_table(
        "run_candidates",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("model", sa.String(length=500), nullable=True),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_candidates_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "position", name=op.f("pk_run_candidates")),
    )
    with op.batch_alter_table("run_candidates", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_candidates_url"), ["url"], unique=False)

    op.create_table(
        "samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("endpoint", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=500), nullable=False),
        sa.Column("item_id", sa.String(length=500), nullable=False),
        sa.Column("repeat", sa.Integer(), nullable=False),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("latency_s", sa.Double(), nullable=True),
        sa.Column("ttft_s", sa.Double(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("data", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_samples_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_samples")),
        sa.UniqueConstraint(
            "run_id",
            "endpoint",
            "suite",
            "item_id",
            "repeat",
            name=op.f("uq_samples_run_id_endpoint_suite_item_id_repeat"),
        ),
    )
    with op.batch_alter_table("samples", schema=None) as batch_op:
        batch_op.create_index("ix_samples_run_suite", ["run_id", "suite"], unique=False)

    op.create_table(
        "suite_snapshots",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=500), nullable=False),
        sa.Column("kind", sa.String(length=100), nullable=False),
        sa.Column("version", sa.String(length=100), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_suite_snapshots_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_suite_snapshots")),
        sa.UniqueConstraint("run_id", "name", name=op.f("uq_suite_snapshots_run_id_name")),
    )


def downgrade() -> None:
    op.drop_table("suite_snapshots")
    with op.batch_alter_table("samples", schema=None) as batch_op:
        batch_op.drop_index("ix_samples_run_suite")

    op.drop_table("samples")
    with op.batch_alter_table("run_candidates", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_candidates_url"))

    op.drop_table("run_candidates")
    op.drop_table("reports")
    op.drop_table("gate_results")
    op.drop_table("endpoint_snapshots")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_runs_verdict"))
        batch_op.drop_index("ix_runs_status_lease")
        batch_op.drop_index(batch_op.f("ix_runs_schedule_id"))
        batch_op.drop_index(batch_op.f("ix_runs_created_at"))
        batch_op.drop_index("ix_runs_claim")
        batch_op.drop_index(batch_op.f("ix_runs_baseline_url"))

    op.drop_table("runs")
    op.drop_table("schedules")
    op.drop_table("endpoints")
    op.drop_table("api_tokens")
