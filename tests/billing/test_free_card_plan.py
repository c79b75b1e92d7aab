"""A zero-price card plan (spec B 3: "zero-price open-ended card plans roll instead") is bought
through a token-only page: nothing is charged, the card is saved, the plan starts at once, and
the collector never charges it: open-ended, it rolls on; of a fixed term, it ends."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector
from gymctl.billing.lifecycle import run_lifecycle
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

pytestmark = pytest.mark.embedded  # the demo gym sells online: both engines


def _bought_online(client, org, card_server, session, **plan_fields):  # noqa: F811
    """A free plan bought through its page, the page completed: the subscription row."""
    plan = create_plan(client, org, priceInCents=0, **plan_fields)
    bought = purchase(client, org, plan)
    assert bought.status_code == 201, bought.json
    row = session.get(Checkout, uuid.UUID(bought.json["data"]["checkout"]["id"]))
    card_server.complete_page(row.page_id, APPROVE)
    assert webhook(client, org, row.page_id).status_code == 200
    session.expire_all()
    return session.get(Subscription, uuid.UUID(bought.json["data"]["subscription"]["id"]))


def test_a_zero_price_card_plan_saves_the_card_and_starts_without_a_charge(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
):
    plan = create_plan(client, org, priceInCents=0)
    bought = purchase(client, org, plan)
    assert bought.status_code == 201, bought.json
    row = session.get(Checkout, uuid.UUID(bought.json["data"]["checkout"]["id"]))
    assert (row.operation, row.amount_in_cents) == ("CreateTokenOnly", 0)
    card_server.complete_page(row.page_id, APPROVE)
    assert webhook(client, org, row.page_id).status_code == 200

    session.expire_all()
    subscription = session.get(Subscription, uuid.UUID(bought.json["data"]["subscription"]["id"]))
    assert subscription.status == SubscriptionStatus.active
    assert subscription.payment_method_id is not None
    assert session.scalars(select(PaymentTransaction)).all() == []
    renewal = subscription.current_period_end
    assert collector.due_in(session, org.id, now=renewal) == []
    assert renewal > NOW


def test_a_free_plan_of_a_fixed_term_bought_online_ends_at_its_period_end(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
):
    """Its grant set a next charge at the period end and its page saved a card, but the
    collector never charges a zero price: the hourly lifecycle pass ends its term then
    (term_ended) rather than leave it active on a period long over."""
    subscription = _bought_online(client, org, card_server, session, openEnded=False)
    end = subscription.current_period_end
    assert subscription.payment_method_id is not None
    assert subscription.next_charge_date == end
    assert collector.due_in(session, org.id, now=end) == []

    with session_factory() as hourly:
        run_lifecycle(hourly, now=end - timedelta(seconds=1))
        run_lifecycle(hourly, now=end)
        hourly.commit()

    session.expire_all()
    assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, end)
    assert session.scalars(select(PaymentTransaction)).all() == []
