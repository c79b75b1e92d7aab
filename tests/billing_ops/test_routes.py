"""The billing operator routes over HTTP (spec B 4.1, 4.2, 4.3, 5): who may call each, the
documented codes and statuses, and that a refusal changes nothing."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.models import PaymentMethod, PaymentTransaction, Role
from gymctl.models.billing import PlanType, TransactionStatus
from tests import factories
from tests.access.conftest import snapshot
from tests.billing import factories as bf
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.helpers import (
    audit_rows,
    card_of,
    card_subscription,
    paid_charge,
    pending_attempt,
    presale_with_checkout,
    sent_attempt,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the demo gym reaches it: both engines


@pytest.fixture
def headers(idp):
    def of(user) -> dict[str, str]:
        return {"Authorization": f"Bearer {idp.token(user.identity_id, now=NOW)}"}

    return of


@pytest.fixture
def operator(session, idp):
    idp.add_account("user_ops", "ops@gymctl.example", private_metadata={"platformRole": "admin"})
    user = factories.user(session, identity_id="user_ops", email="ops@gymctl.example")
    return user


def _tx_url(gym, transaction, suffix=""):
    base = f"/organizations/{gym.organization.id}/payments/billing/transactions"
    return f"{base}/{transaction.id}{suffix}"


def _confirm_body(transaction, **overrides):
    attempt = transaction.billing_attempt
    return {
        "requestId": str(uuid.uuid4()),
        "providerCaseId": "CASE-1",
        "confirmedAt": (NOW - timedelta(minutes=1)).isoformat().replace("+00:00", "Z"),
        "externalAttemptId": attempt["externalAttemptId"],
        "terminal": attempt["terminal"],
        "amountInCents": attempt["amountInCents"],
        "currency": attempt["currency"],
        "noDebitOccurred": True,
        "cannotSettleLater": True,
        **overrides,
    }


def test_inspect_and_reconcile_need_payments_manage(client, session, gym, card_server, headers):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    session.commit()

    seen = client.get(_tx_url(gym, transaction), headers=headers(gym.owner))
    assert seen.status_code == 200, seen.json
    assert seen.json["data"]["state"] == "unresolved"
    refused = client.get(_tx_url(gym, transaction), headers=headers(gym.member))
    assert refused.status_code == 403
    reconciled = client.post(_tx_url(gym, transaction, "/reconcile"), headers=headers(gym.owner))
    assert reconciled.json["data"]["outcome"] == "no_verified_success"


def test_confirm_no_debit_over_http_and_its_refusals(client, session, gym, card_server, headers):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    admin = factories.user(session)
    factories.membership(session, user=admin, organization=gym.organization, role=Role.admin)
    session.commit()
    url = _tx_url(gym, transaction, "/confirm-no-debit")
    before = snapshot(session)

    cases = [
        (admin, _confirm_body(transaction), 403, "owner_required"),
        (
            gym.owner,
            _confirm_body(transaction, requestId=str(uuid.uuid1())),
            422,
            "request_id_invalid",
        ),
        (
            gym.owner,
            _confirm_body(transaction, confirmedAt="2026-11-21T08:59:00+02:00"),
            422,
            "billing_confirmation_time_invalid",
        ),
        (gym.owner, _confirm_body(transaction, amountInCents=1), 409, "billing_evidence_mismatch"),
        (
            gym.owner,
            _confirm_body(transaction, noDebitOccurred=False),
            422,
            "billing_attestation_required",
        ),
        (gym.owner, {"requestId": "x"}, 400, "invalid_body"),
    ]
    for user, body, status, code in cases:
        answer = client.post(url, json=body, headers=headers(user))
        assert (answer.status_code, answer.json["code"]) == (status, code), body
    assert snapshot(session) == before

    done = client.post(
        url, json=_confirm_body(transaction, authorizeRetry=True), headers=headers(gym.owner)
    )
    assert done.status_code == 200, done.json
    assert done.json["data"]["state"] == "not_charged_retry_authorized"
    session.expire_all()
    assert session.get(PaymentTransaction, transaction.id).status == TransactionStatus.cancelled


def test_a_vetoed_confirmation_keeps_the_settlement(client, session, gym, card_server, headers):
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    session.commit()
    answer = client.post(
        _tx_url(gym, transaction, "/confirm-no-debit"),
        json=_confirm_body(transaction),
        headers=headers(gym.owner),
    )
    assert (answer.status_code, answer.json["code"]) == (409, "billing_known_success")
    session.expire_all()
    assert session.get(PaymentTransaction, transaction.id).status == TransactionStatus.completed


def test_the_ordinary_dismiss_refuses_protected_attempts(
    client, session, gym, card_server, headers
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    session.commit()
    answer = client.post(
        f"/organizations/{gym.organization.id}/payments/transactions/{transaction.id}/dismiss",
        headers=headers(gym.owner),
    )
    assert (answer.status_code, answer.json["code"]) == (409, "billing_attempt_protected")
    session.expire_all()
    assert session.get(PaymentTransaction, transaction.id).status == TransactionStatus.pending


def test_desk_charge_refund_and_credit_note_over_http(client, session, gym, card_server, headers):
    card_of(session, gym, card_server)
    session.commit()
    base = f"/organizations/{gym.organization.id}/payments"
    body = {
        "idempotencyKey": str(uuid.uuid4()),
        "userId": str(gym.member.id),
        "amountInCents": 3000,
        "currency": "ILS",
        "description": "towel",
    }
    first = client.post(f"{base}/desk-charges", json=body, headers=headers(gym.owner))
    assert first.status_code == 201, first.json
    replay = client.post(f"{base}/desk-charges", json=body, headers=headers(gym.owner))
    assert (replay.status_code, replay.json["data"]["replayed"]) == (200, True)
    changed = client.post(
        f"{base}/desk-charges", json={**body, "amountInCents": 3001}, headers=headers(gym.owner)
    )
    assert (changed.status_code, changed.json["code"]) == (409, "idempotency_key_reused")
    sale_id = first.json["data"]["transaction"]["id"]

    note = {"idempotencyKey": str(uuid.uuid4()), "amountInCents": 1000, "cashReturned": True}
    filed = client.post(
        f"{base}/transactions/{sale_id}/credit-notes", json=note, headers=headers(gym.owner)
    )
    assert filed.status_code == 201, filed.json
    again = client.post(
        f"{base}/transactions/{sale_id}/credit-notes", json=note, headers=headers(gym.owner)
    )
    assert (again.status_code, again.json["data"]["replayed"]) == (200, True)
    before = snapshot(session)
    over = client.post(
        f"{base}/transactions/{sale_id}/credit-notes",
        json={**note, "idempotencyKey": str(uuid.uuid4()), "amountInCents": 2001},
        headers=headers(gym.owner),
    )
    assert (over.status_code, over.json["code"]) == (409, "credit_note_amount_exceeds_cap")
    assert snapshot(session) == before

    refunded = client.post(
        f"{base}/transactions/{sale_id}/refund",
        json={"amountInCents": 2000, "reason": "changed mind"},
        headers=headers(gym.owner),
    )
    assert refunded.status_code == 201, refunded.json
    # the desk sale had a tax invoice, so its refund document reverses one
    assert refunded.json["data"]["documentType"] == "TaxInvoiceAndReceiptRefund"
    too_much = client.post(
        f"{base}/transactions/{sale_id}/refund",
        json={"amountInCents": 1, "reason": "again"},
        headers=headers(gym.owner),
    )
    assert (too_much.status_code, too_much.json["code"]) == (409, "refund_not_refundable")


@pytest.mark.parametrize(
    ("due", "status", "code"),
    [
        ("2026-12-01T09:00:00", 422, "timestamp_not_utc"),  # no offset: it answered 500
        ("0001-01-01T00:00:00+14:00", 400, "invalid_body"),  # no UTC time
    ],
)
def test_a_desk_sale_on_pay_later_terms_needs_a_due_instant(
    client, session, gym, headers, due, status, code
):
    plan = bf.make_plan(session, gym.organization, PlanType.cash)
    session.commit()
    before = snapshot(session)

    response = client.post(
        f"/organizations/{gym.organization.id}/subscriptions",
        json={
            "userId": str(gym.member.id),
            "planId": str(plan.id),
            "method": "pay_later",
            "paymentDueAt": due,
        },
        headers=headers(gym.owner),
    )

    assert (response.status_code, response.json["code"]) == (status, code)
    assert snapshot(session) == before


def test_debt_clearance_and_member_pay_debt(client, session, gym, card_server, headers):

    cash = bf.make_subscription(session, gym, PlanType.cash, in_debt_since=NOW)
    card = card_subscription(session, gym, card_server, in_debt_since=NOW - timedelta(days=1))
    session.commit()
    org = f"/organizations/{gym.organization.id}/subscriptions"
    cleared = client.post(f"{org}/{cash.id}/clear-debt", json={}, headers=headers(gym.owner))
    assert cleared.status_code == 200, cleared.json
    not_staff = client.post(f"{org}/{cash.id}/clear-debt", json={}, headers=headers(gym.member))
    assert not_staff.status_code == 403
    paid = client.post(f"{org}/{card.id}/pay-debt", headers=headers(gym.member))
    assert (paid.status_code, paid.json["data"]["outcome"]) == (200, "charged")
    session.expire_all()
    assert session.get(type(card), card.id).debt_amount_in_cents == 0


@pytest.mark.embedded
def test_a_debt_the_collector_refuses_to_charge_is_refused_and_nothing_changes(
    client, session, gym, card_server, headers
):
    """ "Refusals change nothing": the member's card is gone, so the collector blocks the debt
    attempt after the route's own checks passed. The debt's retry date the member's request
    moved to now went back with the 409 (it stayed, and the collector's passes then tried the
    debt at every tick)."""
    card = card_subscription(session, gym, card_server, in_debt_since=NOW - timedelta(days=1))
    session.get(PaymentMethod, card.payment_method_id).deleted_at = NOW - timedelta(hours=1)
    session.commit()
    before = snapshot(session)

    paid = client.post(
        f"/organizations/{gym.organization.id}/subscriptions/{card.id}/pay-debt",
        headers=headers(gym.member),
    )

    assert (paid.status_code, paid.json["code"]) == (409, "pay_debt_not_available")
    assert snapshot(session) == before


def test_readiness_and_repairs_are_platform_admin_routes(
    client, session, gym, card_server, headers, operator, idp
):
    subscription, _ = presale_with_checkout(
        session, gym, card_server, opening=NOW + timedelta(days=20)
    )
    subscription.next_charge_date = None
    session.commit()
    base = f"/admin/organizations/{gym.organization.id}/billing-readiness"

    assert client.get(base, headers=headers(gym.owner)).status_code == 403
    report = client.get(base, headers=headers(operator))
    assert report.status_code == 200
    assert report.json["checkState"] == "blocked"
    bad_cursor = client.get(base, query_string={"cursor": "nope"}, headers=headers(operator))
    assert (bad_cursor.status_code, bad_cursor.json["code"]) == (400, "cursor_invalid")

    repair = f"{base}/subscriptions/{subscription.id}/repair-schedule"
    naive = client.post(
        repair, json={"expectedNextChargeAt": "2026-11-21T09:00:00"}, headers=headers(operator)
    )
    assert (naive.status_code, naive.json["code"]) == (422, "timestamp_not_utc")
    repaired = client.post(repair, json={"expectedNextChargeAt": None}, headers=headers(operator))
    assert repaired.status_code == 200, repaired.json
    assert repaired.json["data"]["item"]["nextChargeAt"] == (NOW + timedelta(days=20)).isoformat()
    assert len(audit_rows(session, "admin.billing.schedule_repaired")) == 1

    verify = f"{base}/subscriptions/{subscription.id}/verify-account"
    verified = client.post(verify, json={}, headers=headers(operator))
    assert verified.status_code == 200, verified.json
    assert verified.json["outcome"] == "already_verified"

    idp.add_account(
        "user_ghost", "ghost@gymctl.example", private_metadata={"platformRole": "admin"}
    )
    ghost = {"Authorization": f"Bearer {idp.token('user_ghost', now=NOW)}"}
    before = snapshot(session)
    refused = client.post(verify, json={}, headers=ghost)
    assert (refused.status_code, refused.json["code"]) == (403, "operator_user_required")
    assert snapshot(session) == before


def test_a_refund_of_another_organizations_payment_is_404(
    client, session, gym, card_server, headers
):
    other = bf.make_gym(session)
    sale = paid_charge(session, other, card_server)
    session.commit()
    answer = client.post(
        f"/organizations/{gym.organization.id}/payments/transactions/{sale.id}/refund",
        json={"amountInCents": 100, "reason": "x"},
        headers=headers(gym.owner),
    )
    assert (answer.status_code, answer.json["code"]) == (404, "transaction_not_found")


def test_a_refund_whose_answer_is_lost_is_kept_stored_and_a_retry_with_another_amount_is_409(
    client, session, gym, card_server, headers
):
    """The refund route stores the attempt (committed) before asking the provider: a lost
    answer leaves it refund_pending for recovery, never a second refund."""
    from gymctl.providers.card_http import REFUND
    from tests.billing.fake_card_provider import Fault

    sale = paid_charge(session, gym, card_server, amount=9900)
    session.commit()
    card_server.inject(REFUND, Fault.answer_lost)
    url = f"/organizations/{gym.organization.id}/payments/transactions/{sale.id}/refund"
    lost = client.post(
        url, json={"amountInCents": 9900, "reason": "moved"}, headers=headers(gym.owner)
    )
    assert (lost.status_code, lost.json["code"]) == (503, "refund_provider_unavailable")
    refund = session.get(PaymentTransaction, uuid.UUID(lost.json["refundTransactionId"]))
    assert refund.status == TransactionStatus.refund_pending
    retry = client.post(
        url, json={"amountInCents": 5000, "reason": "moved"}, headers=headers(gym.owner)
    )
    assert (retry.status_code, retry.json["code"]) == (409, "refund_in_progress")
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [9900]
