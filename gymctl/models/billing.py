"""Billing records (spec B 2.1, 2.2, 2.5): plans, subscriptions, payment transactions, the
organization's payment provider config, saved cards and token-only checkouts.

Money is integer cents with an ISO currency. Every JSON document the spec names (billingAttempt,
the delivered-effects record, billingResolution, cashPauses) is a column of its own so the sweeps
can read and index them without parsing a catch-all.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Enum,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    false,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin, JSONType


def _enum(cls: type[StrEnum], name: str) -> Enum:
    return Enum(cls, name=name, native_enum=False, create_constraint=True, length=32)


class PlanType(StrEnum):
    """Named plan types (spec B 2.1); `card` is the recurring card plan."""

    course = "course"
    pack = "pack"
    drop_in = "drop_in"
    gift = "gift"
    cash = "cash"
    card = "card"


class CollectionMethod(StrEnum):
    """How a subscription's money is collected (values not shown in the spec; ours)."""

    card_provider = "card_provider"  # the protected collector
    provider_direct = "provider_direct"  # other providers collect on their own schedule
    cash = "cash"
    pay_later = "pay_later"
    external = "external"  # billed outside the platform


class SubscriptionStatus(StrEnum):
    scheduled = "scheduled"
    active = "active"
    past_due = "past_due"
    debt = "debt"
    cancelled = "cancelled"
    expired = "expired"
    gift_ended = "gift_ended"
    term_ended = "term_ended"
    paused = "paused"  # frozen: not charged; a notice may still be given and withdrawn


LIVE_STATUSES = (
    SubscriptionStatus.scheduled,
    SubscriptionStatus.active,
    SubscriptionStatus.past_due,
    SubscriptionStatus.debt,
)


class TransactionType(StrEnum):
    charge = "charge"
    recurring = "recurring"
    refund = "refund"


class TransactionStatus(StrEnum):
    pending = "pending"
    completed = "completed"
    failed = "failed"
    cancelled = "cancelled"
    refund_pending = "refund_pending"
    refunded = "refunded"


class AttemptKind(StrEnum):
    """Which obligation a protected billing attempt collects (spec B 4.2: v1 recurring, manual
    and debt attempts); presale first charges are recurring attempts on the opening day."""

    recurring = "recurring"
    manual = "manual"
    debt = "debt"


class Plan(IdMixin, Base):
    __tablename__ = "plans"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    type: Mapped[PlanType] = mapped_column(_enum(PlanType, "plan_type"))
    plan_group: Mapped[str | None] = mapped_column(String(100))
    price_in_cents: Mapped[int]
    currency: Mapped[str] = mapped_column(String(3))
    # Card plans renew every `interval_months`; None with a card plan means one paid term.
    interval_months: Mapped[int | None]
    open_ended: Mapped[bool] = mapped_column(default=True, server_default=true())
    validity_days: Mapped[int | None]  # packs, drop-ins, set-period gifts
    sessions_quota: Mapped[int | None]
    max_purchases: Mapped[int | None]
    purchases_count: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("price_in_cents >= 0", name="price_not_negative"),
        CheckConstraint(
            "max_purchases IS NULL OR purchases_count <= max_purchases", name="within_cap"
        ),
    )

    @property
    def recurring(self) -> bool:
        return self.type == PlanType.card and self.interval_months is not None


class PaymentProviderConfig(IdMixin, Base):
    """The organization's payment provider. One active row per organization; terminal_since is
    when the terminal became active (the presale card-age rule counts from it)."""

    __tablename__ = "payment_provider_configs"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    provider: Mapped[str] = mapped_column(String(32))  # card_provider, or another provider's name
    terminal: Mapped[str | None] = mapped_column(String(32))
    terminal_since: Mapped[datetime | None]
    credentials_ciphertext: Mapped[str | None] = mapped_column(Text)
    active: Mapped[bool] = mapped_column(default=True)
    # Other providers: payment-webhook-signature-enforcement (spec B 6); None reads as not
    # enforced (the spec's fail-open).
    webhook_signature_enforcement: Mapped[bool | None]
    created_at: Mapped[datetime]

    __table_args__ = (
        Index(
            "uq_payment_provider_configs_active",
            "organization_id",
            unique=True,
            postgresql_where=text("active"),
            sqlite_where=text("active"),
        ),
    )


