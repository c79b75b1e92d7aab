"""Protected transaction resolution (spec B 4.2) against the fake card provider: inspect makes
no provider call, reconcile never debits, confirm-no-debit checks the provider first and every
veto, late positive evidence reopens a dismissed attempt."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from gymctl.billing import attempts, no_debit, resolution
from gymctl.billing.accounts import saved_card
from gymctl.billing.no_debit import NoDebitConfirmation
from gymctl.errors import DomainError
from gymctl.models import PaymentMethod, Role, Task
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.providers.card import Terminal
from gymctl.providers.card_http import CHARGE, LOOKUP_CHARGE
from tests import factories
from tests.billing.cards import TERMINAL, connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.fake_card_provider import Fault
from tests.billing_ops.helpers import (
    audit_rows,
    card_subscription,
    forget_account,
    paid_charge,
    pending_attempt,
    sent_attempt,
)
from tests.conftest import NOW


def _confirmation(transaction, **overrides) -> NoDebitConfirmation:
    attempt = transaction.billing_attempt
    values = {
        "request_id": uuid.uuid4(),
        "provider_case_id": "CASE-4411",
        "confirmed_at": NOW - timedelta(minutes=1),
        "external_attempt_id": attempt["externalAttemptId"],
        "terminal": attempt["terminal"],
        "amount_in_cents": attempt["amountInCents"],
        "currency": attempt["currency"],
        "no_debit_occurred": True,
        "cannot_settle_later": True,
        **overrides,
    }
    return NoDebitConfirmation(**values)


def _confirm(session, gym, provider, transaction, actor=None, **overrides):
    return no_debit.confirm_no_debit(
        session,
        provider,
        TEST_CIPHER,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=(actor or gym.owner).id,
        confirmation=overrides.pop("confirmation", None) or _confirmation(transaction, **overrides),
        now=NOW,
    )


def _reconcile(session, gym, provider, transaction, now=NOW):
    return resolution.reconcile(
        session,
        provider,
        TEST_CIPHER,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=gym.owner.id,
        now=now,
    )


def _authorize(session, gym, transaction, actor=None):
    return no_debit.authorize_retry(
        session,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=(actor or gym.owner).id,
        now=NOW,
    )


def _snapshot(subscription):
    return (
        subscription.status,
        subscription.next_charge_date,
        subscription.current_period_end,
        subscription.collection_paused,
        subscription.retry_at,
    )


def test_inspect_types_the_state_and_hints_without_calling_the_provider(session, gym, card_server):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))

    view = resolution.inspect(session, gym.organization.id, transaction.id, now=NOW)

    assert view["state"] == "unresolved"
    assert view["actions"] == {
        "reconcile": True,
        "confirmNoDebit": True,
        "authorizeRetry": False,
        "settleContradiction": False,
    }
    assert view["attempt"]["externalAttemptId"] == transaction.billing_attempt["externalAttemptId"]
    assert card_server.requests(LOOKUP_CHARGE) == 0
    young = resolution.inspect(
        session, gym.organization.id, transaction.id, now=NOW - timedelta(minutes=5, seconds=-30)
    )
    assert young["state"] == "executing"
    assert young["actions"]["confirmNoDebit"] is False


def test_only_persisted_protected_attempts_are_accepted(session, gym, card_server):
    sale = paid_charge(session, gym, card_server)
    with pytest.raises(DomainError) as refused:
        resolution.inspect(session, gym.organization.id, sale.id, now=NOW)
    assert (refused.value.code, refused.value.status) == ("billing_attempt_not_protected", 409)
    with pytest.raises(DomainError) as missing:
        resolution.inspect(session, uuid.uuid4(), sale.id, now=NOW)
    assert (missing.value.code, missing.value.status) == ("transaction_not_found", 404)


def test_reconcile_applies_a_verified_success_and_never_debits(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    external = transaction.billing_attempt["externalAttemptId"]
    charges_before = card_server.requests(CHARGE)

    answer = _reconcile(session, gym, provider, transaction)

    assert answer["outcome"] == "charged"
    assert answer["state"] == "settled"
    assert transaction.status == TransactionStatus.completed
    assert subscription.status == SubscriptionStatus.active
    assert subscription.next_charge_date > NOW
    assert card_server.requests(CHARGE) == charges_before
    assert card_server.charge_count(external) == 1
    [audit] = audit_rows(session, "billing.transaction_reconciled")
    assert audit.actor_user_id == gym.owner.id
    assert audit.data["outcome"] == "charged"
    again = _reconcile(session, gym, provider, transaction)
    assert again["outcome"] == "already_resolved"


def test_reconcile_leaves_an_attempt_the_provider_never_saw(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    before = _snapshot(subscription)

    answer = _reconcile(session, gym, provider, transaction)

    assert answer["outcome"] == "no_verified_success"
    assert transaction.status == TransactionStatus.pending
    assert _snapshot(subscription) == before


def test_reconcile_refusals_change_nothing(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    young = pending_attempt(session, subscription, now=NOW - timedelta(seconds=30))
    with pytest.raises(DomainError) as executing:
        _reconcile(session, gym, provider, young)
    assert (executing.value.code, executing.value.status) == ("billing_attempt_executing", 409)

    card_server.inject(LOOKUP_CHARGE, Fault.error)
    with pytest.raises(DomainError) as down:
        _reconcile(session, gym, provider, young, now=NOW + timedelta(minutes=5))
    assert (down.value.code, down.value.status) == ("billing_provider_unavailable", 409)

    connect_card_provider(session, gym, terminal=Terminal("2000", "elsewhere"))
    forget_account(session, gym, TERMINAL.number)
    with pytest.raises(DomainError) as gone:
        _reconcile(session, gym, provider, young, now=NOW + timedelta(minutes=5))
    assert (gone.value.code, gone.value.status) == ("billing_original_account_unavailable", 409)
    assert young.status == TransactionStatus.pending
    assert audit_rows(session, "billing.transaction_reconciled") == []


def test_confirm_no_debit_cancels_with_dates_unchanged_and_holds_collection(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    dates = (subscription.next_charge_date, subscription.current_period_end)
    confirmation = _confirmation(transaction)

    answer = _confirm(session, gym, provider, transaction, confirmation=confirmation)

    assert (answer["outcome"], answer["replayed"]) == ("not_charged", False)
    assert transaction.status == TransactionStatus.cancelled
    assert transaction.billing_resolution["decision"] == "not_charged"
    assert "evidence" not in answer["resolution"]  # internal evidence stays hidden
    assert (subscription.next_charge_date, subscription.current_period_end) == dates
    assert subscription.collection_paused is True
    assert answer["state"] == "not_charged_paused"
    assert answer["actions"]["authorizeRetry"] is True
    [audit] = audit_rows(session, "billing.no_debit_confirmed")
    assert audit.actor_user_id == gym.owner.id
    replay = _confirm(session, gym, provider, transaction, confirmation=confirmation)
    assert replay["replayed"] is True
    assert len(audit_rows(session, "billing.no_debit_confirmed")) == 1
    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert (began.outcome, began.reason) == ("blocked", "collection_paused_by_owner")


def test_confirm_no_debit_with_authorize_retry_lets_the_collector_try_once_more(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))

    answer = _confirm(session, gym, provider, transaction, authorize_retry=True)

    assert answer["state"] == "not_charged_retry_authorized"
    assert subscription.collection_paused is False
    assert subscription.retry_at == NOW
    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)
    assert began.outcome == "started"


def test_a_verified_approval_vetoes_the_request_and_settles_normally(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)

    with pytest.raises(DomainError) as vetoed:
        _confirm(session, gym, provider, transaction)

    assert (vetoed.value.code, vetoed.value.status) == ("billing_known_success", 409)
    assert vetoed.value.audited is True  # the door keeps the settlement
    assert transaction.status == TransactionStatus.completed
    assert subscription.next_charge_date > NOW
    assert len(audit_rows(session, "billing.no_debit_vetoed")) == 1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("external_attempt_id", "another-attempt"),
        ("terminal", "2000"),
        ("amount_in_cents", 1),
        ("currency", "USD"),
    ],
)
def test_mismatched_evidence_cannot_be_dismissed(session, gym, card_server, provider, field, value):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    with pytest.raises(DomainError) as refused:
        _confirm(session, gym, provider, transaction, **{field: value})
    assert (refused.value.code, refused.value.status) == ("billing_evidence_mismatch", 409)
    assert transaction.status == TransactionStatus.pending
    assert card_server.requests(LOOKUP_CHARGE) == 1  # the provider is asked first (not_found)


@pytest.mark.parametrize(
    "overrides",
    [
        {"amount_in_cents": 1},
        {"no_debit_occurred": False},
        {"confirmed_at": NOW + timedelta(hours=1)},
    ],
)
def test_the_provider_is_asked_before_any_local_veto_and_its_approval_settles(
    session, gym, card_server, provider, overrides
):
    """Spec B 4.2: "The route checks the provider first: a verified approval vetoes the
    request and settles normally" - even a request a local veto would refuse."""
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    with pytest.raises(DomainError) as vetoed:
        _confirm(session, gym, provider, transaction, **overrides)
    assert (vetoed.value.code, vetoed.value.status) == ("billing_known_success", 409)
    assert transaction.status == TransactionStatus.completed
    assert len(audit_rows(session, "billing.no_debit_vetoed")) == 1


