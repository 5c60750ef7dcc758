"""Registered endpoints may name the model's own tokenizer: ``endpoints.tokenizer``.

A path (a ``tokenizer.json`` or a checkpoint directory holding one) on the machine that runs
the suites, used by the token-sized kinds (``needle``, ``longctx``) when the engine has no
tokenize route. Endpoints registered before this revision have none.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.add_column(sa.Column("tokenizer", sa.String(length=1000), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("endpoints") as batch:
        batch.drop_column("tokenizer")
