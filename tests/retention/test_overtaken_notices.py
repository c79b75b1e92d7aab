"""A notice overtaken: the plan ends another way before the notice matures (cancelled for
non-payment after the debt's grace, spec B 3; ended with the membership; superseded by the
member's own purchase). The notice ends with the plan, in its transaction: the subscription
no longer says a notice is pending, the retention case closes with an outcome that says why,
no refund is computed (the notice never matured) and the period-end sweep never touches it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.access import erasure, memberships
from gymctl.billing import collector, lifecycle
from gymctl.billing.attempts import emit_cancelled
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.models import (
    CancellationNotice,
    CancellationSettlement,
    OutboxEvent,
    Task,
)
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from gymctl.providers.mail import read_mailbox
from gymctl.retention import cases, escalation
from gymctl.retention.digest import send_digests
from gymctl.retention.settlement import period_end_due, period_end_sweep
from tests.billing.cards import DECLINE, save_test_card
from tests.billing.factories import TEST_CIPHER, make_plan, make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice, log_contact

D = timedelta(days=1)


def _events(session, aggregate_id, name: str) -> list[OutboxEvent]:
    return list(
        session.scalars(
            select(OutboxEvent)
            .where(OutboxEvent.aggregate_id == str(aggregate_id), OutboxEvent.name == name)
            .order_by(OutboxEvent.id)
        )
    )


def _assert_overtaken(session, subscription, case, *, reason: str, outcome: str, effective):
    """The plan ended for `reason`; its notice ended with it: nothing pending, the case closed
    with `outcome` and its review task done, the notice row kept as given (not withdrawn), and
    the audit says so."""
    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.cancellation_reason == reason
    assert (subscription.cancel_at_period_end, subscription.cancellation_effective_at) == (
        False,
        None,
    )
    assert subscription.retention_outcome == outcome
    assert (case.status, case.outcome) == ("closed", outcome)
    assert case.closed_at == subscription.cancelled_at
    assert session.get(Task, case.task_id).status == "done"
    notice = session.get(CancellationNotice, case.notice_id)
    assert notice.withdrawn_at is None
    assert notice.effective_at == effective
    [event] = _events(session, subscription.id, "subscription.notice_overtaken")
    assert event.payload == {
        "reason": reason,
        "outcome": outcome,
        "noticeId": str(notice.id),
        "caseId": str(case.id),
        "effectiveAt": effective.isoformat(),
        "userId": str(subscription.user_id),
    }
    assert len(_events(session, subscription.id, "subscription.cancelled")) == 1
    assert cases.open_cases(session, subscription.organization_id) == []


def _sweep_does_nothing(session, session_factory, doors, subscription, effective) -> None:
    """The period-end sweep, run when the notice would have matured, settles nothing and
    emails no one: the notice never matured."""
    session.commit()
    assert period_end_due(session) is None
    result = period_end_sweep(session_factory, doors, now=effective + timedelta(hours=1))
    assert result.as_dict() == {
        "cancelled": [],
        "refunded": 0,
        "ownerTasks": 0,
        "emailed": 0,
        "errors": 0,
    }
    assert session.scalar(select(func.count()).select_from(CancellationSettlement)) == 0
    assert _events(session, subscription.id, "subscription.cancellation_settled") == []


# --- non-payment: the lifecycle pass after the debt's grace --------------------------------


@pytest.mark.embedded
def test_a_pay_later_plan_cancelled_for_non_payment_ends_its_notice_with_it(
    session, session_factory, gym, doors, mailbox
):
    """Notice given on a pay-later term (effective at its period end, a month on); the balance
    falls due in 3 days and is never paid: debt, then cancelled for non-payment once day 7
    has passed (spec B 3), weeks before the notice would have matured. The case closes
    lost_payment in the pass that cancels the plan; no staff digest lists it."""
    subscription = make_subscription(session, gym, pay_later_due=NOW + 3 * D)
    _, case = give_notice(session, gym, subscription)
    effective = subscription.cancellation_effective_at
    assert effective == subscription.current_period_end == NOW + 30 * D
    session.commit()

    assert lifecycle.run_lifecycle(session, now=NOW + 3 * D)["payment_due"] == 1
    session.commit()
    assert (subscription.status, case.status) == (SubscriptionStatus.debt, "open")

    after_grace = NOW + 11 * D
    summary = lifecycle.run_lifecycle(session, now=after_grace)
    session.commit()

    assert summary["cancelled"] == 1
    assert summary["events"] == 2  # subscription.cancelled and subscription.notice_overtaken
    _assert_overtaken(
        session,
        subscription,
        case,
        reason="non_payment",
        outcome="lost_payment",
        effective=effective,
    )
    assert subscription.cancelled_at == after_grace
    assert lifecycle.run_lifecycle(session, now=after_grace + D)["events"] == 0
    assert send_digests(session_factory, doors.mailer, now=after_grace) == {
        "orgsChecked": 0,
        "sent": 0,
    }
    _sweep_does_nothing(session, session_factory, doors, subscription, effective)
    assert read_mailbox(mailbox) == []


@pytest.mark.embedded
def test_a_declined_renewal_cancelled_for_non_payment_ends_a_later_staff_notice(
    session, session_factory, gym, card_server, doors
):
    """Staff set the notice a month past the renewal: the collector charges the renewal, the
    card declines (debt), and the lifecycle cancels the plan after the grace. A contact logged
    on the case does not change why the member was lost: lost_payment."""
    method = save_test_card(session, gym, card_server.provider(), card_server.simulator, DECLINE)
    subscription = make_subscription(session, gym, payment_method_id=method.id)
    renewal = subscription.next_charge_date
    effective = renewal + 30 * D
    _, case = give_notice(
        session,
        gym,
        subscription,
        initiator="staff",
        reason_code="price",
        actor_user_id=gym.owner.id,
        effective_at=effective,
    )
    log_contact(session, gym, case)
    session.commit()

    summary = collector.daily_sweep(
        session_factory, card_server.provider(), now=renewal, cipher=TEST_CIPHER
    )
    session.expire_all()
    assert (summary.charged, subscription.status) == (0, SubscriptionStatus.debt)
    lifecycle.run_lifecycle(session, now=renewal + 9 * D)
    session.commit()

    _assert_overtaken(
        session,
        subscription,
        case,
        reason="non_payment",
        outcome="lost_payment",
        effective=effective,
    )
    _sweep_does_nothing(session, session_factory, doors, subscription, effective)


@pytest.mark.embedded
def test_a_notice_matured_before_the_grace_ends_is_the_period_end_sweeps_to_settle(
    session, session_factory, gym, doors
):
    """Both are due at the same tick, and the hourly pass runs first (daemons/jobs.py): the
    notice matured first, so the plan ends by notice (settled, with its outcome), not
    as cancelled for non-payment. Overtaken is only for a plan that ends before its notice."""
    subscription = make_subscription(
        session, gym, pay_later_due=NOW + D, current_period_end=NOW + 3 * D
    )
    _, case = give_notice(session, gym, subscription)
    effective = subscription.cancellation_effective_at
    session.commit()
    assert lifecycle.run_lifecycle(session, now=NOW + D)["payment_due"] == 1
    session.commit()
    tick = NOW + 9 * D  # after an outage: the notice matured on day 2 of the debt, day 7 ended

    assert lifecycle.run_lifecycle(session, now=tick)["cancelled"] == 0
    session.commit()
    assert period_end_sweep(session_factory, doors, now=tick).cancelled == [str(subscription.id)]

    session.expire_all()
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.cancellation_reason == "notice"
    assert (case.status, case.outcome) == ("closed", "lost_no_contact")
    assert _events(session, subscription.id, "subscription.notice_overtaken") == []
    settlement = session.scalar(select(CancellationSettlement))
    assert (settlement.subscription_id, settlement.effective_at) == (subscription.id, effective)


# --- the plan ends with the membership, or superseded ---------------------------------------


@pytest.mark.embedded
def test_a_member_removed_with_a_notice_running_is_lost_as_at_period_end(
    session, session_factory, gym, doors
):
    """Removal ends the live plans (reason membership_ended, leaving.end_holdings): the member
    is lost, contacted or not, as the period-end sweep would have said (spec B 3)."""
    subscription = make_subscription(session, gym)
    _, case = give_notice(session, gym, subscription)
    effective = subscription.cancellation_effective_at
    log_contact(session, gym, case)
    session.commit()

    memberships.remove_member(
        session,
        gym.organization.id,
        gym.member.id,
        actor=None,
        actor_user_id=gym.owner.id,
        now=NOW + D,
    )
    session.commit()

    _assert_overtaken(
        session,
        subscription,
        case,
        reason="membership_ended",
        outcome="lost_contacted",
        effective=effective,
    )
    _sweep_does_nothing(session, session_factory, doors, subscription, effective)


@pytest.mark.embedded
def test_a_member_erased_with_a_notice_running_is_lost_without_contact(
    session, session_factory, gym, doors
):
    subscription = make_subscription(session, gym, PlanType.cash)
    _, case = give_notice(session, gym, subscription)
    effective = subscription.cancellation_effective_at
    session.commit()

    erasure.erase_personal_data(
        session, gym.organization, gym.member.id, actor_user_id=gym.owner.id, now=NOW + D
    )
    session.commit()

    _assert_overtaken(
        session,
        subscription,
        case,
        reason="membership_ended",
        outcome="lost_no_contact",
        effective=effective,
    )
    _sweep_does_nothing(session, session_factory, doors, subscription, effective)


@pytest.mark.embedded
def test_a_debt_paid_on_a_plan_the_member_bought_again_ends_its_notice_as_kept(
    session, session_factory, gym, doors
):
    """The member gave notice on a plan in debt, then bought the plan again: paying the old
    debt ends the old plan, superseded (spec B 4.3: a plan is held once). The member stays,
    by their own act: saved_member_withdrew, not a member lost."""
    plan = make_plan(session, gym.organization)
    old = make_subscription(session, gym, plan=plan, in_debt_since=NOW - 2 * D)
    _, case = give_notice(session, gym, old)
    effective = old.cancellation_effective_at
    assert effective == old.current_period_end > NOW
    make_subscription(session, gym, plan=plan, now=NOW + D)
    session.commit()

    clear_debt_at_desk(
        session,
        organization_id=gym.organization.id,
        subscription_id=old.id,
        actor_user_id=gym.owner.id,
        now=NOW + D,
        documents=LocalDocumentProvider(),
    )
    session.commit()

    _assert_overtaken(
        session,
        old,
        case,
        reason="superseded",
        outcome="saved_member_withdrew",
        effective=effective,
    )
    _sweep_does_nothing(session, session_factory, doors, old, effective)


@pytest.mark.embedded
def test_a_case_an_older_release_left_open_on_an_ended_plan_closes_at_the_escalation(
    session, session_factory, gym, doors
):
    """Before each ending closed its notice, a removed member's plan kept cancel_at_period_end
    and an open case: the hourly escalation closes it as the ending would have."""
    subscription = make_subscription(session, gym)
    _, case = give_notice(session, gym, subscription)
    effective = subscription.cancellation_effective_at
    subscription.status = SubscriptionStatus.cancelled  # as end_plan left it then
    subscription.cancellation_reason = "membership_ended"
    subscription.cancelled_at = NOW + D
    emit_cancelled(session, subscription, reason="membership_ended", now=NOW + D)
    session.commit()

    assert escalation.escalate(session, now=NOW + D) == {"checked": 1, "escalated": 0}
    session.commit()

    _assert_overtaken(
        session,
        subscription,
        case,
        reason="membership_ended",
        outcome="lost_no_contact",
        effective=effective,
    )
    assert escalation.escalate(session, now=NOW + 2 * D) == {"checked": 0, "escalated": 0}
    _sweep_does_nothing(session, session_factory, doors, subscription, effective)
