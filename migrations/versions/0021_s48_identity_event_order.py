"""users: signed_up_at (when the identity provider's user.created was applied, so its sign-up
effects happen once whatever delivery id it comes under) and identity_synced_at (the
provider's updated_at, in milliseconds, of the newest user object applied, so an older one
delivered late writes nothing)

Revision ID: 0021_s48_identity_event_order
Revises: 0020_s45_booking_plan
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021_s48_identity_event_order"
down_revision = "0020_s45_booking_plan"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("signed_up_at", sa.DateTime(timezone=True), nullable=True))
        batch.add_column(sa.Column("identity_synced_at", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.drop_column("identity_synced_at")
        batch.drop_column("signed_up_at")
