"""Two gaps of protected transaction resolution (spec B 3, 4.2, 6):

- An attempt reopened on late positive evidence files an urgent payment_follow_up ("reconcile
  it"); nothing closed it once the attempt was resolved (reconcile settling it, or the
  settle-contradiction door), so the staff's list kept a task for a payment already settled.
  The transaction that resolves the attempt now marks it done, audited (task.done).
- Inspect (GET .../payments/billing/transactions/:id, `gymctl billing transaction show`) offered
  only reconcile for a contradicted attempt and answered 409 billing_attempt_not_protected for a
  page's or a desk charge's contradiction: the operator could not see the door that settles it.
  Every payment the door settles is now shown with its typed state and a settleContradiction
  hint."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select
from typer.testing import CliRunner

from gymctl.cli.billing import app as billing_app
from gymctl.models import PaymentTransaction, Task
from gymctl.models.billing import TransactionStatus
from gymctl.models.organizations import Role
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.contradictions import (
    cli_gym,
    contradicted_attempt,
    desk_contradiction_reconciled,
    org_url,
    page_contradiction,
    reconciled,
    reconciled_on_the_cli,
    settle,
    transaction_url,
)
from tests.billing_ops.helpers import audit_rows, card_subscription, sent_attempt
from tests.billing_ops.test_routes import headers  # noqa: F401 (fixture)

pytestmark = pytest.mark.embedded  # as the resolution and contradiction doors' own tests

FOLLOW_UP = "payment_follow_up"


def _closed_as_not_charged(session, transaction) -> None:
    """A technical non-charge the provider charged after all: reconcile finds it approved."""
    transaction.status = TransactionStatus.failed
    transaction.billing_resolution = {"decision": "not_charged"}
    session.commit()


def _follow_up(session, transaction) -> Task:
    session.expire_all()
    return session.scalar(
        select(Task).where(
            Task.kind == FOLLOW_UP,
            Task.subject_type == "payment_transaction",
            Task.subject_id == str(transaction.id),
        )
    )


# --- the late-evidence follow-up is done when the attempt is resolved -------------------


def test_the_late_evidence_follow_up_is_done_when_reconcile_settles_the_attempt(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    _closed_as_not_charged(session, transaction)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "late_positive_evidence"
    task = _follow_up(session, transaction)
    assert (task.status, task.priority, task.data["reason"]) == (
        "open",
        "urgent",
        "late_positive_evidence",
    )

    assert reconciled(client, gym, transaction.id, owner) == "charged"

    task = _follow_up(session, transaction)
    assert task.status == "done"
    assert task.data["doneBecause"] == "payment_completed"
    [done] = audit_rows(session, "task.done")
    assert (done.target_type, done.target_id) == ("task", str(task.id))
    assert done.data["subjectId"] == str(transaction.id)
    # A second reconcile finds it resolved and touches the task no more.
    assert reconciled(client, gym, transaction.id, owner) == "already_resolved"
    assert len(audit_rows(session, "task.done")) == 1


def test_the_late_evidence_follow_up_is_done_when_the_contradiction_door_settles_it(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    _closed_as_not_charged(session, transaction)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "late_positive_evidence"
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"
    assert _follow_up(session, transaction).status == "open"  # still to be looked at

    settled = settle(client, gym, transaction.id, owner, "refund", taken)
    assert settled.status_code == 200, settled.json

    task = _follow_up(session, transaction)
    assert task.status == "done"
    [done] = audit_rows(session, "task.done")
    assert done.target_id == str(task.id)


# --- inspect shows every payment the door settles, with the hint ------------------------


def test_a_contradicted_attempt_is_shown_with_the_settle_contradiction_hint(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    transaction, taken = contradicted_attempt(session, gym, card_server)
    owner = headers(gym.owner)
    assert reconciled(client, gym, transaction.id, owner) == "contradiction"

    shown = client.get(transaction_url(gym, transaction.id), headers=owner)
    assert shown.status_code == 200, shown.json
    data = shown.json["data"]
    assert data["state"] == "contradiction"
    assert data["actions"] == {
        "reconcile": True,  # the provider may still come to agree with the stored terms
        "confirmNoDebit": False,
        "authorizeRetry": False,
        "settleContradiction": True,
    }

    assert settle(client, gym, transaction.id, owner, "accept", taken).status_code == 200
    after = client.get(transaction_url(gym, transaction.id), headers=owner).json["data"]
    assert after["state"] == "settled"
    assert after["actions"]["settleContradiction"] is False


def test_an_unresolved_attempt_offers_no_settle_contradiction(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    session.commit()
    shown = client.get(transaction_url(gym, transaction.id), headers=headers(gym.owner))
    assert shown.status_code == 200, shown.json
    assert shown.json["data"]["state"] == "unresolved"
    assert shown.json["data"]["actions"]["settleContradiction"] is False


def test_a_pages_contradiction_is_shown_with_its_state_and_hint(
    client,
    org,
    card_server,
    session,
):
    bought, transaction_id = page_contradiction(client, org, card_server, session)
    owner = org[Role.owner].headers

    shown = client.get(org_url(org, transaction_id), headers=owner)
    assert shown.status_code == 200, shown.json
    data = shown.json["data"]
    assert data["state"] == "contradiction"
    assert data["actions"] == {
        "reconcile": False,  # a page is not looked up by an attempt id: only the door settles it
        "confirmNoDebit": False,
        "authorizeRetry": False,
        "settleContradiction": True,
    }
    assert data["transaction"]["kind"] is None
    assert data["transaction"]["subscriptionId"] == bought["subscription"]["id"]
    assert data["attempt"]["contradiction"]["field"] == "amount"

    body = {"decision": "refund", "amountInCents": 25000, "currency": "ILS"}
    settled = client.post(
        f"{org_url(org, transaction_id)}/settle-contradiction", json=body, headers=owner
    )
    assert settled.status_code == 200, settled.json
    after = client.get(org_url(org, transaction_id), headers=owner).json["data"]
    assert (after["state"], after["actions"]["settleContradiction"]) == ("settled", False)
    assert after["resolution"]["decision"] == "contradiction_settled"


def test_a_desk_charges_contradiction_is_shown_with_its_state_and_hint(
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

    shown = client.get(transaction_url(gym, transaction_id), headers=owner)
    assert shown.status_code == 200, shown.json
    data = shown.json["data"]
    assert data["state"] == "contradiction"
    assert data["actions"]["settleContradiction"] is True
    assert data["actions"]["reconcile"] is False  # its reconcile is the desk charge's own route
    assert (data["transaction"]["subscriptionId"], data["transaction"]["kind"]) == (None, None)


def test_a_desk_charge_without_a_contradiction_is_still_not_protected(
    client,
    session,
    gym,
    card_server,
    headers,  # noqa: F811 (the fixture)
):
    """Inspect widens to what the settle-contradiction door takes, no further."""
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    transaction.attempt_kind = None
    transaction.subscription_id = None
    transaction.metadata_ = {**(transaction.metadata_ or {}), "source": "desk_charge"}
    session.commit()
    shown = client.get(transaction_url(gym, transaction.id), headers=headers(gym.owner))
    assert (shown.status_code, shown.json["code"]) == (409, "billing_attempt_not_protected")


def test_the_cli_shows_a_contradicted_attempt_with_the_settle_contradiction_hint(
    committed_database, card_server, monkeypatch
):
    with cli_gym(committed_database, card_server, monkeypatch) as (factory, session, gym):
        transaction, _ = contradicted_attempt(session, gym, card_server)
        org, owner = str(gym.organization.id), str(gym.owner.id)
    reconciled_on_the_cli(org, transaction.id, owner)
    shown = CliRunner().invoke(
        billing_app, ["transaction", "show", org, str(transaction.id), "--json"]
    )
    assert shown.exit_code == 0, shown.output
    view = json.loads(shown.stdout)
    assert view["state"] == "contradiction"
    assert view["actions"]["settleContradiction"] is True
    table = CliRunner().invoke(billing_app, ["transaction", "show", org, str(transaction.id)])
    assert table.exit_code == 0, table.output
    assert "settleContradiction" in table.output
    with factory() as session:
        assert session.get(PaymentTransaction, transaction.id).status == TransactionStatus.pending
