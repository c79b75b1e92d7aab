"""A page or a desk charge the provider approved at another amount than the one stored (a billing
contradiction, spec B 6) held the gym's money with no way to settle it: refund, reconcile and the
ordinary dismiss all refused it. The operator's door (POST .../payments/billing/transactions/
:id/settle-contradiction, CLI `gymctl billing transaction settle-contradiction`) accepts the
provider's amount or refunds it all, asking the provider again by the stored ids first; a
refusal changes nothing, a second settlement replays."""

from __future__ import annotations

import json
import uuid

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.models import AuditLog, Checkout, OutboxEvent, PaymentTransaction, Subscription
from gymctl.models.billing import (
    CheckoutStatus,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.organizations import Role
from gymctl.providers.card_http import CHARGE, REFUND
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app, create_plan, purchase, webhook  # noqa: F401
from tests.billing_ops.contradictions import (
    cli_gym,
    desk_contradiction,
    desk_contradiction_reconciled,
    org_url,
    page_contradiction,
    transaction_url,
)
from tests.billing_ops.helpers import audit_rows
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded  # the demo gym sells card plans and charges at the desk


def _state(session) -> tuple[int, ...]:
    session.expire_all()
    return tuple(
        session.scalar(select(func.count()).select_from(model))
        for model in (AuditLog, OutboxEvent, PaymentTransaction)
    ) + tuple(
        session.scalars(select(PaymentTransaction.status).order_by(PaymentTransaction.id)).all()
    )


def test_a_desk_charge_taken_at_another_amount_is_accepted_at_the_providers_amount(
    client,
    clock,
    idp,
    session,
    session_factory,
    gym,
    card_server,
    provider,
    documents,
):
    transaction_id, owner = desk_contradiction_reconciled(
        client, clock, idp, session, session_factory, gym, card_server, provider, documents
    )
    org = f"/organizations/{gym.organization.id}"
    # Every other door refuses it: the money has no other way to be settled.
    refused = client.post(
        f"{org}/payments/transactions/{transaction_id}/refund",
        json={"amountInCents": 4500, "reason": "x"},
        headers=owner,
    )
    assert (refused.status_code, refused.json["code"]) == (409, "refund_not_refundable")
    dismissed = client.post(f"{org}/payments/transactions/{transaction_id}/dismiss", headers=owner)
    assert (dismissed.status_code, dismissed.json["code"]) == (409, "billing_attempt_protected")

    before = _state(session)
    stale = client.post(
        f"{transaction_url(gym, transaction_id)}/settle-contradiction",
        json={"decision": "accept", "amountInCents": 4000, "currency": "ILS"},
        headers=owner,
    )
    assert (stale.status_code, stale.json["code"]) == (409, "billing_evidence_mismatch")
    assert stale.json["providerAmountInCents"] == 4500
    assert _state(session) == before

    settled = client.post(
        f"{transaction_url(gym, transaction_id)}/settle-contradiction",
        json={"decision": "accept", "amountInCents": 4500, "currency": "ILS"},
        headers=owner,
    )
    assert settled.status_code == 200, settled.json
    data = settled.json["data"]
    assert (data["outcome"], data["transaction"]["status"]) == ("accepted", "completed")
    assert data["transaction"]["amountInCents"] == 4500
    assert data["resolution"]["expected"] == {"amountInCents": 4000, "currency": "ILS"}
    session.expire_all()
    row = session.get(PaymentTransaction, transaction_id)
    assert (row.status, row.amount_in_cents) == (TransactionStatus.completed, 4500)
    assert row.provider_transaction_id
    assert row.document_number
    [audited] = audit_rows(session, "billing.contradiction_settled")
    assert audited.actor_user_id == gym.owner.id

    again = client.post(
        f"{transaction_url(gym, transaction_id)}/settle-contradiction",
        json={"decision": "accept", "amountInCents": 4500, "currency": "ILS"},
        headers=owner,
    )
    assert (again.status_code, again.json["data"]["outcome"]) == (200, "already_settled")
    other = client.post(
        f"{transaction_url(gym, transaction_id)}/settle-contradiction",
        json={"decision": "refund", "amountInCents": 4500, "currency": "ILS"},
        headers=owner,
    )
    assert (other.status_code, other.json["code"]) == (409, "billing_contradiction_settled")
    # The overcharge goes back through the ordinary refund, now open to it.
    difference = client.post(
        f"{org}/payments/transactions/{transaction_id}/refund",
        json={"amountInCents": 500, "reason": "charged 5.00 too much"},
        headers=owner,
    )
    assert difference.status_code == 201, difference.json
    assert card_server.requests(CHARGE) == 1  # asked again, never charged again


def test_a_page_taken_at_another_amount_is_refunded_in_full_once(
    client,
    org,
    card_server,
    session,
):
    bought, transaction_id = page_contradiction(client, org, card_server, session)
    owner = org[Role.owner].headers
    reconciled = client.post(f"{org_url(org, transaction_id)}/reconcile", headers=owner)
    assert (reconciled.status_code, reconciled.json["code"]) == (
        409,
        "billing_attempt_not_protected",
    )

    body = {"decision": "refund", "amountInCents": 25000, "currency": "ILS"}
    settled = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction", json=body, headers=owner
    )
    assert settled.status_code == 200, settled.json
    data = settled.json["data"]
    assert data["outcome"] == "refund_stored"
    assert (data["refund"]["status"], data["refund"]["amountInCents"]) == ("refunded", 25000)
    session.expire_all()
    taken = session.get(PaymentTransaction, transaction_id)
    assert taken.status == TransactionStatus.refunded
    assert (
        session.get(Checkout, uuid.UUID(bought["checkout"]["id"])).status == CheckoutStatus.failed
    )
    subscription = session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))
    assert subscription.status == SubscriptionStatus.cancelled

    again = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction", json=body, headers=owner
    )
    assert (again.status_code, again.json["data"]["outcome"]) == (200, "already_settled")
    assert card_server.requests(REFUND) == 1
    refunds = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.type == TransactionType.refund)
    ).all()
    assert len(refunds) == 1


