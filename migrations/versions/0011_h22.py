"""movements: secondary muscles and mechanics, which the movement's embedding reads (issue 22)

Revision ID: 0011_h22
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h22"
down_revision = "0011_h23"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("movements") as batch:
        batch.add_column(
            sa.Column("secondary_muscles", sa.JSON(), nullable=False, server_default="[]")
        )
        batch.add_column(sa.Column("mechanic", sa.String(length=32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("movements") as batch:
        batch.drop_column("mechanic")
        batch.drop_column("secondary_muscles")
