"""Collection holds (spec B 3, 4.2, 6): late positive evidence holds collection again, the
alert says why, and the attempt's own settlement releases the hold (back to the owner's own
pause as it stood); a held subscription alerts once per state change, not every pass."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta

from gymctl.billing import attempts, collector, no_debit, resolution
from gymctl.billing.accounts import saved_card
from gymctl.errors import DomainError
from gymctl.models import PaymentMethod, Subscription
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card_http import CHARGE
from tests.billing.cards import TERMINAL
from tests.billing.factories import TEST_CIPHER
from tests.billing_ops.helpers import audit_rows, card_subscription, dismiss, pending_attempt
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

MINUTE = timedelta(minutes=1)


def _reconcile(session, gym, provider, transaction, at=NOW):
    return resolution.reconcile(
        session,
        provider,
        TEST_CIPHER,
        organization_id=gym.organization.id,
        transaction_id=transaction.id,
        actor_user_id=gym.owner.id,
        now=at,
    )


def _settles_late(session, provider, subscription, transaction) -> None:
    """The dismissed request reaches the provider after all and is charged."""
    card = saved_card(session.get(PaymentMethod, subscription.payment_method_id), TEST_CIPHER)
    provider.charge_token(
        TERMINAL,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=transaction.amount_in_cents,
        currency="ILS",
        unique_id=transaction.billing_attempt["externalAttemptId"],
    )


def _reopened(session, gym, card_server, provider, *, owner_paused=False, retry=True):
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    subscription.collection_paused = owner_paused
    dismiss(session, provider, gym, transaction, retry=retry)
    _settles_late(session, provider, subscription, transaction)
    answer = _reconcile(session, gym, provider, transaction)
    assert answer["outcome"] == "late_positive_evidence"
    return subscription, transaction, answer


def test_late_evidence_hold_says_why_and_the_settlement_releases_it(
    session, gym, card_server, provider
):
    """ "late positive evidence -> pending; audit and alert; collection held again": held until
    the reopened attempt settles, then the next renewal is collected as usual."""
    subscription, transaction, answer = _reopened(session, gym, card_server, provider)
    assert subscription.collection_paused is True
    assert answer["collectionHeldBecause"] == "collection_held:late_positive_evidence"

    settled = _reconcile(session, gym, provider, transaction)

    assert settled["outcome"] == "charged"
    assert transaction.status == TransactionStatus.completed
    assert (subscription.collection_paused, subscription.collection_hold) == (False, None)
    assert settled["collectionHeld"] is False
    [released] = audit_rows(session, "billing.collection_released")
    assert released.data["hold"] == "late_positive_evidence"
    # renewals go on: the next one is collected when due
    renewal = subscription.next_charge_date
    began = attempts.begin_attempt(session, subscription.id, now=renewal, cipher=TEST_CIPHER)
    assert began.outcome == "started"
    with pytest.raises(DomainError) as settled_already:
        no_debit.authorize_retry(
            session,
            organization_id=gym.organization.id,
            transaction_id=transaction.id,
            actor_user_id=gym.owner.id,
            now=NOW,
        )
    assert settled_already.value.code == "billing_retry_not_available"


def test_release_restores_the_owners_own_pause_not_more(session, gym, card_server, provider):
    subscription, transaction, _ = _reopened(session, gym, card_server, provider, owner_paused=True)

    _reconcile(session, gym, provider, transaction)

    assert (subscription.collection_paused, subscription.collection_hold) == (True, None)
    began = attempts.begin_attempt(
        session, subscription.id, now=subscription.next_charge_date, cipher=TEST_CIPHER
    )
    assert (began.outcome, began.reason) == ("blocked", "collection_paused_by_owner")


def test_the_collector_names_the_late_evidence_hold_while_it_stands(
    session, session_factory, gym, card_server, provider
):
    """An attempt that could not reopen (a newer attempt held the subscription) keeps the hold;
    the collector's block names its cause instead of blaming the owner."""
    subscription = card_subscription(session, gym, card_server)
    transaction = pending_attempt(session, subscription, now=NOW - timedelta(minutes=5))
    dismiss(session, provider, gym, transaction, retry=True)
    _settles_late(session, provider, subscription, transaction)
    subscription.collection_hold = attempts.LATE_POSITIVE_EVIDENCE
    subscription.collection_paused = True
    session.commit()

    began = attempts.begin_attempt(session, subscription.id, now=NOW, cipher=TEST_CIPHER)

    assert (began.outcome, began.alert) == ("blocked", "collection_held:late_positive_evidence")


def _pass(session_factory, provider, at):
    return collector.catch_up(session_factory, provider, now=at, cipher=TEST_CIPHER)


def test_a_held_subscription_alerts_once_per_state_change_not_every_pass(
    session, session_factory, gym, card_server, provider
):
    subscription = card_subscription(session, gym, card_server, collection_paused=True)
    session.commit()

    first = _pass(session_factory, provider, NOW)
    second = _pass(session_factory, provider, NOW + MINUTE)
    third = _pass(session_factory, provider, NOW + 2 * MINUTE)

    assert [alert["reason"] for alert in first.alerts] == ["collection_paused_by_owner"]
    assert (second.alerts, third.alerts) == ([], [])
    assert (second.blocked, third.blocked) == (1, 1)  # still counted, only not paged again
    # a state change: collection resumes and charges, then the owner pauses again
    row = session.get(Subscription, subscription.id)
    row.collection_paused = False
    session.commit()
    assert _pass(session_factory, provider, NOW + 3 * MINUTE).charged == 1
    assert card_server.requests(CHARGE) == 1
    session.expire_all()
    row = session.get(Subscription, subscription.id)
    row.collection_paused = True
    session.commit()
    due = row.next_charge_date
    assert due > NOW + relativedelta(days=20)
    again = _pass(session_factory, provider, due)
    assert [alert["reason"] for alert in again.alerts] == ["collection_paused_by_owner"]
    assert _pass(session_factory, provider, due + MINUTE).alerts == []
