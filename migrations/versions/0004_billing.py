"""billing: plans, subscriptions, payment transactions, provider configs, saved cards, checkouts

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "billing_settings",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("billing_grace_days", sa.Integer(), server_default=sa.text("7"), nullable=False),
        sa.Column("plan_required_to_book", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("billing_lifecycle_day", sa.Integer(), nullable=True),
        sa.Column("timezone", sa.String(length=64), server_default="UTC", nullable=False),
        sa.Column("opening_day", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_billing_settings_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("organization_id", name=op.f("pk_billing_settings")),
    )
    op.create_table(
        "payment_methods",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("payload_ciphertext", sa.Text(), nullable=False),
        sa.Column("last4", sa.String(length=4), nullable=True),
        sa.Column("expires_month", sa.String(length=7), nullable=True),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_payment_methods_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_payment_methods_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_methods")),
    )
    op.create_index(
        "ix_payment_methods_org_user",
        "payment_methods",
        ["organization_id", "user_id"],
        unique=False,
    )
    op.create_table(
        "payment_provider_configs",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("terminal", sa.String(length=32), nullable=True),
        sa.Column("terminal_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("credentials_ciphertext", sa.Text(), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("webhook_signature_enforcement", sa.Boolean(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_payment_provider_configs_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_provider_configs")),
    )
    op.create_index(
        "uq_payment_provider_configs_active",
        "payment_provider_configs",
        ["organization_id"],
        unique=True,
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )
    op.create_table(
        "plans",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "type",
            sa.Enum(
                "course",
                "pack",
                "drop_in",
                "gift",
                "cash",
                "card",
                name="plan_type",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("plan_group", sa.String(length=100), nullable=True),
        sa.Column("price_in_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("interval_months", sa.Integer(), nullable=True),
        sa.Column("open_ended", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("validity_days", sa.Integer(), nullable=True),
        sa.Column("sessions_quota", sa.Integer(), nullable=True),
        sa.Column("max_purchases", sa.Integer(), nullable=True),
        sa.Column("purchases_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.CheckConstraint(
            "max_purchases IS NULL OR purchases_count <= max_purchases",
            name=op.f("ck_plans_within_cap"),
        ),
        sa.CheckConstraint("price_in_cents >= 0", name=op.f("ck_plans_price_not_negative")),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_plans_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_plans")),
    )
    op.create_index(op.f("ix_plans_organization_id"), "plans", ["organization_id"], unique=False)
    op.create_table(
        "subscriptions",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("membership_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("plan_id", sa.Uuid(), nullable=False),
        sa.Column(
            "plan_type",
            sa.Enum(
                "course",
                "pack",
                "drop_in",
                "gift",
                "cash",
                "card",
                name="subscription_plan_type",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "status",
            sa.Enum(
                "scheduled",
                "active",
                "past_due",
                "debt",
                "cancelled",
                "expired",
                "gift_ended",
                "term_ended",
                name="subscription_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column(
            "payment_collection_method",
            sa.Enum(
                "card_provider",
                "provider_direct",
                "cash",
                "pay_later",
                "external",
                name="payment_collection_method",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("payment_method_id", sa.Uuid(), nullable=True),
        sa.Column("price_in_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("interval_months", sa.Integer(), nullable=True),
        sa.Column("open_ended", sa.Boolean(), server_default=sa.true(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("opening_day", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_period_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("current_period_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_charge_date", sa.DateTime(timezone=True), nullable=True),
        sa.Column("renewal_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("sessions_remaining", sa.Integer(), nullable=True),
        sa.Column("credits", sa.Integer(), nullable=True),
        sa.Column("cash_prepaid_through", sa.DateTime(timezone=True), nullable=True),
        sa.Column("payment_due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("payment_last_day", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "unpaid_amount_in_cents", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column(
            "debt_amount_in_cents", sa.Integer(), server_default=sa.text("0"), nullable=False
        ),
        sa.Column("debt_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("debt_reason", sa.String(length=32), nullable=True),
        sa.Column("debt_notice_stage", sa.String(length=32), nullable=True),
        sa.Column("decline_count", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("collection_paused", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("retry_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancel_at_period_end", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("cancellation_effective_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cancellation_reason", sa.String(length=64), nullable=True),
        sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("retention_outcome", sa.String(length=32), nullable=True),
        sa.Column("retention_case_kind", sa.String(length=32), nullable=True),
        sa.Column("cash_pauses", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.CheckConstraint(
            "debt_amount_in_cents >= 0", name=op.f("ck_subscriptions_debt_not_negative")
        ),
        sa.CheckConstraint("price_in_cents >= 0", name=op.f("ck_subscriptions_price_not_negative")),
        sa.ForeignKeyConstraint(
            ["membership_id"],
            ["memberships.id"],
            name=op.f("fk_subscriptions_membership_id_memberships"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_subscriptions_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["payment_method_id"],
            ["payment_methods.id"],
            name=op.f("fk_subscriptions_payment_method_id_payment_methods"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["plan_id"], ["plans.id"], name=op.f("fk_subscriptions_plan_id_plans")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_subscriptions_user_id_users"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subscriptions")),
    )
    op.create_index(
        "ix_subscriptions_debt",
        "subscriptions",
        ["organization_id", "debt_since"],
        unique=False,
        postgresql_where=sa.text("status = 'debt' AND deleted_at IS NULL"),
        sqlite_where=sa.text("status = 'debt' AND deleted_at IS NULL"),
    )
    op.create_index(
        "ix_subscriptions_due",
        "subscriptions",
        ["organization_id", "next_charge_date"],
        unique=False,
        postgresql_where=sa.text(
            "status IN ('scheduled', 'active', 'past_due', 'debt') AND deleted_at IS NULL"
        ),
        sqlite_where=sa.text(
            "status IN ('scheduled', 'active', 'past_due', 'debt') AND deleted_at IS NULL"
        ),
    )
    op.create_index(
        op.f("ix_subscriptions_membership_id"), "subscriptions", ["membership_id"], unique=False
    )
    op.create_index(op.f("ix_subscriptions_plan_id"), "subscriptions", ["plan_id"], unique=False)
    op.create_index(
        "ix_subscriptions_status_org", "subscriptions", ["status", "organization_id"], unique=False
    )
    op.create_table(
        "checkouts",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("operation", sa.String(length=32), nullable=False),
        sa.Column("terminal", sa.String(length=32), nullable=False),
        sa.Column("page_id", sa.String(length=128), nullable=True),
        sa.Column("url", sa.Text(), nullable=True),
        sa.Column("amount_in_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column(
            "status",
            sa.Enum(
                "open",
                "completed",
                "failed",
                "abandoned",
                name="checkout_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("provider_transaction_id", sa.String(length=128), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_checkouts_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_checkouts_subscription_id_subscriptions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_checkouts_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkouts")),
        sa.UniqueConstraint("page_id", name=op.f("uq_checkouts_page_id")),
    )
    op.create_index("ix_checkouts_open_expiry", "checkouts", ["status", "expires_at"], unique=False)
    op.create_index(
        op.f("ix_checkouts_subscription_id"), "checkouts", ["subscription_id"], unique=False
    )
    op.create_table(
        "payment_transactions",
        sa.Column("organization_id", sa.Uuid(), nullable=False),
        sa.Column("subscription_id", sa.Uuid(), nullable=True),
        sa.Column("user_id", sa.Uuid(), nullable=True),
        sa.Column(
            "type",
            sa.Enum(
                "charge",
                "recurring",
                "refund",
                name="transaction_type",
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
                "completed",
                "failed",
                "cancelled",
                "refund_pending",
                "refunded",
                name="transaction_status",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=False,
        ),
        sa.Column("provider", sa.String(length=32), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=True),
        sa.Column("amount_in_cents", sa.Integer(), nullable=False),
        sa.Column("currency", sa.String(length=3), nullable=False),
        sa.Column("provider_transaction_id", sa.String(length=128), nullable=True),
        sa.Column(
            "attempt_kind",
            sa.Enum(
                "recurring",
                "manual",
                "debt",
                name="attempt_kind",
                native_enum=False,
                create_constraint=True,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("obligation_key", sa.String(length=128), nullable=True),
        sa.Column("idempotency_key", sa.String(length=128), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("document_error", sa.Text(), nullable=True),
        sa.Column("document_type", sa.String(length=64), nullable=True),
        sa.Column("document_number", sa.String(length=64), nullable=True),
        sa.Column("refund_external_reference", sa.String(length=128), nullable=True),
        sa.Column("metadata", JSON, nullable=False),
        sa.Column("billing_attempt", JSON, nullable=True),
        sa.Column("effects", JSON, nullable=True),
        sa.Column("billing_resolution", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.CheckConstraint(
            "amount_in_cents >= 0", name=op.f("ck_payment_transactions_amount_not_negative")
        ),
        sa.ForeignKeyConstraint(
            ["organization_id"],
            ["organizations.id"],
            name=op.f("fk_payment_transactions_organization_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["subscription_id"],
            ["subscriptions.id"],
            name=op.f("fk_payment_transactions_subscription_id_subscriptions"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"],
            ["users.id"],
            name=op.f("fk_payment_transactions_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_payment_transactions")),
        sa.UniqueConstraint(
            "organization_id",
            "idempotency_key",
            name=op.f("uq_payment_transactions_organization_id_idempotency_key"),
        ),
    )
    op.create_index(
        "ix_payment_transactions_effects_open",
        "payment_transactions",
        ["organization_id"],
        unique=False,
        postgresql_where=sa.text("status = 'completed' AND effects IS NOT NULL"),
        sqlite_where=sa.text("status = 'completed' AND effects IS NOT NULL"),
    )
    op.create_index(
        "ix_payment_transactions_obligation",
        "payment_transactions",
        ["obligation_key"],
        unique=False,
    )
    op.create_index(
        "ix_payment_transactions_org_status",
        "payment_transactions",
        ["organization_id", "status", "created_at"],
        unique=False,
    )
    op.create_index(
        "ix_payment_transactions_pending_attempts",
        "payment_transactions",
        ["updated_at"],
        unique=False,
        postgresql_where=sa.text("status = 'pending' AND attempt_kind IS NOT NULL"),
        sqlite_where=sa.text("status = 'pending' AND attempt_kind IS NOT NULL"),
    )
    op.create_index(
        "ix_payment_transactions_provider_tx",
        "payment_transactions",
        ["provider_transaction_id"],
        unique=False,
    )
    op.create_index(
        "ix_payment_transactions_subscription",
        "payment_transactions",
        ["subscription_id", "created_at"],
        unique=False,
    )
    op.create_index(
        "uq_payment_transactions_one_pending_attempt",
        "payment_transactions",
        ["subscription_id"],
        unique=True,
        postgresql_where=sa.text("status = 'pending' AND attempt_kind IS NOT NULL"),
        sqlite_where=sa.text("status = 'pending' AND attempt_kind IS NOT NULL"),
    )
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(
            sa.Column("source", sa.String(length=16), server_default="auto", nullable=False)
        )
        batch.add_column(sa.Column("assignee_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("linked_user_id", sa.Uuid(), nullable=True))
        batch.add_column(sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_foreign_key(
            op.f("fk_tasks_assignee_id_users"),
            "users",
            ["assignee_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_foreign_key(
            op.f("fk_tasks_linked_user_id_users"),
            "users",
            ["linked_user_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint(op.f("fk_tasks_linked_user_id_users"), type_="foreignkey")
        batch.drop_constraint(op.f("fk_tasks_assignee_id_users"), type_="foreignkey")
        for column in ("deleted_at", "linked_user_id", "assignee_id", "source"):
            batch.drop_column(column)
    for table in (
        "payment_transactions",
        "checkouts",
        "subscriptions",
        "plans",
        "payment_provider_configs",
        "payment_methods",
        "billing_settings",
    ):
        op.drop_table(table)
