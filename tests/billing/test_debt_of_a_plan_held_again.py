"""The debt of a plan the member holds again (issue 19, money at the joins). Spec B 4.3 refuses
only active and scheduled holders of a recurring plan, so a member whose subscription S of plan
P is in debt may buy P again and get S2. Paying S's debt afterwards (the member's pay-debt, the
collector's debt retry, the desk's clear-debt) pays it and restores the debt columns (spec B 3),
but does not revive S: P is held once (the uq_subscriptions_plan_held index, and no second
renewal). S ends, cancelled with reason `superseded`; the member keeps S2."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import OutboxEvent
from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE, DECLINE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded  # the demo gym reaches every step: both engines

FIRST = ("charge", "completed", 25000)
DECLINED = ("recurring", "failed", 25000)


def _held_again(journey):
    """S renewed into debt by a declining card, then P bought again (S2, charged once)."""
    plan = create_plan(journey.client, journey.org)
    old = journey.buy(plan)
    journey.save_card(old, DECLINE)
    journey.at(journey.subscription(old).next_charge_date + timedelta(minutes=1))
    assert journey.collect()["declined"] == 1
    assert journey.subscription(old).status is SubscriptionStatus.debt
    new = journey.buy(plan)  # a subscription in debt does not hold the plan (spec B 4.3)
    assert journey.subscription(new).status is SubscriptionStatus.active
    assert journey.ledger(new) == [FIRST]
    journey.save_card(old, APPROVE)  # the member's good card on the old one too
    journey.at(journey.clock.now() + timedelta(hours=1))  # the payment comes later (ledger order)
    return plan, old, new


def _superseded_events(journey, old) -> list[dict]:
    journey.session.expire_all()
    rows = journey.session.scalars(
        select(OutboxEvent)
        .where(
            OutboxEvent.name == "subscription.cancelled",
            OutboxEvent.aggregate_id == str(old),
        )
        .order_by(OutboxEvent.id)
    )
    return [row.payload for row in rows]


def _renewals_granted(journey, subscription_id) -> list[bool]:
    """`granted` of each subscription.renewed event of the subscription: a period given."""
    journey.session.expire_all()
    rows = journey.session.scalars(
        select(OutboxEvent.payload)
        .where(
            OutboxEvent.name == "subscription.renewed",
            OutboxEvent.aggregate_id == str(subscription_id),
        )
        .order_by(OutboxEvent.id)
    )
    return [payload["granted"] for payload in rows]


def _assert_paid_and_ended(journey, old, new, paid_row) -> None:
    """The debt paid once, S ended (not revived), S2 untouched; no second renewal of P."""
    ended = journey.subscription(old)
    assert ended.status is SubscriptionStatus.cancelled
    assert ended.cancellation_reason == "superseded"
    assert ended.ended_at is not None
    assert ended.next_charge_date is None
    assert (ended.debt_amount_in_cents, ended.debt_since, ended.debt_reason) == (0, None, None)
    assert ended.retry_at is None
    assert journey.ledger(old) == [FIRST, DECLINED, paid_row]
    [payload] = _superseded_events(journey, old)
    assert payload["reason"] == "superseded"
    assert payload["supersededBy"] == str(new)
    kept = journey.subscription(new)
    assert kept.status is SubscriptionStatus.active
    assert journey.ledger(new) == [FIRST]
    # From then on P renews once a month, on S2 only.
    journey.at(kept.next_charge_date + timedelta(minutes=1))
    assert journey.collect()["charged"] == 1
    assert journey.ledger(old) == [FIRST, DECLINED, paid_row]
    assert journey.ledger(new) == [FIRST, ("recurring", "completed", 25000)]
    # Booking is not blocked: nothing is owed.
    klass = journey.klass(journey.clock.now() + timedelta(days=2))
    assert journey.book(klass, 201)["data"]["status"] == "confirmed"


def test_the_member_pays_the_debt_of_a_plan_held_again_and_keeps_the_new_one(life):  # noqa: F811
    _, old, new = _held_again(life)
    paid = life.call("POST", f"/subscriptions/{old}/pay-debt", life.member, 200)
    assert paid["data"]["outcome"] == "charged"
    _assert_paid_and_ended(life, old, new, ("recurring", "completed", 25000))
    assert _renewals_granted(life, old) == [False]  # paid, but S gets no period: it ended
    # Nothing is left to pay: a second pay-debt is refused and changes nothing.
    again = life.client.post(
        f"/organizations/{life.org.id}/subscriptions/{old}/pay-debt",
        headers=life.headers(life.member),
    )
    assert (again.status_code, again.json["code"]) == (409, "pay_debt_not_available")
    assert len(life.ledger(old)) == 3


def test_the_debt_retry_sweep_pays_the_debt_of_a_plan_held_again(life):  # noqa: F811
    _, old, new = _held_again(life)
    life.at(life.subscription(old).retry_at + timedelta(minutes=1))
    swept = life.collect()
    assert swept["charged"] == 1, swept
    assert life.collect()["charged"] == 0  # the next run neither charges nor crashes
    _assert_paid_and_ended(life, old, new, ("recurring", "completed", 25000))
    assert _renewals_granted(life, old) == [False]


def test_the_desk_clears_the_debt_of_a_plan_held_again(life):  # noqa: F811
    _, old, new = _held_again(life)
    cleared = life.call("POST", f"/subscriptions/{old}/clear-debt", life.owner, 200, json={})
    assert cleared["data"]["subscriptionId"] == str(old)
    _assert_paid_and_ended(life, old, new, ("charge", "completed", 25000))


def test_a_debt_paid_with_no_other_holder_still_revives_the_plan(life):  # noqa: F811
    """The ordinary case is unchanged: no second holder, the paid debt makes S active."""
    plan = create_plan(life.client, life.org)
    old = life.buy(plan)
    life.save_card(old, DECLINE)
    life.at(life.subscription(old).next_charge_date + timedelta(minutes=1))
    assert life.collect()["declined"] == 1
    life.save_card(old, APPROVE)
    life.call("POST", f"/subscriptions/{old}/pay-debt", life.member, 200)
    revived = life.subscription(old)
    assert (revived.status, revived.cancellation_reason) == (SubscriptionStatus.active, None)
    assert revived.next_charge_date is not None
    assert _superseded_events(life, uuid.UUID(old)) == []
    assert _renewals_granted(life, old) == [True]
