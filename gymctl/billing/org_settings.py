"""An organization's billing settings (spec B 2.5): the grace before cancellation for
non-payment, the lifecycle day (the day of the month the organization charges on), the
time zone its days are counted in, and whether a member needs a plan to book a class (then a
pack or drop-in spends a session per booking: gymctl.bookings.quota), and its opening day
(before it, a card-plan purchase is a presale: gymctl.billing.plans.presale_opening_day).
Reading is finance's; changing them is the owner's (they decide when members are cancelled).
"""

from __future__ import annotations

import functools
import uuid
import zoneinfo
from datetime import date, datetime
from typing import Any

from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from gymctl.billing import codes
from gymctl.billing.accounts import billing_settings
from gymctl.billing.attempts import lock_subscription
from gymctl.billing.opening_day import edit_opening_day, first_instant
from gymctl.billing.plans import set_term
from gymctl.billing.resolution import lock_organization
from gymctl.bridge import mirror
from gymctl.errors import DomainError, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import BillingSettings, Plan, Subscription
from gymctl.models.billing import CollectionMethod, SubscriptionStatus
from gymctl.retention.proration import OPENING_DELAY

# The zones a gym's days may be counted in: the tz database's own names (zoneinfo's list: no
# right/ zones, which count leap seconds that PostgreSQL's AT TIME ZONE adds and Python's
# does not, 27 s apart at every midnight; no posix/ copies), less the server's own zone
# (/etc/localtime: a gym's days would move with the machine that runs it), Factory (no
# place's time), and the tz database's old names PostgreSQL's AT TIME ZONE reads as
# abbreviations, a fixed offset with no summer time (CET is UTC+1 all year there, Europe's
# time in Python): every grace ended an hour apart on the two engines from spring to autumn.
# A gym names its place (Europe/Paris); a gym that had one moved to it (migration 0024).
LEGACY_ZONES = {"CET": "Europe/Brussels", "EET": "Europe/Athens", "MET": "Europe/Brussels",
                "WET": "Europe/Lisbon"}  # fmt: skip
NOT_A_GYMS_ZONE = ("localtime", "Factory", *LEGACY_ZONES)

MAX_GRACE_DAYS = 60  # ours: two months of unpaid access is already generous
LIFECYCLE_DAYS = range(1, 29)  # 1-28: a day every month has
KEEP: Any = object()  # a setting the caller does not change


def settings_json(row: BillingSettings) -> dict[str, Any]:
    return {
        "billingGraceDays": row.billing_grace_days,
        "billingLifecycleDay": row.billing_lifecycle_day,
        "timezone": row.timezone or "UTC",
        "planRequiredToBook": row.plan_required_to_book,
        "openingDay": row.opening_day.isoformat() if row.opening_day is not None else None,
    }


def read_settings(session: Session, organization_id: uuid.UUID) -> dict[str, Any]:
    return settings_json(billing_settings(session, organization_id))


