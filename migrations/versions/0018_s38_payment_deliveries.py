"""payment_webhook_deliveries: another provider's verified webhook, keyed by its body's digest,
so a replayed or redelivered one is answered as a duplicate and not recorded again

Revision ID: 0018_s38_payment_deliveries
Revises: 0017_s36_member_imports
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018_s38_payment_deliveries"
down_revision = "0017_s36_member_imports"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "payment_webhook_deliveries",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("body_sha256", sa.String(length=64), nullable=False),
        sa.Column("received_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_payment_webhook_deliveries_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "organization_id",
            "provider",
            "body_sha256",
            name=op.f("pk_payment_webhook_deliveries"),
        ),
    )


def downgrade() -> None:
    op.drop_table("payment_webhook_deliveries")
