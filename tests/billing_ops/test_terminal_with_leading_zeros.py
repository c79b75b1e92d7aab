"""A terminal the payment settings take as "01000" (the route's pattern allows leading zeros)
is the provider's terminal 1000, and the provider echoes TerminalNumber as that number. The
collector and the desk compared the echo with the stored text exactly
(`attempts.evidence_mismatch`): every approved charge was held as a terminal contradiction,
money taken and nothing completed. One rule now, `card.same_terminal`: leading zeros aside."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector
from gymctl.models import PaymentTransaction
from gymctl.models.billing import PlanType, TransactionStatus, TransactionType
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import CHARGE, REFUND
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER, settle
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

ZEROS = Terminal("01000", "test2025")  # the fake provider's terminal 1000, as an owner typed it
MOVED_TO = Terminal("2000", "elsewhere")


def _owner(idp, gym, now=NOW) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=now)}"}


def _connect_over_http(client, idp, gym) -> None:
    answer = client.put(
        f"/organizations/{gym.organization.id}/payments/provider",
        json={"provider": "card_provider", "terminal": ZEROS.number, "apiName": ZEROS.api_name},
        headers=_owner(idp, gym),
    )
    assert answer.status_code == 200, answer.json
    assert answer.json["data"]["terminal"] == "01000"  # taken as typed


def _desk_charge(client, idp, gym, *, now=NOW):
    return client.post(
        f"/organizations/{gym.organization.id}/payments/desk-charges",
        json={
            "idempotencyKey": str(uuid.uuid4()),
            "userId": str(gym.member.id),
            "amountInCents": 4500,
            "currency": "ILS",
            "description": "protein bar",
        },
        headers=_owner(idp, gym, now),
    )


def test_a_desk_charge_on_a_terminal_with_leading_zeros_is_charged(
    client, session, idp, card_server
):
    gym = bf.make_gym(session)
    _connect_over_http(client, idp, gym)
    save_test_card(session, gym, card_server.provider(), card_server.simulator, terminal=ZEROS)
    session.commit()

    answer = _desk_charge(client, idp, gym)

    assert answer.status_code == 201, answer.json
    assert answer.json["data"]["outcome"] == "charged"
    assert [r["TerminalNumber"] for r in card_server.received(CHARGE)] == [1000]


def test_the_collector_sweep_settles_a_renewal_on_a_terminal_with_leading_zeros(
    session, session_factory, card_server
):
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, terminal=ZEROS, since=NOW - timedelta(days=30))
    method = save_test_card(
        session, gym, card_server.provider(), card_server.simulator, terminal=ZEROS
    )
    due = NOW - timedelta(minutes=1)
    subscription = bf.make_subscription(
        session,
        gym,
        PlanType.card,
        payment_method_id=method.id,
        next_charge_date=due,
        current_period_start=due - timedelta(days=30),
        current_period_end=due,
    )
    session.commit()

    summary = collector.daily_sweep(
        session_factory, card_server.provider(), now=NOW, cipher=TEST_CIPHER
    )

    assert (summary.charged, summary.alerts) == (1, [])
    session.expire_all()
    [attempt] = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription.id)
    ).all()
    assert attempt.status == TransactionStatus.completed
    assert "contradiction" not in attempt.billing_attempt


def test_a_charge_the_provider_reports_on_the_first_terminal_is_refunded_on_its_account(
    client, clock, session, idp, card_server
):
    """The gym typed its first account "01000", then moved to 2000; a desk charge sent on 2000
    is found on 1000. The settled contradiction records the terminal as the provider reports it
    (1000), and the refund looked that up in SQL by text: no account, refused."""
    gym = bf.make_gym(session)
    _connect_over_http(client, idp, gym)
    save_test_card(session, gym, card_server.provider(), card_server.simulator, terminal=ZEROS)
    session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    lost = _desk_charge(client, idp, gym)
    assert (lost.status_code, lost.json["code"]) == (409, "billing_reconciliation_required")
    transaction_id = lost.json["transactionId"]
    connect_card_provider(session, gym, terminal=MOVED_TO)
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    row.billing_attempt = {**row.billing_attempt, "terminal": MOVED_TO.number}
    session.commit()
    card_server.answer_lookups_from(MOVED_TO.number, "1000")
    clock.set(LATER)
    owner = _owner(idp, gym, LATER)
    base = f"/organizations/{gym.organization.id}/payments"
    reconciled = client.post(f"{base}/desk-charges/{transaction_id}/reconcile", headers=owner)
    assert reconciled.json["data"]["outcome"] == "contradiction", reconciled.json
    assert settle(client, gym, transaction_id, owner, "accept", 4500).status_code == 200

    refunded = client.post(
        f"{base}/transactions/{transaction_id}/refund",
        json={"amountInCents": 500, "reason": "one bar fewer"},
        headers=owner,
    )

    assert refunded.status_code == 201, refunded.json
    session.expire_all()
    refund = session.scalar(
        select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
    )
    assert (refund.status, refund.billing_attempt["terminal"]) == (
        TransactionStatus.refunded,
        "01000",
    )
    assert [r["TerminalNumber"] for r in card_server.received(REFUND)] == [1000]
