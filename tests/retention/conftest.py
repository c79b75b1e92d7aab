"""A gym on the fake card provider (loopback), members' paid card charges, the local document
provider, the sweep's doors with a mailbox, and the steps the retention tests share: a notice,
a logged contact, a presale whose opening charge was declined, the desk taking a debt, and a
refusal that changes nothing."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl import ids
from gymctl.billing import collector, debt_payments
from gymctl.billing.accounts import CARD_PROVIDER, saved_card
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType, TransactionType
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import MailboxMailer
from gymctl.retention import cases, notices
from gymctl.retention.settlement import Doors
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, TERMINAL, Sandbox, save_test_card
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=400))


@pytest.fixture
def mailer(mailbox, clock):
    return MailboxMailer(mailbox, "gym <no-reply@gym.example>", clock=clock)


@pytest.fixture
def doors(card_server, mailer):  # noqa: F811
    return Doors(
        provider=card_server.provider(),
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=mailer,
    )


def give_notice(session, gym, subscription, **overrides):
    """notices.give_notice: by default the member's own notice, in English, at NOW."""
    values = {
        "initiator": "member",
        "actor_user_id": gym.member.id,
        "locale": "en",
        "now": NOW,
        **overrides,
    }
    return notices.give_notice(session, gym.organization.id, subscription.id, **values)


def staff_notice(session, gym, subscription, effective, *, now=NOW):
    """Staff give notice for the member at `now`, for the owner's own reason, effective on
    `effective`; the case it opened."""
    _, case = give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        actor_user_id=gym.owner.id,
        reason_code="price",
        effective_at=effective,
        now=now,
    )
    return case


def declined_presale(session, session_factory, gym, sandbox: Sandbox, opening) -> Subscription:
    """A presale on a card the sandbox declines, its opening-day charge declined by the
    collector at `opening`: in debt and marked presale_charge_failed, its case not yet opened."""
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    subscription = bf.make_subscription(
        session, gym, presale_opening=opening, payment_method_id=method.id
    )
    session.commit()
    declined = collector.catch_up(
        session_factory, sandbox.provider, now=opening, cipher=TEST_CIPHER
    )
    assert declined.declined == 1
    return subscription


def pay_at_desk(session, gym, subscription, *, now) -> None:
    """The owner takes the whole debt at the desk, committed."""
    debt_payments.clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        actor_user_id=gym.owner.id,
        now=now,
        documents=LocalDocumentProvider(),
    )
    session.commit()


def log_contact(session, gym, case, *, at=NOW, channel="phone", note=None):
    """The owner logs a contact with the member, made at `at`."""
    return cases.log_contact(
        session,
        gym.organization.id,
        case.id,
        channel=channel,
        note=note,
        contacted_at=at,
        actor_user_id=gym.owner.id,
        now=at,
    )


def refused(session, call) -> DomainError:
    """The DomainError `call` raises, after checking that it changed nothing."""
    session.flush()
    before = snapshot(session)
    with pytest.raises(DomainError) as caught:
        call()
    assert snapshot(session) == before
    return caught.value


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
    charge = bf.make_transaction(
        session,
        gym,
        subscription_id=subscription.id,
        type=TransactionType.recurring,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=amount,
        provider_transaction_id=result.transaction_id,
        billing_attempt={"terminal": TERMINAL.number},
    )
    return subscription, charge
