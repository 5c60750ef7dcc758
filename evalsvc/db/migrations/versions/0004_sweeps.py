"""Stored sweeps: ``sweeps`` (a queued sweep, its lease and its JSON report), ``sweep_runs`` (the
quality runs each configuration made) and ``schedules.kind`` (a schedule fires a run or a sweep).

``POST /api/v1/sweeps`` and sweep schedules queue a row of ``sweeps``; a worker claims it like a
run and executes it through ``evalsvc.services.sweeps``. Schedules stored before this revision
are run schedules (``kind`` defaults to ``run``).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), server_default="run", nullable=False)
        )
    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("spec", sa.JSON(), nullable=False),
        sa.Column("report", sa.JSON(), nullable=True),
        sa.Column("progress", sa.JSON(), nullable=False),
        sa.Column("recommendation", sa.String(length=200), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("submitted_by", sa.String(length=200), nullable=True),
        sa.Column("schedule_id", sa.String(length=32), nullable=True),
        sa.Column("fire_time", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["schedule_id"],
            ["schedules.id"],
            name=op.f("fk_sweeps_schedule_id_schedules"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sweeps")),
        sa.UniqueConstraint(
            "schedule_id", "fire_time", name=op.f("uq_sweeps_schedule_id_fire_time")
        ),
    )
    with op.batch_alter_table("sweeps") as batch:
        batch.create_index("ix_sweeps_claim", ["status", "created_at"], unique=False)
        batch.create_index(batch.f("ix_sweeps_created_at"), ["created_at"], unique=False)
        batch.create_index(batch.f("ix_sweeps_schedule_id"), ["schedule_id"], unique=False)
    op.create_table(
        "sweep_runs",
        sa.Column("sweep_id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("config", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_sweep_runs_run_id_runs"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["sweep_id"],
            ["sweeps.id"],
            name=op.f("fk_sweep_runs_sweep_id_sweeps"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("sweep_id", "run_id", name=op.f("pk_sweep_runs")),
    )
    with op.batch_alter_table("sweep_runs") as batch:
        batch.create_index(batch.f("ix_sweep_runs_run_id"), ["run_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("sweep_runs") as batch:
        batch.drop_index(batch.f("ix_sweep_runs_run_id"))
    op.drop_table("sweep_runs")
    with op.batch_alter_table("sweeps") as batch:
        batch.drop_index(batch.f("ix_sweeps_schedule_id"))
        batch.drop_index(batch.f("ix_sweeps_created_at"))
        batch.drop_index("ix_sweeps_claim")
    op.drop_table("sweeps")
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("kind")
