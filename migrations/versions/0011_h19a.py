"""billing at the joins: why collection is held, the last collector alert of a subscription,
and the member-facing billing emails sent

Revision ID: 0011_h19a
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h19a"
down_revision = "0011_h19b"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions") as batch:
        batch.add_column(sa.Column("collection_hold", sa.String(length=64), nullable=True))
        batch.add_column(sa.Column("billing_alert", sa.String(length=64), nullable=True))
    op.create_table(
        "member_emails",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column(
            "outbox_event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_member_emails_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_member_emails_subscription_id_subscriptions"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_member_emails")),
        sa.UniqueConstraint("outbox_event_id", name=op.f("uq_member_emails_outbox_event_id")),
    )


def downgrade() -> None:
    op.drop_table("member_emails")
    with op.batch_alter_table("subscriptions") as batch:
        batch.drop_column("billing_alert")
        batch.drop_column("collection_hold")
