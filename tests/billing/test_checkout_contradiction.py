"""A checkout page charged for another amount (issue 19, defect 5): the money taken is put on
the ledger once with the billing contradiction alert (spec B 6: "billing contradictions"), and
the abandoned sweep never cancels a subscription over taken money."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.models import Checkout, PaymentTransaction, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from tests.access.conftest import gym, outsider  # noqa: F401 (fixtures)
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


def _alerts(caplog):
    return [r.args["reason"] for r in caplog.records if r.name == "gymctl.billing.alerts"]


def test_a_page_charged_for_another_amount_is_recorded_once_alerted_and_never_cancelled(
    client,
    org,  # noqa: F811 (the fixture)
    card_server,
    session,
    session_factory,
    caplog,
):
    plan = create_plan(client, org)  # 250.00 ILS
    bought = purchase(client, org, plan).json["data"]
    page_id = bought["checkout"]["pageId"]
    row = session.get(Checkout, bought["checkout"]["id"])
    row.amount_in_cents = 30000  # the page the member paid on asked for another amount
    session.commit()
    card_server.complete_page(page_id, APPROVE)

    with caplog.at_level("WARNING", logger="gymctl.billing.alerts"):
        first = webhook(client, org, page_id)
        again = webhook(client, org, page_id)  # the provider redelivers
        later = NOW + checkout.CHECKOUT_TTL + timedelta(hours=1)
        sweep = checkout.abandoned_sweep(
            session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
        )

    assert (first.status_code, first.json["outcome"]) == (200, "billing_contradiction")
    assert again.status_code == 200
    session.expire_all()
    [taken] = session.scalars(select(PaymentTransaction)).all()
    assert (taken.status, taken.amount_in_cents) == (TransactionStatus.pending, 25000)
    assert taken.provider_transaction_id
    assert str(taken.subscription_id) == bought["subscription"]["id"]
    assert taken.billing_attempt["contradiction"]["expectedAmountInCents"] == 30000
    assert _alerts(caplog) == ["billing_contradiction"]
    assert sweep["abandoned"] == []
    subscription = session.get(Subscription, bought["subscription"]["id"])
    assert subscription.status == SubscriptionStatus.scheduled
    assert session.get(Checkout, bought["checkout"]["id"]).status == CheckoutStatus.open
