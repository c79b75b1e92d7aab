"""subscriptions: an index by member (user_id). plan_already_held, asked at every purchase and
every debt payment, and a member's own list found a member's rows through the plan's or the
organization's index, walking every subscription of a popular plan (1 ms at 5,000 holders on
the embedded default, 0.007 ms by member)

Revision ID: 0013_s30_subscriptions_by_user
Revises: 0012_h18_class_order
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0013_s30_subscriptions_by_user"
down_revision = "0012_h18_class_order"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_subscriptions_user", "subscriptions", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_subscriptions_user", table_name="subscriptions")
