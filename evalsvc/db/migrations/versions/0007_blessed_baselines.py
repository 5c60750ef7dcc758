"""Blessed baselines: ``blessed_baselines``, the baseline samples a later run reuses.

``evalsvc baselines bless RUN [RUN ...]`` (and ``POST /api/v1/baselines``) stores one row per
blessed suite: the key it is reused under (``fingerprint``: a hash of the baseline endpoint's
provenance fingerprint, the suite snapshot's fingerprint, the seed and the planned items), the
parts of that key (``key``, so a mismatch names the field that changed), the run whose samples
are reused (``run_id``), every run the blessing aggregates (``run_ids``) and the between-run
noise floor measured across them (``noise``). A revoked blessing keeps its row
(``revoked_at``) so a report that reused it still resolves. Rows go with their reused run
(``ON DELETE CASCADE``).

Revision ID: 0007_blessed_baselines
Revises: 0006
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007_blessed_baselines"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "blessed_baselines",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("suite", sa.String(length=200), nullable=False),
        sa.Column("endpoint_url", sa.String(length=2000), nullable=False),
        sa.Column("key", sa.JSON(), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("run_ids", sa.JSON(), nullable=False),
        sa.Column("items", sa.Integer(), nullable=False),
        sa.Column("noise", sa.JSON(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("blessed_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_blessed_baselines_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_blessed_baselines")),
    )
    with op.batch_alter_table("blessed_baselines") as batch:
        batch.create_index(batch.f("ix_blessed_baselines_fingerprint"), ["fingerprint"], unique=False)
        batch.create_index(batch.f("ix_blessed_baselines_run_id"), ["run_id"], unique=False)
        batch.create_index(batch.f("ix_blessed_baselines_created_at"), ["created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("blessed_baselines") as batch:
        batch.drop_index(batch.f("ix_blessed_baselines_created_at"))
        batch.drop_index(batch.f("ix_blessed_baselines_run_id"))
        batch.drop_index(batch.f("ix_blessed_baselines_fingerprint"))
    op.drop_table("blessed_baselines")
