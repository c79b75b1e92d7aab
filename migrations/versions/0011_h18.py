"""bridge: expression indexes so the schedule poll and the booking reconcile read only the
poll window's entity-map rows (their cost follows the window, not the organization's history);
bridge_issues, the owner's inbox of external changes only a person can settle;
bridge_series_cutovers, the day each recurring class series moves its source of truth

Revision ID: 0011_h18
Revises: 0010
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0011_h18"
down_revision = "0011_h19a"
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


JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "bridge_issues",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("subject", sa.String(length=160), nullable=False),
        sa.Column("details", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name="fk_bridge_issues_organization_id_organizations",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_bridge_issues"),
        sa.UniqueConstraint("organization_id", "kind", "subject", name="uq_bridge_issues_subject"),
    )
    op.create_table(
        "bridge_series_cutovers",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("class_type_id", sa.Uuid(), nullable=False),
        sa.Column("weekday", sa.Integer(), nullable=False),
        sa.Column("start_time", sa.String(length=5), nullable=False),
        sa.Column("cutover_on", sa.Date(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name="fk_bridge_series_cutovers_organization_id_organizations",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["class_type_id"],
            ["class_types.id"],
            name="fk_bridge_series_cutovers_class_type_id_class_types",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name="pk_bridge_series_cutovers"),
        sa.UniqueConstraint(
            "organization_id",
            "class_type_id",
            "weekday",
            "start_time",
            name="uq_bridge_series_cutovers_series",
        ),
    )
    # The mirror reads an entity's last op by its aggregate (every status): no scan of the
    # organization's history per change.
    op.create_index(
        "ix_bridge_sync_ops_aggregate_key_id", "bridge_sync_ops", ["aggregate_key", "id"]
    )
    for name, key in INDEXES.items():
        op.create_index(
            name,
            "bridge_entity_map",
            ["organization_id", "entity_type", sa.text(_member(key))],
        )


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="bridge_entity_map")
    op.drop_index("ix_bridge_sync_ops_aggregate_key_id", table_name="bridge_sync_ops")
    op.drop_table("bridge_series_cutovers")
    op.drop_table("bridge_issues")
