"""After an outage, the period-end sweep may run before the hourly pass: a plan whose own end came
before its notice is still the lifecycle's (s42: "a notice cannot end a plan later than it ends
by itself"; spec B 3). The sweep used to take it as a matured notice: cancelled at the notice's
date with 0 refund days, where the pass would have ended it by itself (term_ended, expired,
gift_ended) and closed the notice as overtaken. The sweep now leaves every row the pass's own
ends would move at that instant, so the outcome no longer depends on which job runs first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import lifecycle
from gymctl.models import CancellationSettlement
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention.settlement import matured, period_end_sweep
from tests.billing.factories import make_plan, make_subscription
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded  # the demo gym sells packs and gives notices: both engines

D = timedelta(days=1)
H = timedelta(hours=1)


def _noticed(session, gym, subscription, effective):
    _, case = give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        reason_code="moving_away",
        actor_user_id=gym.owner.id,
        effective_at=subscription.current_period_end,
    )
    subscription.cancellation_effective_at = effective  # stored before the door refused it
    session.commit()
    return case


def _settlements(session) -> int:
    return session.scalar(select(func.count()).select_from(CancellationSettlement))


@pytest.mark.parametrize(
    ("plan_type", "ending"),
    [
        (PlanType.card, SubscriptionStatus.term_ended),
        (PlanType.pack, SubscriptionStatus.expired),
        (PlanType.gift, SubscriptionStatus.gift_ended),
    ],
)
def test_the_sweep_first_leaves_a_plan_that_ended_by_itself_before_its_notice(
    session, session_factory, gym, doors, plan_type, ending
):
    subscription = make_subscription(session, gym, plan_type)
    effective = subscription.current_period_end + 10 * D
    case = _noticed(session, gym, subscription, effective)
    back = effective + 5 * D  # the daemons were down from before the plan's end until now

    assert matured(session, now=back) == []
    result = period_end_sweep(session_factory, doors, now=back)

    assert result.cancelled == []
    assert _settlements(session) == 0
    session.expire_all()
    assert subscription.status == SubscriptionStatus.active
    summary = lifecycle.run_lifecycle(session, now=back)
    session.commit()
    session.expire_all()
    assert summary[ending.value] == 1
    assert (subscription.status, subscription.cancellation_reason) == (ending, ending.value)
    assert subscription.cancel_at_period_end is False
    assert (case.status, case.outcome) == ("closed", "lost_no_contact")
    assert period_end_sweep(session_factory, doors, now=back + H).cancelled == []
    assert _settlements(session) == 0


def test_a_free_plan_rolls_first_and_its_notice_is_settled_after(
    session, session_factory, gym, doors
):
    """A free open-ended plan rolls on under a later notice: the sweep leaves it until the pass
    has rolled it, then settles the notice, as when the pass ran first."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    subscription = make_subscription(session, gym, plan=free)
    ends = subscription.current_period_end
    _noticed(session, gym, subscription, ends + 10 * D)
    back = ends + 15 * D

    assert period_end_sweep(session_factory, doors, now=back).cancelled == []
    assert lifecycle.run_lifecycle(session, now=back)["rolled"] == 1
    session.commit()
    result = period_end_sweep(session_factory, doors, now=back)

    assert result.cancelled == [str(subscription.id)]
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.ended_at == ends + 10 * D
    assert subscription.current_period_start == ends


def test_a_notice_effective_by_the_plans_own_end_is_still_settled_by_the_sweep_first(
    session, session_factory, gym, doors
):
    """The other side of the rule: a notice at the plan's end matured first; the sweep, run
    before the pass after the outage, settles it."""
    subscription = make_subscription(session, gym)
    ends = subscription.current_period_end
    _noticed(session, gym, subscription, ends)

    result = period_end_sweep(session_factory, doors, now=ends + 5 * D)

    assert result.cancelled == [str(subscription.id)]
    assert _settlements(session) == 1
    assert lifecycle.run_lifecycle(session, now=ends + 5 * D)["term_ended"] == 0
