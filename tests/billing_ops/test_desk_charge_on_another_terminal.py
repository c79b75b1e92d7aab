"""A desk charge the provider approved at the asked amount but on another terminal than the one
its stored attempt names (the fake provider answers a lookup asked on 2000 with the deal
terminal 1000 made). The desk charge compared only amount and currency: it was completed on
2000, where the provider knows no such deal, so its refunds were refused there. It now takes
the collector's rule (`attempts.evidence_mismatch`, spec B: exact amount, currency and
terminal): held as a contradiction, nothing completed, for the settle-contradiction door, which
records the terminal that took it so its refunds go there."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card_http import REFUND
from tests.access.conftest import snapshot
from tests.billing.cards import TERMINAL
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER, reconcile_desk, replay_desk, settle
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym charges at the desk


def _changed(before: dict, after: dict) -> set[str]:
    return {table for table in before if before[table] != after[table]}


@pytest.mark.parametrize(
    ("asked", "written"),
    [
        (reconcile_desk, {"payment_transactions", "audit_log", "outbox_events"}),  # its audit event
        (replay_desk, {"payment_transactions"}),
    ],
    ids=["reconcile", "replay"],
)
def test_a_desk_charge_approved_on_another_terminal_is_held_with_nothing_completed(
    client, session, gym, card_server, charged_elsewhere, asked, written
):
    body, transaction_id, owner = charged_elsewhere
    before = snapshot(session)
    asked(client, gym, body, transaction_id, owner)
    after = snapshot(session)

    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    assert (row.status, row.provider_transaction_id, row.document_number) == (
        TransactionStatus.pending,
        None,
        None,
    )
    assert row.billing_attempt["contradiction"] == {"field": "terminal", "at": LATER.isoformat()}
    assert row.billing_attempt["uncertainSince"] == NOW.isoformat()  # the lost answer's
    assert _changed(before, after) == written  # the charge's attempt alone: no document
    assert card_server.requests(REFUND) == 0
    shown = client.get(
        f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}",
        headers=owner,
    ).json["data"]
    assert (shown["state"], shown["attempt"]["contradiction"]["field"]) == (
        "contradiction",
        "terminal",
    )


def test_a_desk_charge_approved_on_another_terminal_is_refunded_there(
    client, session, gym, card_server, charged_elsewhere
):
    body, transaction_id, owner = charged_elsewhere
    reconcile_desk(client, gym, body, transaction_id, owner)
    settled = settle(client, gym, transaction_id, owner, "accept", 4500)
    assert settled.status_code == 200, settled.json
    session.expire_all()
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    assert (row.status, row.amount_in_cents) == (TransactionStatus.completed, 4500)
    assert row.billing_resolution["takenOnTerminal"] == TERMINAL.number

    refunded = client.post(
        f"/organizations/{gym.organization.id}/payments/transactions/{transaction_id}/refund",
        json={"amountInCents": 500, "reason": "one bar fewer"},
        headers=owner,
    )
    assert refunded.status_code == 201, refunded.json
    session.expire_all()
    refunds = [
        (r.status, r.amount_in_cents, r.billing_attempt["terminal"])
        for r in session.scalars(
            select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
        )
    ]
    assert refunds == [(TransactionStatus.refunded, 500, TERMINAL.number)]
    assert [r["TerminalNumber"] for r in card_server.received(REFUND)] == [1000]
