"""plan_already_held in the database: one active or scheduled holder of a recurring plan

Revision ID: 0011_h19b
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h19b"
down_revision = "0011_h22"
branch_labels = None
depends_on = None

# Spelled out (not imported): a migration keeps the shape it was written with.
WHERE = (
    "status IN ('active', 'scheduled') AND deleted_at IS NULL AND plan_type = 'card' "
    "AND interval_months IS NOT NULL"
)


def upgrade() -> None:
    held_twice = sa.text(
        "SELECT plan_id, user_id, COUNT(*) FROM subscriptions WHERE "  # noqa: S608 (constant)
        + WHERE
        + " GROUP BY plan_id, user_id HAVING COUNT(*) > 1"
    )
    duplicates = op.get_bind().execute(held_twice).all()
    if duplicates:
        # Each of them may carry money: which one stays is a person's decision, not ours.
        pairs = ", ".join(f"plan {row[0]} / user {row[1]} ({row[2]})" for row in duplicates)
        raise RuntimeError(
            "members hold a recurring plan twice; cancel the extra subscriptions (and refund "
            f"what they took) before upgrading: {pairs}"
        )
    op.create_index(
        "uq_subscriptions_plan_held",
        "subscriptions",
        ["plan_id", "user_id"],
        unique=True,
        postgresql_where=sa.text(WHERE),
        sqlite_where=sa.text(WHERE),
    )


def downgrade() -> None:
    op.drop_index("uq_subscriptions_plan_held", table_name="subscriptions")
