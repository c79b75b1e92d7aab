"""Cancellation notices, retention cases, contact logs, period-end settlements and the daily
digest ledger (spec B 2.1, 2.3, 3, 6, 8).

The subscription keeps the notice's outcome (cancel_at_period_end, cancellation_effective_at,
cancellation_reason, retention_outcome); these tables keep the history a subscription column
cannot: who gave and withdrew each notice, what staff did about it, and what was refunded.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class RetentionOutcome(StrEnum):
    """saved_* (the member stays), lost_contacted, lost_no_contact, lost_payment (spec B 2.1)."""

    saved_offer = "saved_offer"  # a discount or other offer kept the member
    saved_plan_change = "saved_plan_change"
    saved_pause = "saved_pause"
    saved_staff = "saved_staff"  # staff withdrew the notice after talking to the member
    saved_member_withdrew = "saved_member_withdrew"  # the member's own act
    lost_contacted = "lost_contacted"
    lost_no_contact = "lost_no_contact"
    lost_payment = "lost_payment"


SAVED = frozenset(o for o in RetentionOutcome if o.value.startswith("saved_"))


class CaseKind(StrEnum):
    cancellation_notice = "cancellation_notice"
    presale_withdrawal = "presale_withdrawal"
    presale_charge_failed = "presale_charge_failed"


class CancellationNotice(IdMixin, Base):
    """One notice given on a subscription; a withdrawal keeps the row (withdrawn_*)."""

    __tablename__ = "cancellation_notices"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    initiator: Mapped[str] = mapped_column(String(16))  # member, staff
    given_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    reason_code: Mapped[str | None] = mapped_column(String(32))
    reason_text: Mapped[str | None] = mapped_column(Text)
    locale: Mapped[str] = mapped_column(String(8))
    effective_at: Mapped[datetime]
    given_at: Mapped[datetime]
    withdrawn_at: Mapped[datetime | None]
    withdrawn_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    withdrawn_by_member: Mapped[bool | None]


class RetentionCase(IdMixin, Base):
    """Staff's follow-up of a notice, a presale withdrawal or a presale charge failure.

    `episode` keys what opened it (the notice id, the decline's day 0), so a sweep that opens
    cases can run any number of times and open each once."""

    __tablename__ = "retention_cases"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    episode: Mapped[str] = mapped_column(String(64))
    notice_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("cancellation_notices.id", ondelete="SET NULL")
    )
    status: Mapped[str] = mapped_column(String(16))  # open, closed
    owner_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    task_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("tasks.id", ondelete="SET NULL"))
    locale: Mapped[str] = mapped_column(String(8))
    opened_at: Mapped[datetime]
    sla_due_at: Mapped[datetime | None]
    acknowledged_at: Mapped[datetime | None]
    last_contact_at: Mapped[datetime | None]
    escalated_unacknowledged_at: Mapped[datetime | None]
    escalated_ending_soon_at: Mapped[datetime | None]
    notified_at: Mapped[datetime | None]  # the case owner's email (presale cases)
    outcome: Mapped[str | None] = mapped_column(String(32))
    closed_at: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("subscription_id", "kind", "episode"),
        Index(
            "ix_retention_cases_open",
            "organization_id",
            "opened_at",
            postgresql_where=text("status = 'open'"),
            sqlite_where=text("status = 'open'"),
        ),
    )


class RetentionContact(IdMixin, Base):
    """A logged contact with the member about their case (call, message, meeting)."""

    __tablename__ = "retention_contacts"

    case_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("retention_cases.id", ondelete="CASCADE"), index=True
    )
    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="CASCADE"), index=True
    )
    staff_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    channel: Mapped[str] = mapped_column(String(16))
    note: Mapped[str | None] = mapped_column(Text)
    contacted_at: Mapped[datetime]
    created_at: Mapped[datetime]


class CancellationSettlement(IdMixin, Base):
    """The claim of a matured cancellation's settlement: one row per subscription (unique), so
    a second sweep, or two sweeps at once, never refunds twice."""

    __tablename__ = "cancellation_settlements"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    subscription_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="CASCADE"), unique=True
    )
    effective_at: Mapped[datetime]
    period_end: Mapped[datetime | None]
    charge_transaction_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("payment_transactions.id", ondelete="SET NULL")
    )
    charge_amount_in_cents: Mapped[int]
    days: Mapped[int]
    amount_in_cents: Mapped[int]
    currency: Mapped[str] = mapped_column(String(3))
    mode: Mapped[str] = mapped_column(String(16))  # card, manual, none, balance (a pay-later term)
    execution: Mapped[str] = mapped_column(String(32))
    refund_transaction_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("payment_transactions.id", ondelete="SET NULL")
    )
    standing_order: Mapped[str] = mapped_column(String(16))  # cancelled, failed, none
    detail: Mapped[dict[str, Any]] = mapped_column(default=dict)
    email_sent_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]


class RetentionDigest(Base):
    """One digest per organization and UTC day: the claim that makes a second run send nothing."""

    __tablename__ = "retention_digests"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    day: Mapped[date] = mapped_column(primary_key=True)
    recipients: Mapped[int]
    open_cases: Mapped[int]
    sent_at: Mapped[datetime]
