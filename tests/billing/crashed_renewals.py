"""Renewals charged at the provider whose answer died with the process (the crash tests)."""

from __future__ import annotations

from sqlalchemy import select

from gymctl.billing import collector
from gymctl.models import PaymentTransaction
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_collector import due_subscription  # noqa: F401 (the crash tests')


def rows(session_factory, subscription_id):
    with session_factory() as s:
        return s.scalars(
            select(PaymentTransaction)
            .where(PaymentTransaction.subscription_id == subscription_id)
            .order_by(PaymentTransaction.created_at)
        ).all()


def fresh(session_factory, model, row_id):
    with session_factory() as s:
        return s.get(model, row_id)


def provider_charges(sandbox, rows_):
    ids_ = {(r.billing_attempt or {}).get("externalAttemptId") for r in rows_}
    return [c for c in sandbox.simulator.charges() if c.unique_id in ids_]


def recover(session_factory, sandbox, at):
    return collector.recover(session_factory, sandbox.provider, now=at, cipher=TEST_CIPHER)
