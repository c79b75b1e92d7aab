"""A gym on the fake card provider (loopback), members' paid card charges, the local document
provider, and the sweep's doors with a mailbox."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl import ids
from gymctl.billing.accounts import CARD_PROVIDER, saved_card
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType, TransactionStatus, TransactionType
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailboxMailer
from gymctl.retention.settlement import Doors
from tests.billing import factories as bf
from tests.billing.cards import TERMINAL, connect_card_provider, save_test_card
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW


@pytest.fixture
def gym(session):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=400))
    return gym


@pytest.fixture
def doors(card_server, mailbox, clock):  # noqa: F811
    return Doors(
        provider=card_server.provider(),
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=MailboxMailer(mailbox, "gym <no-reply@gym.example>", clock=clock),
    )


def paid_card_subscription(
    session, gym, server, *, amount: int = 36500, **fields
) -> tuple[Subscription, PaymentTransaction]:
    """A yearly card plan paid by card on the fake provider (money really moved)."""
    method = save_test_card(session, gym, server.provider(), server.simulator)
    plan = bf.make_plan(
        session, gym.organization, PlanType.card, price_in_cents=amount, interval_months=12
    )
    subscription = bf.make_subscription(
        session, gym, plan=plan, payment_method_id=method.id, **fields
    )
    card = saved_card(method, TEST_CIPHER)
    result = server.provider().charge_token(
        TERMINAL,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=amount,
        currency="ILS",
        unique_id=str(ids.new_id()),
    )
    charge = PaymentTransaction(
        id=ids.new_id(),
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        user_id=gym.member.id,
        type=TransactionType.recurring,
        status=TransactionStatus.completed,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=amount,
        currency="ILS",
        provider_transaction_id=result.transaction_id,
        billing_attempt={"terminal": TERMINAL.number},
        metadata_={},
        created_at=NOW,
        updated_at=NOW,
    )
    session.add(charge)
    session.flush()
    return subscription, charge


def cash_paid(session, subscription, amount: int) -> PaymentTransaction:
    charge = PaymentTransaction(
        id=ids.new_id(),
        organization_id=subscription.organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        type=TransactionType.charge,
        status=TransactionStatus.completed,
        provider="manual",
        method="cash",
        amount_in_cents=amount,
        currency=subscription.currency,
        metadata_={},
        created_at=NOW,
        updated_at=NOW,
    )
    session.add(charge)
    session.flush()
    return charge