class PaymentWebhookDelivery(Base):
    """One row per verified delivery of another provider's signed webhook, keyed by the digest
    of its body (the bytes the signature covers), so a replay or redelivery is acknowledged as
    a duplicate, not recorded again. Only verified deliveries are kept: without the secret no one
    can add a row."""

    __tablename__ = "payment_webhook_deliveries"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    provider: Mapped[str] = mapped_column(String(32), primary_key=True)
    body_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    received_at: Mapped[datetime]


class PaymentMethod(IdMixin, Base):
    """A saved card. The token, its expiry and the terminal it was verified on live only in the
    encrypted payload (AES-256-GCM); `last4` and `saved_at` are what reports may show."""

    __tablename__ = "payment_methods"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    payload_ciphertext: Mapped[str] = mapped_column(Text)
    last4: Mapped[str | None] = mapped_column(String(4))
    expires_month: Mapped[str | None] = mapped_column(String(7))  # YYYY-MM
    saved_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_payment_methods_org_user", "organization_id", "user_id"),)


PLAN_HELD_WHERE = (
    "status IN ('active', 'scheduled') AND deleted_at IS NULL AND plan_type = 'card' "
    "AND interval_months IS NOT NULL"
)


class Subscription(IdMixin, Base):
    __tablename__ = "subscriptions"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    membership_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("memberships.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    plan_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("plans.id"), index=True)
    plan_type: Mapped[PlanType] = mapped_column(_enum(PlanType, "subscription_plan_type"))
    status: Mapped[SubscriptionStatus] = mapped_column(
        _enum(SubscriptionStatus, "subscription_status")
    )
    payment_collection_method: Mapped[CollectionMethod] = mapped_column(
        _enum(CollectionMethod, "payment_collection_method")
    )
    payment_method_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("payment_methods.id", ondelete="SET NULL")
    )
    price_in_cents: Mapped[int]
    currency: Mapped[str] = mapped_column(String(3))
    interval_months: Mapped[int | None]
    open_ended: Mapped[bool] = mapped_column(default=True, server_default=true())
    started_at: Mapped[datetime | None]
    opening_day: Mapped[datetime | None]  # a presale's first charge day
    current_period_start: Mapped[datetime | None]
    current_period_end: Mapped[datetime | None]
    next_charge_date: Mapped[datetime | None]
    renewal_end: Mapped[datetime | None]  # a card plan's last renewal (None: renews on)
    sessions_remaining: Mapped[int | None]
    credits: Mapped[int | None]
    cash_prepaid_through: Mapped[datetime | None]
    payment_due_at: Mapped[datetime | None]
    payment_last_day: Mapped[datetime | None]
    unpaid_amount_in_cents: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    debt_amount_in_cents: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    debt_since: Mapped[datetime | None]
    debt_reason: Mapped[str | None] = mapped_column(String(32))
    debt_notice_stage: Mapped[str | None] = mapped_column(String(32))
    decline_count: Mapped[int] = mapped_column(default=0, server_default=text("0"))
    collection_paused: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Why collection is held when the hold is the system's, not an owner's decision (late
    # positive evidence on a dismissed attempt); None while paused: the owner's.
    collection_hold: Mapped[str | None] = mapped_column(String(64))
    # The collector alert last raised for this row: raised once per state change, not per pass.
    billing_alert: Mapped[str | None] = mapped_column(String(64))
    # The collector leaves the row alone until then (technical retries, daily debt retries).
    retry_at: Mapped[datetime | None]
    cancel_at_period_end: Mapped[bool] = mapped_column(default=False, server_default=false())
    cancellation_effective_at: Mapped[datetime | None]
    cancellation_reason: Mapped[str | None] = mapped_column(String(64))
    cancelled_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    retention_outcome: Mapped[str | None] = mapped_column(String(32))
    retention_case_kind: Mapped[str | None] = mapped_column(String(32))
    cash_pauses: Mapped[list[dict[str, Any]]] = mapped_column(JSONType, default=list)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("price_in_cents >= 0", name="price_not_negative"),
        CheckConstraint("debt_amount_in_cents >= 0", name="debt_not_negative"),
        # The lifecycle pass and the debt-recovery job read live debt by its age (spec B 9:
        # "a partial debt index").
        Index(
            "ix_subscriptions_debt",
            "organization_id",
            "debt_since",
            postgresql_where=text("status = 'debt' AND deleted_at IS NULL"),
            sqlite_where=text("status = 'debt' AND deleted_at IS NULL"),
        ),
        # plan_already_held (spec B 4.3) in the database: one active or scheduled holder of a
        # recurring plan per member, whatever races (concurrent purchases, a revival).
        Index(
            "uq_subscriptions_plan_held",
            "plan_id",
            "user_id",
            unique=True,
            postgresql_where=text(PLAN_HELD_WHERE),
            sqlite_where=text(PLAN_HELD_WHERE),
        ),
        # The collectors' due scan: live card-provider subscriptions by their next charge.
        Index(
            "ix_subscriptions_due",
            "organization_id",
            "next_charge_date",
            postgresql_where=text(
                "status IN ('scheduled', 'active', 'past_due', 'debt') AND deleted_at IS NULL"
            ),
            sqlite_where=text(
                "status IN ('scheduled', 'active', 'past_due', 'debt') AND deleted_at IS NULL"
            ),
        ),
        Index("ix_subscriptions_status_org", "status", "organization_id"),
        # A member's subscriptions (plan_already_held at every purchase and debt payment, the
        # member's own list): by plan or organization alone, a popular plan's every row.
        Index("ix_subscriptions_user", "user_id"),
    )


