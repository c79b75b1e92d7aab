"""branding: palettes, published brand, workspace, minisites

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
TABLES = (
    "brand_drafts",
    "brand_revisions",
    "websites",
    "website_revisions",
    "member_app_drafts",
    "member_app_versions",
)


def _organization(table: str) -> list:
    return [
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f(f"fk_{table}_organization_id_organizations"),
            ondelete="CASCADE",
        ),
    ]


def _at(name: str, *, nullable: bool = False) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "brand_drafts",
        *_organization("brand_drafts"),
        sa.Column("palette", JSON, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("logos", JSON, nullable=False),
        _at("updated_at"),
        sa.Column("updated_by_user_id", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_brand_drafts")),
    )
    op.create_table(
        "brand_revisions",
        *_organization("brand_revisions"),
        sa.Column("revision", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("palette", JSON, nullable=False),
        sa.Column("name", sa.String(length=200), nullable=True),
        sa.Column("logos", JSON, nullable=False),
        sa.Column("brand", JSON, nullable=False),
        _at("published_at"),
        sa.Column("published_by_user_id", sa.Uuid(), nullable=True),
        _at("unpublished_at", nullable=True),
        sa.PrimaryKeyConstraint("organization_id", "revision", name=op.f("pk_brand_revisions")),
    )
    op.create_table(
        "websites",
        *_organization("websites"),
        sa.Column("adopted_schema", sa.Integer(), nullable=True),
        sa.Column("draft_revision", sa.Integer(), nullable=False),
        sa.Column("published_content_revision", sa.Integer(), nullable=True),
        sa.Column("published_brand_revision", sa.Integer(), nullable=True),
        _at("published_at", nullable=True),
        _at("updated_at"),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_websites")),
    )
    op.create_table(
        "website_revisions",
        *_organization("website_revisions"),
        sa.Column("revision", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("content", JSON, nullable=False),
        _at("created_at"),
        sa.Column("created_by_user_id", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("organization_id", "revision", name=op.f("pk_website_revisions")),
    )
    op.create_table(
        "member_app_drafts",
        *_organization("member_app_drafts"),
        sa.Column("display_name", sa.String(length=60), nullable=True),
        _at("updated_at"),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_member_app_drafts")),
    )
    op.create_table(
        "member_app_versions",
        *_organization("member_app_versions"),
        sa.Column("version", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("display_name", sa.String(length=60), nullable=True),
        sa.Column("assets", JSON, nullable=False),
        sa.Column("brand_revision", sa.Integer(), nullable=True),
        _at("published_at"),
        sa.Column("published_by_user_id", sa.Uuid(), nullable=True),
        _at("unpublished_at", nullable=True),
        _at("screenshot_attested_at", nullable=True),
        sa.Column("screenshot_attested_by_user_id", sa.Uuid(), nullable=True),
        _at("internal_smoke_attested_at", nullable=True),
        sa.Column("internal_smoke_attested_by_user_id", sa.Uuid(), nullable=True),
        sa.PrimaryKeyConstraint("organization_id", "version", name=op.f("pk_member_app_versions")),
    )


def downgrade() -> None:
    for table in reversed(TABLES):
        op.drop_table(table)
