"""An organization's billing settings (spec B 2.5): the grace before cancellation for
non-payment, the lifecycle day (the day of the month the organization charges on), the
time zone its days are counted in, and whether a member needs a plan to book a class (then a
pack or drop-in spends a session per booking: gymctl.bookings.quota). Reading is finance's;
changing them is the owner's (they decide when members are cancelled).
"""

from __future__ import annotations

import functools
import uuid
import zoneinfo
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import codes
from gymctl.billing.accounts import billing_settings
from gymctl.billing.resolution import lock_organization
from gymctl.errors import unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import BillingSettings

# The zones a gym's days may be counted in: the tz database's own names (zoneinfo's list: no
# right/ zones, which count leap seconds that PostgreSQL's AT TIME ZONE adds and Python's
# does not, 27 s apart at every midnight; no posix/ copies), less the server's own zone
# (/etc/localtime: a gym's days would move with the machine that runs it) and Factory (no
# place's time).
NOT_A_GYMS_ZONE = ("localtime", "Factory")

MAX_GRACE_DAYS = 60  # ours: two months of unpaid access is already generous
LIFECYCLE_DAYS = range(1, 29)  # 1-28: a day every month has
KEEP: Any = object()  # a setting the caller does not change


def settings_json(row: BillingSettings) -> dict[str, Any]:
    return {
        "billingGraceDays": row.billing_grace_days,
        "billingLifecycleDay": row.billing_lifecycle_day,
        "timezone": row.timezone or "UTC",
        "planRequiredToBook": row.plan_required_to_book,
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
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    """Change the given settings (the others stay); every value is checked before anything is
    written. A change is audited with its before and after; no change writes nothing."""
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
    # The organization's lock first (the fixed order's first): an organization that never set
    # any has no row to lock, and two first changes would both insert one (a unique violation).
    lock_organization(session, organization_id)
    row = session.scalar(
        select(BillingSettings)
        .where(BillingSettings.organization_id == organization_id)
        .with_for_update()
    )
    if row is None:
        row = billing_settings(session, organization_id)
        session.add(row)
    before = settings_json(row)
    if grace_days is not KEEP:
        row.billing_grace_days = grace_days
    if lifecycle_day is not KEEP:
        row.billing_lifecycle_day = lifecycle_day
    if timezone is not KEEP:
        row.timezone = timezone
    if plan_required_to_book is not KEEP:
        row.plan_required_to_book = plan_required_to_book
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
    return after


@functools.cache
def gym_zones() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - set(NOT_A_GYMS_ZONE)