class PaymentTransaction(IdMixin, Base):
    __tablename__ = "payment_transactions"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="SET NULL")
    )
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    type: Mapped[TransactionType] = mapped_column(_enum(TransactionType, "transaction_type"))
    status: Mapped[TransactionStatus] = mapped_column(
        _enum(TransactionStatus, "transaction_status")
    )
    provider: Mapped[str] = mapped_column(String(32))  # card_provider, manual, external, test
    method: Mapped[str | None] = mapped_column(String(32))
    amount_in_cents: Mapped[int]
    currency: Mapped[str] = mapped_column(String(3))
    provider_transaction_id: Mapped[str | None] = mapped_column(String(128))
    # The protected attempt's kind and its obligation (the charge it collects): at most three
    # technical retries per obligation, one unresolved attempt per subscription.
    attempt_kind: Mapped[AttemptKind | None] = mapped_column(_enum(AttemptKind, "attempt_kind"))
    obligation_key: Mapped[str | None] = mapped_column(String(128))
    idempotency_key: Mapped[str | None] = mapped_column(String(128))
    note: Mapped[str | None] = mapped_column(Text)
    document_error: Mapped[str | None] = mapped_column(Text)
    document_type: Mapped[str | None] = mapped_column(String(64))
    document_number: Mapped[str | None] = mapped_column(String(64))
    refund_external_reference: Mapped[str | None] = mapped_column(String(128))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    billing_attempt: Mapped[dict[str, Any] | None]
    effects: Mapped[dict[str, Any] | None]  # {"done": [...], "at": ...}
    billing_resolution: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    # When recovery last asked the provider about this pending attempt and it stayed pending:
    # a batch takes the attempts asked longest ago first (collector.pending_attempts).
    asked_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("amount_in_cents >= 0", name="amount_not_negative"),
        # One unresolved protected attempt per subscription: the database refuses a second
        # collector's attempt even if both passed every check (spec B 1: never charge twice).
        Index(
            "uq_payment_transactions_one_pending_attempt",
            "subscription_id",
            unique=True,
            postgresql_where=text("status = 'pending' AND attempt_kind IS NOT NULL"),
            sqlite_where=text("status = 'pending' AND attempt_kind IS NOT NULL"),
        ),
        UniqueConstraint("organization_id", "idempotency_key"),
        Index("ix_payment_transactions_subscription", "subscription_id", "created_at"),
        Index("ix_payment_transactions_org_status", "organization_id", "status", "created_at"),
        Index("ix_payment_transactions_obligation", "obligation_key"),
        Index("ix_payment_transactions_provider_tx", "provider_transaction_id"),
        Index(
            "ix_payment_transactions_pending_attempts",
            "updated_at",
            postgresql_where=text("status = 'pending' AND attempt_kind IS NOT NULL"),
            sqlite_where=text("status = 'pending' AND attempt_kind IS NOT NULL"),
        ),
        Index(
            "ix_payment_transactions_effects_open",
            "organization_id",
            postgresql_where=text("status = 'completed' AND effects IS NOT NULL"),
            sqlite_where=text("status = 'completed' AND effects IS NOT NULL"),
        ),
    )


