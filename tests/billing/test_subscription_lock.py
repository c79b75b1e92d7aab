"""`attempts.lock_subscription` on both engines: PostgreSQL's row locks in the fixed order
membership, then subscription (spec B 4.1); the embedded default's transaction already holds
SQLite's one write lock, so the subscription is only read."""

from __future__ import annotations

import pytest

from gymctl import ids
from gymctl.billing import attempts
from gymctl.db import is_postgres
from tests.billing import factories as bf

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
