"""Every path to the card provider, walked with the outside-call detector on
(tests/embedded_outside_calls.py), on the embedded default as the quick start makes it (a SQLite
file of its own, committed for real: BEGIN IMMEDIATE each): no thread holds SQLite's one write
lock while the provider answers (decisions s42). The provider is the fake one on loopback, over
real HTTP, as the billing tests use it. Each walk sets up the rows that reach its call (a due
card plan, a pending attempt past its grace, a stored refund, a matured notice with a refund,
an open page past its time, ...) and asserts the call was made at all."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import (
    accounts,
    card_replacement,
    checkout,
    collector,
    contradictions,
    debt_payments,
    desk_resolution,
    recovery,
    refunds,
    resolution,
    verification,
)
from gymctl.billing.desk import DeskChargeRequest, desk_charge
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import CheckoutStatus, TransactionStatus
from gymctl.providers.card_http import CHARGE, GET_PAGE, LOOKUP_CHARGE, REFUND
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention import settlement
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, BUY_URLS, TIMEOUT, buy_card_plan, completed_token_page
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.contradictions import contradicted_attempt
from tests.billing_ops.helpers import (
    card_of,
    card_subscription,
    dismiss,
    paid_charge,
    pending_attempt,
    sent_attempt,
)
from tests.conftest import NOW
from tests.embedded_outside_calls import factory, mailer, watching  # noqa: F401 (fixtures)
from tests.retention.conftest import give_notice, paid_card_subscription

D = timedelta(days=1)
PAST_GRACE = NOW + timedelta(minutes=5)
HTTP = "httpx"


@pytest.fixture
def provider(card_server):
    return card_server.provider()


@pytest.fixture
def documents() -> LocalDocumentProvider:
    return LocalDocumentProvider()


def _gym(session):
    return bf.make_gym(session, card_provider_since=NOW - 400 * D)


def _status(factory, transaction_id) -> TransactionStatus:
    with factory() as session:
        return session.get(PaymentTransaction, transaction_id).status


def _reconcile(factory, provider, gym, transaction_id):
    """The owner's reconcile of a transaction, committed (the route's transaction)."""
    with factory() as session:
        answer = resolution.reconcile(
            session,
            provider,
            TEST_CIPHER,
            organization_id=gym.organization.id,
            transaction_id=transaction_id,
            actor_user_id=gym.owner.id,
            now=NOW,
        )
        session.commit()
    return answer


def _held(seen) -> None:
    assert HTTP in seen.doors(), "the walk never reached the card provider"
    assert not seen.calls, seen.report()


# -- the collector's passes -----------------------------------------------------------------


def test_the_catch_up_pass_holds_no_write_lock(factory, card_server, provider):
    with factory() as session:
        card_subscription(session, _gym(session), card_server)
        session.commit()
    with watching() as seen:
        summary = collector.catch_up(factory, provider, now=NOW, cipher=TEST_CIPHER)
    assert summary.charged == 1, summary
    _held(seen)


def test_the_daily_sweep_holds_no_write_lock(factory, card_server, provider):
    with factory() as session:
        card_subscription(session, _gym(session), card_server)
        session.commit()
    with watching() as seen:
        summary = collector.daily_sweep(factory, provider, now=NOW, cipher=TEST_CIPHER)
    assert summary.charged == 1, summary
    _held(seen)


def test_recovery_looking_up_a_pending_attempt_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    """A renewal whose answer was lost: pending, looked up by its stored id past its grace."""
    with factory() as session:
        card_subscription(session, _gym(session), card_server)
        session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    assert collector.catch_up(factory, provider, now=NOW, cipher=TEST_CIPHER).pending == 1
    with watching() as seen:
        summary = collector.recover(factory, provider, now=PAST_GRACE, cipher=TEST_CIPHER)
    assert summary.resolved == 1, summary
    assert card_server.requests(LOOKUP_CHARGE) == 1
    _held(seen)


def test_recovery_collecting_a_debt_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    with factory() as session:
        card_subscription(session, _gym(session), card_server, in_debt_since=NOW - 3 * D)
        session.commit()
    with watching() as seen:
        summary = collector.recover(factory, provider, now=NOW, cipher=TEST_CIPHER)
    assert card_server.requests(CHARGE) == 1, summary
    _held(seen)


def test_the_recovery_pass_resuming_a_stored_refund_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
):
    with factory() as session:
        sale = paid_charge(session, _gym(session), card_server)
        refund = refunds.begin_refund(
            session,
            transaction=sale,
            amount_cents=9900,
            reason="moved away",
            actor_user_id=None,
            now=NOW,
            documents=documents,
        )
        session.commit()
    with watching() as seen:
        summary = recovery.recovery_pass(
            factory, provider, TEST_CIPHER, now=PAST_GRACE, documents=documents
        )
    assert summary["refunds"]["refunded"] == 1, summary
    assert _status(factory, refund.id) == TransactionStatus.refunded
    _held(seen)


def test_the_recovery_pass_resolving_a_desk_charge_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
):
    with factory() as session:
        gym = _gym(session)
        card_of(session, gym, card_server)
        session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    request = DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "protein bar")
    with pytest.raises(DomainError) as pending:
        desk_charge(
            factory,
            provider,
            organization_id=gym.organization.id,
            request=request,
            actor_user_id=gym.owner.id,
            now=NOW,
            cipher=TEST_CIPHER,
            documents=documents,
        )
    transaction_id = uuid.UUID(pending.value.details["transactionId"])
    with watching() as seen:
        summary = recovery.recovery_pass(
            factory, provider, TEST_CIPHER, now=PAST_GRACE, documents=documents
        )
    assert _status(factory, transaction_id) == TransactionStatus.completed, summary
    _held(seen)


# -- the period-end settlement, the abandoned pages -------------------------------------------


def _matured_notice(factory, card_server):
    """A paid card plan whose notice matures now, with a refund of the unused days due."""
    with factory() as session:
        gym = _gym(session)
        subscription, _charge = paid_card_subscription(
            session, gym, card_server, current_period_end=NOW + 40 * D
        )
        give_notice(session, gym, subscription, now=NOW - 30 * D)
        subscription.cancellation_effective_at = NOW
        session.commit()
    return subscription


def test_the_period_end_sweeps_card_refund_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
    mailer,
):
    subscription = _matured_notice(factory, card_server)
    doors = settlement.Doors(
        provider=provider, cipher=TEST_CIPHER, documents=documents, mailer=mailer
    )
    with watching() as seen:
        swept = settlement.period_end_sweep(factory, doors, now=NOW)
    assert (swept.cancelled, swept.refunded) == ([str(subscription.id)], 1), swept
    assert card_server.requests(REFUND) == 1
    _held(seen)


def test_the_period_end_sweep_resending_a_stored_refund_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
    mailer,
):
    """A refund stored with its claim whose answer was lost: the next sweep sends it again."""
    _matured_notice(factory, card_server)
    doors = settlement.Doors(
        provider=provider, cipher=TEST_CIPHER, documents=documents, mailer=mailer
    )
    card_server.inject(REFUND, Fault.error)
    assert settlement.period_end_sweep(factory, doors, now=NOW).refunded == 0
    with watching() as seen:
        swept = settlement.period_end_sweep(factory, doors, now=NOW + timedelta(hours=1))
    assert swept.refunded == 1, swept
    _held(seen)


def test_the_abandoned_pages_read_back_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    with factory() as session:
        gym = _gym(session)
        plan = bf.make_plan(session, gym.organization)
        buy_card_plan(session, provider, gym, plan)
        session.commit()
    with watching() as seen:
        swept = checkout.abandoned_sweep(
            factory, provider, now=NOW + timedelta(hours=2), cipher=TEST_CIPHER
        )
    assert swept["checked"] == 1, swept
    assert len(swept["abandoned"]) == 1, swept
    assert card_server.requests(GET_PAGE) == 1
    _held(seen)


def test_the_abandoned_pages_later_read_back_holds_no_write_lock(factory, card_server, provider):
    """s51: a page the abandoned sweep marked abandoned, then paid with no webhook, read back
    by abandoned_pages on its schedule: the count is claimed in its own commit, the provider
    asked with no transaction open, the payment applied after."""
    from gymctl.billing import abandoned_pages

    abandoned_at = NOW + timedelta(hours=2)
    with factory() as session:
        gym = _gym(session)
        plan = bf.make_plan(session, gym.organization)
        _, bought = buy_card_plan(session, provider, gym, plan)
        session.commit()
    checkout.abandoned_sweep(factory, provider, now=abandoned_at, cipher=TEST_CIPHER)
    card_server.complete_page(bought.page_id, APPROVE)
    reads = card_server.requests(GET_PAGE)
    with watching() as seen:
        result = abandoned_pages.read_back_abandoned(
            factory, provider, now=abandoned_at + timedelta(hours=1), cipher=TEST_CIPHER
        )
    assert (result["read"], len(result["completed"])) == (1, 1), result
    assert card_server.requests(GET_PAGE) == reads + 1
    _held(seen)
    with factory() as session:
        (paid,) = session.scalars(select(PaymentTransaction)).all()
        assert paid.status == TransactionStatus.completed


# -- the doors: as their routes call them ---------------------------------------------------


def test_reconcile_of_a_pending_attempt_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    with factory() as session:
        gym = _gym(session)
        attempt = sent_attempt(session, card_subscription(session, gym, card_server), card_server)
        session.commit()
    with watching() as seen:
        answer = _reconcile(factory, provider, gym, attempt.id)
    assert answer["outcome"] == "charged", answer
    _held(seen)


def test_the_contradictions_door_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
):
    """Reconcile finds the contradiction; settling it by refund stores the refund, commits,
    then sends it (the route's order)."""
    with factory() as session:
        gym = _gym(session)
        attempt, taken = contradicted_attempt(session, gym, card_server)
    with watching() as seen:
        found = _reconcile(factory, provider, gym, attempt.id)
        assert found["outcome"] == "contradiction", found
        with factory() as session:
            answer = contradictions.settle_contradiction(
                session,
                provider,
                TEST_CIPHER,
                organization_id=gym.organization.id,
                transaction_id=attempt.id,
                decision="refund",
                amount_in_cents=taken,
                currency="ILS",
                actor_user_id=gym.owner.id,
                now=NOW,
                documents=documents,
            )
            session.commit()
            answer = contradictions.send_stored_refund(
                session, provider, TEST_CIPHER, answer, now=NOW, documents=documents
            )
            session.commit()
    assert answer["refund"]["status"] == "refunded", answer
    _held(seen)


def test_confirm_no_debit_holds_no_write_lock(factory, card_server, provider):
    with factory() as session:
        gym = _gym(session)
        subscription = card_subscription(session, gym, card_server, TIMEOUT)
        attempt = pending_attempt(session, subscription, started=NOW - timedelta(minutes=5))
        session.commit()
    with watching() as seen, factory() as session:
        answer = dismiss(session, provider, gym, attempt)
        session.commit()
    assert answer["outcome"] == "not_charged", answer
    assert card_server.requests(LOOKUP_CHARGE) == 1
    _held(seen)


def test_verify_account_holds_no_write_lock(factory, card_server, provider):
    with factory() as session:
        gym = _gym(session)
        operator = factories.user(session, identity_id="user_ops", email="ops@gymctl.example")
        page = completed_token_page(provider, card_server.simulator)
        method = accounts.save_card(
            session,
            organization_id=gym.organization.id,
            user_id=gym.member.id,
            card=page.token,
            terminal="1000",
            now=NOW,
            cipher=TEST_CIPHER,
        )
        subscription = bf.make_subscription(session, gym, payment_method_id=method.id)
        bf.make_checkout(
            session,
            subscription,
            page_id=page.page_id,
            status=CheckoutStatus.completed,
        )
        session.commit()
    with watching() as seen, factory() as session:
        answer = verification.verify_account(
            session,
            provider,
            organization_id=gym.organization.id,
            subscription_id=subscription.id,
            low_profile_id=None,
            operator_user_id=operator.id,
            now=NOW,
            cipher=TEST_CIPHER,
        )
        session.commit()
    assert answer["outcome"] in ("verified", "already_verified"), answer
    _held(seen)


def test_a_refund_at_the_door_holds_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
):
    """The refund route: stored, committed, then sent."""
    with factory() as session:
        sale = paid_charge(session, _gym(session), card_server)
        session.commit()
    with watching() as seen, factory() as session:
        refund = refunds.begin_refund_once(
            session,
            transaction=session.get(PaymentTransaction, sale.id),
            idempotency_key=uuid.uuid4(),
            amount_cents=9900,
            reason="moved away",
            actor_user_id=None,
            now=NOW,
            documents=documents,
        )[0]
        session.commit()
        refund = refunds.execute_refund(
            session, provider, TEST_CIPHER, refund.id, now=NOW, documents=documents
        )
        session.commit()
    assert refund.status == TransactionStatus.refunded
    _held(seen)


