"""A member pays on a hosted page opened on the gym's terminal, and the gym moves to another
terminal before the webhook arrives (or before the abandoned sweep reads the page back): the
page is only known on the terminal that opened it, so the read-back must be made there, on the
old account whose credentials are kept (as refunds and reconciles already do). Read on the new
terminal it is 'deal not found': the payment is never recorded and the paid plan is cancelled
as abandoned."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.models import Checkout, PaymentTransaction, Role, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from tests.access.conftest import gym  # noqa: F401 (fixtures)
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

pytestmark = pytest.mark.embedded


def _move_terminal(client, org):
    answer = client.put(
        f"/organizations/{org.id}/payments/provider",
        json={"provider": "card_provider", "terminal": "2000", "apiName": "new-account"},
        headers=org[Role.owner].headers,
    )
    assert answer.status_code == 200, answer.json


def _paid(session, subscription_id):
    session.expire_all()
    return session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()


def test_a_page_paid_before_the_terminal_moved_is_verified_on_its_own_terminal(
    client, org, card_server, session
):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    page_id = answer.json["data"]["checkout"]["pageId"]
    subscription_id = uuid.UUID(answer.json["data"]["subscription"]["id"])
    card_server.complete_page(page_id, APPROVE)  # the member pays on the old terminal
    _move_terminal(client, org)
    delivered = webhook(client, org, page_id)
    assert delivered.status_code == 200, delivered.json
    subscription = session.get(Subscription, subscription_id)
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.active
    assert [t.status for t in _paid(session, subscription_id)] == [TransactionStatus.completed]


def test_the_abandoned_sweep_reads_the_page_back_on_its_own_terminal(
    client, org, card_server, session, session_factory
):
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    page_id = answer.json["data"]["checkout"]["pageId"]
    subscription_id = uuid.UUID(answer.json["data"]["subscription"]["id"])
    card_server.complete_page(page_id, APPROVE)  # paid; the webhook was lost
    _move_terminal(client, org)
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    result = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    assert result["abandoned"] == []
    assert result["completed"] == 1
    session.expire_all()
    assert session.get(Subscription, subscription_id).status == SubscriptionStatus.active
    found = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
    assert found.status == CheckoutStatus.completed
    assert [t.status for t in _paid(session, subscription_id)] == [TransactionStatus.completed]
