"""The opening-day edit of a presale (design: a presale's first charge waits for its opening
day): staff move the day a scheduled presale starts and is first charged.

The presale keeps holding no period, quota or credits; only its opening day and its first
charge date move together. Refused while its first charge or a page is in flight (the outcome
would settle against a date that changed under it), and while the provider's confirmed
non-charges of it stand (its technical retries are the collector's, counted per obligation,
which the day names).
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes
from gymctl.billing.accounts import billing_settings
from gymctl.clock import zone
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import Checkout, PaymentTransaction
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus


def first_instant(value: datetime | date, zone_name: str, code: str) -> datetime:
    """A date's first instant in the gym's zone (its local midnight), or the instant, as UTC;
    422 `code` for one the calendar cannot hold in UTC (0001-01-01 east of Greenwich falls in
    year 0)."""
    if type(value) is date:
        value = datetime.combine(value, time(0), zone(zone_name))
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise unprocessable(code, "the opening day is out of the calendar's range") from None


def edit_opening_day(
    session: Session,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    opening_day: datetime | date,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    expected_day: datetime | None = None,
) -> dict[str, Any] | None:
    """Move a presale's opening day (and its first charge) to `opening_day`: an instant, or a
    date read as the gym's local midnight (as the gym's own opening day is). Refusals change
    nothing: 404 subscription_not_found, 409 not_a_presale (not scheduled with an opening day),
    422 opening_day_invalid (not in the future), 409 presale_charge_in_flight (with
    technicalNonCharges when the provider never received the opening charge).

    `expected_day`: the gym's move, which chose the presale on that day before its lock; one
    no longer a presale on it once locked (withdrawn, deleted, or given a day of its own by
    staff meanwhile) is left as it is: None."""
    subscription = attempts.lock_subscription(session, subscription_id)
    if expected_day is not None and (
        subscription is None
        or subscription.deleted_at is not None
        or subscription.status != SubscriptionStatus.scheduled
        or subscription.opening_day != expected_day
    ):
        return None
    if (
        subscription is None
        or subscription.organization_id != organization_id
        or subscription.deleted_at is not None
    ):
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription in this organization")
    if subscription.status != SubscriptionStatus.scheduled or subscription.opening_day is None:
        raise conflict(
            codes.NOT_A_PRESALE,
            "only a presale (scheduled, with an opening day) has an opening day to move",
            subscriptionStatus=subscription.status.value,
        )
    if type(opening_day) is date:
        local = billing_settings(session, organization_id).timezone or "UTC"
        opening_day = first_instant(opening_day, local, codes.OPENING_DAY_INVALID)
    if opening_day <= now:
        raise unprocessable(codes.OPENING_DAY_INVALID, "the opening day must be in the future")
    if _in_flight(session, subscription.id, now):
        raise conflict(
            codes.PRESALE_CHARGE_IN_FLIGHT,
            "the presale's first charge or payment page is in flight; try again once it settles",
        )
    _, non_charges = attempts.due_ledger_checks(session, subscription)
    if non_charges:
        # The opening charge is still being collected: moved, it would be a new obligation and
        # its technical retries would start again at none (spec B 8: at most three).
        raise conflict(
            codes.PRESALE_CHARGE_IN_FLIGHT,
            "the provider never received the presale's first charge; its technical retries are "
            "the collector's (past the last, the owner's authorize-retry)",
            technicalNonCharges=non_charges,
        )
    before = subscription.opening_day
    subscription.opening_day = opening_day
    subscription.next_charge_date = opening_day
    subscription.retry_at = None
    subscription.updated_at = now
    emit(
        session,
        EventKind.audit,
        "subscription.opening_day_changed",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"before": before.isoformat(), "after": opening_day.isoformat()},
    )
    session.flush()
    return {
        "subscriptionId": str(subscription.id),
        "openingDay": opening_day.isoformat(),
        "nextChargeDate": opening_day.isoformat(),
    }


def _in_flight(session: Session, subscription_id: uuid.UUID, now: datetime) -> bool:
    pending = session.scalar(
        select(PaymentTransaction.id).where(
            PaymentTransaction.subscription_id == subscription_id,
            PaymentTransaction.status == TransactionStatus.pending,
        )
    )
    page = session.scalar(
        select(Checkout.id).where(
            Checkout.subscription_id == subscription_id,
            Checkout.status == CheckoutStatus.open,
            Checkout.expires_at > now,
        )
    )
    return pending is not None or page is not None
