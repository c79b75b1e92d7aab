"""bridge: bridge connection, entity map, sync queue

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
WAITING = "status IN ('pending', 'failed')"
UNFINISHED = "status IN ('pending', 'in_flight', 'failed', 'parked')"
OP_TYPES = (
    "user.create",
    "user.update",
    "membership.assign",
    "membership.update",
    "membership.cancel",
    "membership.hold",
    "booking.create",
    "booking.cancel",
    "lead.create",
    "schedule.coach",
)
OP_STATUSES = ("pending", "in_flight", "succeeded", "failed", "parked", "superseded", "dismissed")
ENTITY_TYPES = (
    "member",
    "membership_type",
    "membership",
    "schedule",
    "booking",
    "lead",
    "location",
    "staff",
)


def _enum(name: str, values: tuple[str, ...]) -> sa.Enum:
    return sa.Enum(*values, name=name, native_enum=False, create_constraint=True, length=32)


def _organization_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["organization_id"],
        ["organizations.id"],
        name=op.f(f"fk_{table}_organization_id_organizations"),
        ondelete="CASCADE",
    )


def upgrade() -> None:
    op.create_table(
        "integration_connections",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column(
            "status",
            _enum("integration_connection_status", ("pending", "active", "revoked", "error")),
            nullable=False,
        ),
        sa.Column("credentials_ciphertext", sa.String(length=1024), nullable=True),
        sa.Column("external_account_id", sa.String(length=64), nullable=True),
        sa.Column("bridge_membership_type_id", sa.String(length=64), nullable=True),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("connected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("disconnected_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("schedule_poll_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reconcile_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_schedule_poll_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_reconcile_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_run", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _organization_fk("integration_connections"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_integration_connections")),
        sa.UniqueConstraint(
            "organization_id", name=op.f("uq_integration_connections_organization_id")
        ),
    )
    op.create_table(
        "bridge_entity_map",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("entity_type", _enum("bridge_entity_type", ENTITY_TYPES), nullable=False),
        sa.Column("platform_id", sa.String(length=128), nullable=True),
        sa.Column("external_id", sa.String(length=128), nullable=False),
        sa.Column(
            "origin",
            _enum("bridge_entity_origin", ("import", "mirror", "poll", "manual")),
            nullable=False,
        ),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _organization_fk("bridge_entity_map"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bridge_entity_map")),
        sa.UniqueConstraint(
            "organization_id",
            "entity_type",
            "external_id",
            name=op.f("uq_bridge_entity_map_organization_id_entity_type_external_id"),
        ),
        sa.UniqueConstraint(
            "organization_id",
            "entity_type",
            "platform_id",
            name=op.f("uq_bridge_entity_map_organization_id_entity_type_platform_id"),
        ),
    )
    op.create_table(
        "bridge_sync_ops",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("op_type", _enum("bridge_op_type", OP_TYPES), nullable=False),
        sa.Column("aggregate_key", sa.String(length=160), nullable=False),
        sa.Column("dedupe_key", sa.String(length=200), nullable=True),
        sa.Column("payload", JSON, nullable=False),
        sa.Column("status", _enum("bridge_op_status", OP_STATUSES), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.String(length=300), nullable=True),
        sa.Column("issue_code", sa.String(length=64), nullable=True),
        sa.Column("run_after", sa.DateTime(timezone=True), nullable=False),
        sa.Column("lease_owner", sa.String(length=64), nullable=True),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("superseded_by_id", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        _organization_fk("bridge_sync_ops"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bridge_sync_ops")),
        sa.UniqueConstraint("dedupe_key", name=op.f("uq_bridge_sync_ops_dedupe_key")),
    )
    op.create_index(
        "ix_bridge_sync_ops_waiting",
        "bridge_sync_ops",
        ["organization_id", "id"],
        unique=False,
        postgresql_where=sa.text(WAITING),
        sqlite_where=sa.text(WAITING),
    )
    op.create_index(
        "ix_bridge_sync_ops_unfinished_key",
        "bridge_sync_ops",
        ["aggregate_key", "id"],
        unique=False,
        postgresql_where=sa.text(UNFINISHED),
        sqlite_where=sa.text(UNFINISHED),
    )
    op.create_index(
        "uq_bridge_sync_ops_in_flight_key",
        "bridge_sync_ops",
        ["aggregate_key"],
        unique=True,
        postgresql_where=sa.text("status = 'in_flight'"),
        sqlite_where=sa.text("status = 'in_flight'"),
    )
    op.create_index(
        "ix_bridge_sync_ops_organization_id_status",
        "bridge_sync_ops",
        ["organization_id", "status"],
        unique=False,
    )
    op.create_table(
        "bridge_roster",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("external_id", sa.String(length=128), nullable=False),
        sa.Column("first_name", sa.String(length=200), nullable=True),
        sa.Column("last_name", sa.String(length=200), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        _organization_fk("bridge_roster"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bridge_roster")),
        sa.UniqueConstraint(
            "organization_id",
            "external_id",
            name=op.f("uq_bridge_roster_organization_id_external_id"),
        ),
    )


def downgrade() -> None:
    op.drop_table("bridge_roster")
    op.drop_index("ix_bridge_sync_ops_organization_id_status", table_name="bridge_sync_ops")
    op.drop_index("uq_bridge_sync_ops_in_flight_key", table_name="bridge_sync_ops")
    op.drop_index("ix_bridge_sync_ops_unfinished_key", table_name="bridge_sync_ops")
    op.drop_index("ix_bridge_sync_ops_waiting", table_name="bridge_sync_ops")
    op.drop_table("bridge_sync_ops")
    op.drop_table("bridge_entity_map")
    op.drop_table("integration_connections")
