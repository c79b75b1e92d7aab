"""Day counting in the organization's time zone (spec B 2.5, 3, 8): a debt's day N ends at the
organization's midnight. The lifecycle (SQL on both engines) and the booking refusal (Python)
agree to the second, on both sides of the date line and across a daylight-saving change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from gymctl.billing.days import grace_ends
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.bookings import eligibility
from gymctl.errors import DomainError
from gymctl.models.billing import SubscriptionStatus
from tests.billing.factories import make_billing_settings, make_gym, make_subscription

pytestmark = pytest.mark.embedded

SECOND = timedelta(seconds=1)
SINCE = datetime(2026, 11, 13, 10, 30, tzinfo=UTC)
# Day 0 is SINCE's local date: Nov 14 in Kiritimati (UTC+14), Nov 12 in Pago Pago (UTC-11),
# Nov 13 in UTC. Day 7 ends at the local midnight after it.
DAY_7_ENDS = {
    "Pacific/Kiritimati": datetime(2026, 11, 21, 10, 0, tzinfo=UTC),  # Nov 22 00:00 +14
    "Pacific/Pago_Pago": datetime(2026, 11, 20, 11, 0, tzinfo=UTC),  # Nov 20 00:00 -11
    "UTC": datetime(2026, 11, 21, 0, 0, tzinfo=UTC),
}


def _gym_in(session, timezone: str):
    gym = make_gym(session)
    make_billing_settings(session, gym.organization, timezone=timezone)
    return gym


def _may_book(session, gym, at) -> bool:
    try:
        eligibility.check_may_book(session, gym.organization.id, gym.member.id, now=at)
    except DomainError as refused:
        return refused.code != "booking_blocked_debt"
    return True


@pytest.mark.parametrize("timezone", sorted(DAY_7_ENDS))
def test_a_debts_day_n_ends_at_the_organizations_midnight(session, timezone):
    """ "day N (billing_grace_days counted from debt_since) has passed -> cancelled": the
    member books until that midnight, and the lifecycle cancels from it, not a second before."""
    gym = _gym_in(session, timezone)
    subscription = make_subscription(session, gym, in_debt_since=SINCE)
    ends = DAY_7_ENDS[timezone]

    assert _may_book(session, gym, ends - SECOND)
    run_lifecycle(session, now=ends - SECOND)
    assert subscription.status == SubscriptionStatus.debt
    assert not _may_book(session, gym, ends)
    with pytest.raises(DomainError) as refused:
        eligibility.check_may_book(session, gym.organization.id, gym.member.id, now=ends)
    assert refused.value.details["billingDebt"]["payBy"] == ends.isoformat()

    run_lifecycle(session, now=ends)

    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.cancelled_at == ends


def test_the_date_line_splits_one_instant_into_three_outcomes(session):
    """At 09:00 UTC on Nov 21 the UTC and Pago Pago gyms' day 7 is over, Kiritimati's is not."""
    now = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
    rows = {
        timezone: make_subscription(session, _gym_in(session, timezone), in_debt_since=SINCE)
        for timezone in DAY_7_ENDS
    }

    summary = run_lifecycle(session, now=now)

    assert summary["cancelled"] == 2
    assert {tz: row.status.value for tz, row in rows.items()} == {
        "Pacific/Kiritimati": "debt",
        "Pacific/Pago_Pago": "cancelled",
        "UTC": "cancelled",
    }


def test_a_daylight_saving_change_keeps_the_local_midnight(session):
    """New York leaves daylight time on Nov 1 2026: day 7 of a debt from Oct 30 ends at
    midnight EST (05:00 UTC), one hour later in UTC than the day began."""
    gym = _gym_in(session, "America/New_York")
    since = datetime(2026, 10, 30, 12, 0, tzinfo=UTC)  # 08:00 EDT, day 0 = Oct 30
    subscription = make_subscription(session, gym, in_debt_since=since)
    ends = datetime(2026, 11, 7, 5, 0, tzinfo=UTC)
    settings = make_billing_settings(session, make_gym(session).organization)
    settings.timezone, settings.billing_grace_days = "America/New_York", 7
    assert grace_ends(since, settings) == ends

    run_lifecycle(session, now=ends - SECOND)
    assert subscription.status == SubscriptionStatus.debt
    run_lifecycle(session, now=ends)
    assert subscription.status == SubscriptionStatus.cancelled
