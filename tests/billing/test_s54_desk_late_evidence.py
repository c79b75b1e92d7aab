"""A desk charge closed as not charged is not final against late positive evidence (spec B 2.2:
"A pending billing attempt means the local outcome is unresolved, not that the card was
uncharged"; B 3: "cancelled (not_charged) | late positive evidence | -> pending | audit and
alert").

The scene (a hunt in s54 found it): a desk charge goes unanswered,
reconcile past the 90 s grace finds nothing at the provider and closes it as not charged, then
the provider processes the delayed request under the stored external id. Reconcile answered
already_resolved without asking, the key replayed not_charged, and no completed row existed:
the member paid and the gym had no record. Now reconcile asks again on the original terminal;
an approval at the exact amount, currency and terminal completes the charge as the late payment
it is (its document, an audit row, the late_positive_evidence alert, an urgent follow-up), an
approval at other terms is held as a contradiction, and a decline or "not found" changes
nothing. The recovery sweep does not look at closed desk charges: the collector's recovery asks
about no closed attempt either (an operator's reconcile does)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from gymctl.billing import desk, desk_resolution, recovery
from gymctl.billing.accounts import saved_card
from gymctl.billing.idempotency import by_key
from gymctl.models import DocumentCounter, PaymentTransaction, Task
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card import ChargeResult, Outcome
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.cards import DECLINE, TERMINAL, completed_token_page
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture: the fake provider)
from tests.billing_ops.helpers import audit_rows, card_of
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

CLOSED_AT = NOW + timedelta(minutes=2)  # past the executing grace: the lookup finds nothing
LATER = NOW + timedelta(hours=1)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


@pytest.fixture
def documents() -> LocalDocumentProvider:
    return LocalDocumentProvider()


@pytest.fixture
def headers(idp, clock):
    def of(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {idp.token(user.identity_id, now=clock.now())}"}

    return of


@pytest.fixture
def alerts(caplog):
    """The messages of the billing alerts raised so far in the test."""
    caplog.set_level("WARNING", logger="gymctl.billing.alerts")
    return lambda: [r.getMessage() for r in caplog.records if r.name == "gymctl.billing.alerts"]


@dataclass
class Closed:
    """A desk charge of 30.00 closed as not charged; nothing taken yet."""

    base: str
    body: dict[str, Any]
    transaction_id: str
    external_id: str
    method: Any


@pytest.fixture
def closed(client, session, gym, card_server, headers, clock) -> Closed:
    method = card_of(session, gym, card_server)
    session.commit()
    base = f"/organizations/{gym.organization.id}/payments/desk-charges"
    body = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": str(gym.member.id),
        "amountInCents": 3000,
        "currency": "ILS",
        "description": "personal training",
    }
    card_server.inject(CHARGE, Fault.drop)  # unanswered, nothing recorded at the provider
    first = client.post(base, json=body, headers=headers(gym.owner))
    assert (first.status_code, first.json["code"]) == (409, "billing_reconciliation_required")
    transaction_id = first.json["transactionId"]
    clock.set(CLOSED_AT)
    shut = client.post(f"{base}/{transaction_id}/reconcile", headers=headers(gym.owner))
    assert shut.status_code == 200, shut.json
    assert shut.json["data"]["outcome"] == "not_charged"
    session.expire_all()
    row = session.get(PaymentTransaction, uuid.UUID(transaction_id))
    clock.set(LATER)
    return Closed(base, body, transaction_id, row.billing_attempt["externalAttemptId"], method)


def late_charge(
    card_server, closed: Closed, *, amount: int = 3000, currency: str = "ILS", card=None
) -> ChargeResult:
    """The provider processes the delayed request under the charge's stored external id (on
    the member's saved card, or `card`: anything with a token and an expiry)."""
    card = card or saved_card(closed.method, TEST_CIPHER)
    return card_server.provider().charge_token(
        TERMINAL,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=amount,
        currency=currency,
        unique_id=closed.external_id,
    )


def reconcile(client, gym, closed: Closed, headers) -> dict[str, Any]:
    answer = client.post(f"{closed.base}/{closed.transaction_id}/reconcile", headers=headers)
    assert answer.status_code == 200, answer.json
    return answer.json["data"]


def row_of(session, closed: Closed) -> PaymentTransaction:
    session.expire_all()
    return session.get(PaymentTransaction, uuid.UUID(closed.transaction_id))


def completed(session, gym) -> int:
    return session.scalar(
        select(func.count())
        .select_from(PaymentTransaction)
        .where(
            PaymentTransaction.organization_id == gym.organization.id,
            PaymentTransaction.status == TransactionStatus.completed,
        )
    )


def documents_issued(session, gym) -> int:
    counter = session.get(DocumentCounter, gym.organization.id)
    return counter.last_number if counter else 0


