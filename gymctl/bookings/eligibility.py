"""Who may book (spec B 1, 4.3, 7): refusals before any seat is looked at.

- 409 booking_blocked_debt: in debt beyond the grace period (day N, billing_grace_days from
  debt_since, ends at the organization's midnight; a debt left open on a plan that has ended
  too), or holding a plan cancelled for non-payment while any plan has open debt. Inside the
  grace the member still books (a failed charge is retried; existing bookings stay).
- 409 plan_not_started: the only live plans are unstarted presales (scheduled, or in debt
  after a declined opening charge: unpaid either way).
- 409 plan_required_to_book: the organization requires a plan and the member holds none.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl.billing.accounts import billing_settings
from gymctl.billing.days import grace_ends
from gymctl.billing.debt import debt_reason
from gymctl.billing.plans import subscriptions_of
from gymctl.billing.transitions import NON_PAYMENT
from gymctl.bookings import codes
from gymctl.errors import conflict
from gymctl.models import BillingSettings, Subscription
from gymctl.models.billing import SubscriptionStatus

# Statuses a member books on; `scheduled` is live but not started (a presale).
LIVE = (
    SubscriptionStatus.scheduled,
    SubscriptionStatus.active,
    SubscriptionStatus.past_due,
    SubscriptionStatus.debt,
    SubscriptionStatus.paused,
)
BOOKABLE = (SubscriptionStatus.active, SubscriptionStatus.past_due, SubscriptionStatus.debt)


def _awaiting_payment(row: Subscription) -> bool:
    return row.status == SubscriptionStatus.scheduled and row.opening_day is None


def unstarted(row: Subscription) -> bool:
    """A presale not paid yet: scheduled, or in debt since its opening charge was declined
    (never granted: no start). It holds no period, quota or credits (spec B 2.1), so it books
    nothing, least of all as a plan without a quota."""
    if row.status == SubscriptionStatus.scheduled:
        return True
    declined = row.status == SubscriptionStatus.debt and row.opening_day is not None
    return declined and row.started_at is None


def _cancelled_for_non_payment(row: Subscription) -> bool:
    return row.status == SubscriptionStatus.cancelled and row.cancellation_reason == NON_PAYMENT


def billing_debt(
    rows: list[Subscription], *, settings: BillingSettings, now: datetime
) -> dict[str, Any] | None:
    """The billingDebt body of a refusal, or None when the member may book.

    since, reason and payBy are those of the oldest debt; amountInCents is the open debt in
    its currency over every plan, byCurrency every currency's (a gym may sell plans in two:
    cents of two currencies do not add up); state is `cancelled` (a plan was cancelled for
    non-payment) or `past_grace`. A debt's grace runs whatever became of its plan: one that
    ended with the debt open (its notice matured meanwhile) is still owed, and blocks past
    its day N as it would have in status debt."""
    owing = [row for row in rows if row.debt_amount_in_cents > 0 and row.debt_since is not None]
    if not owing:
        return None
    cancelled = [row for row in rows if _cancelled_for_non_payment(row)]
    past_grace = [row for row in owing if grace_ends(row.debt_since, settings) <= now]
    if not cancelled and not past_grace:
        return None
    oldest = min(owing, key=lambda row: (row.debt_since, str(row.id)))
    pay_by = grace_ends(oldest.debt_since, settings)
    ended = min(cancelled, key=lambda row: row.cancelled_at or now) if cancelled else None
    totals: dict[str, int] = {oldest.currency: 0}
    for row in owing:
        totals[row.currency] = totals.get(row.currency, 0) + row.debt_amount_in_cents
    return {
        "amountInCents": totals[oldest.currency],
        "currency": oldest.currency,
        "byCurrency": [{"currency": c, "amountInCents": a} for c, a in totals.items()],
        "since": oldest.debt_since.isoformat(),
        "reason": debt_reason(oldest),
        "payBy": pay_by.isoformat(),
        "cancelsAt": ((ended.cancelled_at or now) if ended else pay_by).isoformat(),
        "state": "cancelled" if ended else "past_grace",
    }


def check_may_book(
    session: Session, organization_id: uuid.UUID, user_id: uuid.UUID, *, now: datetime
) -> Subscription | None:
    """Raise the first refusal that applies; returns the plan the booking rests on, the newest
    bookable one (None when the organization books without plans and the member holds none)."""
    rows = subscriptions_of(session, organization_id, user_id)
    settings = billing_settings(session, organization_id)
    debt = billing_debt(rows, settings=settings, now=now)
    if debt is not None:
        raise conflict(
            codes.BOOKING_BLOCKED_DEBT,
            "booking is blocked until the open balance is paid",
            billingDebt=debt,
        )
    # A plan bought online waits scheduled for its page to be paid (no opening day: not a
    # presale); until then it holds nothing, and refused nothing either (an open page kept a
    # member of a gym that books without plans from booking, "not started" with no start).
    live = [row for row in rows if row.status in LIVE and not _awaiting_payment(row)]
    if live and all(unstarted(row) for row in live):
        openings = [row.opening_day for row in live if row.opening_day is not None]
        raise conflict(
            codes.PLAN_NOT_STARTED,
            "your plan has not started yet; you can book from its opening day",
            startsAt=min(openings).isoformat() if openings else None,
        )
    # A paused (frozen) plan is live but books nothing until it resumes.
    bookable = [row for row in live if row.status in BOOKABLE and not unstarted(row)]
    if not bookable and settings.plan_required_to_book:
        raise conflict(codes.PLAN_REQUIRED_TO_BOOK, "this gym requires a plan to book a class")
    return bookable[0] if bookable else None
