"""A card plan's debt charged at the desk on the member's saved card (a hunter's test of s55).

Spec B 3: "debt -> payment (desk payment, clear-debt, member pay-debt, next successful retry)
-> active, debt columns restored". The desk's card door was the desk charge, tied to no plan:
a member's debt taken there stayed owed, and the next daily sweep's retry charged the card for
it again. clear-debt now takes `method: card`: the member's own pay-debt path (one protected
debt attempt, stored first, settled with the debt restored), opened by staff and audited."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.cards import DECLINE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
)
from tests.billing.test_member_life import life  # noqa: F401 (fixture)
from tests.billing_ops.helpers import audit_rows
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym sells card plans and has a desk


def _in_card_debt(life):  # noqa: F811
    plan = create_plan(life.client, life.org)  # 250.00 ILS a month
    subscription_id = life.buy(plan)
    life.save_card(subscription_id, DECLINE)
    life.at(life.subscription(subscription_id).next_charge_date + timedelta(minutes=1))
    assert life.collect()["declined"] == 1
    assert life.subscription(subscription_id).debt_amount_in_cents == 25000
    return subscription_id


def test_staff_charge_a_card_debt_at_the_desk_once_and_the_retry_charges_nothing(life):  # noqa: F811
    subscription_id = _in_card_debt(life)
    life.save_card(subscription_id, "4580000000000000")  # the member brings a card that pays
    path = f"/subscriptions/{subscription_id}/clear-debt"

    paid = life.call("POST", path, life.owner, 200, json={"method": "card"})["data"]

    assert paid == {"outcome": "charged", "subscriptionId": subscription_id}
    owed = life.subscription(subscription_id)
    assert owed.status is SubscriptionStatus.active
    assert (owed.debt_amount_in_cents, owed.debt_since) == (0, None)
    charges = [row for row in life.ledger(subscription_id) if row[1] == "completed"]
    assert len(charges) == 2  # the first month, then the debt
    [audit] = audit_rows(life.session, "subscription.debt_charged_at_desk")
    assert audit.data == {"amountInCents": 25000, "outcome": "charged"}
    life.at(life.clock.now() + timedelta(days=1))  # the next daily sweep: no retry of a debt
    assert life.collect()["charged"] == 0
    assert [row for row in life.ledger(subscription_id) if row[1] == "completed"] == charges
    again = life.call("POST", path, life.owner, 409, json={"method": "card"})
    assert again["code"] == "pay_debt_not_available"


def test_a_card_at_the_desk_is_refused_for_a_plan_paid_in_cash_and_nothing_changes(life):  # noqa: F811
    life.at(NOW)
    plan = create_plan(life.client, life.org, type="cash", priceInCents=8000)
    sale = {"userId": str(life.member.user.id), "planId": plan["id"], "method": "pay_later",
            "paymentDueAt": (NOW + timedelta(days=1)).isoformat()}  # fmt: skip
    sold = life.call("POST", "/subscriptions", life.owner, 201, json=sale)["data"]
    life.at(NOW + timedelta(days=2))
    life.lifecycle()  # the balance past its due instant: a debt
    assert life.subscription(sold["id"]).debt_amount_in_cents == 8000
    before = life.ledger(sold["id"])

    refused = life.call(
        "POST", f"/subscriptions/{sold['id']}/clear-debt", life.owner, 409, json={"method": "card"}
    )

    assert refused["code"] == "pay_debt_not_available"
    assert life.ledger(sold["id"]) == before
    assert life.subscription(sold["id"]).debt_amount_in_cents == 8000
    assert audit_rows(life.session, "subscription.debt_charged_at_desk") == []


def test_a_card_debt_with_no_card_to_charge_is_refused_and_nothing_is_audited(life):  # noqa: F811
    """The collector blocks a debt attempt with no saved card: 409 pay_debt_not_available, the
    retry date put back, and no audit row saying the debt was charged at the desk (the
    session's reviewer: it was written before the charge was tried)."""
    subscription_id = _in_card_debt(life)
    owing = life.subscription(subscription_id)
    owing.payment_method_id = None
    life.session.commit()
    before = (owing.retry_at, life.ledger(subscription_id))

    refused = life.call(
        "POST", f"/subscriptions/{subscription_id}/clear-debt", life.owner, 409,
        json={"method": "card"},
    )  # fmt: skip

    assert refused["code"] == "pay_debt_not_available"
    after = life.subscription(subscription_id)
    assert (after.retry_at, life.ledger(subscription_id)) == before
    assert after.debt_amount_in_cents == 25000
    assert audit_rows(life.session, "subscription.debt_charged_at_desk") == []
