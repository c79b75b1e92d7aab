"""The two readiness repairs (spec B 4.1): verify-account and repair-schedule. Both move no
money, lock organization, membership, subscription, and are audited twice; an operator without
a user row gets 403."""

from __future__ import annotations

import json
import uuid
from datetime import date, timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import collector, repair, verification
from gymctl.errors import DomainError
from gymctl.models import AuditLog, PaymentMethod
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card import PageRequest, Terminal
from gymctl.providers.card_http import GET_PAGE
from tests.billing import factories as bf
from tests.billing.cards import TERMINAL, connect_card_provider, connect_other_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import pending_attempt, presale_with_checkout
from tests.conftest import NOW

OPENING = NOW + timedelta(days=20)


def _verify(session, gym, provider, subscription, operator="owner", low_profile_id=None):
    return verification.verify_account(
        session,
        provider,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        low_profile_id=low_profile_id,
        operator_user_id=gym.owner.id if operator == "owner" else operator,
        now=NOW,
        cipher=TEST_CIPHER,
    )


def _repair(session, gym, subscription, expected, operator="owner"):
    return repair.repair_schedule(
        session,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        expected_next_charge_at=expected,
        operator_user_id=gym.owner.id if operator == "owner" else operator,
        now=NOW,
        cipher=TEST_CIPHER,
    )


def _payload(session, subscription) -> dict:
    method = session.get(PaymentMethod, subscription.payment_method_id)
    return json.loads(
        TEST_CIPHER.decrypt(
            method.payload_ciphertext,
            table="payment_methods",
            column="payload_ciphertext",
            row_id=str(method.id),
        )
    )


def _audits(session) -> list[AuditLog]:
    return list(session.scalars(select(AuditLog).where(AuditLog.target_type == "subscription")))


@pytest.fixture
def new_terminal_gym(session):
    """A gym whose terminal went live just now: a card saved now is not yet proven on it."""
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW)
    return gym


def test_an_exact_match_writes_the_terminal_and_is_audited_twice(
    session, new_terminal_gym, card_server, provider
):
    gym = new_terminal_gym
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    assert "verifiedAt" not in _payload(session, subscription)

    answer = _verify(session, gym, provider, subscription)

    assert answer["outcome"] == "verified"
    assert "reason" not in answer
    assert answer["data"]["item"]["card"]["accountCheck"] == "verified_on_current_terminal"
    assert _payload(session, subscription)["terminalNumber"] == TERMINAL.number
    admin, organization = sorted(_audits(session), key=lambda row: row.action)
    assert admin.action == "admin.billing.account_verification"
    assert admin.data["platformAdmin"] is True
    assert admin.data["body"] == {"lowProfileId": None}
    assert organization.action == "billing.account_verification"
    assert organization.actor_user_id == admin.actor_user_id == gym.owner.id
    assert organization.data["terminal"] == TERMINAL.number
    assert organization.data["deal"]
    again = _verify(session, gym, provider, subscription)
    assert again["outcome"] == "already_verified"


def test_a_card_verify_account_proved_passes_the_collectors_presale_card_age_rule(
    session, session_factory, new_terminal_gym, card_server, provider
):
    """spec B 8: a presale's card counts as on the terminal when saved 45 minutes after it went
    live, or when verify-account proved it there; the collector honours both."""
    gym = new_terminal_gym
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    session.commit()

    def collect():
        return collector.collect_subscription(
            session_factory,
            subscription.id,
            provider,
            now=OPENING,
            cipher=TEST_CIPHER,
            summary=collector.Summary(),
        )

    assert collect() == "blocked"
    _verify(session, gym, provider, subscription)
    session.commit()
    assert collect() == "charged"


def test_a_deal_unknown_on_the_current_terminal_is_not_verified(
    session, gym, card_server, provider
):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    connect_card_provider(session, gym, terminal=Terminal("2000", "new-account"))
    before = _payload(session, subscription)

    answer = _verify(session, gym, provider, subscription)

    assert (answer["outcome"], answer["reason"]) == (
        "not_verified",
        "deal_not_found_on_current_terminal",
    )
    assert _payload(session, subscription) == before