def test_known_success_confirmed_decline_and_executing_cannot_be_dismissed(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    young = pending_attempt(session, subscription, now=NOW - timedelta(seconds=30))
    with pytest.raises(DomainError) as executing:
        _confirm(session, gym, provider, young)
    assert (executing.value.code, executing.value.status) == ("billing_attempt_executing", 409)

    young.status = TransactionStatus.failed
    with pytest.raises(DomainError) as declined:
        _confirm(session, gym, provider, young)
    assert (declined.value.code, declined.value.status) == ("billing_confirmed_decline", 409)

    young.status = TransactionStatus.completed
    with pytest.raises(DomainError) as known:
        _confirm(session, gym, provider, young)
    assert (known.value.code, known.value.status) == ("billing_known_success", 409)
    assert audit_rows(session, "billing.no_debit_confirmed") == []


def test_an_unavailable_original_account_or_provider_cannot_be_dismissed(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    card_server.inject(LOOKUP_CHARGE, Fault.error)
    with pytest.raises(DomainError) as down:
        _confirm(session, gym, provider, transaction)
    assert (down.value.code, down.value.status) == ("billing_provider_unavailable", 409)

    connect_card_provider(session, gym, terminal=Terminal("2000", "elsewhere"))
    forget_account(session, gym, TERMINAL.number)
    with pytest.raises(DomainError) as gone:
        _confirm(session, gym, provider, transaction)
    assert (gone.value.code, gone.value.status) == ("billing_original_account_unavailable", 409)
    assert transaction.status == TransactionStatus.pending
    assert subscription.collection_paused is False


def test_attestations_and_an_explicit_utc_time_are_required(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    for overrides in (
        {"no_debit_occurred": False},
        {"cannot_settle_later": False},
    ):
        with pytest.raises(DomainError) as refused:
            _confirm(session, gym, provider, transaction, **overrides)
        assert (refused.value.code, refused.value.status) == ("billing_attestation_required", 422)
    for confirmed_at in (NOW + timedelta(minutes=1), NOW - timedelta(hours=1)):
        with pytest.raises(DomainError) as refused:
            _confirm(session, gym, provider, transaction, confirmed_at=confirmed_at)
        assert refused.value.code == "billing_confirmation_time_invalid"
    assert transaction.status == TransactionStatus.pending


def test_only_the_owner_may_confirm_no_debit(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    manager = factories.user(session)
    factories.membership(session, user=manager, organization=gym.organization, role=Role.admin)
    with pytest.raises(DomainError) as refused:
        _confirm(session, gym, provider, transaction, actor=manager)
    assert (refused.value.code, refused.value.status) == ("owner_required", 403)
    assert transaction.status == TransactionStatus.pending


def test_a_reused_request_id_for_another_confirmation_is_refused(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    first = _confirmation(transaction)
    _confirm(session, gym, provider, transaction, confirmation=first)
    with pytest.raises(DomainError) as refused:
        _confirm(
            session,
            gym,
            provider,
            transaction,
            request_id=first.request_id,
            amount_in_cents=first.amount_in_cents + 1,
        )
    assert (refused.value.code, refused.value.status) == ("billing_request_id_reused", 409)


@pytest.mark.parametrize(
    "overrides",
    [
        {"provider_case_id": "CASE-9999"},
        {"confirmed_at": NOW - timedelta(minutes=2)},
        {"authorize_retry": True},
    ],
)
def test_a_replayed_request_id_with_other_evidence_is_a_conflict_not_a_replay(
    session, gym, card_server, provider, overrides
):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    first = _confirmation(transaction)
    _confirm(session, gym, provider, transaction, confirmation=first)
    assert _confirm(session, gym, provider, transaction, confirmation=first)["replayed"] is True
    before = (dict(transaction.billing_resolution), _snapshot(subscription))
    with pytest.raises(DomainError) as refused:
        _confirm(session, gym, provider, transaction, request_id=first.request_id, **overrides)
    assert (refused.value.code, refused.value.status) == ("billing_request_id_reused", 409)
    assert (transaction.billing_resolution, _snapshot(subscription)) == before


def test_a_request_id_used_for_one_attempt_is_a_conflict_on_another(
    session, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server)
    first = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    used = _confirmation(first)
    _confirm(session, gym, provider, first, confirmation=used)
    other_member = card_subscription(session, gym, card_server, membership=_other(session, gym))
    second = pending_attempt(session, other_member, now=NOW - timedelta(minutes=5))
    with pytest.raises(DomainError) as refused:
        _confirm(session, gym, provider, second, request_id=used.request_id)
    assert (refused.value.code, refused.value.status) == ("billing_request_id_reused", 409)
    assert second.status == TransactionStatus.pending


def _other(session, gym):
    user = factories.user(session)
    return factories.membership(session, user=user, organization=gym.organization)


@pytest.mark.embedded
def test_late_positive_evidence_moves_it_back_to_pending_and_holds_collection(
    session, gym, card_server, provider
):
    """The old request settled after all (it was still on its way): back to pending, audit,
    alert, collection held again; the next reconcile settles it."""
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    _confirm(session, gym, provider, transaction, authorize_retry=True)
    card = saved_card(session.get(PaymentMethod, subscription.payment_method_id), TEST_CIPHER)
    provider.charge_token(
        TERMINAL,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=transaction.amount_in_cents,
        currency="ILS",
        unique_id=transaction.billing_attempt["externalAttemptId"],
    )

    answer = _reconcile(session, gym, provider, transaction)

    assert answer["outcome"] == "late_positive_evidence"
    assert transaction.status == TransactionStatus.pending
    assert subscription.collection_paused is True
    assert len(audit_rows(session, "billing.late_positive_evidence")) == 1
    task = session.query(Task).filter_by(subject_id=str(transaction.id)).one()
    assert task.priority == "urgent"
    settled = _reconcile(session, gym, provider, transaction)
    assert settled["outcome"] == "charged"


def test_authorize_retry_resumes_a_paused_obligation_once(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    with pytest.raises(DomainError) as early:
        _authorize(session, gym, transaction)
    assert (early.value.code, early.value.status) == ("billing_retry_not_available", 409)
    _confirm(session, gym, provider, transaction)
    with pytest.raises(DomainError) as member:
        _authorize(session, gym, transaction, actor=gym.member)
    assert (member.value.code, member.value.status) == ("owner_required", 403)

    answer = _authorize(session, gym, transaction)

    assert answer["outcome"] == "retry_authorized"
    assert (subscription.collection_paused, subscription.retry_at) == (False, NOW)
    again = _authorize(session, gym, transaction)
    assert again["outcome"] == "already_authorized"
    assert len(audit_rows(session, "billing.retry_authorized")) == 1


def test_the_request_id_must_be_a_uuid4(session, gym, card_server, provider):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    with pytest.raises(DomainError) as refused:
        _confirm(session, gym, provider, transaction, request_id=uuid.uuid1())
    assert (refused.value.code, refused.value.status) == ("request_id_invalid", 422)
    assert transaction.status == TransactionStatus.pending
    assert card_server.requests(LOOKUP_CHARGE) == 0


def test_reconcile_asks_the_original_account_after_the_terminal_changed(
    session, gym, card_server, provider
):
    """The collector leaves an attempt of a replaced terminal to an operator; reconcile asks
    the account that sent it (its credentials are kept) and settles the verified success."""
    subscription = card_subscription(session, gym, card_server)
    transaction = sent_attempt(session, subscription, card_server)
    connect_card_provider(session, gym, terminal=Terminal("2000", "elsewhere"))
    view = resolution.inspect(session, gym.organization.id, transaction.id, now=NOW)
    assert view["actions"]["reconcile"] is True

    answer = _reconcile(session, gym, provider, transaction)

    assert answer["outcome"] == "charged"
    assert card_server.received(LOOKUP_CHARGE)[-1]["TerminalNumber"] == 1000


def test_releasing_a_no_debit_hold_never_lifts_the_owners_own_pause(
    session, gym, card_server, provider
):
    """The attempt began before the owner paused collection: confirm-no-debit with a retry,
    or a later authorize-retry, releases only the hold it put, never the owner's pause."""
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    subscription.collection_paused = True  # the owner's own decision, after the attempt began
    session.commit()
    answer = _confirm(session, gym, provider, transaction, authorize_retry=True)
    assert answer["collectionHeld"] is True
    assert subscription.collection_paused is True
    again = _authorize(session, gym, transaction)
    assert again["outcome"] == "already_authorized"
    assert subscription.collection_paused is True
