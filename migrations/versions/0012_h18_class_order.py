"""bridge: booking ops may carry their class session's key (class_key): a booking.create that
carries it waits for an earlier unfinished booking.cancel of the same class (the seat it may
need), with a partial index that keeps that check an index probe. Waiting booking ops get the
key on upgrade (every create waits then: the safe side)

Revision ID: 0012_h18_class_order
Revises: 0011_h18
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_h18_class_order"
down_revision = "0011_h18"
branch_labels = None
depends_on = None

# Waiting bookings keep their class's order across the upgrade.
BACKFILL_PG = (
    "UPDATE bridge_sync_ops SET class_key = 'class:' || (payload ->> 'sessionId') "
    "WHERE op_type IN ('booking.create', 'booking.cancel') "
    "AND status IN ('pending', 'in_flight', 'failed', 'parked')"
)
BACKFILL_SQLITE = BACKFILL_PG.replace(
    "(payload ->> 'sessionId')", "json_extract(payload, '$.sessionId')"
)
UNFINISHED = "class_key IS NOT NULL AND status IN ('pending', 'in_flight', 'failed', 'parked')"


def upgrade() -> None:
    op.add_column("bridge_sync_ops", sa.Column("class_key", sa.String(length=160), nullable=True))
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.execute(BACKFILL_PG if postgresql else BACKFILL_SQLITE)
    op.create_index(
        "ix_bridge_sync_ops_unfinished_class",
        "bridge_sync_ops",
        ["class_key", "id"],
        unique=False,
        postgresql_where=sa.text(UNFINISHED),
        sqlite_where=sa.text(UNFINISHED),
    )


def downgrade() -> None:
    op.drop_index("ix_bridge_sync_ops_unfinished_class", table_name="bridge_sync_ops")
    with op.batch_alter_table("bridge_sync_ops") as batch:
        batch.drop_column("class_key")
