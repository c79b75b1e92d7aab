"""`attempts.lock_subscription` on both engines: PostgreSQL's row locks in the fixed order
membership, then subscription (spec B 4.1); the embedded default's transaction already holds
SQLite's one write lock, so the subscription is only read."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl import ids
from gymctl.billing import attempts
from gymctl.db import is_postgres
from gymctl.models import Subscription
from gymctl.models.billing import SubscriptionStatus
from gymctl.providers.card import ChargeResult, Outcome
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _table(statement: str) -> str:
    return statement.split(" FROM ")[1].split()[0]


def test_locks_membership_then_subscription_on_postgresql_and_reads_once_on_sqlite(
    session, statements
):
    gym = bf.make_gym(session)
    subscription = bf.make_subscription(session, gym)
    session.commit()
    statements.clear()

    locked = attempts.lock_subscription(session, subscription.id)

    assert locked is subscription
    if is_postgres(session):
        assert [_table(s) for s in statements.text] == [
            "subscriptions",
            "memberships",
            "subscriptions",
        ]
        assert "FOR UPDATE" in statements.text[1]
        assert "FOR UPDATE" in statements.text[2]
    else:
        assert len(statements.text) == 1
        assert _table(statements.text[0]) == "subscriptions"


def test_lock_subscription_of_an_unknown_subscription_is_none(session):
    assert attempts.lock_subscription(session, ids.new_id()) is None


def test_apply_outcome_locks_in_order_on_postgresql_and_reads_the_ledger_row_first_on_sqlite(
    session, statements
):
    """Step 3 takes the subscription before the transaction on PostgreSQL (its look-up, the
    members waiting in its member's classes whose ids come first, as a settlement superseding
    the plan gives its seats up: test_locks_end_plan.py, the membership, the subscription, then
    the ledger row); the embedded default, already holding
    its one write lock, reads the ledger row and the subscription it names: two reads in
    all on the decline path."""
    gym = bf.make_gym(session)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    card = bf.make_card(session, gym, user=gym.member)
    subscription = bf.make_subscription(session, gym, payment_method_id=card.id)
    session.commit()
    due = subscription.next_charge_date
    began = attempts.begin_attempt(session, subscription.id, now=due, cipher=TEST_CIPHER)
    assert began.outcome == "started"
    session.commit()
    statements.clear()

    declined = ChargeResult(Outcome.declined, began.attempt["externalAttemptId"])
    applied = attempts.apply_outcome(session, began.transaction_id, declined, now=due)

    assert applied.outcome == "declined"
    assert set(statements.seen) == {"SELECT"}  # the writes wait for the flush
    reads = [_table(s) for s in statements.text]
    if is_postgres(session):
        assert reads == [
            "payment_transactions",
            "subscriptions",
            "memberships",  # the waiting members first (shared): none here
            "memberships",
            "subscriptions",
            "payment_transactions",
        ]
        assert "FOR SHARE" in statements.text[2]
        assert "FOR UPDATE" in statements.text[5]
    else:
        assert reads == ["payment_transactions", "subscriptions"]
    assert session.get(Subscription, subscription.id).status == SubscriptionStatus.debt
