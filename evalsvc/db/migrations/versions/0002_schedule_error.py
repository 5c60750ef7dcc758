"""Schedules remember why they last failed to fire: ``last_error`` and ``last_error_at``.

A schedule whose template cannot be queued (a value the database refuses, a template that no
longer validates) is skipped with its error recorded, so that one bad schedule never stops the
others and ``evalsvc schedules list`` / ``GET /schedules`` show what is wrong.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.add_column(sa.Column("last_error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("last_error_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("last_error_at")
        batch.drop_column("last_error")
