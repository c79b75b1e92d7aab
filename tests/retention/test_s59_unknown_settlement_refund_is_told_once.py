"""A settlement's card refund left at an unknown outcome (the card provider answered neither
yes nor no) is told to the gym's owner, once (s56 noticed it, left it).

Spec B 1: "matured cancellations settle refunds owed for the unused paid period"; spec B 7: "A
refund thrown during cancellation settlement becomes a high-priority owner task"; spec B 8:
"Refund task / notice: owner task due in 3 days". The sweep sent the stored refund again each
pass, for ever if the provider never answered, and nobody was told that a member might be owed
money. As an attempt the provider leaves unanswered (billing's attempt_unanswered, told once
past UNANSWERED_ALERT_AFTER), the owner gets one high-priority
payment_follow_up task an hour on (not a manual_refund: a refund the provider may have made
must not be made twice), not one a pass; it is done once the refund's outcome is known.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.attempts import UNANSWERED_ALERT_AFTER
from gymctl.models import CancellationSettlement, Task
from gymctl.providers.card_http import REFUND
from gymctl.retention.settlement import period_end_sweep
from gymctl.tasks import mark_done
from tests.billing.fake_card_provider import Fault
from tests.conftest import NOW
from tests.retention.conftest import paid_card_subscription, staff_notice

D = timedelta(days=1)
EFFECTIVE = NOW + 50 * D
pytestmark = pytest.mark.embedded  # the demo gym's members pay by card


def _follow_ups(session) -> list[Task]:
    session.expire_all()
    return list(session.scalars(select(Task).where(Task.kind == "payment_follow_up")))


def _stuck_refund(session, session_factory, gym, card_server, doors):
    """A notice settled at EFFECTIVE whose refund the provider never answers."""
    subscription, _ = paid_card_subscription(
        session, gym, card_server, current_period_end=NOW + 100 * D
    )
    staff_notice(session, gym, subscription, EFFECTIVE)
    session.commit()
    card_server.inject(REFUND, Fault.error, times=None)
    period_end_sweep(session_factory, doors, now=EFFECTIVE)
    session.expire_all()
    settlement = session.scalar(select(CancellationSettlement))
    assert settlement.execution == "refund_pending"
    return subscription, settlement


def test_a_refund_left_unknown_files_one_owner_task_an_hour_on(
    session, session_factory, gym, card_server, doors
):
    subscription, settlement = _stuck_refund(session, session_factory, gym, card_server, doors)
    assert _follow_ups(session) == []  # recovery may yet learn the outcome
    period_end_sweep(session_factory, doors, now=EFFECTIVE + timedelta(minutes=30))
    assert _follow_ups(session) == []

    told_at = EFFECTIVE + UNANSWERED_ALERT_AFTER
    period_end_sweep(session_factory, doors, now=told_at)
    [task] = _follow_ups(session)
    assert (task.status, task.priority, task.assignee_id, task.due_at) == (
        "open",
        "high",
        gym.owner.id,
        told_at + 3 * D,
    )
    assert (task.subject_type, task.subject_id) == (
        "payment_transaction",
        str(settlement.refund_transaction_id),
    )
    assert task.linked_user_id == subscription.user_id
    assert "50.00" in task.detail  # the amount, in money

    # The owner looks at it and marks it done; the next passes, the refund still unknown,
    # neither reopen it nor file another.
    mark_done(session, gym.organization.id, task.id, actor_user_id=gym.owner.id, now=told_at)
    # The plan's one alert mark taken by another alert (the collector's side-effect recovery)
    # does not make the refund's told again: its mark is the settlement's own.
    session.get(
        type(subscription), subscription.id
    ).billing_alert = "settlement_side_effects_pending"
    session.commit()
    for minutes in (5, 10):
        period_end_sweep(session_factory, doors, now=told_at + timedelta(minutes=minutes))
    [task] = _follow_ups(session)
    assert task.status == "done"
    assert session.get(CancellationSettlement, settlement.id).execution == "refund_pending"


def test_the_owner_task_is_done_once_the_refund_goes_through(
    session, session_factory, gym, card_server, doors
):
    _, settlement = _stuck_refund(session, session_factory, gym, card_server, doors)
    period_end_sweep(session_factory, doors, now=EFFECTIVE + UNANSWERED_ALERT_AFTER)
    [task] = _follow_ups(session)
    assert task.status == "open"

    card_server.clear_faults()
    later = EFFECTIVE + 2 * UNANSWERED_ALERT_AFTER
    assert period_end_sweep(session_factory, doors, now=later).refunded == 1

    [task] = _follow_ups(session)
    assert (task.status, session.get(CancellationSettlement, settlement.id).execution) == (
        "done",
        "refunded",
    )
    assert [r.amount_in_cents for r in card_server.simulator.refunds()] == [5000]
