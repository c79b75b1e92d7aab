"""A notice cannot end a plan later than it ends by itself (spec B 3: a pack or drop-in past its
validity expires, a gift past its coverage end is gift_ended, a card plan with no card and no
renewal ahead is term_ended; the period-end sweep ends a plan whose notice took effect).

- At the door: staff cannot set a notice on a pack, a drop-in or a gift effective after its
  validity's end (notice_effective_too_far, endsAt); at that end is allowed.
- In the lifecycle, for a notice that takes effect after the plan's own end anyway (a card
  plan's term, which a card saved later could have renewed; a notice stored before the door
  refused it): the plan ends at its own end, and the notice ends with it, overtaken, owing no
  refund. Before, the plan stayed active past its end until the notice matured, and the sweep
  then settled it with 0 refund days. A notice effective by the plan's end is still the sweep's."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import lifecycle
from gymctl.models import CancellationSettlement, OutboxEvent, Task
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention import codes
from gymctl.retention.settlement import period_end_sweep
from tests.billing.factories import make_plan, make_subscription
from tests.retention.conftest import give_notice, refused

pytestmark = pytest.mark.embedded  # the demo gym sells packs and gives notices: both engines

D = timedelta(days=1)


def _staff_notice(session, gym, subscription, effective):
    return give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        reason_code="moving_away",
        actor_user_id=gym.owner.id,
        effective_at=effective,
    )


def _names(session, subscription) -> list[str]:
    return list(
        session.scalars(
            select(OutboxEvent.name)
            .where(OutboxEvent.aggregate_id == str(subscription.id))
            .order_by(OutboxEvent.id)
        )
    )


@pytest.mark.parametrize(
    "plan_type", [PlanType.pack, PlanType.drop_in, PlanType.gift, PlanType.course]
)
def test_staff_cannot_set_a_notice_after_a_plan_of_fixed_validity_ends_by_itself(
    session, gym, plan_type
):
    subscription = make_subscription(session, gym, plan_type)
    ends = subscription.current_period_end

    error = refused(session, lambda: _staff_notice(session, gym, subscription, ends + D))

    assert error.code == codes.NOTICE_EFFECTIVE_TOO_FAR
    assert error.details["endsAt"] == ends.isoformat()
    _, case = _staff_notice(session, gym, subscription, ends)
    assert subscription.cancellation_effective_at == ends
    assert case.status == "open"


def test_a_card_plan_ending_its_term_before_its_notice_ends_it_then_and_overtakes_it(
    session, session_factory, gym, doors
):
    """No card to renew it and no renewal end: its term is over at its period end (a card saved
    before then would have renewed it, so the door allows a later notice). Staff set the notice
    a month after: the pass ends the plan at its period end, term_ended, and the notice with it,
    lost_no_contact; the sweep, when the notice would have matured, settles nothing."""
    subscription = make_subscription(session, gym)
    ends = subscription.current_period_end
    effective = ends + 30 * D
    _, case = _staff_notice(session, gym, subscription, effective)
    session.commit()

    assert lifecycle.run_lifecycle(session, now=ends - timedelta(hours=1))["term_ended"] == 0
    after = ends + timedelta(hours=1)
    summary = lifecycle.run_lifecycle(session, now=after)
    session.commit()

    assert (summary["term_ended"], summary["events"]) == (1, 2)
    session.expire_all()
    assert (subscription.status, subscription.ended_at) == (SubscriptionStatus.term_ended, after)
    assert (subscription.cancel_at_period_end, subscription.cancellation_effective_at) == (
        False,
        None,
    )
    assert subscription.cancellation_reason == "term_ended"
    assert subscription.retention_outcome == "lost_no_contact"
    assert (case.status, case.outcome) == ("closed", "lost_no_contact")
    assert session.get(Task, case.task_id).status == "done"
    assert _names(session, subscription)[-2:] == [
        "subscription.term_ended",
        "subscription.notice_overtaken",
    ]
    result = period_end_sweep(session_factory, doors, now=effective + timedelta(hours=1))
    assert result.cancelled == []
    assert session.scalar(select(func.count()).select_from(CancellationSettlement)) == 0
    assert lifecycle.run_lifecycle(session, now=effective + D)["events"] == 0


def test_a_pack_whose_stored_notice_outlasts_it_expires_at_its_validity_end(session, gym):
    """A notice stored past the pack's end (given before the door refused it): the pack expires
    at its validity's end all the same, its notice overtaken."""
    subscription = make_subscription(session, gym, PlanType.pack)
    ends = subscription.current_period_end
    _, case = _staff_notice(session, gym, subscription, ends)
    subscription.cancellation_effective_at = ends + 20 * D
    session.commit()

    summary = lifecycle.run_lifecycle(session, now=ends + timedelta(hours=1))
    session.commit()

    assert summary["expired"] == 1
    session.expire_all()
    assert subscription.status == SubscriptionStatus.expired
    assert (subscription.cancel_at_period_end, subscription.cancellation_reason) == (
        False,
        "expired",
    )
    assert (case.status, case.outcome) == ("closed", "lost_no_contact")


def test_a_notice_effective_by_the_plans_own_end_is_still_the_sweeps_to_settle(
    session, session_factory, gym, doors
):
    """At its own end or before, the notice matured first: the pass leaves the plan to the
    period-end sweep, which ends it by its notice."""
    subscription = make_subscription(session, gym, PlanType.gift)
    ends = subscription.current_period_end
    _, case = _staff_notice(session, gym, subscription, ends)
    session.commit()

    assert lifecycle.run_lifecycle(session, now=ends + timedelta(hours=1))["gift_ended"] == 0
    assert subscription.status == SubscriptionStatus.active
    result = period_end_sweep(session_factory, doors, now=ends + timedelta(hours=1))
    assert result.cancelled == [str(subscription.id)]
    session.expire_all()
    assert (subscription.status, subscription.cancellation_reason) == (
        SubscriptionStatus.cancelled,
        "moving_away",
    )
    assert case.status == "closed"


def test_a_free_plan_rolls_on_under_a_notice_effective_after_its_period(session, gym):
    """A zero-price open-ended card plan rolls at its period end (spec B 3); a notice a month
    later does not hold it back: it rolls, and the notice still runs."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0)
    subscription = make_subscription(session, gym, plan=free)
    ends = subscription.current_period_end
    _staff_notice(session, gym, subscription, ends + 20 * D)
    session.commit()

    assert lifecycle.run_lifecycle(session, now=ends + timedelta(hours=1))["rolled"] == 1
    session.expire_all()
    assert subscription.status == SubscriptionStatus.active
    assert subscription.current_period_start == ends
    assert subscription.cancellation_effective_at == ends + 20 * D
