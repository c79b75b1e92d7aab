"""bridge: expression indexes so the schedule poll and the booking reconcile read only the
poll window's entity-map rows (their cost follows the window, not the organization's history)

Revision ID: 0011_h18
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_h18"
down_revision = "0010"
branch_labels = None
depends_on = None

# The same spelling as gymctl.bridge.polling.json_text, or the planner would not use them.
INDEXES = {
    "ix_bridge_entity_map_schedule_ref": "scheduleId",  # a booking's class
    "ix_bridge_entity_map_day": "date",  # a class's day
}


def _member(key: str) -> str:
    if op.get_bind().dialect.name == "postgresql":
        return f"(metadata ->> '{key}')"
    return f"json_extract(metadata, '$.{key}')"


def upgrade() -> None:
    for name, key in INDEXES.items():
        op.create_index(
            name,
            "bridge_entity_map",
            ["organization_id", "entity_type", sa.text(_member(key))],
        )


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="bridge_entity_map")
