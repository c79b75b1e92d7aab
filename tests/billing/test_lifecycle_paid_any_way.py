"""The lifecycle's term_ended and cash_lapsed rows cover every way a card plan can be paid
(spec B 3): a card plan sold at the desk for cash lapses into debt when it renews and ends its
term when it does not; one sold on pay-later terms ends once paid. Other billers' rows stay
theirs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dateutil.relativedelta import relativedelta

from gymctl.billing import plans
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models.billing import CollectionMethod, SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing.factories import make_plan, make_subscription
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

SOLD = NOW - relativedelta(months=1)  # a monthly plan sold then is paid through NOW


def _sold_at_desk(session, gym, plan, method=CollectionMethod.cash, **kwargs):
    return plans.grant_plan(
        session,
        plan,
        gym.membership,
        method=method,
        documents=LocalDocumentProvider(),
        now=SOLD,
        actor_user_id=gym.owner.id,
        **kwargs,
    )


def test_renewing_card_plan_sold_for_cash_lapses_into_debt_at_its_paid_through_day(session, gym):
    """ "cash plan lapsed (day 0 = cash prepaid-through date) -> debt (reason cash_lapsed)":
    a monthly card plan paid in cash owes its next month like a cash plan does."""
    subscription = _sold_at_desk(session, gym, make_plan(session, gym.organization))
    assert subscription.cash_prepaid_through == NOW

    assert run_lifecycle(session, now=NOW - timedelta(seconds=1))["cash_lapsed"] == 0
    summary = run_lifecycle(session, now=NOW)

    assert summary["cash_lapsed"] == 1
    assert subscription.status == SubscriptionStatus.debt
    assert (subscription.debt_reason, subscription.debt_since) == ("cash_lapsed", NOW)
    assert subscription.debt_amount_in_cents == subscription.price_in_cents


def test_card_plan_sold_for_cash_with_no_renewal_ahead_ends_its_term(session, gym):
    fixed = _sold_at_desk(session, gym, make_plan(session, gym.organization, open_ended=False))
    last = make_subscription(
        session,
        gym,
        plan=make_plan(session, gym.organization),
        payment_collection_method=CollectionMethod.cash,
        cash_prepaid_through=NOW,
        current_period_end=NOW,
        next_charge_date=None,
        renewal_end=NOW,
    )

    summary = run_lifecycle(session, now=NOW)

    assert (summary["term_ended"], summary["cash_lapsed"]) == (2, 0)
    for subscription in (fixed, last):
        assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, NOW)
        assert subscription.debt_amount_in_cents == 0


def test_card_plan_sold_on_pay_later_terms_ends_once_paid_and_owes_while_unpaid(session, gym):
    plan = make_plan(session, gym.organization)
    paid = _sold_at_desk(
        session, gym, plan, method=CollectionMethod.pay_later, payment_due_at=SOLD + timedelta(7)
    )
    paid.unpaid_amount_in_cents = 0  # the member paid the balance at the desk
    unpaid = make_subscription(
        session,
        gym,
        plan=make_plan(session, gym.organization),
        pay_later_due=NOW - timedelta(days=1),
        next_charge_date=None,
        current_period_end=NOW,
    )

    summary = run_lifecycle(session, now=NOW)

    assert paid.status == SubscriptionStatus.term_ended
    assert (unpaid.status, unpaid.debt_reason) == (SubscriptionStatus.debt, "payment_due")
    assert (summary["term_ended"], summary["payment_due"]) == (1, 1)
    assert run_lifecycle(session, now=NOW)["events"] == 0


def test_card_plans_of_other_billers_are_theirs_to_end(session, gym):
    rows = [
        make_subscription(
            session,
            gym,
            plan=make_plan(session, gym.organization),
            current_period_end=NOW - timedelta(days=1),
            payment_collection_method=method,
        )
        for method in (CollectionMethod.provider_direct, CollectionMethod.external)
    ]

    run_lifecycle(session, now=NOW)

    assert [row.status for row in rows] == [SubscriptionStatus.active] * 2
