"""A desk charge left pending (billing_reconciliation_required) has an operator path that needs
no client key: inspect it and reconcile it by its stored ids (a lookup, never a charge), over
HTTP and the CLI; the recovery sweep resolves it too."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from typer.testing import CliRunner

from gymctl.billing import attempts
from gymctl.billing.desk import DeskChargeRequest
from gymctl.billing.desk_resolution import recover_desk_charges, unresolved_desk_charges
from gymctl.cli.billing import app as billing_app
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.contradictions import cli_gym
from tests.billing_ops.helpers import audit_rows, card_of, charge_at_desk
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)
from tests.conftest import NOW


def _lost_charge(session, session_factory, gym, card_server, provider, documents):
    """A desk charge the provider made whose answer was lost: pending, its key with the client."""
    card_of(session, gym, card_server)
    session.commit()
    card_server.inject(CHARGE, Fault.answer_lost)
    request = DeskChargeRequest(uuid.uuid4(), gym.member.id, 4500, "ILS", "protein bar")
    with pytest.raises(DomainError) as pending:
        charge_at_desk(session_factory, gym, provider, documents, request)
    return uuid.UUID(pending.value.details["transactionId"])


def test_an_operator_inspects_and_reconciles_a_pending_desk_charge_by_its_id_over_http(
    client,
    clock,
    idp,
    session,
    session_factory,
    gym,
    card_server,
    provider,
    documents,
    headers,  # noqa: F811 (the fixture)
):
    transaction_id = _lost_charge(session, session_factory, gym, card_server, provider, documents)
    url = f"/organizations/{gym.organization.id}/payments/desk-charges/{transaction_id}"

    seen = client.get(url, headers=headers(gym.owner))
    assert seen.status_code == 200, seen.json
    assert (seen.json["data"]["state"], seen.json["data"]["actions"]) == (
        "executing",
        {"reconcile": False, "settleContradiction": False},
    )
    early = client.post(f"{url}/reconcile", headers=headers(gym.owner))
    assert (early.status_code, early.json["code"]) == (409, "billing_attempt_executing")
    assert card_server.requests(LOOKUP_CHARGE) == 0

    clock.set(NOW + timedelta(minutes=2))
    owner = {"Authorization": f"Bearer {idp.token(gym.owner.identity_id, now=clock.now())}"}
    seen = client.get(url, headers=owner)
    assert seen.status_code == 200, seen.json
    assert seen.json["data"]["state"] == "unresolved"
    done = client.post(f"{url}/reconcile", headers=owner)
    assert done.status_code == 200, done.json
    assert done.json["data"]["outcome"] == "charged"
    again = client.post(f"{url}/reconcile", headers=owner)
    assert again.json["data"]["outcome"] == "already_resolved"
    assert card_server.requests(CHARGE) == 1  # looked up, never charged again
    session.expire_all()
    assert session.get(PaymentTransaction, transaction_id).status == TransactionStatus.completed
    assert len(audit_rows(session, "payment.desk_charge_reconciled")) == 1


def test_another_organizations_or_a_non_desk_transaction_is_404(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    other = bf.make_gym(session)
    theirs = bf.make_transaction(session, other, metadata_={"source": "desk_charge"})
    ours = bf.make_transaction(session, gym)
    session.commit()
    base = f"/organizations/{gym.organization.id}/payments/desk-charges"
    for transaction in (theirs, ours):
        answer = client.post(f"{base}/{transaction.id}/reconcile", headers=headers(gym.owner))
        assert answer.status_code == 404
        assert answer.json["code"] in ("transaction_not_found", "desk_charge_not_found")


def test_recovery_resolves_a_pending_desk_charge_past_the_grace(
    session, session_factory, gym, card_server, provider, documents
):
    transaction_id = _lost_charge(session, session_factory, gym, card_server, provider, documents)
    inside = recover_desk_charges(
        session_factory, provider, TEST_CIPHER, now=NOW + timedelta(seconds=30), documents=documents
    )
    assert inside["selected"] == 0
    counts = recover_desk_charges(
        session_factory, provider, TEST_CIPHER, now=NOW + timedelta(minutes=5), documents=documents
    )
    assert counts == {"selected": 1, "resolved": 1, "pending": 0, "errors": 0, "alerts": []}
    session.expire_all()
    assert session.get(PaymentTransaction, transaction_id).status == TransactionStatus.completed
    assert card_server.requests(CHARGE) == 1


def test_the_cli_shows_and_reconciles_a_pending_desk_charge(
    committed_pg, card_server, monkeypatch, documents
):
    with cli_gym(committed_pg, card_server, monkeypatch) as (factory, session, gym):
        transaction_id = _lost_charge(
            session, factory, gym, card_server, card_server.provider(), documents
        )
    org, owner = str(gym.organization.id), str(gym.owner.id)
    shown = CliRunner().invoke(billing_app, ["desk-charge", "show", org, str(transaction_id)])
    assert shown.exit_code == 0, shown.output
    reconciled = CliRunner().invoke(
        billing_app,
        [
            "desk-charge",
            "reconcile",
            org,
            str(transaction_id),
            "--json",
            "--operator",
            owner,
        ],
    )
    assert reconciled.exit_code == 0, reconciled.output
    assert json.loads(reconciled.output)["outcome"] == "charged"
    assert card_server.requests(CHARGE) == 1


def test_recovery_asks_about_the_desk_charges_asked_longest_ago_first(
    session, session_factory, gym, card_server, provider, documents
):
    """A charge whose lookups keep failing is marked asked and goes behind the others: by
    updated_at alone, a batch's worth of them kept every later charge from being asked."""
    first = _lost_charge(session, session_factory, gym, card_server, provider, documents)
    second = _lost_charge(session, session_factory, gym, card_server, provider, documents)
    later = NOW + timedelta(minutes=5)

    def batch():
        with session_factory() as look:
            return [t.id for t in unresolved_desk_charges(look, now=later, limit=1)]

    card_server.inject(LOOKUP_CHARGE, Fault.error, times=None)
    counts = recover_desk_charges(
        session_factory, provider, TEST_CIPHER, now=later, documents=documents
    )
    assert counts["errors"] == 2
    session.expire_all()
    assert session.get(PaymentTransaction, first).asked_at == later
    with session_factory() as s:
        attempts.mark_asked(s, second, later + timedelta(minutes=1))
        s.commit()
    assert batch() == [first]  # asked longer ago than the second (both at the fixed NOW before)
    with session_factory() as s:
        attempts.mark_asked(s, first, later + timedelta(minutes=2))
        s.commit()
    assert batch() == [second]
