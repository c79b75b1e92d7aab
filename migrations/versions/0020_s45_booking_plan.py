"""bookings: the plan that pays the seat (subscription_id). A booking in a gym that requires a
plan spends a session of a pack or drop-in and gives it back when it ends unused, so it records
which plan it spent; a plan deleted leaves the booking without one

Revision ID: 0020_s45_booking_plan
Revises: 0019_s40_push_notices
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020_s45_booking_plan"
down_revision = "0019_s40_push_notices"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("bookings") as batch:
        batch.add_column(sa.Column("subscription_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_bookings_subscription_id_subscriptions"),
            "subscriptions",
            ["subscription_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_index(op.f("ix_bookings_subscription_id"), ["subscription_id"])


def downgrade() -> None:
    with op.batch_alter_table("bookings") as batch:
        batch.drop_index(op.f("ix_bookings_subscription_id"))
        batch.drop_constraint(op.f("fk_bookings_subscription_id_subscriptions"), type_="foreignkey")
        batch.drop_column("subscription_id")
