"""Endpoint identity on what a run reuses, and calibration adoption (issue 47).

- ``endpoint_snapshots.identity``: the endpoint a run measured, as the operator names it: its
  registered name when the run's ref carried a name registered with that URL, else its
  normalized base URL (``evalsvc.services.identity``). Recorded when the probe answers; rows
  from before this revision keep NULL, and nothing measured on them is reused.
- ``blessed_baselines.endpoint``: the identity of the endpoint a blessing was measured on; a
  run reuses a blessing only when its own baseline has the same identity (and key). NULL on
  blessings made before: never reused (bless again).
- ``calibration_adoptions``: one row per calibration (an A/A run) an admin adopted, or that
  an admin or the local operator ran: only those feed gates and ``plan``. Rows go with their run.

Revision ID: 0009_endpoint_identity
Revises: 0008_alerts
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_endpoint_identity"
down_revision: str | None = "0008_alerts"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("endpoint_snapshots") as batch:
        batch.add_column(sa.Column("identity", sa.String(length=2000), nullable=True))
    with op.batch_alter_table("blessed_baselines") as batch:
        batch.add_column(sa.Column("endpoint", sa.String(length=2000), nullable=True))
    op.create_table(
        "calibration_adoptions",
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("adopted_by", sa.String(length=200), nullable=True),
        sa.Column("adopted_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_calibration_adoptions_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_calibration_adoptions")),
    )


def downgrade() -> None:
    op.drop_table("calibration_adoptions")
    with op.batch_alter_table("blessed_baselines") as batch:
        batch.drop_column("endpoint")
    with op.batch_alter_table("endpoint_snapshots") as batch:
        batch.drop_column("identity")
