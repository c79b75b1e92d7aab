"""A free plan's roll counts months on the gym's calendar, as a paid renewal does (spec B 2.5:
days and charges in the organization's time zone; `clock.add_months`). s56 noticed the
lifecycle's roll of zero-price plans counted UTC's months: in Jerusalem a free monthly plan that
began at local midnight on March 1st (February 28th 22:00 UTC) rolled to March 28th 22:00 UTC,
the 29th at 01:00 local, and drifted a day or two every month after, while a paid plan bought
the same day renews on the 1st. Both engines: PostgreSQL moves the rows in one statement, the
embedded default per row in Python; each must say what `add_months` says, the clocks' changes
included (a wall-clock time the clocks repeat is the first of the two, as zoneinfo reads it)."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models.billing import PlanType
from tests.billing.factories import make_billing_settings, make_plan, make_subscription

pytestmark = pytest.mark.embedded


def _local(zone: str, *fields: int) -> datetime:
    return datetime(*fields, tzinfo=ZoneInfo(zone)).astimezone(UTC)


@pytest.mark.parametrize(
    ("zone", "ends", "months", "now", "start", "next_end"),
    [
        # March 1st at midnight rolls to April 1st at midnight, across the clocks going forward.
        ("Asia/Jerusalem", (2027, 3, 1), 1, (2027, 3, 1), (2027, 3, 1), (2027, 4, 1)),
        # Late: as many whole months as pass now, each on the local calendar.
        ("Asia/Jerusalem", (2027, 1, 1), 1, (2027, 3, 5), (2027, 3, 1), (2027, 4, 1)),
        (
            "Asia/Jerusalem",
            (2027, 1, 31, 23),
            1,
            (2027, 1, 31, 23),
            (2027, 1, 31, 23),
            (2027, 2, 28, 23),
        ),
        # Havana's clocks go back from 01:00 to 00:00 on November 1st, 2026: 00:30 that night
        # comes twice, and the period ends at the first.
        (
            "America/Havana",
            (2026, 10, 1, 0, 30),
            1,
            (2026, 10, 1, 0, 30),
            (2026, 10, 1, 0, 30),
            (2026, 11, 1, 0, 30),
        ),
        # West of Greenwich: the evening of the 31st is the 1st in UTC.
        (
            "America/New_York",
            (2026, 12, 31, 20),
            3,
            (2026, 12, 31, 20),
            (2026, 12, 31, 20),
            (2027, 3, 31, 20),
        ),
    ],
)
def test_a_free_plan_rolls_to_the_same_local_day_and_hour(
    session, gym, zone, ends, months, now, start, next_end
):
    make_billing_settings(session, gym.organization, timezone=zone)
    free = make_plan(
        session, gym.organization, PlanType.card, price_in_cents=0, interval_months=months
    )
    subscription = make_subscription(
        session, gym, plan=free, current_period_end=_local(zone, *ends), next_charge_date=None
    )
    session.commit()

    summary = run_lifecycle(session, now=_local(zone, *now))

    assert summary["rolled"] == 1
    session.refresh(subscription)
    assert subscription.current_period_end == _local(zone, *next_end)
    # The period rolled into runs from the last whole interval's end, on the same calendar.
    assert subscription.current_period_start == _local(zone, *start)
    assert subscription.next_charge_date is None
