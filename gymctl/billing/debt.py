"""Debt: opening it on a decline or a lapse, and restoring the debt columns on any payment
(spec B 2.1, 3). One place, so the collector, the lifecycle pass and desk payments agree."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import Subscription
from gymctl.models.billing import SubscriptionStatus

CHARGE_FAILED = "charge_failed"
CASH_LAPSED = "cash_lapsed"
PAYMENT_DUE = "payment_due"
NOTICE_OPENED = "opened"
NOTICE_CANCELLED = "cancelled"


def debt_reason(subscription: Subscription) -> str:
    """debt_reason, read as charge_failed when null (spec B 2.1)."""
    return subscription.debt_reason or CHARGE_FAILED


def open_debt(
    session: Session,
    subscription: Subscription,
    *,
    amount_in_cents: int,
    reason: str,
    since: datetime,
    now: datetime,
) -> None:
    """Enter debt (day 0 = `since`). Already in debt: the amount grows, the day 0 stays."""
    if subscription.status == SubscriptionStatus.debt:
        subscription.debt_amount_in_cents += amount_in_cents
        subscription.updated_at = now
        return
    subscription.status = SubscriptionStatus.debt
    subscription.debt_amount_in_cents = amount_in_cents
    subscription.debt_since = since
    subscription.debt_reason = reason
    subscription.debt_notice_stage = NOTICE_OPENED
    subscription.updated_at = now
    emit(
        session,
        EventKind.domain,
        "subscription.debt_opened",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={
            "reason": reason,
            "amountInCents": amount_in_cents,
            "currency": subscription.currency,
            "since": since.isoformat(),
            "userId": str(subscription.user_id),
            "notice": NOTICE_OPENED,
        },
    )


def owes(subscription: Subscription) -> bool:
    """Open debt, whatever the status: a plan cancelled for non-payment keeps its debt columns
    (they block booking) until a payment restores them (spec B 3)."""
    return (
        subscription.status in (SubscriptionStatus.debt, SubscriptionStatus.past_due)
        or subscription.debt_amount_in_cents > 0
    )


def restore_from_debt(subscription: Subscription, *, now: datetime) -> bool:
    """Any payment restores the debt columns (spec B 3); True when the row was in debt."""
    was_in_debt = subscription.status in (SubscriptionStatus.debt, SubscriptionStatus.past_due)
    if was_in_debt:
        subscription.status = SubscriptionStatus.active
    subscription.debt_amount_in_cents = 0
    subscription.debt_since = None
    subscription.debt_reason = None
    subscription.debt_notice_stage = None
    subscription.decline_count = 0
    subscription.updated_at = now
    return was_in_debt
