"""Giving and withdrawing notice (spec B 2.1, 2.3, 3, 7), with a fixed clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.models import AuditLog, CancellationNotice, RetentionCase, Task
from gymctl.models.billing import SubscriptionStatus
from gymctl.retention import notices
from tests.billing.cards import connect_other_provider
from tests.billing.factories import make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice, refused


@pytest.mark.parametrize(
    "status",
    [
        SubscriptionStatus.active,
        SubscriptionStatus.paused,
        SubscriptionStatus.past_due,
        SubscriptionStatus.debt,
    ],
)
def test_a_member_gives_notice_on_any_live_status_with_nothing_filled_in(session, gym, status):
    subscription = make_subscription(session, gym, status=status)
    _, case = give_notice(session, gym, subscription)
    assert subscription.cancel_at_period_end is True
    assert subscription.cancellation_effective_at == subscription.current_period_end
    assert subscription.status == status
    notice = session.scalar(select(CancellationNotice))
    assert (notice.initiator, notice.reason_code, notice.reason_text) == ("member", None, None)
    assert (case.kind, case.status, case.sla_due_at) == (
        "cancellation_notice",
        "open",
        NOW + timedelta(hours=48),
    )
    task = session.get(Task, case.task_id)
    assert (task.kind, task.priority, task.due_at, task.linked_user_id) == (
        "cancellation_review",
        "urgent",
        NOW + timedelta(hours=48),
        gym.member.id,
    )
    audit = session.scalar(select(AuditLog).where(AuditLog.action == "subscription.notice_given"))
    assert audit.data["initiator"] == "member"


def test_staff_give_notice_with_a_reason_and_a_chosen_date_and_own_the_case(session, gym):
    subscription = make_subscription(session, gym)
    chosen = NOW + timedelta(days=10)
    _, case = give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        actor_user_id=gym.owner.id,
        reason_code="moving_away",
        reason_text="relocating to Haifa",
        effective_at=chosen,
    )
    assert subscription.cancellation_effective_at == chosen
    assert subscription.cancellation_reason == "moving_away"
    assert case.owner_user_id == gym.owner.id


def test_notice_refusals_change_nothing(session, gym):
    subscription = make_subscription(session, gym)
    presale = make_subscription(session, gym, presale_opening=NOW + timedelta(days=9))
    cases = [
        (
            lambda: give_notice(session, gym, subscription, reason_code="nope"),
            "notice_reason_invalid",
            422,
        ),
        (
            lambda: give_notice(
                session, gym, subscription, initiator="staff", actor_user_id=gym.owner.id
            ),
            "notice_reason_required",
            422,
        ),
        (lambda: give_notice(session, gym, presale), "notice_not_allowed", 409),
        (
            lambda: give_notice(
                session,
                gym,
                subscription,
                initiator="staff",
                reason_code="price",
                effective_at=NOW - timedelta(days=1),
            ),
            "notice_effective_in_past",
            422,
        ),
    ]
    for call, code, status in cases:
        error = refused(session, call)
        assert (error.code, error.status) == (code, status)
    give_notice(session, gym, subscription)
    error = refused(session, lambda: give_notice(session, gym, subscription))
    assert (error.code, error.status) == ("notice_already_given", 409)


def _withdraw(session, gym, subscription, *, by_member=True, locale="en"):
    return notices.withdraw_notice(
        session,
        gym.organization.id,
        subscription.id,
        actor_user_id=gym.member.id if by_member else gym.owner.id,
        by_member=by_member,
        locale=locale,
        now=NOW + timedelta(hours=1),
    )


def test_withdrawing_on_a_paused_plan_clears_the_notice_as_the_members_own_act(session, gym):
    subscription = make_subscription(session, gym, status=SubscriptionStatus.paused)
    _, case = give_notice(session, gym, subscription)
    _withdraw(session, gym, subscription)
    assert (subscription.cancel_at_period_end, subscription.cancellation_effective_at) == (
        False,
        None,
    )
    assert subscription.retention_outcome == "saved_member_withdrew"
    notice = session.scalar(select(CancellationNotice))
    assert (notice.withdrawn_by_member, notice.withdrawn_by_user_id) == (True, gym.member.id)
    assert (case.status, case.outcome) == ("closed", "saved_member_withdrew")
    assert session.get(Task, case.task_id).status == "done"


def test_staff_withdrawal_is_recorded_as_staffs(session, gym):
    subscription = make_subscription(session, gym)
    give_notice(session, gym, subscription)
    _withdraw(session, gym, subscription, by_member=False)
    assert subscription.retention_outcome == "saved_staff"


def test_withdrawal_on_an_externally_billed_organization_is_refused_in_the_members_language(
    session, gym
):
    subscription = make_subscription(session, gym)
    give_notice(session, gym, subscription)
    connect_other_provider(session, gym, "external")
    error = refused(session, lambda: _withdraw(session, gym, subscription, locale="es"))
    assert (error.code, error.status) == ("externally_billed", 409)
    assert error.message.startswith("Este gimnasio factura")
    assert subscription.cancel_at_period_end is True


def test_withdrawing_without_a_notice_is_refused(session, gym):
    subscription = make_subscription(session, gym)
    error = refused(session, lambda: _withdraw(session, gym, subscription))
    assert (error.code, error.status) == ("notice_not_given", 409)


def test_a_notice_of_another_organization_is_not_found(session, gym):
    from tests.billing.factories import make_gym

    other = make_gym(session)
    subscription = make_subscription(session, other)
    error = refused(session, lambda: give_notice(session, gym, subscription))
    assert (error.code, error.status) == ("subscription_not_found", 404)
    assert session.scalar(select(RetentionCase)) is None
