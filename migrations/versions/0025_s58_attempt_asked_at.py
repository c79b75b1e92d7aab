"""payment_transactions: asked_at, when recovery last asked the provider about a pending
attempt that stayed pending; a recovery batch takes the attempts never asked, then those asked
longest ago (gymctl.billing.collector.pending_attempts). Attempts pending now start unasked.

Revision ID: 0025_s58_attempt_asked_at
Revises: 0024_s58_gym_zone_names
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_s58_attempt_asked_at"
down_revision = "0024_s58_gym_zone_names"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "payment_transactions", sa.Column("asked_at", sa.DateTime(timezone=True), nullable=True)
    )


def downgrade() -> None:
    with op.batch_alter_table("payment_transactions") as batch:
        batch.drop_column("asked_at")
