"""Renewals charged at the provider whose answer died with the process (the crash tests)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from gymctl.billing import collector
from gymctl.models import PaymentTransaction
from gymctl.models.billing import PlanType
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW

DUE = NOW - timedelta(minutes=1)


def due_subscription(session, gym, sandbox, card=APPROVE, **fields):
    method = save_test_card(session, gym, sandbox.provider, sandbox.simulator, card)
    values = {
        "payment_method_id": method.id,
        "next_charge_date": DUE,
        "current_period_end": DUE,
        "current_period_start": DUE - timedelta(days=30),
        **fields,
    }
    subscription = bf.make_subscription(session, gym, PlanType.card, **values)
    session.commit()
    return subscription


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