def follow_ups(session, closed: Closed) -> list[Task]:
    return list(
        session.scalars(
            select(Task).where(
                Task.kind == "payment_follow_up",
                Task.subject_type == "payment_transaction",
                Task.subject_id == closed.transaction_id,
            )
        )
    )


def late_alerts(alerts) -> list[str]:
    return [a for a in alerts() if "late_positive_evidence" in a]


def test_a_desk_charge_closed_as_not_charged_but_charged_later_is_completed_as_late_payment(
    client, session, gym, card_server, headers, closed, alerts
):
    late = late_charge(card_server, closed)
    assert late.outcome == Outcome.approved  # the provider holds the member's 30.00
    asked = card_server.requests(LOOKUP_CHARGE)

    answer = reconcile(client, gym, closed, headers(gym.owner))

    assert card_server.requests(LOOKUP_CHARGE) == asked + 1  # asked again, by the stored id
    assert card_server.charge_count(closed.external_id) == 1  # never charged again
    assert (answer["outcome"], answer["state"]) == ("charged", "charged")
    row = row_of(session, closed)
    assert row.status == TransactionStatus.completed
    assert row.provider_transaction_id == late.transaction_id
    assert row.document_number is not None
    assert row.billing_resolution["decision"] == "reopened_by_late_evidence"
    assert row.billing_resolution["lateEvidence"]["answer"] == "approved"
    assert completed(session, gym) == 1
    [audit] = audit_rows(session, "billing.late_positive_evidence")
    assert audit.target_id == str(row.id)
    [task] = follow_ups(session, closed)
    assert (task.priority, task.status, task.data["reason"]) == (
        "urgent",
        "open",
        "late_positive_evidence",
    )
    [alert] = late_alerts(alerts)
    assert closed.transaction_id in alert


def test_reconciled_twice_the_late_payment_is_completed_once(
    client, session, gym, card_server, headers, closed, alerts
):
    late_charge(card_server, closed)

    first = reconcile(client, gym, closed, headers(gym.owner))
    asked = card_server.requests(LOOKUP_CHARGE)
    second = reconcile(client, gym, closed, headers(gym.owner))

    assert (first["outcome"], second["outcome"]) == ("charged", "already_resolved")
    assert card_server.requests(LOOKUP_CHARGE) == asked  # settled: not asked again
    assert completed(session, gym) == 1
    assert documents_issued(session, gym) == 1
    assert len(late_alerts(alerts)) == 1
    assert len(audit_rows(session, "billing.late_positive_evidence")) == 1
    assert len(follow_ups(session, closed)) == 1


@pytest.mark.parametrize("answer", ["not_found", "declined"])
def test_a_late_decline_or_not_found_changes_nothing(
    client, session, gym, card_server, headers, closed, alerts, answer
):
    if answer == "declined":  # the delayed request reaches the provider and is declined
        declining = completed_token_page(
            card_server.provider(), card_server.simulator, DECLINE
        ).token
        assert late_charge(card_server, closed, card=declining).outcome == Outcome.declined
    before = row_of(session, closed)
    resolution, updated = dict(before.billing_resolution), before.updated_at
    asked = card_server.requests(LOOKUP_CHARGE)

    reconciled = reconcile(client, gym, closed, headers(gym.owner))
    replay = client.post(closed.base, json=closed.body, headers=headers(gym.owner))

    assert card_server.requests(LOOKUP_CHARGE) == asked + 1  # it was asked, by its stored id
    assert (reconciled["outcome"], reconciled["state"]) == ("not_charged", "not_charged")
    assert (replay.status_code, replay.json["data"]["outcome"]) == (200, "not_charged")
    row = row_of(session, closed)
    assert (row.status, row.billing_resolution, row.updated_at) == (
        TransactionStatus.failed,
        resolution,
        updated,
    )
    assert row.document_number is None
    assert completed(session, gym) == 0
    assert documents_issued(session, gym) == 0
    assert audit_rows(session, "billing.late_positive_evidence") == []
    assert follow_ups(session, closed) == []
    assert alerts() == []


