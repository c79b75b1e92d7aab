"""access: invitations, sales grants, join links, leads, tasks, sessions, email ownership

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21 06:51:36.751530
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "invitations",
        sa.Column("organization_id", sa.Uuid(), nullable=True),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column(
            "role",
            sa.Enum(
                "owner",
                "admin",
                "coach",
                "member",
                name="invitation_role",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "status",
            sa.Enum(
                "pending",
                "accepted",
                "revoked",
                "expired",
                name="invitation_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("invited_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("provider_invitation_id", sa.String(length=128), nullable=True),
        sa.Column("token_version", sa.Integer(), nullable=False),
        sa.Column("send_count", sa.Integer(), nullable=False),
        sa.Column("last_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("accepted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("accepted_user_id", sa.Uuid(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_invitations_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_invitations_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_invitations")),
    )
    op.create_index(
        "ix_invitations_email_lower_status",
        "invitations",
        [sa.literal_column("lower(email)"), "status"],
        unique=False,
    )
    op.create_index(
        "ix_invitations_organization_id_status",
        "invitations",
        ["organization_id", "status"],
        unique=False,
    )
    op.create_index(
        "ix_invitations_pending_expires_at",
        "invitations",
        ["expires_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.create_table(
        "join_links",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("label", sa.String(length=200), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("plan_id", sa.Uuid(), nullable=True),
        sa.Column("created_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_join_links_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_join_links")),
        sa.UniqueConstraint("token", name=op.f("uq_join_links_token")),
    )
    op.create_index(
        op.f("ix_join_links_organization_id"), "join_links", ["organization_id"], unique=False
    )
    op.create_table(
        "leads",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("converted_user_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_leads_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_leads")),
    )
    op.create_index(op.f("ix_leads_organization_id"), "leads", ["organization_id"], unique=False)
    op.create_table(
        "tasks",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("priority", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("title", sa.String(length=300), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("subject_type", sa.String(length=64), nullable=True),
        sa.Column("subject_id", sa.String(length=128), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_tasks_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
        sa.UniqueConstraint(
            "organization_id",
            "kind",
            "subject_type",
            "subject_id",
            name=op.f("uq_tasks_organization_id_kind_subject_type_subject_id"),
        ),
    )
    op.create_index(
        "ix_tasks_organization_id_status_due_at",
        "tasks",
        ["organization_id", "status", "due_at"],
        unique=False,
    )
    op.create_table(
        "user_sessions",
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("session_id", sa.String(length=128), nullable=False),
        sa.Column("ip", sa.String(length=64), nullable=True),
        sa.Column("city", sa.String(length=128), nullable=True),
        sa.Column("country", sa.String(length=64), nullable=True),
        sa.Column("user_agent", sa.String(length=512), nullable=True),
        sa.Column("impersonated_by", sa.String(length=128), nullable=True),
        sa.Column("first_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_user_sessions_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_user_sessions")),
        sa.UniqueConstraint(
            "user_id", "session_id", name=op.f("uq_user_sessions_user_id_session_id")
        ),
    )
    op.create_index(
        "ix_user_sessions_user_id_last_seen_at",
        "user_sessions",
        ["user_id", "last_seen_at"],
        unique=False,
    )
    op.create_table(
        "join_submissions",
        sa.Column("join_link_id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("ip", sa.String(length=64), nullable=True),
        sa.Column("user_agent", sa.String(length=512), nullable=True),
        sa.Column(
            "data",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["join_link_id"],
            ["join_links.id"],
            name=op.f("fk_join_submissions_join_link_id_join_links"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_join_submissions")),
    )
    op.create_index(
        "ix_join_submissions_email_lower",
        "join_submissions",
        [sa.literal_column("lower(email)")],
        unique=False,
    )
    op.create_table(
        "sales_grants",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("membership_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("manager", sa.Boolean(), nullable=False),
        sa.Column("granted_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["membership_id"],
            ["memberships.id"],
            name=op.f("fk_sales_grants_membership_id_memberships"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_sales_grants_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sales_grants")),
    )
    op.create_index(
        "uq_sales_grants_live_membership",
        "sales_grants",
        ["membership_id"],
        unique=True,
        postgresql_where=sa.text("revoked_at IS NULL"),
        sqlite_where=sa.text("revoked_at IS NULL"),
    )
    # Batch mode: SQLite gets the tier CHECK constraint through a table copy.
    with op.batch_alter_table("organizations") as batch:
        batch.add_column(
            sa.Column(
                "tier",
                sa.Enum(
                    "starter",
                    "growth",
                    "elite",
                    name="organization_tier",
                    native_enum=False,
                    create_constraint=True,
                    length=32,
                ),
                nullable=False,
                server_default="starter",
            ),
        )
        batch.add_column(
            sa.Column("join_enabled", sa.Boolean(), nullable=False, server_default=sa.true()),
        )
        batch.add_column(
            sa.Column("onboarding_completed_at", sa.DateTime(timezone=True), nullable=True),
        )
    op.add_column("users", sa.Column("name", sa.String(length=200), nullable=True))
    op.add_column(
        "users", sa.Column("email_verified_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("users", sa.Column("email_verified_by", sa.String(length=128), nullable=True))
    op.add_column(
        "users",
        sa.Column("signup_origin", sa.String(length=32), nullable=False, server_default="self"),
    )
    op.add_column("users", sa.Column("signup_organization_id", sa.Uuid(), nullable=True))
    op.add_column("users", sa.Column("signup_join_link_id", sa.Uuid(), nullable=True))
    op.add_column("users", sa.Column("created_by_user_id", sa.Uuid(), nullable=True))
    op.add_column(
        "users", sa.Column("national_id_ciphertext", sa.String(length=512), nullable=True)
    )
    # Logins linked before email ownership was tracked were linked under the provider's word.
    op.execute(
        "UPDATE users SET email_verified_at = created_at, email_verified_by = 'migration' "
        "WHERE identity_id IS NOT NULL"
    )


def downgrade() -> None:
    op.drop_column("users", "national_id_ciphertext")
    op.drop_column("users", "created_by_user_id")
    op.drop_column("users", "signup_join_link_id")
    op.drop_column("users", "signup_organization_id")
    op.drop_column("users", "signup_origin")
    op.drop_column("users", "email_verified_by")
    op.drop_column("users", "email_verified_at")
    op.drop_column("users", "name")
    op.drop_column("organizations", "onboarding_completed_at")
    op.drop_column("organizations", "join_enabled")
    op.drop_column("organizations", "tier")
    op.drop_index(
        "uq_sales_grants_live_membership",
        table_name="sales_grants",
        postgresql_where=sa.text("revoked_at IS NULL"),
        sqlite_where=sa.text("revoked_at IS NULL"),
    )
    op.drop_table("sales_grants")
    op.drop_index("ix_join_submissions_email_lower", table_name="join_submissions")
    op.drop_table("join_submissions")
    op.drop_index("ix_user_sessions_user_id_last_seen_at", table_name="user_sessions")
    op.drop_table("user_sessions")
    op.drop_index("ix_tasks_organization_id_status_due_at", table_name="tasks")
    op.drop_table("tasks")
    op.drop_index(op.f("ix_leads_organization_id"), table_name="leads")
    op.drop_table("leads")
    op.drop_index(op.f("ix_join_links_organization_id"), table_name="join_links")
    op.drop_table("join_links")
    op.drop_index(
        "ix_invitations_pending_expires_at",
        table_name="invitations",
        postgresql_where=sa.text("status = 'pending'"),
        sqlite_where=sa.text("status = 'pending'"),
    )
    op.drop_index("ix_invitations_organization_id_status", table_name="invitations")
    op.drop_index("ix_invitations_email_lower_status", table_name="invitations")
    op.drop_table("invitations")
