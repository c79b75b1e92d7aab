"""billing at the joins: why collection is held, and the last collector alert of a subscription

Revision ID: 0011_h19a
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h19a"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as batch:
        batch.add_column(sa.Column("collection_hold", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("billing_alert", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("subscriptions") as batch:
        batch.drop_column("billing_alert")
        batch.drop_column("collection_hold")
