"""The settle-contradiction door when the provider reports the charge on another terminal of
the gym than the one the stored attempt names (the fake provider answers a lookup asked on
2000 with the deal terminal 1000 made): the money is settled, and given back, on the terminal
that took it, when the gym has an account there; else 409 and nothing changes. The accepted
charge kept the asked terminal, so the ordinary refund of an overcharge (the door's own advice)
was sent where the provider knows no such deal and refused."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models import PaymentProviderConfig, PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import REFUND
from tests.billing.cards import TERMINAL, connect_card_provider
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import LATER, desk_contradiction, settle

pytestmark = pytest.mark.embedded  # the demo gym charges at the desk

ASKED = Terminal("2000", "elsewhere")


@pytest.fixture
def taken_elsewhere(client, clock, idp, session, session_factory, gym, card_server, provider,
                    documents):  # fmt: skip
    """A desk contradiction whose stored attempt names terminal 2000 (the gym's account now)
    while the provider reports the deal on 1000 (its earlier account, kept): (its id, the
    owner's headers)."""
    transaction_id = desk_contradiction(
        session, session_factory, gym, card_server, provider, documents
    )
    connect_card_provider(session, gym, terminal=ASKED)
    row = session.get(PaymentTransaction, transaction_id)
    row.billing_attempt = {**row.billing_attempt, "terminal": ASKED.number}
    session.commit()
    card_server.answer_lookups_from(ASKED.number, TERMINAL.number)
    clock.set(LATER)
    owner = {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=LATER)}"}
    url = f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}/reconcile"
    assert client.post(url, headers=owner).json["data"]["outcome"] == "contradiction"
    return transaction_id, owner


def _refunds(session) -> list[tuple]:
    session.expire_all()
    return [
        (row.status, row.amount_in_cents, row.billing_attempt["terminal"])
        for row in session.scalars(
            select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
        )
    ]


def test_an_accepted_charge_taken_on_another_terminal_is_refunded_there(
    client, session, gym, card_server, taken_elsewhere
):
    transaction_id, owner = taken_elsewhere
    settled = settle(client, gym, transaction_id, owner, "accept", 4500)
    assert settled.status_code == 200, settled.json
    session.expire_all()
    row = session.get(PaymentTransaction, transaction_id)
    assert row.billing_resolution["takenOnTerminal"] == TERMINAL.number

    difference = client.post(
        f"/organizations/{gym.organization.id}/payments/transactions/{transaction_id}/refund",
        json={"amountInCents": 500, "reason": "charged 5.00 too much"},
        headers=owner,
    )
    assert difference.status_code == 201, difference.json
    assert _refunds(session) == [(TransactionStatus.refunded, 500, TERMINAL.number)]
    assert [r["TerminalNumber"] for r in card_server.received(REFUND)] == [1000]


def test_a_charge_taken_on_another_terminal_is_refunded_in_full_there(
    client, session, gym, card_server, taken_elsewhere
):
    transaction_id, owner = taken_elsewhere
    settled = settle(client, gym, transaction_id, owner, "refund", 4500)
    assert settled.status_code == 200, settled.json
    assert settled.json["data"]["refund"]["status"] == "refunded"
    assert _refunds(session) == [(TransactionStatus.refunded, 4500, TERMINAL.number)]
    assert [r["TerminalNumber"] for r in card_server.received(REFUND)] == [1000]


def test_a_charge_taken_on_a_terminal_without_an_account_is_refused_and_nothing_changes(
    client, session, gym, card_server, taken_elsewhere
):
    transaction_id, owner = taken_elsewhere
    took_it = session.scalar(
        select(PaymentProviderConfig).where(PaymentProviderConfig.terminal == TERMINAL.number)
    )
    took_it.credentials_ciphertext = None  # the account that took it is gone
    session.commit()
    refused = settle(client, gym, transaction_id, owner, "refund", 4500)
    assert (refused.status_code, refused.json["code"]) == (
        409,
        "billing_original_account_unavailable",
    )
    assert refused.json["providerTerminal"] == TERMINAL.number
    session.expire_all()
    assert session.get(PaymentTransaction, transaction_id).status is TransactionStatus.pending
    assert _refunds(session) == []
    assert card_server.requests(REFUND) == 0
