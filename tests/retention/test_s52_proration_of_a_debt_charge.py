"""The refund of a notice settled after a debt was paid never takes back more than the period
that charge paid (spec B 1, 3, 8).

Spec B 8: "Cancellation-settlement proration | floor(charge cents x ceil(days from effective
date to period end) / 365)"; spec B 1: "matured cancellations settle refunds owed for the unused
paid period"; docs/decisions.md (retention): "Refund owed = floor(last completed charge x
ceil(days from the effective date to the period end) / 365), capped at the charge (and what is
left of it)".

A reported suspicion: a debt that grows over several periods (`debt.open_debt` adds to an open
debt), paid in one charge that grants one period, would be prorated whole over that period.
It cannot arise: every path that opens a debt opens it on a plan not in debt yet (a decline
through `attempts.leave_unpaid`, the lifecycle's cash_lapsed and payment_due on active rows), a
plan in debt is not renewed (its period end stays; the collector retries the same debt), and
a debt paid grants exactly the period it stood for (`attempts.grant_period`), whose price it
is. The periods after it are each charged on their own. So "charge cents" is one period's
price. This test walks a debt past two period ends (a long grace) and pins that.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta
from sqlalchemy import select

from gymctl.billing import collector, lifecycle
from gymctl.models import CancellationSettlement, PaymentTransaction
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import Doors, period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import APPROVE, DECLINE, Sandbox, save_test_card
from tests.billing.factories import TEST_CIPHER
from tests.conftest import NOW
from tests.retention.conftest import staff_notice

pytestmark = pytest.mark.embedded  # the demo gym renews monthly card plans: both engines

HOUR = timedelta(hours=1)
DUE = NOW  # the renewal declined: day 0 of the debt


@pytest.fixture
def sandbox(tmp_path) -> Sandbox:
    return Sandbox(tmp_path)


def _collect(session_factory, sandbox, subscription, at):
    return collector.collect_subscription(
        session_factory,
        subscription.id,
        sandbox.provider,
        now=at,
        cipher=TEST_CIPHER,
        summary=collector.Summary(),
    )


def test_a_debt_carried_past_two_period_ends_is_one_periods_price_and_prorated_as_one(
    session, session_factory, gym, sandbox, mailer
):
    bf.make_billing_settings(session, gym.organization, billing_grace_days=90)
    declined = save_test_card(session, gym, sandbox.provider, sandbox.simulator, DECLINE)
    subscription = bf.make_subscription(
        session, gym, payment_method_id=declined.id, now=DUE - relativedelta(months=1)
    )
    price = subscription.price_in_cents
    session.commit()
    assert _collect(session_factory, sandbox, subscription, DUE) == "declined"

    for months in (1, 2):  # two more period ends pass in debt; every retry declines
        at = DUE + relativedelta(months=months) + HOUR
        lifecycle.run_lifecycle(session, now=at)
        session.commit()
        assert _collect(session_factory, sandbox, subscription, at) == "declined"
        session.expire_all()
        assert subscription.status == SubscriptionStatus.debt
        assert subscription.debt_amount_in_cents == price  # never grows

    subscription.payment_method_id = save_test_card(
        session, gym, sandbox.provider, sandbox.simulator, APPROVE
    ).id
    session.commit()
    paid_at = DUE + relativedelta(months=2) + HOUR + timedelta(days=1)  # the next retry
    while _collect(session_factory, sandbox, subscription, paid_at) == "charged":
        pass  # the debt, then each period since, one charge each
    session.expire_all()
    charges = session.scalars(
        select(PaymentTransaction.amount_in_cents).where(
            PaymentTransaction.status == TransactionStatus.completed
        )
    ).all()
    assert charges == [price, price, price]
    assert subscription.current_period_start == DUE + relativedelta(months=2)

    effective = paid_at + timedelta(days=10)
    staff_notice(session, gym, subscription, effective)
    session.commit()
    doors = Doors(sandbox.provider, TEST_CIPHER, LocalDocumentProvider(), mailer)
    assert period_end_sweep(session_factory, doors, now=effective).cancelled == [
        str(subscription.id)
    ]
    settled = session.scalar(select(CancellationSettlement))
    days = -(-(subscription.current_period_end - effective) // timedelta(days=1))
    assert (settled.charge_amount_in_cents, settled.days) == (price, days)
    assert settled.amount_in_cents == price * days // 365
