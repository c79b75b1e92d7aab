"""A cash plan's term ends when nothing will lapse into debt (spec B 3): sold on pay-later terms
once its balance is paid and its period is over (a pay-later sale covers one term), and at zero
price at its paid-through day. `term_ended` read only card plans and `cash_lapsed` only rows
collected in cash with a price, so both stayed active for ever: the member kept access without
paying. The spec rolls only "zero-price open-ended card plans"; a cash plan renews by a payment
at the desk, and a free one owes none. Run through the real passes on a clock (the hourly
lifecycle, the daily collector sweep), and the period-end sweep after an outage.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import plans
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.billing.lifecycle import run_lifecycle
from gymctl.models.billing import CollectionMethod, PlanType, SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.retention.settlement import matured
from tests.billing import factories as bf
from tests.billing.cards import Sandbox
from tests.billing.passes import HOUR, MONTH, START, TICK, run_passes
from tests.conftest import NOW
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded  # the demo gym sells at the desk in cash and on pay-later

DAY = timedelta(days=1)


@pytest.fixture
def gym(session):
    return bf.make_gym(session, card_provider_since=NOW - timedelta(days=30))


def _sold(session, gym, *, price: int, method: CollectionMethod, due=None, **plan_fields):
    plan = bf.make_plan(
        session, gym.organization, PlanType.cash, price_in_cents=price, **plan_fields
    )
    subscription = plans.grant_plan(
        session,
        plan,
        gym.membership,
        method=method,
        documents=LocalDocumentProvider(),
        now=START,
        actor_user_id=gym.owner.id,
        payment_due_at=due,
    )
    session.commit()
    return subscription


def _paid_at_desk(session, gym, subscription, *, at):
    """Staff take the whole debt at the desk (`clear_debt_at_desk`), committed."""
    clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=subscription.id,
        actor_user_id=gym.owner.id,
        now=at,
        documents=LocalDocumentProvider(),
    )
    session.commit()


def test_a_cash_plan_sold_on_pay_later_terms_ends_once_paid_and_its_period_is_over(
    session, session_factory, gym, tmp_path
):
    """Its balance falls due, enters debt, and staff take it at the desk: active again, paid.
    The pass then ends it at its period end, as it ends a card plan sold on pay-later terms."""
    sandbox = Sandbox(tmp_path)
    due = START + 7 * DAY
    subscription = _sold(session, gym, price=8000, method=CollectionMethod.pay_later, due=due)
    assert subscription.cash_prepaid_through is None  # no paid-through day: nothing to lapse

    run_passes(session, session_factory, sandbox, since=START, until=due)
    assert (subscription.status, subscription.debt_reason) == (
        SubscriptionStatus.debt,
        "payment_due",
    )
    _paid_at_desk(session, gym, subscription, at=due + HOUR)
    assert (subscription.status, subscription.unpaid_amount_in_cents) == (
        SubscriptionStatus.active,
        0,
    )

    run_passes(session, session_factory, sandbox, since=due + TICK, until=START + MONTH - TICK)
    assert subscription.status == SubscriptionStatus.active
    run_passes(session, session_factory, sandbox, since=START + MONTH, until=START + 3 * MONTH)

    assert (subscription.status, subscription.ended_at) == (
        SubscriptionStatus.term_ended,
        START + MONTH,
    )
    assert subscription.debt_amount_in_cents == 0


@pytest.mark.parametrize("method", [CollectionMethod.cash, CollectionMethod.pay_later])
def test_a_free_cash_plan_ends_at_its_paid_through_day(
    session, session_factory, gym, method, tmp_path
):
    """Spec B 3 rolls "zero-price open-ended card plans"; a cash plan lapses into debt, and a
    zero price owes none: its term ends at its paid-through day (its period end on pay-later
    terms), with no debt opened. Staff sell it again for another free period."""
    sandbox = Sandbox(tmp_path)
    due = START if method == CollectionMethod.pay_later else None
    subscription = _sold(session, gym, price=0, method=method, due=due)
    assert subscription.unpaid_amount_in_cents == 0

    run_passes(session, session_factory, sandbox, since=START, until=START + MONTH - TICK)
    assert subscription.status == SubscriptionStatus.active
    run_passes(session, session_factory, sandbox, since=START + MONTH, until=START + 3 * MONTH)

    assert (subscription.status, subscription.ended_at) == (
        SubscriptionStatus.term_ended,
        START + MONTH,
    )
    assert (subscription.debt_since, subscription.debt_amount_in_cents) == (None, 0)
    assert subscription.current_period_end == START + MONTH  # not rolled on


def test_a_paid_cash_plan_in_cash_still_lapses_into_debt(session, session_factory, gym, tmp_path):
    """The other side: a priced cash plan owes its next month at its paid-through day."""
    subscription = _sold(session, gym, price=8000, method=CollectionMethod.cash)

    run_passes(session, session_factory, Sandbox(tmp_path), since=START, until=START + MONTH)

    assert subscription.status == SubscriptionStatus.debt
    assert (subscription.debt_reason, subscription.debt_since) == ("cash_lapsed", START + MONTH)


def test_a_notice_after_a_free_cash_plans_own_end_is_overtaken_whichever_job_runs_first(
    session, gym
):
    """s42: a notice cannot end a plan later than it ends by itself. The period-end sweep, after
    an outage, leaves the plan to the pass (`ends_by_itself` reads term_ended's own terms),
    which ends it and the notice with it."""
    subscription = _sold(session, gym, price=0, method=CollectionMethod.cash)
    ends = subscription.cash_prepaid_through
    give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        reason_code="moving_away",
        actor_user_id=gym.owner.id,
        effective_at=ends + 10 * DAY,
        now=START,
    )
    session.commit()
    back = ends + 15 * DAY

    assert matured(session, now=back) == []
    summary = run_lifecycle(session, now=back)
    session.commit()
    session.expire_all()

    assert summary["term_ended"] == 1
    assert (subscription.status, subscription.cancellation_reason) == (
        SubscriptionStatus.term_ended,
        "term_ended",
    )
    assert subscription.cancel_at_period_end is False


def test_a_lapsed_cash_plan_of_a_validity_paid_at_the_desk_runs_for_its_validity_again(
    session, session_factory, gym, tmp_path
):
    """Sold for 90 days' validity (no interval), it lapses into debt at its paid-through day;
    the debt paid at the desk grants the next term as the plan was sold (`plans.term_from`),
    90 days from the lapse, where it granted 30 whatever the plan said."""
    sandbox = Sandbox(tmp_path)
    subscription = _sold(
        session,
        gym,
        price=8000,
        method=CollectionMethod.cash,
        interval_months=None,
        validity_days=90,
    )
    lapse = START + 90 * DAY
    assert subscription.cash_prepaid_through == subscription.current_period_end == lapse

    run_passes(session, session_factory, sandbox, since=START, until=lapse)
    assert (subscription.status, subscription.debt_reason) == (
        SubscriptionStatus.debt,
        "cash_lapsed",
    )
    _paid_at_desk(session, gym, subscription, at=lapse + HOUR)

    assert subscription.status == SubscriptionStatus.active
    assert (subscription.current_period_start, subscription.current_period_end) == (
        lapse,
        lapse + 90 * DAY,
    )
    assert subscription.cash_prepaid_through == lapse + 90 * DAY
