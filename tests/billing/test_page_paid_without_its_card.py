"""A hosted page whose deal settled but whose card token never came (s54 noticed it, left alone).

A charging page (ChargeAndCreateToken) answers "pending" while the token it promised is not
there yet (card_http.page_result), so the webhook, the abandoned sweep and each read-back wait
for it. A token that never came left the page "pending" for good: the abandoned sweep cancelled
the plan the member had paid for, and its read-backs waited a week and then stopped, the money
at the provider with no ledger row. Now a settled deal is waited on for its card only while the
page is open: once its time is over it is applied as paid without a card (the plan paid, or
revived, its period granted; the member adds a card for renewals).

Against the fake card provider on loopback; its card 4580000000000006 settles a page's deal
and never gives its token."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.billing.abandoned_pages import read_back_abandoned
from gymctl.models import Checkout, PaymentTransaction, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.models.organizations import Role
from tests.access.conftest import gym  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_abandoned_pages_read_back import ABANDONED_AT, HOUR
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.billing_ops.contradictions import org_url

TOKEN_LOST = "4580000000000006"


def _ledger(session, subscription_id) -> list[PaymentTransaction]:
    session.expire_all()
    return session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()


@pytest.mark.embedded  # both engines: the demo gym sells card plans through pages
def test_a_page_paid_whose_card_never_came_pays_its_plan_once_its_time_is_over(
    client, org, card_server, session, session_factory
):
    """While the page is open the card is waited for (the webhook answers 503, the provider
    redelivers); at the abandoned sweep the member's payment is applied without a card: the
    plan paid and its period granted, not cancelled as abandoned with the money taken."""
    plan = create_plan(client, org)  # 250.00 ILS
    data = purchase(client, org, plan).json["data"]
    page_id, subscription_id = data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])
    card_server.complete_page(page_id, TOKEN_LOST)
    waited = webhook(client, org, page_id)
    assert (waited.status_code, waited.json["code"]) == (503, "deal_not_finalized")
    assert _ledger(session, subscription_id) == []

    provider = card_server.provider()
    swept = checkout.abandoned_sweep(
        session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER
    )
    assert (swept["completed"], swept["abandoned"]) == (1, [])

    [paid] = _ledger(session, subscription_id)
    assert (paid.status, paid.amount_in_cents, paid.currency) == (
        TransactionStatus.completed,
        25000,
        "ILS",
    )
    assert paid.provider_transaction_id
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.current_period_end is not None
    assert subscription.payment_method_id is None  # no card came: none is saved
    page = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
    assert page.status == CheckoutStatus.completed
    again = webhook(client, org, page_id)  # a redelivery after: recorded once
    assert again.status_code == 200, again.json
    assert len(_ledger(session, subscription_id)) == 1


@pytest.mark.embedded  # both engines
def test_a_page_paid_without_its_card_after_it_was_abandoned_revives_its_plan(
    client, org, card_server, session, session_factory
):
    """Paid at the provider after the abandoned sweep, its webhook lost: the first read-back
    applies it (the plan revived and paid), rather than waiting out the week of read-backs
    for a card that never comes and leaving the money with no ledger row."""
    plan = create_plan(client, org)
    data = purchase(client, org, plan).json["data"]
    page_id, subscription_id = data["checkout"]["pageId"], uuid.UUID(data["subscription"]["id"])
    provider = card_server.provider()
    swept = checkout.abandoned_sweep(
        session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER
    )
    assert swept["abandoned"] == [str(subscription_id)]
    card_server.complete_page(page_id, TOKEN_LOST)

    first = read_back_abandoned(
        session_factory, provider, now=ABANDONED_AT + HOUR, cipher=TEST_CIPHER
    )
    assert len(first["completed"]) == 1, first
    [paid] = _ledger(session, subscription_id)
    assert paid.status == TransactionStatus.completed
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.payment_method_id is None


@pytest.mark.embedded  # both engines
def test_a_page_paid_at_another_amount_without_its_card_is_settled_by_the_door(
    client, org, card_server, session, session_factory
):
    """Taken at another amount as well: a billing contradiction, as any page's. The door asks
    the provider again, which still reports the deal without its token: approved money all
    the same, so staff can refund it (it answered billing_evidence_mismatch for ever)."""
    plan = create_plan(client, org)  # 250.00 ILS
    data = purchase(client, org, plan).json["data"]
    page_id = data["checkout"]["pageId"]
    row = session.get(Checkout, uuid.UUID(data["checkout"]["id"]))
    row.amount_in_cents = 30000
    session.commit()
    card_server.complete_page(page_id, TOKEN_LOST)
    provider = card_server.provider()
    swept = checkout.abandoned_sweep(
        session_factory, provider, now=ABANDONED_AT, cipher=TEST_CIPHER
    )
    assert swept["alerts"] == [{"reason": "billing_contradiction", "checkoutId": str(row.id)}]
    [taken] = _ledger(session, uuid.UUID(data["subscription"]["id"]))
    assert taken.status == TransactionStatus.pending

    body = {"decision": "refund", "amountInCents": 25000, "currency": "ILS"}
    settled = client.post(
        f"{org_url(org, taken.id)}/settle-contradiction", json=body, headers=org[Role.owner].headers
    )
    assert settled.status_code == 200, settled.json
    assert settled.json["data"]["outcome"] == "refund_stored"
