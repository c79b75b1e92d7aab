"""assets: brand assets, member app draft slots, rate windows

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21 07:23:46.384648
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_windows",
        sa.Column("key", sa.String(length=256), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("key", "window_start", name=op.f("pk_rate_windows")),
    )
    op.create_index("ix_rate_windows_window_start", "rate_windows", ["window_start"], unique=False)
    op.create_table(
        "brand_assets",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("slot", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=1024), nullable=False),
        sa.Column("content_type", sa.String(length=64), nullable=False),
        sa.Column("width", sa.Integer(), nullable=False),
        sa.Column("height", sa.Integer(), nullable=False),
        sa.Column("bytes", sa.BigInteger(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column(
            "report",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_brand_assets_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_brand_assets")),
        sa.UniqueConstraint("key", name=op.f("uq_brand_assets_key")),
    )
    op.create_index(
        op.f("ix_brand_assets_organization_id"), "brand_assets", ["organization_id"], unique=False
    )
    op.create_table(
        "member_app_draft_assets",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("slot", sa.String(length=32), nullable=False),
        sa.Column("asset_id", sa.Uuid(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["asset_id"],
            ["brand_assets.id"],
            name=op.f("fk_member_app_draft_assets_asset_id_brand_assets"),
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_member_app_draft_assets_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("organization_id", "slot", name=op.f("pk_member_app_draft_assets")),
    )


def downgrade() -> None:
    op.drop_table("member_app_draft_assets")
    op.drop_index(op.f("ix_brand_assets_organization_id"), table_name="brand_assets")
    op.drop_table("brand_assets")
    op.drop_index("ix_rate_windows_window_start", table_name="rate_windows")
    op.drop_table("rate_windows")
