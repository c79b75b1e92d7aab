"""The sweeps' due rules (issue 24's stepping): each names the first instant its pass acts. A
pass a microsecond before that instant does nothing; at it, the pass acts; and asked for the
instants after it, the rule names the next one, or none. On both engines: the rules are SQL
next to the sweeps' own selections."""

from __future__ import annotations

import functools
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import attempts, checkout, collector, recovery
from gymctl.billing.accounts import CARD_PROVIDER
from gymctl.billing.forecast import NowhereMailer, SeededCardProvider
from gymctl.models import CancellationSettlement, PaymentTransaction, RetentionCase
from gymctl.models.billing import (
    AttemptKind,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.retention import CaseKind
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention import presales
from gymctl.retention.settlement import Doors, period_end_due, period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.parametrize("engine", ["postgresql", "sqlite"], indirect=True)

TICK = timedelta(microseconds=1)


@pytest.fixture
def gym(session):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    session.commit()
    return gym


def card_subscription(session, gym, **fields):
    card = bf.make_card(session, gym, user=gym.member)
    subscription = bf.make_subscription(
        session, gym, PlanType.card, payment_method_id=card.id, **fields
    )
    session.commit()
    return subscription


def acts_first_at(session, due, sweep, instant) -> None:
    """`due` names `instant` and nothing after it; the pass a tick before it selects nothing,
    the pass at it charges."""
    assert due(session) == instant
    assert due(session, after=instant) is None
    assert sweep(now=instant - TICK).selected == 0
    assert sweep(now=instant).charged == 1


def test_the_collector_is_due_at_the_charge_date(session, session_factory, gym):
    subscription = card_subscription(session, gym)
    due = subscription.next_charge_date
    catch_up = functools.partial(
        collector.catch_up, session_factory, SeededCardProvider(), cipher=TEST_CIPHER
    )

    acts_first_at(session, collector.next_due, catch_up, due)
    session.expire_all()
    assert collector.next_due(session) == subscription.next_charge_date > due  # renewed


def test_a_debt_is_due_on_its_retry_day_when_later_than_its_charge_date(
    session, session_factory, gym
):
    retry, since = NOW + timedelta(hours=5), NOW - timedelta(days=2)
    card_subscription(session, gym, in_debt_since=since, next_charge_date=since, retry_at=retry)
    recover = functools.partial(
        collector.recover, session_factory, SeededCardProvider(), cipher=TEST_CIPHER
    )

    acts_first_at(session, collector.recovery_due, recover, retry)


def test_a_pending_attempt_is_due_when_its_executing_grace_ends(session, session_factory, gym):
    subscription = card_subscription(session, gym)
    started = subscription.next_charge_date
    bf.make_transaction(
        session,
        gym,
        subscription_id=subscription.id,
        provider=CARD_PROVIDER,
        status=TransactionStatus.pending,
        attempt_kind=AttemptKind.recurring,
        billing_attempt={"startedAt": started.isoformat(), "terminal": "x"},
    )
    session.commit()
    grace_over = started + timedelta(seconds=90)

    assert collector.recovery_due(session) == grace_over  # the plan is no debt: only the attempt
    assert collector.recovery_due(session, after=started) == grace_over
    assert collector.recovery_due(session, after=grace_over) is None


def test_recovery_is_due_when_a_stored_refunds_executing_grace_ends(session, gym):
    created = NOW - timedelta(seconds=30)
    bf.make_transaction(
        session,
        gym,
        type=TransactionType.refund,
        status=TransactionStatus.refund_pending,
        provider=CARD_PROVIDER,
        now=created,
    )
    session.commit()
    grace_over = created + attempts.EXECUTING_GRACE

    assert recovery.recovery_due(session) == grace_over
    assert recovery.recovery_due(session, after=NOW) == grace_over
    assert recovery.recovery_due(session, after=grace_over) is None


def test_a_notice_is_due_when_it_matures_and_waiting_mail_at_once(session, session_factory, gym):
    subscription = card_subscription(session, gym)
    matures = subscription.current_period_end
    subscription.cancel_at_period_end = True
    subscription.cancellation_effective_at = matures
    session.commit()
    doors = Doors(
        provider=SeededCardProvider(),
        cipher=TEST_CIPHER,
        documents=LocalDocumentProvider(),
        mailer=NowhereMailer(),
    )

    assert period_end_due(session) == matures
    assert period_end_due(session, after=matures) is None
    assert period_end_sweep(session_factory, doors, now=matures - TICK).cancelled == []
    assert period_end_sweep(session_factory, doors, now=matures).cancelled == [str(subscription.id)]
    session.expire_all()
    assert period_end_due(session) is None  # settled, its email sent
    settlement = session.scalar(select(CancellationSettlement))
    settlement.email_sent_at = None  # an email that could not be sent waits: at once
    session.commit()
    assert period_end_due(session, after=matures) < NOW


def test_an_open_page_is_due_when_it_expires(session, gym):
    expires = NOW + timedelta(minutes=30)
    subscription = card_subscription(session, gym)
    bf.make_checkout(
        session,
        subscription,
        operation="ChargeAndCreateToken",
        terminal="x",
        amount_in_cents=9900,
        expires_at=expires,
    )
    session.commit()

    assert checkout.abandoned_due(session) == expires
    assert checkout.abandoned_due(session, after=expires) is None


def test_the_presale_pass_is_due_only_while_a_case_waits(session, session_factory, gym):
    """It reads no clock in choosing its cases: nothing waiting, nothing to do."""
    assert presales.cases_waiting(session) is False
    subscription = card_subscription(
        session,
        gym,
        in_debt_since=NOW - timedelta(days=1),
        retention_case_kind=CaseKind.presale_charge_failed.value,
    )
    assert subscription.status == SubscriptionStatus.debt
    assert presales.cases_waiting(session) is True
    presales.presale_cases_pass(session_factory, NowhereMailer(), now=NOW)
    session.expire_all()
    assert session.scalar(select(RetentionCase.notified_at)) == NOW
    assert presales.cases_waiting(session) is False
    assert session.scalar(select(PaymentTransaction.id)) is None  # nothing was charged