def test_a_card_replacement_page_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    with factory() as session:
        gym = _gym(session)
        subscription = card_subscription(session, gym, card_server)
        session.commit()
    with watching() as seen, factory() as session:
        opened = card_replacement.open_card_replacement(
            session,
            provider,
            organization_id=gym.organization.id,
            subscription_id=subscription.id,
            user_id=gym.member.id,
            urls=BUY_URLS,
            now=NOW,
            cipher=TEST_CIPHER,
        )
        session.commit()
    assert opened.page_id
    _held(seen)


def test_a_member_paying_their_debt_holds_no_write_lock(
    factory,
    card_server,
    provider,
):
    with factory() as session:
        gym = _gym(session)
        subscription = card_subscription(session, gym, card_server, in_debt_since=NOW - 3 * D)
        session.commit()
    with watching() as seen:
        outcome = debt_payments.pay_own_debt(
            factory,
            provider,
            organization_id=gym.organization.id,
            subscription_id=subscription.id,
            user_id=gym.member.id,
            now=NOW,
            cipher=TEST_CIPHER,
        )
    assert outcome == "charged"
    _held(seen)


def test_a_desk_charge_and_its_reconcile_hold_no_write_lock(
    factory,
    card_server,
    provider,
    documents,
):
    with factory() as session:
        gym = _gym(session)
        card_of(session, gym, card_server)
        session.commit()
    request = DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "protein bar")
    charge = {
        "organization_id": gym.organization.id,
        "request": request,
        "actor_user_id": gym.owner.id,
        "cipher": TEST_CIPHER,
        "documents": documents,
    }
    card_server.inject(CHARGE, Fault.answer_lost)
    with watching() as seen:
        with pytest.raises(DomainError) as pending:
            desk_charge(factory, provider, now=NOW, **charge)
        transaction_id = uuid.UUID(pending.value.details["transactionId"])
        replayed = desk_charge(factory, provider, now=PAST_GRACE, **charge)  # looked up
        with factory() as session:
            reconciled = desk_resolution.reconcile_desk_charge(
                session,
                provider,
                TEST_CIPHER,
                organization_id=gym.organization.id,
                transaction_id=transaction_id,
                actor_user_id=gym.owner.id,
                now=PAST_GRACE,
                documents=documents,
            )
            session.commit()
    assert replayed["outcome"] == "charged", replayed
    assert reconciled, reconciled
    assert card_server.requests(LOOKUP_CHARGE) >= 1
    _held(seen)
