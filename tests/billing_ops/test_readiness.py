"""Billing readiness (spec B 4.1): issue codes with severity and next action, expected first
charge, floors, card checks, retry counts, the capped organization lists, pending renewals,
page totals and the cursor. Read-only, no provider call, a fixed number of statements per page,
and never a token, ciphertext, credential or email."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from sqlalchemy import event, func, select

from gymctl.billing import attempts
from gymctl.billing.readiness import readiness
from gymctl.models import OutboxEvent, PaymentMethod, PaymentProviderConfig
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionStatus
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import CHARGE, CREATE_PAGE, GET_PAGE, LOOKUP_CHARGE, REFUND
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import TERMINAL, connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import (
    DUE,
    card_subscription,
    pending_attempt,
    presale_with_checkout,
)
from tests.conftest import NOW


def _codes(item) -> set[str]:
    return {issue["code"] for issue in item["issues"]}


def _report(session, gym, **kwargs):
    return readiness(session, gym.organization.id, now=NOW, cipher=TEST_CIPHER, **kwargs)


def _by_subscription(report) -> dict:
    return {item["subscriptionId"]: item for item in report["items"]}


def _legacy_pending(session, gym, count: int) -> None:
    for _ in range(count):
        bf.make_transaction(
            session,
            gym,
            status=TransactionStatus.pending,
            provider="card_provider",
            amount_in_cents=100,
        )


@pytest.mark.embedded
def test_the_report_types_every_issue_with_severity_and_next_action(session, gym, card_server):
    ready, _ = presale_with_checkout(session, gym, card_server, opening=NOW + timedelta(days=20))
    early, _ = presale_with_checkout(session, gym, card_server, opening=NOW + timedelta(days=20))
    early.next_charge_date = NOW - timedelta(days=1)
    early.sessions_remaining = 10
    no_card = bf.make_subscription(
        session, gym, PlanType.card, presale_opening=NOW + timedelta(days=20)
    )
    expired = card_subscription(session, gym, card_server)
    session.get(PaymentMethod, expired.payment_method_id).expires_month = "2026-10"
    paused = card_subscription(session, gym, card_server, collection_paused=True)
    unresolved = card_subscription(session, gym, card_server)
    pending_attempt(session, unresolved, now=NOW - timedelta(minutes=5))
    in_debt = bf.make_subscription(session, gym, PlanType.cash, in_debt_since=NOW)

    report = _report(session, gym)

    items = _by_subscription(report)
    assert report["checkState"] == "blocked"
    assert _codes(items[str(ready.id)]) == set()
    assert _codes(items[str(early.id)]) == {"first_charge_too_early", "presale_holds_period"}
    assert _codes(items[str(no_card.id)]) == {"no_saved_card", "account_evidence_missing"}
    assert "card_expired" in _codes(items[str(expired.id)])
    assert items[str(expired.id)]["card"]["expiryCheck"] == "expired"
    assert "collection_paused_by_owner" in _codes(items[str(paused.id)])
    assert {"subscriptionId": str(paused.id), "reason": "collection_paused_by_owner"} in report[
        "pendingRenewals"
    ]
    assert "unresolved_attempt" in _codes(items[str(unresolved.id)])
    assert items[str(unresolved.id)]["retries"]["pendingAttempts"] == 1
    assert _codes(items[str(in_debt.id)]) == {"debt_open"}
    issue = next(i for i in items[str(early.id)]["issues"] if i["code"] == "first_charge_too_early")
    assert issue == {
        "code": "first_charge_too_early",
        "severity": "blocker",
        "nextAction": "repair_schedule",
    }
    first = items[str(ready.id)]
    assert first["expectedFirstCharge"]["source"] == "live_estimate"
    assert first["floors"]["opening"] == (NOW + timedelta(days=20)).isoformat()
    assert first["memberName"] == gym.member.name
    assert first["userId"] == str(gym.member.id)
    assert first["paymentMethodId"] == str(ready.payment_method_id)
    [unresolved_row] = report["unresolvedProviderTransactions"]["items"]
    assert unresolved_row["subscriptionId"] == str(unresolved.id)
    ils = report["pageTotals"]["ILS"]
    assert ils["subscriptions"] == 7
    assert ils["debtInCents"] == in_debt.debt_amount_in_cents


def test_a_declined_first_charge_is_reported_from_its_snapshot(session, gym, card_server):
    presale, _ = presale_with_checkout(session, gym, card_server, opening=NOW - timedelta(hours=1))
    attempt = pending_attempt(session, presale, now=NOW - timedelta(minutes=30))
    attempt.status = TransactionStatus.failed
    item = _report(session, gym)["items"][0]
    assert item["expectedFirstCharge"]["source"] == "declined_attempt_snapshot"
    assert item["expectedFirstCharge"]["amountInCents"] == attempt.amount_in_cents
    assert item["retries"]["declinedAttempts"] == 1


def test_retry_terms_changed_is_a_pending_renewal(session, gym, card_server):
    subscription = card_subscription(session, gym, card_server)
    attempt = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    attempt.status = TransactionStatus.failed
    attempt.billing_resolution = {"decision": "not_charged"}
    subscription.price_in_cents += 1000  # a new price since the confirmed non-charge
    report = _report(session, gym)
    assert "retry_terms_changed" in _codes(report["items"][0])
    assert report["items"][0]["retries"]["technical"] == 1
    assert report["pendingRenewals"] == [
        {"subscriptionId": str(subscription.id), "reason": "retry_terms_changed"}
    ]


def test_the_cursor_walks_pages_in_id_order(session, gym):
    made = sorted(str(bf.make_subscription(session, gym, PlanType.cash).id) for _ in range(5))
    first = _report(session, gym, page_size=2)
    second = _report(session, gym, page_size=2, cursor=first["nextCursor"])
    last = _report(session, gym, page_size=2, cursor=second["nextCursor"])
    seen = [i["subscriptionId"] for page in (first, second, last) for i in page["items"]]
    assert seen == made
    assert first["nextCursor"] == made[1]
    assert last["nextCursor"] is None


def test_the_organization_lists_are_capped_at_100_and_marked_truncated(session, gym):
    _legacy_pending(session, gym, 101)
    report = _report(session, gym)
    assert len(report["legacyPendingTransactions"]["items"]) == 100
    assert report["legacyPendingTransactions"]["truncated"] is True
    assert report["unresolvedProviderTransactions"] == {"items": [], "truncated": False}


def test_no_terminal_blocks_the_organization(session):
    gym = bf.make_gym(session)
    report = _report(session, gym)
    assert report["organizationIssues"][0]["code"] == "no_card_provider_terminal"
    assert report["checkState"] == "blocked"


def test_a_clean_organization_has_no_known_blockers(session, gym, card_server):
    presale_with_checkout(session, gym, card_server, opening=NOW + timedelta(days=20))
    assert _report(session, gym)["checkState"] == "no_known_blockers"


def test_never_a_token_ciphertext_credential_or_email_and_no_provider_call(
    session, gym, card_server
):
    subscription, _ = presale_with_checkout(
        session, gym, card_server, opening=NOW + timedelta(days=20)
    )
    gym.member.email = "member.secret@example.test"
    session.flush()
    method = session.get(PaymentMethod, subscription.payment_method_id)
    token = json.loads(
        TEST_CIPHER.decrypt(
            method.payload_ciphertext,
            table="payment_methods",
            column="payload_ciphertext",
            row_id=str(method.id),
        )
    )["token"]
    config = session.scalar(select(PaymentProviderConfig).where(PaymentProviderConfig.active))
    events = session.scalar(select(func.count()).select_from(OutboxEvent))
    requests = {
        e: card_server.requests(e) for e in (CREATE_PAGE, GET_PAGE, CHARGE, LOOKUP_CHARGE, REFUND)
    }

    text = json.dumps(_report(session, gym))

    for secret in (
        token,
        method.payload_ciphertext,
        config.credentials_ciphertext,
        TERMINAL.api_name,
        gym.member.email,
        gym.owner.email,
    ):
        assert secret
        assert secret not in text
    assert "@" not in text
    assert {e: card_server.requests(e) for e in requests} == requests
    assert session.scalar(select(func.count()).select_from(OutboxEvent)) == events


def test_statements_per_page_do_not_depend_on_the_rows(session, gym, card_server):
    def statements(page_size: int) -> int:
        counted = []
        listener = lambda *args: counted.append(1)  # noqa: E731
        bind = session.connection()
        event.listen(bind, "before_cursor_execute", listener)
        try:
            _report(session, gym, page_size=page_size)
        finally:
            event.remove(bind, "before_cursor_execute", listener)
        return len(counted)

    for _ in range(2):
        subscription = card_subscription(session, gym, card_server)
        pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    small = statements(1)
    for _ in range(6):
        member = factories.membership(
            session, user=factories.user(session), organization=gym.organization
        )
        subscription = card_subscription(session, gym, card_server, membership=member)
        pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
        presale_with_checkout(session, gym, card_server, opening=NOW + timedelta(days=5))
    assert statements(100) == small
    assert subscription.status == SubscriptionStatus.active


def test_a_card_saved_on_another_terminal_needs_verify_account(session, gym, card_server):
    renewal = card_subscription(session, gym, card_server)
    connect_card_provider(session, gym, terminal=Terminal("2000", "new-account"))
    item = _report(session, gym)["items"][0]
    assert item["subscriptionId"] == str(renewal.id)
    assert item["card"]["accountCheck"] == "other_terminal"
    issue = next(i for i in item["issues"] if i["code"] == "account_unverified")
    assert (issue["severity"], issue["nextAction"]) == ("blocker", "verify_account")


def _non_charge(session, subscription, minutes_ago: int = 5, **resolution):
    attempt = pending_attempt(session, subscription, now=NOW - timedelta(minutes=minutes_ago))
    attempt.status = TransactionStatus.failed
    attempt.billing_resolution = {"decision": "not_charged", **resolution}
    session.flush()
    return attempt


def test_retries_are_counted_per_obligation_as_the_collector_counts_them(session, gym, card_server):
    """Spec B 8: at most three technical retries "per billing obligation". Non-charges of a
    renewal since paid say nothing about the next one: no exhausted ladder, no changed terms."""
    subscription = card_subscription(session, gym, card_server)
    for _ in range(4):
        _non_charge(session, subscription)
    subscription.next_charge_date = DUE + timedelta(days=30)  # paid since: the next renewal
    subscription.price_in_cents += 1000
    session.flush()
    item = _report(session, gym)["items"][0]
    assert _codes(item) & {"technical_retries_exhausted", "retry_terms_changed"} == set()
    assert item["retries"]["technical"] == 0


def test_an_owner_authorized_retry_is_neither_exhausted_nor_changed_terms(
    session, gym, card_server
):
    """The collector lets an authorized retry through (authorize-retry lifts the block): the
    report must not call it blocked."""
    subscription = card_subscription(session, gym, card_server)
    for minutes_ago in (9, 8, 7):
        _non_charge(session, subscription, minutes_ago)
    _non_charge(session, subscription, 6, retryAuthorized=True)
    subscription.price_in_cents += 1000
    session.flush()
    item = _report(session, gym)["items"][0]
    assert _codes(item) & {"technical_retries_exhausted", "retry_terms_changed"} == set()
    assert item["retries"]["technical"] == 4
    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert began.outcome == "started"


def test_an_exhausted_ladder_is_a_blocker(session, gym, card_server):
    subscription = card_subscription(session, gym, card_server)
    for _ in range(4):
        _non_charge(session, subscription)
    item = _report(session, gym)["items"][0]
    assert "technical_retries_exhausted" in _codes(item)
    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert (began.outcome, began.reason) == ("blocked", "technical_retries_exhausted")
