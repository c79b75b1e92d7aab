"""The abandoned-checkouts sweep and the page's webhook at once (a hunter's test of s55; spec
B 3: the sweep cancels an unpaid plan; DESIGN 6: never charge twice). PostgreSQL, committed
for real in two connections: the sweep reads the checkout, releases its transaction for the
read-back (no lock across the provider's call), and the webhook completes the page meanwhile.
The sweep's lock kept the row it held from before, still "open": the paid page was marked
abandoned and its plan cancelled, and the abandoned read-back applied it a second time (two
completed charges for one deal, two months granted). It reads the row again under the lock."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.billing import abandoned_pages, checkout
from gymctl.db import get_engine
from gymctl.models import Checkout, PaymentTransaction, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, buy_card_plan
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

LATER = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)


class PaidDuringTheReadBack:
    """The provider; while the sweep reads the page back (not paid yet), the member pays and
    the webhook's own path applies it, committed in a session of its own."""

    def __init__(self, card_server, factory, organization_id):
        self.real, self.card_server = card_server.provider(), card_server
        self.factory, self.organization_id = factory, organization_id

    def get_page(self, terminal, page_id):
        unpaid = self.real.get_page(terminal, page_id)
        self.card_server.complete_page(page_id, APPROVE)
        with self.factory() as webhook:
            outcome, _ = checkout.verify_and_apply(
                webhook, self.real, organization_id=self.organization_id, page_id=page_id,
                now=LATER, cipher=TEST_CIPHER,
            )  # fmt: skip
            webhook.commit()
        assert outcome == "completed"
        return unpaid

    def __getattr__(self, name):
        return getattr(self.real, name)


def test_a_page_its_webhook_completed_during_the_sweep_is_neither_abandoned_nor_paid_twice(
    committed_pg, card_server
):
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))
        plan = bf.make_plan(session, gym.organization)
        subscription, bought = buy_card_plan(session, card_server.provider(), gym, plan)
        session.commit()
        subscription_id, page_id = subscription.id, bought.page_id
    provider = PaidDuringTheReadBack(card_server, factory, gym.organization.id)

    swept = checkout.abandoned_sweep(factory, provider, now=LATER, cipher=TEST_CIPHER)

    assert swept["abandoned"] == []
    for hours in (1, 2, 30):  # the abandoned pages' read-backs find nothing to record
        abandoned_pages.read_back_abandoned(
            factory, card_server.provider(), now=LATER + timedelta(hours=hours), cipher=TEST_CIPHER
        )
    with factory() as session:
        page = session.scalar(select(Checkout).where(Checkout.page_id == page_id))
        assert page.status == CheckoutStatus.completed
        assert session.get(Subscription, subscription_id).status == SubscriptionStatus.active
        paid = session.scalars(
            select(PaymentTransaction.status).where(
                PaymentTransaction.subscription_id == subscription_id
            )
        ).all()
        assert paid == [TransactionStatus.completed]