def update_settings(
    session: Session,
    organization_id: uuid.UUID,
    *,
    grace_days: int = KEEP,
    lifecycle_day: int | None = KEEP,
    timezone: str = KEEP,
    plan_required_to_book: bool = KEEP,
    opening_day: datetime | date | None = KEEP,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    """Change the given settings (the others stay); every value is checked before anything is
    written. A change is audited with its before and after; no change writes nothing.

    `opening_day`: an instant (timezone-aware), or a date, read as its first instant in the
    gym's own time zone (the one this change leaves it with), as its lifecycle day is; None
    clears it (no purchase is a presale then). One not in the future is refused, 422
    billing_opening_day_invalid (the per-presale edit's opening_day_invalid is its own).

    Moving the gym's day moves the presales sold for it: a presale whose opening day is the
    gym's day as it was, still ahead and still scheduled, was sold for "the day we open" and
    its member expects its first charge when the gym opens, not on a day the gym no longer
    opens. Each moves through the per-presale edit (gymctl.billing.opening_day, audited under
    the same actor); one it refuses (a charge or payment page in flight, 409
    presale_charge_in_flight) stays on the old day, listed, for staff to move once it settles:
    the settings change is not held back by one member's page. The answer then carries
    `presales`: {"moved": n, "stayed": [{"subscriptionId", "code"}]}. Not moved: a presale
    staff already gave a day of its own (it differs from the gym's: a decision made for that
    member), and any presale once the gym's old day has come (the gym has opened; what is due
    is the collector's). Clearing the day moves none: a presale keeps the day it was sold for
    (staff move or cancel it), only later purchases stop being presales."""
    if grace_days is not KEEP and not (
        type(grace_days) is int and 0 <= grace_days <= MAX_GRACE_DAYS
    ):
        raise unprocessable(
            codes.BILLING_GRACE_DAYS_INVALID,
            f"grace days are a whole number from 0 to {MAX_GRACE_DAYS}",
        )
    if lifecycle_day not in (KEEP, None) and not (
        type(lifecycle_day) is int and lifecycle_day in LIFECYCLE_DAYS
    ):
        raise unprocessable(
            codes.BILLING_LIFECYCLE_DAY_INVALID,
            "the lifecycle day is a day of the month from 1 to 28, or none",
        )
    if timezone is not KEEP and (type(timezone) is not str or timezone not in gym_zones()):
        raise unprocessable(codes.TIMEZONE_INVALID, "give an IANA time zone such as Asia/Jerusalem")
    if plan_required_to_book is not KEEP and type(plan_required_to_book) is not bool:
        raise unprocessable(
            codes.PLAN_REQUIRED_TO_BOOK_INVALID, "whether a plan is required to book: true or false"
        )
    if opening_day not in (KEEP, None) and not (
        isinstance(opening_day, date)
        and (type(opening_day) is date or opening_day.tzinfo is not None)
    ):
        raise unprocessable(
            codes.BILLING_OPENING_DAY_INVALID,
            "the opening day is a future date or instant with its UTC offset, or none",
        )
    # The organization's lock first (the fixed order's first): an organization that never set
    # any has no row to lock, and two first changes would both insert one (a unique violation).
    lock_organization(session, organization_id)
    row = session.scalar(
        select(BillingSettings)
        .where(BillingSettings.organization_id == organization_id)
        .with_for_update()
    )
    if opening_day not in (KEEP, None):
        zone_name = timezone if timezone is not KEEP else (row.timezone if row else None)
        opening_day = first_instant(
            opening_day, zone_name or "UTC", codes.BILLING_OPENING_DAY_INVALID
        )
        if opening_day <= now:
            raise unprocessable(
                codes.BILLING_OPENING_DAY_INVALID,
                "the opening day must be in the future",
                openingDay=opening_day.isoformat(),
            )
    if row is None:
        row = billing_settings(session, organization_id)
        session.add(row)
    before = settings_json(row)
    old_day = row.opening_day
    if grace_days is not KEEP:
        row.billing_grace_days = grace_days
    if lifecycle_day is not KEEP:
        row.billing_lifecycle_day = lifecycle_day
    if timezone is not KEEP:
        row.timezone = timezone
    if plan_required_to_book is not KEEP:
        row.plan_required_to_book = plan_required_to_book
    if opening_day is not KEEP:
        row.opening_day = opening_day
    after = settings_json(row)
    if after != before:
        emit(
            session,
            EventKind.audit,
            "billing.settings_changed",
            at=now,
            aggregate_type="organization",
            aggregate_id=organization_id,
            organization_id=organization_id,
            actor_user_id=actor_user_id,
            payload={"before": before, "after": after},
        )
    session.flush()
    if old_day is None or row.opening_day is None or row.opening_day == old_day or old_day <= now:
        return after
    presales, terms = _move_sold_for_the_day(
        session, organization_id, old_day, row.opening_day, actor_user_id=actor_user_id, now=now
    )
    return {**after, "presales": presales, "deskTermsMoved": terms}


def _move_sold_for_the_day(
    session: Session,
    organization_id: uuid.UUID,
    old_day: datetime,
    new_day: datetime,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> tuple[dict[str, Any], int]:
    """What was sold for the gym's `old_day`, moved to `new_day` in one membership order (each
    locks its membership, then itself: billing's order, one order for the whole change):

    - its scheduled presales, one by one through the per-presale edit; the ones it refuses for
      a charge in flight stay, listed;
    - the terms sold at the desk for the day (active, from that day, not begun): they start on
      the new one; a cash plan's move later is recorded in its cashPauses (reason
      opening_delay: days the member paid for, kept in the refund basis, spec B 2.1).

    They are chosen before their locks: one withdrawn, ended or given its own day meanwhile is
    no longer the gym's, left as is. The presales' answer, and how many terms moved."""
    presale = and_(
        Subscription.status == SubscriptionStatus.scheduled, Subscription.opening_day == old_day
    )
    desk_term = and_(
        Subscription.status == SubscriptionStatus.active,
        Subscription.current_period_start == old_day,
        Subscription.started_at == old_day,
    )
    sold = session.execute(
        select(Subscription.id, presale)
        .where(
            Subscription.organization_id == organization_id,
            Subscription.deleted_at.is_(None),
            or_(presale, desk_term),
        )
        .order_by(Subscription.membership_id, Subscription.id)
    ).all()
    moved, stayed, terms = 0, [], 0
    for subscription_id, is_presale in sold:
        if not is_presale:
            terms += _move_desk_term(session, subscription_id, old_day, new_day, now=now)
            continue
        try:
            edited = edit_opening_day(
                session,
                organization_id=organization_id,
                subscription_id=subscription_id,
                opening_day=new_day,
                actor_user_id=actor_user_id,
                now=now,
                expected_day=old_day,
            )
        except DomainError as refused:
            if refused.code != codes.PRESALE_CHARGE_IN_FLIGHT:
                raise
            stayed.append({"subscriptionId": str(subscription_id), "code": refused.code})
        else:
            moved += edited is not None
    return {"moved": moved, "stayed": stayed}, terms


def _move_desk_term(
    session: Session,
    subscription_id: uuid.UUID,
    old_day: datetime,
    new_day: datetime,
    *,
    now: datetime,
) -> bool:
    subscription = lock_subscription(session, subscription_id)
    if (
        subscription is None
        or subscription.status != SubscriptionStatus.active
        or subscription.current_period_start != old_day
    ):
        return False  # ended or changed meanwhile: no longer a term sold for the day
    set_term(session, subscription, session.get(Plan, subscription.plan_id), new_day)
    if subscription.payment_collection_method == CollectionMethod.cash and new_day > old_day:
        delay = {"reason": OPENING_DELAY, "from": old_day.isoformat(), "until": new_day.isoformat()}
        subscription.cash_pauses = [*(subscription.cash_pauses or []), delay]
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    return True


@functools.cache
def gym_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - set(NOT_A_GYMS_ZONE)
