"""member_imports and member_import_rows: roster imports over HTTP queued for the daemons, a
chunk of rows a transaction (registered in the request, a roster past about 4,500 rows outran
it and rolled back)

Revision ID: 0017_s36_member_imports
Revises: 0016_s36_invitation_batches
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0017_s36_member_imports"
down_revision = "0016_s36_invitation_batches"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade() -> None:
    op.create_table(
        "member_imports",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("actor_membership_id", sa.Uuid(), nullable=True),
        sa.Column("ip", sa.String(length=64), nullable=True),
        sa.Column("path", sa.String(length=300), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("invalid", JSON, nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error_code", sa.String(length=64), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["actor_membership_id"],
            ["memberships.id"],
            name=op.f("fk_member_imports_actor_membership_id_memberships"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_member_imports_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_member_imports")),
    )
    op.create_index(
        "ix_member_imports_organization_created",
        "member_imports",
        ["organization_id", "created_at"],
    )
    op.create_index("ix_member_imports_status_created", "member_imports", ["status", "created_at"])
    op.create_table(
        "member_import_rows",
        sa.Column("import_id", sa.Uuid(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["import_id"],
            ["member_imports.id"],
            name=op.f("fk_member_import_rows_import_id_member_imports"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("import_id", "position", name=op.f("pk_member_import_rows")),
    )


def downgrade() -> None:
    op.drop_table("member_import_rows")
    op.drop_index("ix_member_imports_status_created", table_name="member_imports")
    op.drop_index("ix_member_imports_organization_created", table_name="member_imports")
    op.drop_table("member_imports")