def test_a_deal_without_a_token_is_not_verified(session, gym, card_server, provider):
    open_page = provider.create_page(
        TERMINAL,
        PageRequest(
            "CreateTokenOnly", 0, "ILS", "x", "https://a.b/ok", "https://a.b/no", "https://a.b/w"
        ),
    )
    subscription, checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)
    checkout.page_id = open_page.page_id
    answer = _verify(session, gym, provider, subscription)
    assert (answer["outcome"], answer["reason"]) == ("not_verified", "deal_has_no_token")


def test_a_token_of_another_account_is_not_verified(session, gym, card_server, provider):
    _, other_checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)
    subscription, checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)
    page_id, other_checkout.page_id = other_checkout.page_id, None
    session.flush()  # page ids are unique: free it first
    checkout.page_id = page_id
    answer = _verify(session, gym, provider, subscription)
    assert (answer["outcome"], answer["reason"]) == (
        "not_verified",
        "token_belongs_to_another_account",
    )


def test_a_different_expiry_is_not_verified(session, gym, card_server, provider):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    token = _payload(session, subscription)["token"]
    method = bf.make_card(session, gym, token=token, expiry=date(2026, 12, 31))
    subscription.payment_method_id = method.id
    answer = _verify(session, gym, provider, subscription)
    assert (answer["outcome"], answer["reason"]) == ("not_verified", "expiry_differs")


def test_the_deal_reference_falls_back_to_the_body_for_older_checkouts(
    session, new_terminal_gym, card_server, provider
):
    gym = new_terminal_gym
    subscription, checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)
    page_id = checkout.page_id
    checkout.page_id, checkout.metadata_ = None, {}

    with pytest.raises(DomainError) as missing:
        _verify(session, gym, provider, subscription)
    assert (missing.value.code, missing.value.status) == ("billing_account_evidence_missing", 409)

    answer = _verify(session, gym, provider, subscription, low_profile_id=page_id)
    assert answer["outcome"] == "verified"


def test_no_token_only_checkout_is_evidence_missing(session, gym, card_server, provider):
    subscription, checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)
    session.delete(checkout)
    session.flush()
    with pytest.raises(DomainError) as refused:
        _verify(session, gym, provider, subscription)
    assert (refused.value.code, refused.value.status) == ("billing_account_evidence_missing", 409)
    assert _audits(session) == []
    assert card_server.requests(GET_PAGE) == 1  # the card's own save, nothing since


def test_a_transport_failure_is_provider_unavailable_with_nothing_changed(
    session, new_terminal_gym, card_server, provider
):
    gym = new_terminal_gym
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    before = _payload(session, subscription)
    card_server.inject(GET_PAGE, Fault.error)
    with pytest.raises(DomainError) as refused:
        _verify(session, gym, provider, subscription)
    assert (refused.value.code, refused.value.status) == ("billing_provider_unavailable", 409)
    assert _payload(session, subscription) == before
    assert _audits(session) == []


def test_an_operator_without_a_user_row_gets_403(session, gym, card_server, provider):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    for action in (
        lambda: _verify(session, gym, provider, subscription, operator=None),
        lambda: _repair(
            session, gym, subscription, subscription.next_charge_date, operator=uuid.uuid4()
        ),
    ):
        with pytest.raises(DomainError) as refused:
            action()
        assert (refused.value.code, refused.value.status) == ("operator_user_required", 403)
    assert _audits(session) == []


@pytest.mark.parametrize("stored", [None, NOW - timedelta(days=1)])
def test_a_missing_or_too_early_first_charge_moves_to_the_floor(session, gym, card_server, stored):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    subscription.next_charge_date = stored
    subscription.current_period_start, subscription.current_period_end = (
        NOW,
        NOW + timedelta(days=30),
    )
    subscription.sessions_remaining, subscription.credits = 10, 3

    answer = _repair(session, gym, subscription, stored)

    assert subscription.next_charge_date == OPENING  # max(opening day, subscription start)
    assert (subscription.current_period_start, subscription.current_period_end) == (None, None)
    assert (subscription.sessions_remaining, subscription.credits) == (None, None)
    item = answer["data"]["item"]
    assert item["nextChargeAt"] == OPENING.isoformat()
    assert not {"first_charge_missing", "first_charge_too_early", "presale_holds_period"} & {
        issue["code"] for issue in item["issues"]
    }
    admin, organization = sorted(_audits(session), key=lambda row: row.action)
    assert admin.data["body"] == {"expectedNextChargeAt": stored.isoformat() if stored else None}
    assert organization.actor_user_id == gym.owner.id