class CheckoutStatus(StrEnum):
    open = "open"
    completed = "completed"
    failed = "failed"
    abandoned = "abandoned"


# The pages the abandoned sweep marked abandoned (gymctl.billing.abandoned_pages reads them back
# again): only these are indexed, by status, how many times they were read and when last.
READ_BACK_WHERE = "read_back_at IS NOT NULL"


class Checkout(IdMixin, Base):
    """A hosted payment page opened for a subscription: token-only (a presale saves its card) or
    charge-and-token. The page id is the deal reference verify-account reads back."""

    __tablename__ = "checkouts"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    operation: Mapped[str] = mapped_column(String(32))  # CreateTokenOnly, ChargeAndCreateToken
    terminal: Mapped[str] = mapped_column(String(32))
    page_id: Mapped[str | None] = mapped_column(String(128), unique=True)
    url: Mapped[str | None] = mapped_column(Text)
    amount_in_cents: Mapped[int]
    currency: Mapped[str] = mapped_column(String(3))
    status: Mapped[CheckoutStatus] = mapped_column(_enum(CheckoutStatus, "checkout_status"))
    provider_transaction_id: Mapped[str | None] = mapped_column(String(128))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    expires_at: Mapped[datetime]
    created_at: Mapped[datetime]
    completed_at: Mapped[datetime | None]
    # Set when the abandoned sweep marks the page abandoned (its read-back then is the first),
    # then at each later read-back (abandoned_pages.READ_BACK_SCHEDULE); read_backs counts those
    # later ones. Null on a page never abandoned (and on those abandoned before s51's window).
    read_back_at: Mapped[datetime | None]
    read_backs: Mapped[int] = mapped_column(default=0, server_default=text("0"))

    __table_args__ = (
        Index("ix_checkouts_open_expiry", "status", "expires_at"),
        Index(
            "ix_checkouts_read_back",
            "status",
            "read_backs",
            "read_back_at",
            postgresql_where=text(READ_BACK_WHERE),
            sqlite_where=text(READ_BACK_WHERE),
        ),
    )


class BillingSettings(Base):
    """Per-organization billing settings (spec B 2.5); absent row = defaults."""

    __tablename__ = "billing_settings"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    billing_grace_days: Mapped[int] = mapped_column(default=7, server_default=text("7"))
    plan_required_to_book: Mapped[bool] = mapped_column(default=False, server_default=false())
    billing_lifecycle_day: Mapped[int | None]
    timezone: Mapped[str] = mapped_column(String(64), default="UTC", server_default="UTC")
    # Before this day the gym sells presales: the card is saved, the first charge waits for it.
    opening_day: Mapped[datetime | None]


class DocumentCounter(Base):
    """The local document provider's numbering: one gapless sequence per organization."""

    __tablename__ = "document_counters"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    last_number: Mapped[int] = mapped_column(default=0, server_default=text("0"))


class MemberEmail(IdMixin, Base):
    """A member-facing billing email (debt opened, cancelled for non-payment, presale charge
    failed), one per notice event of the outbox: the event's id keys it, so a notice is emailed
    once however often the sweep runs."""

    __tablename__ = "member_emails"

    outbox_event_id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), unique=True
    )
    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="SET NULL")
    )
    kind: Mapped[str] = mapped_column(String(32))
    # None: nobody to tell (no address); the event is settled all the same.
    sent_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
