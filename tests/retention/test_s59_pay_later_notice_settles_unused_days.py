"""A pay-later plan ended by a notice before its term's end (s55/s56 noticed it, left it).

Spec B 1: "matured cancellations settle refunds owed for the unused paid period"; spec B 8
prorates every settlement alike, whatever collected the money: "floor(charge cents x ceil(days
from effective date to period end) / 365)". A card member paid up front and gets those days
back; a member on pay-later terms, whose balance was still unpaid when the notice matured,
owed the whole balance (the due day's debt took all of it) and, once paid, nothing returned
the unused days. The settlement takes their share off the balance instead: the member owes
what a card member keeps paid.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import lifecycle
from gymctl.models import CancellationSettlement, PaymentTransaction, Task
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.mail import read_mailbox
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import make_plan, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import pay_at_desk, staff_notice

D = timedelta(days=1)
PRICE = 36500  # a year's term: a day is 100 cents
pytestmark = pytest.mark.embedded  # the demo gym sells on pay-later terms at the desk


def _pay_later_year(session, gym, *, due):
    plan = make_plan(
        session, gym.organization, PlanType.cash, price_in_cents=PRICE, interval_months=12
    )
    return make_subscription(
        session, gym, plan=plan, pay_later_due=due, current_period_end=NOW + 365 * D
    )


def test_the_unused_days_come_off_a_pay_later_balance_not_yet_due(
    session, session_factory, gym, doors, mailbox
):
    """Ended on day 65 of 365 (300 days unused), due on day 90: the balance falls by
    36500 x 300 / 365 = 30000, so the due day's debt and the desk take 6500, as a card
    member paying 36500 would have got 30000 back."""
    subscription = _pay_later_year(session, gym, due=NOW + 90 * D)
    staff_notice(session, gym, subscription, NOW + 65 * D)
    session.commit()

    assert period_end_sweep(session_factory, doors, now=NOW + 65 * D).cancelled == [
        str(subscription.id)
    ]

    session.expire_all()
    settled = session.scalar(select(CancellationSettlement))
    assert (settled.days, settled.amount_in_cents, settled.mode, settled.execution) == (
        300,
        30000,
        "balance",
        "balance_reduced",
    )
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.unpaid_amount_in_cents == PRICE - 30000
    assert session.scalar(select(Task).where(Task.kind == "manual_refund")) is None
    [email] = read_mailbox(mailbox)
    body = email.get_content()
    assert "The unused part of your term, " in body
    assert "300.00 ILS, was taken off what you owe." in body

    assert lifecycle.run_lifecycle(session, now=NOW + 90 * D)["payment_due_ended"] == 1
    session.commit()
    session.expire_all()
    assert subscription.debt_amount_in_cents == 6500
    pay_at_desk(session, gym, subscription, now=NOW + 91 * D)
    paid = session.scalars(
        select(PaymentTransaction.amount_in_cents).where(
            PaymentTransaction.subscription_id == subscription.id
        )
    ).all()
    assert paid == [6500]
    assert subscription.unpaid_amount_in_cents == 0


def test_the_unused_days_come_off_a_pay_later_debt_already_open(
    session, session_factory, gym, doors
):
    """Due on day 30, ended by notice on day 33, within the debt's grace: the open debt is
    the term's balance, and it falls by the unused days' share as the balance does."""
    subscription = _pay_later_year(session, gym, due=NOW + 30 * D)
    staff_notice(session, gym, subscription, NOW + 33 * D)
    session.commit()
    assert lifecycle.run_lifecycle(session, now=NOW + 30 * D)["payment_due"] == 1
    session.commit()

    period_end_sweep(session_factory, doors, now=NOW + 33 * D)

    session.expire_all()
    settled = session.scalar(select(CancellationSettlement))
    assert (settled.days, settled.amount_in_cents) == (332, PRICE * 332 // 365)
    owed = PRICE - PRICE * 332 // 365
    assert (subscription.unpaid_amount_in_cents, subscription.debt_amount_in_cents) == (owed, owed)
    pay_at_desk(session, gym, subscription, now=NOW + 34 * D)
    [paid] = session.scalars(
        select(PaymentTransaction.amount_in_cents).where(
            PaymentTransaction.subscription_id == subscription.id
        )
    ).all()
    assert paid == owed


def test_a_pay_later_balance_paid_before_the_notice_is_refunded_as_cash(
    session, session_factory, gym, doors
):
    """Paid at the desk before the notice matured: the unused days are a refund owed, the
    owner's task (unchanged by the fix: the paid balance is the settlement's charge)."""
    subscription = _pay_later_year(session, gym, due=NOW + 90 * D)
    staff_notice(session, gym, subscription, NOW + 65 * D)
    session.commit()
    pay_at_desk(session, gym, subscription, now=NOW + 10 * D)

    period_end_sweep(session_factory, doors, now=NOW + 65 * D)

    session.expire_all()
    settled = session.scalar(select(CancellationSettlement))
    assert (settled.amount_in_cents, settled.mode, settled.execution) == (
        30000,
        "manual",
        "owner_task",
    )
    assert subscription.unpaid_amount_in_cents == 0