def test_a_presale_holding_a_period_on_a_right_date_is_cleared_and_keeps_its_date(
    session, gym, card_server
):
    """Readiness sends presale_holds_period to repair_schedule, whose repair "clears period,
    quota and credit fields a presale must not hold" (spec B 4.1): with the first charge
    already at its floor there is nothing to move, but those fields are still the anomaly, so
    the repair clears them and keeps the date (it refused billing_schedule_not_anomalous, and
    no door was left for what readiness reported)."""
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    subscription.next_charge_date = OPENING + timedelta(days=1)  # after the floor: kept
    subscription.current_period_start = NOW
    subscription.current_period_end = NOW + timedelta(days=30)
    subscription.sessions_remaining = 10

    answer = _repair(session, gym, subscription, OPENING + timedelta(days=1))

    assert subscription.next_charge_date == OPENING + timedelta(days=1)
    assert (subscription.current_period_start, subscription.current_period_end) == (None, None)
    assert subscription.sessions_remaining is None
    codes = {issue["code"] for issue in answer["data"]["item"]["issues"]}
    assert "presale_holds_period" not in codes
    assert len(_audits(session)) == 2


def test_repair_schedule_refusals_change_nothing(session, gym, card_server):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    cases = [
        (OPENING, OPENING, "billing_schedule_not_anomalous"),
        (NOW - timedelta(days=1), NOW, "billing_readiness_state_changed"),
        (None, OPENING, "billing_readiness_state_changed"),
    ]
    for stored, expected, code in cases:
        subscription.next_charge_date = stored
        with pytest.raises(DomainError) as refused:
            _repair(session, gym, subscription, expected)
        assert (refused.value.code, refused.value.status) == (code, 409)
        assert subscription.next_charge_date == stored
    assert _audits(session) == []


def test_a_settled_or_unresolved_first_charge_blocks_the_repair(session, gym, card_server):
    early = NOW - timedelta(minutes=10)
    subscription, _ = presale_with_checkout(
        session, gym, card_server, opening=NOW - timedelta(hours=1)
    )
    subscription.next_charge_date = early
    attempt = pending_attempt(session, subscription, now=NOW)
    with pytest.raises(DomainError) as pending:
        _repair(session, gym, subscription, early)
    assert (pending.value.code, pending.value.status) == ("billing_first_charge_unresolved", 409)
    attempt.status = TransactionStatus.completed
    with pytest.raises(DomainError) as settled:
        _repair(session, gym, subscription, early)
    assert settled.value.code == "billing_first_charge_unresolved"
    assert subscription.next_charge_date == early


def test_verify_account_needs_a_card_terminal_and_a_subscription_of_the_organization(
    session, gym, card_server, provider
):
    subscription, _ = presale_with_checkout(session, gym, card_server, opening=OPENING)
    other = bf.make_gym(session)
    with pytest.raises(DomainError) as elsewhere:
        _verify(session, other, provider, subscription, operator=gym.owner.id)
    assert (elsewhere.value.code, elsewhere.value.status) == ("subscription_not_found", 404)
    connect_other_provider(session, gym, "other")
    with pytest.raises(DomainError) as no_terminal:
        _verify(session, gym, provider, subscription)
    assert (no_terminal.value.code, no_terminal.value.status) == (
        "card_provider_not_configured",
        409,
    )
    assert _audits(session) == []


def test_the_checkouts_own_page_id_in_other_letter_case_is_that_deal(
    session, new_terminal_gym, card_server, provider
):
    """A page id is a GUID the provider compares letter case aside (card_http.page_result): the
    kept one pasted in capitals is the same deal, not billing_evidence_mismatch."""
    gym = new_terminal_gym
    subscription, checkout = presale_with_checkout(session, gym, card_server, opening=OPENING)

    answer = _verify(session, gym, provider, subscription, low_profile_id=checkout.page_id.upper())

    assert answer["outcome"] == "verified"
