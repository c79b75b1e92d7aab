"""The protected collector over real HTTP: the httpx client against the fake provider on
loopback, with the transport faults a real provider shows (a call that hangs past the client's
timeout, an answer lost after the charge, a lookup that fails). Pending means unresolved, not
uncharged: each is resolved by asking about the stored id, and money moves at most once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import attempts, collector
from gymctl.models import PaymentTransaction, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionStatus
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.conftest import NOW

DUE = NOW - timedelta(minutes=1)


@pytest.fixture
def provider(card_server):
    return card_server.provider(timeout=0.5)


@pytest.fixture
def subscription(session, card_server):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=30))
    # The card is saved with the provider's usual timeout: the tests' 0.5 s is for the charges
    # they hang, and a loaded machine ran the setup's page past it (a flaky setup error).
    method = save_test_card(session, gym, card_server.provider(), card_server.simulator)
    subscription = bf.make_subscription(
        session,
        gym,
        PlanType.card,
        payment_method_id=method.id,
        next_charge_date=DUE,
        current_period_start=DUE - timedelta(days=30),
        current_period_end=DUE,
    )
    session.commit()
    return subscription


def collect(session_factory, provider, subscription, at=NOW) -> str:
    return collector.collect_subscription(
        session_factory,
        subscription.id,
        provider,
        now=at,
        cipher=TEST_CIPHER,
        summary=collector.Summary(),
    )


def attempts_of(session, subscription) -> list[PaymentTransaction]:
    session.expire_all()
    return session.scalars(
        select(PaymentTransaction)
        .where(PaymentTransaction.subscription_id == subscription.id)
        .order_by(PaymentTransaction.created_at)
    ).all()


def external_id(transaction: PaymentTransaction) -> str:
    return transaction.billing_attempt["externalAttemptId"]


def test_a_charge_that_hangs_past_the_timeout_stays_pending_and_is_retried_once_confirmed(
    session, session_factory, card_server, provider, subscription
):
    card_server.inject(CHARGE, Fault.hang)
    assert collect(session_factory, provider, subscription) == "pending"
    [first] = attempts_of(session, subscription)
    assert first.status == TransactionStatus.pending
    at = NOW + attempts.EXECUTING_GRACE
    collector.recover(session_factory, provider, now=at, cipher=TEST_CIPHER)
    [first] = attempts_of(session, subscription)
    assert first.billing_resolution["decision"] == "not_charged"
    assert card_server.charge_count(external_id(first)) == 0
    retry_at = session.get(Subscription, subscription.id).retry_at
    assert retry_at == at + timedelta(minutes=5)
    assert collect(session_factory, provider, subscription, at=retry_at) == "charged"
    first, second = attempts_of(session, subscription)
    assert card_server.charge_count(external_id(second)) == 1
    assert len(card_server.charges()) == 1


def test_an_answer_lost_after_the_charge_settles_by_lookup_without_a_second_charge(
    session, session_factory, card_server, provider, subscription
):
    card_server.inject(CHARGE, Fault.answer_lost)
    assert collect(session_factory, provider, subscription) == "pending"
    # Inside the grace the attempt may still be executing: the collector leaves it alone.
    soon = NOW + timedelta(seconds=30)
    assert collect(session_factory, provider, subscription, at=soon) == "busy"
    summary = collector.recover(
        session_factory, provider, now=NOW + attempts.EXECUTING_GRACE, cipher=TEST_CIPHER
    )
    assert summary.charged == 1
    [only] = attempts_of(session, subscription)
    assert only.status == TransactionStatus.completed
    assert card_server.charge_count(external_id(only)) == 1
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.active
    assert card_server.requests(CHARGE) == 1


def test_a_failing_lookup_keeps_the_attempt_pending_and_never_charges_again(
    session, session_factory, card_server, provider, subscription
):
    card_server.inject(CHARGE, Fault.answer_lost)
    assert collect(session_factory, provider, subscription) == "pending"
    card_server.inject(LOOKUP_CHARGE, Fault.error, times=None, status=502)
    at = NOW + attempts.EXECUTING_GRACE
    for minutes in (0, 5, 10):
        collector.recover(
            session_factory, provider, now=at + timedelta(minutes=minutes), cipher=TEST_CIPHER
        )
    [only] = attempts_of(session, subscription)
    assert only.status == TransactionStatus.pending
    assert card_server.requests(CHARGE) == 1
    card_server.clear_faults()
    collector.recover(session_factory, provider, now=at + timedelta(minutes=15), cipher=TEST_CIPHER)
    [only] = attempts_of(session, subscription)
    assert only.status == TransactionStatus.completed
    assert card_server.charge_count(external_id(only)) == 1
