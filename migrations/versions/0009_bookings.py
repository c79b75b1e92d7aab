"""cancellations, retention cases and contacts, class types, sessions, bookings

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


SUBSCRIPTION_STATUSES = (
    "scheduled",
    "active",
    "past_due",
    "debt",
    "cancelled",
    "expired",
    "gift_ended",
    "term_ended",
)


def _status_check(statuses: tuple[str, ...]) -> None:
    """subscriptions.status gains `paused`: its CHECK is rebuilt (SQLite: batch copy)."""
    listed = ", ".join(f"'{status}'" for status in statuses)
    with op.batch_alter_table("subscriptions", recreate="auto") as batch:
        batch.drop_constraint(op.f("ck_subscriptions_subscription_status"), type_="check")
        batch.create_check_constraint(
            op.f("ck_subscriptions_subscription_status"), f"status IN ({listed})"
        )


def upgrade() -> None:
    op.create_table(
        "class_types",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("description", sa.Text(), nullable=True),
        sa.Column("default_capacity", sa.Integer(), nullable=False),
        sa.Column("duration_minutes", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.CheckConstraint(
            "default_capacity >= 0", name=op.f("ck_class_types_capacity_not_negative")
        ),
        sa.CheckConstraint("duration_minutes > 0", name=op.f("ck_class_types_duration_positive")),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_class_types_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_class_types")),
    )
    op.create_index(
        op.f("ix_class_types_organization_id"), "class_types", ["organization_id"], unique=False
    )
    op.create_table(
        "class_sessions",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("class_type_id", sa.Uuid(), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("capacity", sa.Integer(), nullable=False),
        sa.Column("coach_user_id", sa.Uuid(), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("attendance_closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.CheckConstraint("capacity >= 0", name=op.f("ck_class_sessions_capacity_not_negative")),
        sa.CheckConstraint("ends_at > starts_at", name=op.f("ck_class_sessions_ends_after_start")),
        sa.ForeignKeyConstraint(
            ["class_type_id"],
            ["class_types.id"],
            name=op.f("fk_class_sessions_class_type_id_class_types"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["coach_user_id"],
            ["users.id"],
            name=op.f("fk_class_sessions_coach_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_class_sessions_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_class_sessions")),
    )
    op.create_index(
        "ix_class_sessions_attendance_open",
        "class_sessions",
        ["ends_at"],
        unique=False,
        postgresql_where=sa.text("attendance_closed_at IS NULL"),
        sqlite_where=sa.text("attendance_closed_at IS NULL"),
    )
    op.create_index(
        op.f("ix_class_sessions_class_type_id"), "class_sessions", ["class_type_id"], unique=False
    )
    op.create_index(
        "ix_class_sessions_organization_id_starts_at",
        "class_sessions",
        ["organization_id", "starts_at"],
        unique=False,
    )
    op.create_table(
        "bookings",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("class_session_id", sa.Uuid(), nullable=False),
        sa.Column("membership_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "confirmed",
                "waitlisted",
                "cancelled",
                name="booking_status",
                native_enum=False,
                create_constraint=True,
                length=16,
            ),
            nullable=False,
        ),
        sa.Column("waitlisted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checked_in_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("checkin_method", sa.String(length=16), nullable=True),
        sa.Column("no_show_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["class_session_id"],
            ["class_sessions.id"],
            name=op.f("fk_bookings_class_session_id_class_sessions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["membership_id"],
            ["memberships.id"],
            name=op.f("fk_bookings_membership_id_memberships"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_bookings_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_bookings_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_bookings")),
        sa.UniqueConstraint(
            "class_session_id",
            "membership_id",
            name=op.f("uq_bookings_class_session_id_membership_id"),
        ),
    )
    op.create_index(
        "ix_bookings_class_session_id_status",
        "bookings",
        ["class_session_id", "status"],
        unique=False,
    )
    op.create_index(op.f("ix_bookings_membership_id"), "bookings", ["membership_id"], unique=False)
    op.create_table(
        "cancellation_notices",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("initiator", sa.String(length=16), nullable=False),
        sa.Column("given_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("reason_code", sa.String(length=32), nullable=True),
        sa.Column("reason_text", sa.Text(), nullable=True),
        sa.Column("locale", sa.String(length=8), nullable=False),
        sa.Column("effective_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("given_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("withdrawn_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("withdrawn_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("withdrawn_by_member", sa.Boolean(), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["given_by_user_id"],
            ["users.id"],
            name=op.f("fk_cancellation_notices_given_by_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_cancellation_notices_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_cancellation_notices_subscription_id_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_cancellation_notices_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["withdrawn_by_user_id"],
            ["users.id"],
            name=op.f("fk_cancellation_notices_withdrawn_by_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cancellation_notices")),
    )
    op.create_index(
        op.f("ix_cancellation_notices_subscription_id"),
        "cancellation_notices",
        ["subscription_id"],
        unique=False,
    )
    op.create_table(
        "retention_cases",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("episode", sa.String(length=64), nullable=False),
        sa.Column("notice_id", sa.Uuid(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("owner_user_id", sa.Uuid(), nullable=True),
        sa.Column("task_id", sa.Uuid(), nullable=True),
        sa.Column("locale", sa.String(length=8), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("sla_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("acknowledged_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_contact_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "escalated_unacknowledged_at",
            sa.DateTime(timezone=True),
            nullable=True,
        ),
        sa.Column("escalated_ending_soon_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("notified_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=True),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["notice_id"],
            ["cancellation_notices.id"],
            name=op.f("fk_retention_cases_notice_id_cancellation_notices"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_retention_cases_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["owner_user_id"],
            ["users.id"],
            name=op.f("fk_retention_cases_owner_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_retention_cases_subscription_id_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["task_id"],
            ["tasks.id"],
            name=op.f("fk_retention_cases_task_id_tasks"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_retention_cases_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retention_cases")),
        sa.UniqueConstraint(
            "subscription_id",
            "kind",
            "episode",
            name=op.f("uq_retention_cases_subscription_id_kind_episode"),
        ),
    )
    op.create_index(
        "ix_retention_cases_open",
        "retention_cases",
        ["organization_id", "opened_at"],
        unique=False,
        postgresql_where=sa.text("status = 'open'"),
        sqlite_where=sa.text("status = 'open'"),
    )
    op.create_table(
        "retention_contacts",
        sa.Column("case_id", sa.Uuid(), nullable=False),
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("staff_user_id", sa.Uuid(), nullable=True),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("contacted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["case_id"],
            ["retention_cases.id"],
            name=op.f("fk_retention_contacts_case_id_retention_cases"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_retention_contacts_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["staff_user_id"],
            ["users.id"],
            name=op.f("fk_retention_contacts_staff_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_retention_contacts_subscription_id_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_retention_contacts")),
    )
    op.create_index(
        op.f("ix_retention_contacts_case_id"), "retention_contacts", ["case_id"], unique=False
    )
    op.create_index(
        op.f("ix_retention_contacts_subscription_id"),
        "retention_contacts",
        ["subscription_id"],
        unique=False,
    )
    # ### end Alembic commands ###
    op.create_table(
        "cancellation_settlements",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("effective_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("period_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("charge_transaction_id", sa.Uuid(), nullable=True),
        sa.Column("charge_amount_in_cents", sa.Integer(), nullable=False),
        sa.Column("days", sa.Integer(), nullable=False),
        sa.Column("amount_in_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("execution", sa.String(length=32), nullable=False),
        sa.Column("refund_transaction_id", sa.Uuid(), nullable=True),
        sa.Column("standing_order", sa.String(length=16), nullable=False),
        sa.Column(
            "detail",
            JSON,
            nullable=False,
        ),
        sa.Column("email_sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["charge_transaction_id"],
            ["payment_transactions.id"],
            name=op.f("fk_cancellation_settlements_charge_transaction_id_payment_transactions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_cancellation_settlements_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["refund_transaction_id"],
            ["payment_transactions.id"],
            name=op.f("fk_cancellation_settlements_refund_transaction_id_payment_transactions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_cancellation_settlements_subscription_id_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_cancellation_settlements")),
        sa.UniqueConstraint(
            "subscription_id", name=op.f("uq_cancellation_settlements_subscription_id")
        ),
    )
    op.create_table(
        "retention_digests",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("recipients", sa.Integer(), nullable=False),
        sa.Column("open_cases", sa.Integer(), nullable=False),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_retention_digests_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("organization_id", "day", name=op.f("pk_retention_digests")),
    )
    _status_check((*SUBSCRIPTION_STATUSES, "paused"))


def downgrade() -> None:
    _status_check(SUBSCRIPTION_STATUSES)
    op.drop_table("retention_digests")
    op.drop_table("cancellation_settlements")
    op.drop_index(op.f("ix_retention_contacts_case_id"), table_name="retention_contacts")
    op.drop_index(op.f("ix_retention_contacts_subscription_id"), table_name="retention_contacts")
    op.drop_table("retention_contacts")
    op.drop_index("ix_retention_cases_open", table_name="retention_cases")
    op.drop_table("retention_cases")
    op.drop_index(
        op.f("ix_cancellation_notices_subscription_id"), table_name="cancellation_notices"
    )
    op.drop_table("cancellation_notices")
    op.drop_index("ix_bookings_class_session_id_status", table_name="bookings")
    op.drop_index(op.f("ix_bookings_membership_id"), table_name="bookings")
    op.drop_table("bookings")
    op.drop_index("ix_class_sessions_attendance_open", table_name="class_sessions")
    op.drop_index(op.f("ix_class_sessions_class_type_id"), table_name="class_sessions")
    op.drop_index("ix_class_sessions_organization_id_starts_at", table_name="class_sessions")
    op.drop_table("class_sessions")
    op.drop_index(op.f("ix_class_types_organization_id"), table_name="class_types")
    op.drop_table("class_types")