@pytest.mark.parametrize(
    "terms", [{"amount": 2500}, {"currency": "USD"}], ids=["amount", "currency"]
)
def test_a_late_approval_at_other_terms_is_held_not_completed(
    client, session, gym, card_server, headers, closed, alerts, terms
):
    assert late_charge(card_server, closed, **terms).outcome == Outcome.approved

    answer = reconcile(client, gym, closed, headers(gym.owner))
    again = reconcile(client, gym, closed, headers(gym.owner))  # the same contradiction
    replay = client.post(closed.base, json=closed.body, headers=headers(gym.owner))

    field = "amount" if "amount" in terms else "currency"
    assert (answer["outcome"], answer["state"]) == ("contradiction", "contradiction")
    assert answer["actions"] == {"reconcile": True, "settleContradiction": True}
    assert again["outcome"] == "contradiction"
    assert (replay.status_code, replay.json["code"]) == (409, "billing_reconciliation_required")
    row = row_of(session, closed)
    assert row.status == TransactionStatus.pending
    assert row.billing_attempt["contradiction"]["field"] == field
    assert row.document_number is None
    assert completed(session, gym) == 0
    assert documents_issued(session, gym) == 0
    assert len(follow_ups(session, closed)) == 1
    assert len(late_alerts(alerts)) == 1
    assert len([a for a in alerts() if "billing_contradiction" in a]) == 1


def test_the_replay_answers_the_corrected_outcome(
    client, session, session_factory, gym, card_server, headers, closed, documents
):
    late_charge(card_server, closed)
    # The recovery sweep leaves a closed desk charge to the operator (as the collector's
    # recovery leaves its closed attempts): only the reconcile asks again.
    swept = recovery.recovery_pass(
        session_factory, card_server.provider(), TEST_CIPHER, now=LATER, documents=documents
    )
    assert swept["deskCharges"]["selected"] == 0
    stale = client.post(closed.base, json=closed.body, headers=headers(gym.owner))
    assert stale.json["data"]["outcome"] == "not_charged"

    reconcile(client, gym, closed, headers(gym.owner))
    replay = client.post(closed.base, json=closed.body, headers=headers(gym.owner))

    assert replay.status_code == 200, replay.json
    data = replay.json["data"]
    assert (data["outcome"], data["replayed"]) == ("charged", True)
    assert data["transaction"]["status"] == "completed"
    assert data["transaction"]["documentNumber"] is not None
    assert card_server.charge_count(closed.external_id) == 1


class _ClosedWhileCharging:
    """The card provider, slow to answer the charge: meanwhile the operator's reconcile, past
    the grace, finds nothing under the id and closes it as not charged. Then the charge goes
    through and its approval arrives."""

    def __init__(self, card_server, close) -> None:
        self.real, self.close = card_server.provider(), close

    def charge_token(self, terminal, **charge):
        self.close(self.real)
        return self.real.charge_token(terminal, **charge)


def test_the_charges_own_approval_after_the_closing_completes_it(
    session, session_factory, gym, card_server, documents, alerts
):
    card_of(session, gym, card_server)
    session.commit()
    request = desk.DeskChargeRequest(uuid.uuid4(), gym.member.id, 3000, "ILS", "towel")

    def close(provider) -> None:
        with session_factory() as other:
            row = by_key(other, gym.organization.id, request.idempotency_key)
            shut = desk_resolution.reconcile_desk_charge(
                other,
                provider,
                TEST_CIPHER,
                organization_id=gym.organization.id,
                transaction_id=row.id,
                actor_user_id=gym.owner.id,
                now=CLOSED_AT,
                documents=documents,
            )
            other.commit()
        assert shut["outcome"] == "not_charged"

    answer = desk.desk_charge(
        session_factory,
        _ClosedWhileCharging(card_server, close),
        organization_id=gym.organization.id,
        request=request,
        actor_user_id=gym.owner.id,
        now=NOW,
        cipher=TEST_CIPHER,
        documents=documents,
    )

    assert answer["outcome"] == "charged"
    session.expire_all()
    row = session.get(PaymentTransaction, uuid.UUID(answer["transaction"]["id"]))
    assert row.status == TransactionStatus.completed
    assert row.document_number is not None
    assert row.billing_resolution["decision"] == "reopened_by_late_evidence"
    assert len(audit_rows(session, "billing.late_positive_evidence")) == 1
    assert len(late_alerts(alerts)) == 1


def test_a_lookup_denying_the_late_approval_afterwards_does_not_close_it_again(
    client, session, gym, card_server, headers, closed, alerts
):
    """Held at other terms on the provider's approval of its id, then a lookup finds nothing:
    that contradicts the approval (the collector's `<answer>_after_approval`); closed again as
    not charged, it would hide money the provider said it took."""
    late_charge(card_server, closed, amount=2500)
    assert reconcile(client, gym, closed, headers(gym.owner))["outcome"] == "contradiction"
    card_server.answer_lookups_from(TERMINAL.number, "9999")  # a terminal that holds nothing

    answer = reconcile(client, gym, closed, headers(gym.owner))

    assert (answer["outcome"], answer["state"]) == ("contradiction", "contradiction")
    row = row_of(session, closed)
    assert row.status == TransactionStatus.pending
    assert row.billing_attempt["contradiction"]["field"] == "not_found_after_approval"
    assert completed(session, gym) == 0
    assert len([a for a in alerts() if "billing_contradiction" in a]) == 2
