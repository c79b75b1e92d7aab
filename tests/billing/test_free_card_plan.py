"""A zero-price card plan (spec B 3: "zero-price open-ended card plans roll instead") is bought
through a token-only page: nothing is charged, the card is saved, the plan starts at once, and
the collector never charges it."""

from __future__ import annotations

from sqlalchemy import select

from gymctl.billing import collector
from gymctl.models import Checkout, PaymentTransaction, Subscription
from gymctl.models.billing import SubscriptionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW


def test_a_zero_price_card_plan_saves_the_card_and_starts_without_a_charge(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    plan = create_plan(client, org, priceInCents=0)
    bought = purchase(client, org, plan)
    assert bought.status_code == 201, bought.json
    row = session.get(Checkout, bought.json["data"]["checkout"]["id"])
    assert (row.operation, row.amount_in_cents) == ("CreateTokenOnly", 0)
    card_server.complete_page(row.page_id, APPROVE)
    assert webhook(client, org, row.page_id).status_code == 200

    session.expire_all()
    subscription = session.get(Subscription, bought.json["data"]["subscription"]["id"])
    assert subscription.status == SubscriptionStatus.active
    assert subscription.payment_method_id is not None
    assert session.scalars(select(PaymentTransaction)).all() == []
    renewal = subscription.current_period_end
    assert collector.due_in(session, org.id, now=renewal) == []
    assert renewal > NOW
