"""Billing contradictions to settle (a charge the provider took at another amount than stored),
made as each door meets them, and the routes and CLI environment the tests of the
settle-contradiction door, the inspect hints and the dry runs share."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.billing.desk import DeskChargeRequest
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import Checkout, PaymentTransaction
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import CHARGE
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, TERMINAL, connect_card_provider
from tests.billing.factories import TEST_KEY
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import create_plan, purchase, webhook
from tests.billing_ops.helpers import card_of, card_subscription, charge_at_desk, sent_attempt
from tests.conftest import NOW

LATER = NOW + timedelta(minutes=5)


@contextmanager
def cli_gym(url: str, card_server, monkeypatch) -> Iterator[tuple]:
    """The billing CLI's environment (the database at `url`, the card server, the test key)
    and a gym on the card provider for 30 days, committed: (session factory, an open session,
    the gym)."""
    monkeypatch.setenv("GYMCTL_DATABASE_URL", url)
    monkeypatch.setenv("GYMCTL_CARD_PROVIDER_URL", card_server.url)
    monkeypatch.setenv("GYMCTL_BILLING_ENCRYPTION_KEY", TEST_KEY)
    factory = sessionmaker(bind=get_engine(url), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        connect_card_provider(session, gym, since=NOW - timedelta(days=30))
        session.commit()
        yield factory, session, gym


def contradicted_attempt(session, gym, card_server, **fields):
    """A charge the provider took at the subscription's price whose answer was lost; the stored
    attempt says 1 cent, so every lookup finds a contradiction. (the row, what was taken)"""
    subscription = card_subscription(session, gym, card_server, **fields)
    attempt = sent_attempt(session, subscription, card_server)
    taken = attempt.amount_in_cents
    attempt.billing_attempt = {**attempt.billing_attempt, "amountInCents": 1}
    attempt.amount_in_cents = 1
    session.commit()
    return attempt, taken


def desk_contradiction(session, session_factory, gym, card_server, provider, documents):
    """A desk charge of 45.00 whose answer was lost; the provider's record says 40.00 was asked
    (the stored request says 45.00): its reconcile finds a contradiction."""
    card_of(session, gym, card_server)
    session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    request = DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "protein bar")
    with pytest.raises(DomainError) as pending:
        charge_at_desk(session_factory, gym, provider, documents, request)
    transaction = session.get(PaymentTransaction, uuid.UUID(pending.value.details["transactionId"]))
    transaction.billing_attempt = {**transaction.billing_attempt, "amountInCents": 4000}
    transaction.amount_in_cents = 4000
    session.commit()
    return transaction.id


def page_contradiction(client, org, card_server, session):
    """A member's page paid 250.00 where the checkout asked 300.00 (issue 19's contradiction)."""
    plan = create_plan(client, org)  # 250.00 ILS
    bought = purchase(client, org, plan).json["data"]
    row = session.get(Checkout, uuid.UUID(bought["checkout"]["id"]))
    row.amount_in_cents = 30000
    session.commit()
    card_server.complete_page(bought["checkout"]["pageId"], APPROVE)
    assert webhook(client, org, bought["checkout"]["pageId"]).json["outcome"] == (
        "billing_contradiction"
    )
    session.expire_all()
    [taken] = session.scalars(select(PaymentTransaction)).all()
    return bought, taken.id


def transaction_url(gym, transaction_id, suffix="") -> str:
    return org_url(gym.organization, transaction_id) + suffix


def org_url(org, transaction_id) -> str:
    return f"/organizations/{org.id}/payments/billing/transactions/{transaction_id}"


def reconciled(client, gym, transaction_id, owner) -> str:
    answer = client.post(transaction_url(gym, transaction_id, "/reconcile"), headers=owner)
    assert answer.status_code == 200, answer.json
    return answer.json["data"]["outcome"]


def settle(client, gym, transaction_id, owner, decision, amount, currency="ILS"):
    body = {"decision": decision, "amountInCents": amount, "currency": currency}
    url = transaction_url(gym, transaction_id, "/settle-contradiction")
    return client.post(url, json=body, headers=owner)


# A desk charge the provider took on another terminal than its attempt names (s49): the gym's
# account is on ASKED now, the provider holds the deal on the earlier TERMINAL.
ASKED = Terminal("2000", "elsewhere")


def _bearer(idp, gym, now) -> dict[str, str]:
    return {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=now)}"}


def desk_charged_elsewhere(client, clock, idp, session, gym, card_server):
    """A desk charge of 45.00 sent over HTTP whose answer was lost, its stored attempt naming
    terminal 2000 (the gym's account now) while the provider holds the deal on 1000 (its
    earlier account, kept): (the charge's body, its id, the owner's headers at LATER)."""
    card_of(session, gym, card_server)
    session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    body = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": str(gym.member.id),
        "amountInCents": 4500,
        "currency": "ILS",
        "description": "protein bar",
    }
    url = f"/organizations/{gym.organization.id}/payments/desk-charges"
    lost = client.post(url, json=body, headers=_bearer(idp, gym, NOW))
    assert (lost.status_code, lost.json["code"]) == (409, "billing_reconciliation_required")
    transaction_id = lost.json["transactionId"]
    connect_card_provider(session, gym, terminal=ASKED)
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    row.billing_attempt = {**row.billing_attempt, "terminal": ASKED.number}
    session.commit()
    card_server.answer_lookups_from(ASKED.number, TERMINAL.number)
    clock.set(LATER)
    return body, transaction_id, _bearer(idp, gym, LATER)


def reconcile_desk(client, gym, body, transaction_id, owner) -> None:
    """The desk charge's reconcile route answers the contradiction, settleable."""
    url = f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}/reconcile"
    answer = client.post(url, headers=owner)
    assert answer.status_code == 200, answer.json
    assert (answer.json["data"]["outcome"], answer.json["data"]["actions"]) == (
        "contradiction",
        {"reconcile": True, "settleContradiction": True},
    )


def replay_desk(client, gym, body, transaction_id, owner) -> None:
    """The desk charge's key sent again: still for reconciliation."""
    url = f"/organizations/{gym.organization.id}/payments/desk-charges"
    answer = client.post(url, json=body, headers=owner)
    assert (answer.status_code, answer.json["code"]) == (409, "billing_reconciliation_required")
    assert answer.json["transactionId"] == transaction_id


def desk_contradiction_reconciled(
    client, clock, idp, session, session_factory, gym, card_server, provider, documents
):
    """desk_contradiction, reconciled over HTTP by the owner at LATER (a contradiction):
    (its id, the owner's headers at LATER)."""
    transaction_id = desk_contradiction(
        session, session_factory, gym, card_server, provider, documents
    )
    clock.set(LATER)
    owner = {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=LATER)}"}
    url = f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}/reconcile"
    reconciled = client.post(url, headers=owner)
    assert reconciled.json["data"]["outcome"] == "contradiction", reconciled.json
    return transaction_id, owner


def reconciled_on_the_cli(org: str, transaction_id, owner: str) -> None:
    """`gymctl billing transaction reconcile` finds the attempt in contradiction."""
    from typer.testing import CliRunner

    from gymctl.cli.billing import app as billing_app

    found = CliRunner().invoke(
        billing_app,
        ["transaction", "reconcile", org, str(transaction_id), "--operator", owner, "--json"],
    )
    assert json.loads(found.stdout)["outcome"] == "contradiction", found.output
