"""Spec B 3: "Transaction | pending | reconcile with verified success | exact amount, currency,
terminal | completed" (and checkout._confirmed: "A charging page counts only with its deal and
the exact amount and currency"). The read-back of a hosted page maps its deal's CoinId through
the four coins we know (card_http._money) and anything else to None, and _confirmed reads None
as "the checkout's currency". A deal the provider states it took in another coin (36, Australian
dollars, by ISO 4217) at the same number is settled as the plan's 250.00 ILS: the checkout
completes, a completed ILS charge is written and the period granted, where money taken at other
terms is a billing contradiction (record_contradiction) left to staff."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.billing.checkout import CHARGE_AND_SAVE_CARD
from gymctl.models import Checkout, PaymentTransaction, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import page_result
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@dataclass
class OneAnswer:
    """A provider whose GetLpResult answer for every page is `data` (mapped by the real HTTP
    client's page_result)."""

    data: dict
    name: str = "card_provider"

    def get_page(self, terminal: Terminal, page_id: str):
        return page_result(terminal, page_id, {**self.data, "LowProfileId": page_id})


def test_a_deal_in_a_coin_we_do_not_know_is_not_settled_as_the_plans_currency(session):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym)
    plan = bf.make_plan(session, gym.organization, price_in_cents=25000, currency="ILS")
    subscription = bf.make_subscription(
        session, gym, plan=plan, status=SubscriptionStatus.scheduled
    )
    page = bf.make_checkout(
        session,
        subscription,
        operation=CHARGE_AND_SAVE_CARD,
        amount_in_cents=25000,
        currency="ILS",
        page_id="page-aud",
    )
    session.commit()
    answer = {
        "ResponseCode": 0,
        "TerminalNumber": 1000,
        "Operation": "ChargeAndCreateToken",
        "ReturnValue": str(page.id),
        "TranzactionId": 777001,
        "TranzactionInfo": {"ResponseCode": 0, "Amount": "250.00", "CoinId": 36},
        "TokenInfo": {"Token": "tok-aud", "TokenExDate": "20301231"},
    }

    outcome, _ = checkout.verify_and_apply(
        session,
        OneAnswer(answer),
        organization_id=gym.organization.id,
        page_id="page-aud",
        now=NOW,
        cipher=TEST_CIPHER,
    )
    session.commit()

    session.expire_all()
    charges = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription.id)
    ).all()
    assert outcome != "completed"
    assert session.get(Checkout, page.id).status != CheckoutStatus.completed
    assert [c.status for c in charges] != [TransactionStatus.completed]
    assert session.get(Subscription, subscription.id).status != SubscriptionStatus.active
