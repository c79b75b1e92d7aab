"""invitation_batches: bulk invites queued for the daemons, each address invited in a
transaction of its own (answered in the request, a large one outran it)

Revision ID: 0016_s36_invitation_batches
Revises: 0015_s33_forecast_runs
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016_s36_invitation_batches"
down_revision = "0015_s33_forecast_runs"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "invitation_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("actor_membership_id", sa.Uuid(), nullable=True),
        sa.Column(
            "role",
            sa.Enum(
                "owner",
                "admin",
                "coach",
                "member",
                name="invitation_batch_role",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("emails", JSON, nullable=False),
        sa.Column("results", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["actor_membership_id"],
            ["memberships.id"],
            name=op.f("fk_invitation_batches_actor_membership_id_memberships"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_invitation_batches_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invitation_batches")),
    )
    op.create_index(
        "ix_invitation_batches_organization_created",
        "invitation_batches",
        ["organization_id", "created_at"],
    )
    op.create_index(
        "ix_invitation_batches_status_created", "invitation_batches", ["status", "created_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_invitation_batches_status_created", table_name="invitation_batches")
    op.drop_index("ix_invitation_batches_organization_created", table_name="invitation_batches")
    op.drop_table("invitation_batches")
