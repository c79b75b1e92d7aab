"""A month of a plan is a month of the gym's calendar (spec B 2.5: days and charges in the
organization's time zone). A hunt in s54 found periods counted on UTC's: a presale opening on
March 1st (local midnight, February 28th 22:00 UTC in Jerusalem) paid a period ending March
29th at 01:00 local and was charged on the 29th from then on. A renewal, a desk sale and a cash
plan's debt paid at the desk add months the same way (`clock.add_months`)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select

from gymctl.billing import collector, plans
from gymctl.clock import add_months
from gymctl.models import PaymentProviderConfig, Role, Subscription
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.providers.documents import LocalDocumentProvider
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.billing import factories as bf
from tests.billing.cards import APPROVE
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW
from tests.retention.conftest import pay_at_desk

JERUSALEM = ZoneInfo("Asia/Jerusalem")


def _local(year, month, day, hour=0):
    return datetime(year, month, day, hour, tzinfo=JERUSALEM)


@pytest.mark.parametrize(
    ("start", "months", "end"),
    [
        (_local(2027, 3, 1), 1, _local(2027, 4, 1)),  # across the clocks going forward
        (_local(2027, 1, 31, 23), 1, _local(2027, 2, 28, 23)),  # the month's last day
        (_local(2027, 10, 1, 8), 1, _local(2027, 11, 1, 8)),  # across the clocks going back
        (_local(2027, 3, 1), 12, _local(2028, 3, 1)),
    ],
)
def test_months_are_added_on_the_gyms_calendar(start, months, end):
    assert add_months(start.astimezone(UTC), months, "Asia/Jerusalem") == end
    assert add_months(start.astimezone(UTC), months, "Asia/Jerusalem").tzinfo is UTC


@pytest.mark.embedded
def test_a_presale_opening_on_march_1st_pays_march(
    client,
    org,  # noqa: F811
    card_server,
    session,
    session_factory,
):
    config = session.scalar(
        select(PaymentProviderConfig).where(PaymentProviderConfig.organization_id == org.id)
    )
    config.terminal_since = NOW - timedelta(days=30)
    session.commit()
    answer = client.patch(
        f"/organizations/{org.id}/billing/settings",
        json={"timezone": "Asia/Jerusalem", "openingDay": "2027-03-01"},
        headers=org[Role.owner].headers,
    )
    assert answer.status_code == 200, answer.json
    opening = _local(2027, 3, 1).astimezone(UTC)
    bought = purchase(client, org, create_plan(client, org)).json["data"]
    card_server.complete_page(bought["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought["checkout"]["pageId"]).status_code == 200
    subscription_id = uuid.UUID(bought["subscription"]["id"])

    for at in (opening, _local(2027, 4, 1).astimezone(UTC)):  # the opening charge, a renewal
        outcome = collector.collect_subscription(
            session_factory,
            subscription_id,
            card_server.provider(),
            now=at,
            cipher=TEST_CIPHER,
            summary=collector.Summary(),
        )
        assert outcome == "charged", outcome

    session.expire_all()
    subscription = session.get(Subscription, subscription_id)
    assert subscription.current_period_start == _local(2027, 4, 1)
    assert subscription.current_period_end == _local(2027, 5, 1)
    assert subscription.next_charge_date == _local(2027, 5, 1)


@pytest.mark.embedded
def test_a_desk_sale_and_a_cash_debt_paid_at_the_desk_run_to_the_same_local_day(session, gym):  # noqa: F811
    bf.make_billing_settings(session, gym.organization, timezone="Asia/Jerusalem")
    plan = bf.make_plan(session, gym.organization, PlanType.cash)
    just_after_midnight = _local(2027, 3, 1, 0).astimezone(UTC) + timedelta(minutes=5)
    sold = plans.grant_plan(
        session,
        plan,
        gym.membership,
        method=CollectionMethod.cash,
        documents=LocalDocumentProvider(),
        now=just_after_midnight,
        actor_user_id=gym.owner.id,
    )
    assert sold.current_period_end == _local(2027, 4, 1) + timedelta(minutes=5)
    lapsed = bf.make_subscription(session, gym, PlanType.cash, in_debt_since=NOW)
    lapsed.cash_prepaid_through = _local(2027, 3, 1).astimezone(UTC)
    session.commit()

    pay_at_desk(session, gym, lapsed, now=_local(2027, 3, 2).astimezone(UTC))

    session.expire_all()
    assert session.get(Subscription, lapsed.id).cash_prepaid_through == _local(2027, 4, 1)