def test_a_page_taken_at_another_amount_is_accepted_and_its_plan_paid(
    client,
    org,
    card_server,
    session,
):
    bought, transaction_id = page_contradiction(client, org, card_server, session)
    settled = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction",
        json={"decision": "accept", "amountInCents": 25000, "currency": "ILS"},
        headers=org[Role.admin].headers,
    )
    assert settled.status_code == 200, settled.json
    session.expire_all()
    assert session.get(PaymentTransaction, transaction_id).status == TransactionStatus.completed
    assert (
        session.get(Checkout, uuid.UUID(bought["checkout"]["id"])).status
        == CheckoutStatus.completed
    )
    subscription = session.get(Subscription, uuid.UUID(bought["subscription"]["id"]))
    assert subscription.payment_method_id is not None
    assert subscription.current_period_end is not None


@pytest.mark.parametrize(
    "body",
    [
        {"decision": "maybe", "amountInCents": 25000, "currency": "ILS"},
        {"decision": "accept", "amountInCents": "25000", "currency": "ILS"},
        {"decision": "accept", "amountInCents": True, "currency": "ILS"},
        {"decision": "accept", "amountInCents": 250.0, "currency": "ILS"},
        {"decision": "accept", "amountInCents": 0, "currency": "ILS"},
        {"decision": "accept", "amountInCents": 25000, "currency": "IL\u0000"},
        {"decision": "accept", "amountInCents": 25000},
        [],
    ],
)
def test_hostile_bodies_are_400_and_change_nothing(
    client,
    org,
    card_server,
    session,
    body,
):
    _, transaction_id = page_contradiction(client, org, card_server, session)
    before = _state(session)
    answer = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction",
        json=body,
        headers=org[Role.owner].headers,
    )
    assert answer.status_code == 400, answer.json
    assert answer.json["code"] == "invalid_body"
    assert _state(session) == before


def test_a_payment_without_a_contradiction_or_of_another_gym_is_refused(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    ours = bf.make_transaction(session, gym)
    other = bf.make_gym(session)
    theirs = bf.make_transaction(session, other, metadata_={"source": "desk_charge"})
    session.commit()
    body = {"decision": "accept", "amountInCents": 100, "currency": "ILS"}
    plain = client.post(
        f"{transaction_url(gym, ours.id)}/settle-contradiction",
        json=body,
        headers=headers(gym.owner),
    )
    assert (plain.status_code, plain.json["code"]) == (409, "billing_no_contradiction")
    foreign = client.post(
        f"{transaction_url(gym, theirs.id)}/settle-contradiction",
        json=body,
        headers=headers(gym.owner),
    )
    assert (foreign.status_code, foreign.json["code"]) == (404, "transaction_not_found")
    member = client.post(
        f"{transaction_url(gym, ours.id)}/settle-contradiction",
        json=body,
        headers=headers(gym.member),
    )
    assert member.status_code == 403


def test_the_cli_settles_a_desk_contradiction_and_its_dry_run_keeps_nothing(
    committed_database, card_server, monkeypatch, documents, caplog
):
    with cli_gym(committed_database, card_server, monkeypatch) as (factory, session, gym):
        transaction_id = desk_contradiction(
            session, factory, gym, card_server, card_server.provider(), documents
        )
        org, owner = str(gym.organization.id), str(gym.owner.id)
        before = _state(session)
    args = [
        "transaction", "settle-contradiction", org, str(transaction_id),
        "--decision", "refund", "--amount-in-cents", "4500", "--currency", "ILS",
        "--operator", owner, "--json",
    ]  # fmt: skip
    found = CliRunner().invoke(
        billing_app,
        ["desk-charge", "reconcile", org, str(transaction_id), "--operator", owner, "--json"],
    )
    assert json.loads(found.stdout)["outcome"] == "contradiction", found.output
    with factory() as session:
        before = _state(session)
    dry = CliRunner().invoke(billing_app, [*args, "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["outcome"] == "refund_stored"
    with factory() as session:
        assert _state(session) == before
    assert card_server.requests(REFUND) == 0  # a dry run sends no refund

    real = CliRunner().invoke(billing_app, args)
    assert real.exit_code == 0, real.output
    answer = json.loads(real.stdout)
    assert answer["refund"]["status"] == "refunded"
    with factory() as session:
        row = session.get(PaymentTransaction, transaction_id)
        assert (row.status, row.amount_in_cents) == (TransactionStatus.refunded, 4500)
    assert card_server.requests(REFUND) == 1
