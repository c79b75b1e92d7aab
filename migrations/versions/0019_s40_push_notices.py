"""push_notices: an outbox event pushed to its member's devices, one per event; the app's
language on each push registration (X-Locale when it registered); outbox events by name and
time, for the member notices' every-minute look at the last days

Revision ID: 0019_s40_push_notices
Revises: 0018_s38_payment_deliveries
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019_s40_push_notices"
down_revision = "0018_s38_payment_deliveries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("push_registrations") as batch:
        batch.add_column(sa.Column("locale", sa.String(length=8), nullable=True))
    op.create_table(
        "push_notices",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column(
            "outbox_event_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            nullable=False,
        ),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("sent", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_push_notices_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_push_notices_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_push_notices")),
        sa.UniqueConstraint("outbox_event_id", name=op.f("uq_push_notices_outbox_event_id")),
    )
    op.create_index("ix_outbox_events_name_occurred_at", "outbox_events", ["name", "occurred_at"])


def downgrade() -> None:
    op.drop_index("ix_outbox_events_name_occurred_at", table_name="outbox_events")
    op.drop_table("push_notices")
    with op.batch_alter_table("push_registrations") as batch:
        batch.drop_column("locale")
