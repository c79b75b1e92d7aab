"""The charge-date schedule (spec B 2.5, 4.3): which card-provider charges fall when, by the
organization's own calendar, and staff moving one renewal's charge date.

A moved date is what the collector reads (`next_charge_date`); an attempt in flight under the
old date settles with a settlementReview (retry_date_changed), so a move is refused while an
attempt is unresolved, and while a technical retry is owed (the count is per obligation, which
the date names). A presale's charge date is its opening day (edited there, not here);
a debt's retries are the collector's.

A move is lasting: it moves the billing anchor (the organization's charge day, Kill Bill's
bill-cycle day, is reached by moving renewals onto it). The current period ends on the new date,
so the renewal charged then pays for the period from it, and access, notices and refunds read
the same end as the collector.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from datetime import datetime, time, timedelta
from typing import Any

from dateutil.relativedelta import relativedelta
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes
from gymctl.billing.accounts import billing_settings
from gymctl.billing.resolution import locked_subscription
from gymctl.bridge import mirror
from gymctl.clock import zone
from gymctl.errors import conflict, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import Subscription
from gymctl.models.billing import CollectionMethod, SubscriptionStatus

DEFAULT_DAYS = 30
MAX_DAYS = 92
LIMIT = 500
MAX_AHEAD = timedelta(days=366)
MOVED = "charge_date_moved"  # the reason of the unpaid days a later charge date gives


def charge_schedule(
    session: Session, organization_id: uuid.UUID, *, now: datetime, days: int = DEFAULT_DAYS
) -> dict[str, Any]:
    """Charges due before now + `days` (overdue ones first: they are being collected or held),
    each with its local date, and the totals per local day and currency. At most LIMIT items;
    `truncated` says when more fall in the window."""
    if type(days) is not int or not 1 <= days <= MAX_DAYS:
        raise unprocessable(
            codes.SCHEDULE_DAYS_INVALID, f"days is a whole number from 1 to {MAX_DAYS}"
        )
    settings = billing_settings(session, organization_id)
    local = zone(settings.timezone or "UTC")
    until = now + timedelta(days=days)
    rows = session.scalars(
        select(Subscription)
        .where(
            Subscription.organization_id == organization_id,
            Subscription.deleted_at.is_(None),
            Subscription.status.in_(attempts.COLLECTABLE),
            Subscription.payment_collection_method == CollectionMethod.card_provider,
            Subscription.next_charge_date.is_not(None),
            Subscription.next_charge_date < until,
        )
        .order_by(Subscription.next_charge_date, Subscription.id)
        .limit(LIMIT + 1)
    ).all()
    items = [_item(row, local, now) for row in rows[:LIMIT]]
    totals: dict[str, dict[str, Any]] = defaultdict(lambda: {"count": 0, "amounts": {}})
    for item in items:
        day = totals[item["localDate"]]
        day["count"] += 1
        day["amounts"][item["currency"]] = (
            day["amounts"].get(item["currency"], 0) + item["amountInCents"]
        )
    return {
        "timezone": settings.timezone or "UTC",
        "lifecycleDay": settings.billing_lifecycle_day,
        "from": now.isoformat(),
        "until": until.isoformat(),
        "days": [{"localDate": date, **totals[date]} for date in sorted(totals)],
        "items": items,
        "truncated": len(rows) > LIMIT,
    }


def move_charge_date(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    expected: datetime | None,
    to: datetime | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    """Move an active renewal's next charge, and its current period's end with it, to `to`, or
    (no `to`) to the organization's next lifecycle day on or after the current date, at its
    local midnight. `expected` must be the date the caller saw (another move in between is
    refused, not overwritten). Refused before the period's end (the member paid until then),
    and under a notice: given for the period end, it would be
    overtaken by a renewal moved before it, or refund the free days of one moved after."""
    subscription = locked_subscription(session, organization_id, subscription_id)
    if (
        subscription.status != SubscriptionStatus.active
        or subscription.payment_collection_method != CollectionMethod.card_provider
        or subscription.next_charge_date is None
    ):
        raise conflict(
            codes.CHARGE_DATE_NOT_MOVABLE,
            "only an active card renewal's charge date can be moved here",
            subscriptionStatus=subscription.status.value,
        )
    if expected != subscription.next_charge_date:
        raise conflict(
            codes.CHARGE_DATE_CHANGED,
            "the charge date changed since you read it; read the schedule again",
            nextChargeDate=subscription.next_charge_date.isoformat(),
        )
    if subscription.cancel_at_period_end:
        raise conflict(
            codes.CHARGE_DATE_NOT_MOVABLE,
            "a plan under notice ends on its notice's date; withdraw the notice to move it",
            subscriptionStatus=subscription.status.value,
            noticeEffectiveAt=_iso(subscription.cancellation_effective_at),
        )
    unresolved, failures = attempts.due_ledger_checks(session, subscription)
    if unresolved:
        raise conflict(
            codes.BILLING_RECONCILIATION_REQUIRED,
            "a card attempt for this subscription is unresolved; reconcile it first",
        )
    if failures:
        # Technical retries count per obligation, a renewal by its due date: a moved date made
        # a new obligation, its count back at none and no non-charge to check its terms by.
        raise conflict(
            codes.CHARGE_DATE_NOT_MOVABLE,
            "the provider never received this charge and its technical retries are the "
            "collector's (past the last, the owner's authorize-retry); move it once it is paid",
            subscriptionStatus=subscription.status.value,
            technicalNonCharges=failures,
        )
    settings = billing_settings(session, organization_id)
    if to is None:
        if settings.billing_lifecycle_day is None:
            raise conflict(
                codes.BILLING_LIFECYCLE_DAY_UNSET,
                "give the new date, or set the organization's lifecycle day first",
            )
        to = next_lifecycle_day(
            subscription.next_charge_date, settings.billing_lifecycle_day, settings.timezone
        )
    if to <= now or to > now + MAX_AHEAD:
        raise unprocessable(
            codes.CHARGE_DATE_OUT_OF_RANGE,
            "the new charge date must be in the future and within a year",
        )
    if subscription.renewal_end is not None and to >= subscription.renewal_end:
        raise unprocessable(
            codes.CHARGE_DATE_OUT_OF_RANGE,
            "the new charge date falls after the plan's last renewal",
        )
    paid_through = subscription.current_period_end
    if paid_through is not None and to < paid_through:
        # The renewal would pay for days the member has paid for already (no charge is
        # prorated, spec B): a charge day is brought forward by moving it past the period.
        raise unprocessable(
            codes.CHARGE_DATE_OUT_OF_RANGE,
            "the member has paid until the current period's end: a charge date moves to it or "
            "later (to charge on an earlier day of the month, move it to that day after it)",
            paidThrough=paid_through.isoformat(),
        )
    moved_from = subscription.next_charge_date
    _move_anchor(subscription, to)
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    emit(
        session,
        EventKind.audit,
        "billing.charge_date_moved",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"from": moved_from.isoformat(), "to": to.isoformat()},
    )
    session.flush()
    return _item(subscription, zone(settings.timezone or "UTC"), now)


def _move_anchor(subscription: Subscription, to: datetime) -> None:
    """The current period ends on `to` (never before its end: move_charge_date refuses), where
    the next charge falls. The days from the old end are the gym's: a cashPauses entry says
    nobody paid for them, so a refund does not pay them back."""
    end = subscription.current_period_end
    if end is not None and to > end:
        unpaid = {"reason": MOVED, "from": end.isoformat(), "until": to.isoformat()}
        subscription.cash_pauses = [*(subscription.cash_pauses or []), unpaid]
    subscription.current_period_end = to
    subscription.next_charge_date = to


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def next_lifecycle_day(at: datetime, day: int, timezone: str | None) -> datetime:
    """The first local midnight of day-of-month `day` at or after `at`, as UTC."""
    local = zone(timezone or "UTC")
    start = at.astimezone(local)
    candidate = datetime.combine(start.date().replace(day=day), time(0), local)
    if candidate < start:
        candidate = datetime.combine(
            (start.date().replace(day=day) + relativedelta(months=1)), time(0), local
        )
    return candidate.astimezone(at.tzinfo)


def _item(row: Subscription, local, now: datetime) -> dict[str, Any]:
    kind = attempts.kind_of(row)
    return {
        "subscriptionId": str(row.id),
        "userId": str(row.user_id),
        "status": row.status.value,
        "kind": "presale" if row.status == SubscriptionStatus.scheduled else kind.value,
        "nextChargeDate": row.next_charge_date.isoformat(),
        "localDate": row.next_charge_date.astimezone(local).date().isoformat(),
        "amountInCents": attempts.amount_of(row, kind),
        "currency": row.currency,
        "overdue": row.next_charge_date <= now,
        "collectionHeld": row.collection_paused,
    }
