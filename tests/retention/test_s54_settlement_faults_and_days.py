"""The period-end settlement (spec B 8), three defects a hunt in s54 found:
- a stored card refund that raised when sent again (its account's credentials unreadable)
  stopped every sweep before any matured notice was settled, in every gym (the settlement's own
  rule: "one notice's fault is logged and counted, not raised");
- the owner's task named the amount owed in cents as if it were the currency ("return 7300
  ILS" of 73.00 ILS owed);
- a span between two local midnights across the clocks going back (12 calendar days, 12 days
  and an hour by UTC's clock) was refunded as 13 days: days are the gym's calendar days."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gymctl.models import BillingSettings, CancellationSettlement, PaymentProviderConfig, Task
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.card_http import REFUND
from gymctl.retention.proration import refund_days
from gymctl.retention.settlement import period_end_sweep
from tests.billing import factories as bf
from tests.billing.fake_card_provider import Fault
from tests.conftest import NOW
from tests.retention.conftest import paid_card_subscription, staff_notice

D = timedelta(days=1)
JERUSALEM = ZoneInfo("Asia/Jerusalem")


def _local(year, month, day):
    return datetime(year, month, day, tzinfo=JERUSALEM).astimezone(UTC)


@pytest.mark.parametrize(
    ("effective", "end", "days"),
    [
        (_local(2027, 10, 20), _local(2027, 11, 1), 12),  # across the clocks going back
        (_local(2027, 3, 20), _local(2027, 4, 1), 12),  # across the clocks going forward
        (_local(2027, 10, 20) + timedelta(hours=1), _local(2027, 11, 1), 12),  # a begun day
        # 01:50 then 01:10 local, the hour the clocks repeat on Oct 31st: one begun day
        (datetime(2027, 10, 30, 22, 50, tzinfo=UTC), datetime(2027, 10, 30, 23, 10, tzinfo=UTC), 1),
    ],
)
def test_refund_days_are_the_gyms_calendar_days(effective, end, days):
    assert refund_days(effective, end, [], timezone="Asia/Jerusalem") == days


@pytest.mark.embedded
def test_a_settlement_across_the_clocks_going_back_refunds_the_calendar_days(
    session, session_factory, gym, card_server, doors
):
    settings = session.get(BillingSettings, gym.organization.id)
    if settings is None:
        settings = bf.make_billing_settings(session, gym.organization)
    settings.timezone = "Asia/Jerusalem"
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=_local(2027, 11, 1)
    )
    staff_notice(session, gym, subscription, _local(2027, 10, 20))
    session.commit()

    period_end_sweep(session_factory, doors, now=_local(2027, 10, 20) + timedelta(minutes=1))

    settled = session.scalar(select(CancellationSettlement))
    assert (settled.days, settled.amount_in_cents) == (12, 36500 * 12 // 365)


@pytest.mark.embedded
def test_the_owner_task_names_the_amount_owed_in_money(session, session_factory, gym, doors):
    subscription = bf.make_subscription(
        session, gym, PlanType.cash, current_period_end=NOW + 73 * D, price_in_cents=36500
    )
    bf.make_transaction(
        session, gym, subscription_id=subscription.id, method="cash", amount_in_cents=36500
    )
    staff_notice(session, gym, subscription, NOW)
    session.commit()

    period_end_sweep(session_factory, doors, now=NOW)

    assert session.scalar(select(CancellationSettlement.amount_in_cents)) == 7300
    task = session.scalar(select(Task).where(Task.kind == "manual_refund"))
    assert task.detail.startswith("return 73.00 ILS (paid by")


def test_a_stored_refund_that_raises_holds_back_no_matured_notice(
    session, session_factory, gym, card_server, doors
):
    """The first notice's card refund was stored and its answer lost (refund_pending); then its
    account's credentials cannot be read (a key rotated away, a damaged row). A second member's
    cash notice matures the next day: it is settled, the refund counted as an error and left
    pending for the next pass."""
    first, _ = paid_card_subscription(session, gym, card_server, current_period_end=NOW + 100 * D)
    staff_notice(session, gym, first, NOW + 50 * D)
    session.commit()
    card_server.inject(REFUND, Fault.answer_lost)
    period_end_sweep(session_factory, doors, now=NOW + 50 * D)
    for config in session.scalars(select(PaymentProviderConfig)):
        config.credentials_ciphertext = "v1:damaged"
    second = bf.make_subscription(session, gym, PlanType.cash, current_period_end=NOW + 80 * D)
    staff_notice(session, gym, second, NOW + 51 * D)
    session.commit()

    result = period_end_sweep(session_factory, doors, now=NOW + 51 * D)

    session.expire_all()
    assert result.errors == 1
    assert second.status == SubscriptionStatus.cancelled
    pending = session.scalar(
        select(CancellationSettlement).where(CancellationSettlement.subscription_id == first.id)
    )
    assert pending.execution == "refund_pending"
