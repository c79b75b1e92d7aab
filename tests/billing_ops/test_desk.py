"""Desk charges (spec B 4.3): a UUIDv4 key per request, the same key and request answer the
same outcome, another request under the key is refused, a pending outcome is
billing_reconciliation_required (not a decline); debt clearance at the desk and a member paying
their debt restore the debt columns."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import debt_payments, desk
from gymctl.billing.desk import DeskChargeRequest
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, connect_card_provider, connect_other_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import audit_rows, card_of, card_subscription, charge_at_desk
from tests.conftest import NOW


def _request(gym, key=None, **overrides) -> DeskChargeRequest:
    values = {
        "idempotency_key": key or uuid.uuid4(),
        "user_id": gym.member.id,
        "amount_in_cents": 4500,
        "currency": "ILS",
        "description": "protein bar x3",
        **overrides,
    }
    return DeskChargeRequest(**values)


def _clear_debt(session, gym, subscription, documents):
    return debt_payments.clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        actor_user_id=gym.owner.id,
        now=NOW,
        documents=documents,
    )


def _pay_debt(session_factory, gym, provider, subscription):
    return debt_payments.pay_own_debt(
        session_factory,
        provider,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        user_id=gym.member.id,
        now=NOW,
        cipher=TEST_CIPHER,
    )


def _rows(session) -> int:
    return session.scalar(select(func.count()).select_from(PaymentTransaction))


def test_the_same_key_and_request_replay_the_same_charge(
    session, session_factory, gym, card_server, provider, documents
):
    card_of(session, gym, card_server)
    session.commit()
    request = _request(gym)

    first = charge_at_desk(session_factory, gym, provider, documents, request)
    again = charge_at_desk(session_factory, gym, provider, documents, request)

    assert (first["outcome"], first["replayed"]) == ("charged", False)
    assert (again["outcome"], again["replayed"]) == ("charged", True)
    assert again["transaction"] == first["transaction"]
    assert first["transaction"]["documentType"] == "TaxInvoiceAndReceipt"
    assert card_server.requests(CHARGE) == 1
    [audit] = audit_rows(session, "payment.desk_charge")
    assert audit.actor_user_id == gym.owner.id


@pytest.mark.parametrize(
    "change",
    [{"amount_in_cents": 4600}, {"description": "protein bar x4"}, {"user_id": "owner"}],
)
def test_the_same_key_for_another_amount_member_or_description_is_refused(
    session, session_factory, gym, card_server, provider, documents, change
):
    card_of(session, gym, card_server)
    card_of(session, gym, card_server, user=gym.owner)
    session.commit()
    key = uuid.uuid4()
    charge_at_desk(session_factory, gym, provider, documents, _request(gym, key))
    if change.get("user_id") == "owner":
        change = {"user_id": gym.owner.id}
    rows = _rows(session)

    with pytest.raises(DomainError) as refused:
        charge_at_desk(session_factory, gym, provider, documents, _request(gym, key, **change))

    assert (refused.value.code, refused.value.status) == ("idempotency_key_reused", 409)
    assert _rows(session) == rows
    assert card_server.requests(CHARGE) == 1


def test_a_decline_is_an_outcome_and_stays_replayable(
    session, session_factory, gym, card_server, provider, documents
):
    card_of(session, gym, card_server, DECLINE)
    session.commit()
    request = _request(gym)
    first = charge_at_desk(session_factory, gym, provider, documents, request)
    again = charge_at_desk(session_factory, gym, provider, documents, request)
    assert first["outcome"] == again["outcome"] == "declined"
    assert again["replayed"] is True
    assert card_server.requests(CHARGE) == 1


def test_a_lost_answer_is_reconciliation_required_then_resolved_by_replay_without_a_debit(
    session, session_factory, gym, card_server, provider, documents
):
    card_of(session, gym, card_server)
    session.commit()
    request = _request(gym)
    card_server.inject(CHARGE, Fault.answer_lost)

    with pytest.raises(DomainError) as pending:
        charge_at_desk(session_factory, gym, provider, documents, request)
    assert (pending.value.code, pending.value.status) == ("billing_reconciliation_required", 409)
    with pytest.raises(DomainError) as executing:  # inside the 90 s grace: not asked yet
        charge_at_desk(
            session_factory, gym, provider, documents, request, now=NOW + timedelta(seconds=30)
        )
    assert executing.value.code == "billing_reconciliation_required"
    assert card_server.requests(LOOKUP_CHARGE) == 0

    later = charge_at_desk(
        session_factory, gym, provider, documents, request, now=NOW + timedelta(minutes=2)
    )

    assert (later["outcome"], later["replayed"]) == ("charged", True)
    assert card_server.requests(CHARGE) == 1
    assert len(card_server.charges()) == 1


def test_a_lost_answer_resolves_on_the_terminal_that_sent_it_after_the_terminal_changed(
    session, session_factory, gym, card_server, provider, documents
):
    """A desk request is resolvable only by replaying its key: after the gym moved to another
    terminal the replay asks the original merchant account (spec B 4.2), never stays stuck."""
    card_of(session, gym, card_server)
    session.commit()
    request = _request(gym)
    card_server.inject(CHARGE, Fault.answer_lost)
    with pytest.raises(DomainError):
        charge_at_desk(session_factory, gym, provider, documents, request)
    connect_card_provider(session, gym, terminal=Terminal("2000", "elsewhere"))
    session.commit()

    later = charge_at_desk(
        session_factory, gym, provider, documents, request, now=NOW + timedelta(minutes=2)
    )

    assert (later["outcome"], later["replayed"]) == ("charged", True)
    assert card_server.received(LOOKUP_CHARGE)[-1]["TerminalNumber"] == 1000
    assert card_server.requests(CHARGE) == 1


@pytest.mark.parametrize(
    ("setup", "code", "status"),
    [
        ("no_card", "no_saved_card", 409),
        ("bad_key", "idempotency_key_invalid", 422),
        ("zero", "amount_invalid", 422),
        ("other_provider", "card_provider_not_configured", 409),
    ],
)
def test_desk_charge_refusals_change_nothing(
    session, session_factory, gym, card_server, provider, documents, setup, code, status
):
    request = _request(gym)
    if setup != "no_card":
        card_of(session, gym, card_server)
    if setup == "bad_key":
        request = _request(gym, key=uuid.uuid1())
    if setup == "zero":
        request = _request(gym, amount_in_cents=0)
    if setup == "other_provider":
        connect_other_provider(session, gym, "other")
    session.commit()
    rows = _rows(session)
    with pytest.raises(DomainError) as refused:
        charge_at_desk(session_factory, gym, provider, documents, request)
    assert (refused.value.code, refused.value.status) == (code, status)
    assert _rows(session) == rows
    assert card_server.requests(CHARGE) == 0


def test_clearing_a_debt_at_the_desk_restores_the_debt_columns(session, gym, documents):
    subscription = bf.make_subscription(
        session, gym, PlanType.cash, in_debt_since=NOW - timedelta(days=2)
    )

    answer = _clear_debt(session, gym, subscription, documents)

    assert answer["transaction"]["amountInCents"] == subscription.price_in_cents
    assert answer["transaction"]["documentType"] == "TaxInvoiceAndReceipt"
    assert subscription.status == SubscriptionStatus.active
    assert (subscription.debt_amount_in_cents, subscription.debt_since) == (0, None)
    assert (subscription.debt_reason, subscription.debt_notice_stage) == (None, None)
    assert subscription.cash_prepaid_through > NOW
    assert len(audit_rows(session, "subscription.debt_cleared")) == 1
    with pytest.raises(DomainError) as again:
        _clear_debt(session, gym, subscription, documents)
    assert (again.value.code, again.value.status) == ("subscription_not_in_debt", 409)


def test_a_member_pays_their_card_debt_once_and_the_debt_columns_are_restored(
    session, session_factory, gym, card_server, provider
):
    subscription = card_subscription(
        session,
        gym,
        card_server,
        in_debt_since=NOW - timedelta(days=1),
        retry_at=NOW + timedelta(hours=20),
    )
    session.commit()

    outcome = _pay_debt(session_factory, gym, provider, subscription)

    assert outcome == "charged"
    session.refresh(subscription)
    assert subscription.status == SubscriptionStatus.active
    assert (subscription.debt_amount_in_cents, subscription.debt_since) == (0, None)
    assert card_server.requests(CHARGE) == 1
    with pytest.raises(DomainError) as nothing:
        _pay_debt(session_factory, gym, provider, subscription)
    assert (nothing.value.code, nothing.value.status) == ("pay_debt_not_available", 409)


def test_the_ordinary_dismiss_cancels_a_hand_entered_pending_payment_once(session, gym):
    record = bf.make_transaction(
        session,
        gym,
        status=TransactionStatus.pending,
        method="bank_transfer",
        amount_in_cents=5000,
    )

    def dismiss():
        return desk.dismiss_pending_payment(
            session,
            organization_id=gym.organization.id,
            transaction_id=record.id,
            actor_user_id=gym.owner.id,
            now=NOW,
        )

    assert dismiss().status == TransactionStatus.cancelled
    with pytest.raises(DomainError) as again:
        dismiss()
    assert (again.value.code, again.value.status) == ("transaction_not_pending", 409)
    assert len(audit_rows(session, "payment.pending_dismissed")) == 1


def test_pay_debt_refuses_a_held_debt_and_changes_nothing(
    session, session_factory, gym, card_server, provider
):
    retry_at = NOW + timedelta(hours=20)
    subscription = card_subscription(
        session,
        gym,
        card_server,
        in_debt_since=NOW - timedelta(days=1),
        collection_paused=True,
        retry_at=retry_at,
    )
    session.commit()
    with pytest.raises(DomainError) as held:
        _pay_debt(session_factory, gym, provider, subscription)
    assert (held.value.code, held.value.status) == ("pay_debt_not_available", 409)
    session.refresh(subscription)
    assert subscription.retry_at == retry_at
    assert card_server.requests(CHARGE) == 0
