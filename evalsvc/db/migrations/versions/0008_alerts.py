"""Alerts: ``alerts``, one row per event a finished run raised (``evalsvc.services.alerts``).

A verdict that changed between consecutive runs of one (baseline URL, candidate URL, suite), a
Δ whose interval crossed the margin, an endpoint's error streak, a stale blessed baseline. The
unique ``dedupe_key`` makes raising idempotent across workers (the database decides which of two
concurrent inserts wins); the ``delivery`` columns let exactly one process send the webhooks.
``run_id`` is kept when the run is deleted (``SET NULL``): an alert outlives the run it names.

Revision ID: 0008_alerts
Revises: 0007_blessed_baselines
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_alerts"
down_revision: str | None = "0007_blessed_baselines"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alerts",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("dedupe_key", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("baseline_url", sa.String(length=2000), nullable=True),
        sa.Column("candidate_url", sa.String(length=2000), nullable=True),
        sa.Column("suite", sa.String(length=500), nullable=True),
        sa.Column("run_id", sa.String(length=32), nullable=True),
        sa.Column("previous_run_id", sa.String(length=32), nullable=True),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("details", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_by", sa.String(length=200), nullable=True),
        sa.Column("delivery", sa.String(length=16), nullable=False),
        sa.Column("delivery_owner", sa.String(length=200), nullable=True),
        sa.Column("delivery_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deliveries", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_alerts_run_id_runs"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_alerts_dedupe_key")),
    )
    op.create_index(op.f("ix_alerts_created_at"), "alerts", ["created_at"], unique=False)
    op.create_index(op.f("ix_alerts_run_id"), "alerts", ["run_id"], unique=False)
    op.create_index(op.f("ix_alerts_status"), "alerts", ["status"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_alerts_status"), table_name="alerts")
    op.drop_index(op.f("ix_alerts_run_id"), table_name="alerts")
    op.drop_index(op.f("ix_alerts_created_at"), table_name="alerts")
    op.drop_table("alerts")
