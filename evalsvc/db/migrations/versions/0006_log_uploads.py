"""Uploaded logs wait in the database for a worker: ``log_uploads`` and ``log_upload_chunks``.

``POST /api/v1/gate-logs`` used to gate the uploaded logs inside the request. It now stores the
files here (a row per upload with the gate options and the file names, the bytes in chunks of at
most 1 MiB) with a queued run, and a worker gates them like any run. The database, not a
directory, holds them so that a worker on another host (PostgreSQL deployments) reads them as it
reads the run. Rows go with their run (``ON DELETE CASCADE``) and are deleted by the worker once
the run has ended.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "log_uploads",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("submitted_by", sa.String(length=200), nullable=True),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("total_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_log_uploads_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_log_uploads")),
    )
    op.create_index(
        op.f("ix_log_uploads_submitted_by"), "log_uploads", ["submitted_by"], unique=False
    )
    op.create_table(
        "log_upload_chunks",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("file_no", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["log_uploads.run_id"],
            name=op.f("fk_log_upload_chunks_run_id_log_uploads"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", "file_no", "seq", name=op.f("pk_log_upload_chunks")),
    )


def downgrade() -> None:
    op.drop_table("log_upload_chunks")
    op.drop_index(op.f("ix_log_uploads_submitted_by"), table_name="log_uploads")
    op.drop_table("log_uploads")
