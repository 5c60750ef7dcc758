"""Runs record who queued them: ``runs.submitted_by`` (the API token's name).

``POST /runs`` stores the caller's token name; ``POST /runs/{id}/cancel`` is then limited to
that token and admin tokens. Runs stored before this revision, scheduled runs and runs queued
from the CLI have none (admins only may cancel them through the API).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("submitted_by", sa.String(length=200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("submitted_by")
