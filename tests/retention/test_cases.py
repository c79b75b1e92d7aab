"""Retention cases: contacts, outcomes and the hourly escalation (spec B 2.1, 3, 7, 8)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.models import OutboxEvent, RetentionContact, Task
from gymctl.models.billing import SubscriptionStatus
from gymctl.models.retention import RetentionOutcome
from gymctl.retention import cases, escalation
from tests.access.conftest import snapshot
from tests.billing.cards import connect_other_provider
from tests.billing.factories import make_subscription
from tests.conftest import NOW
from tests.retention.conftest import give_notice, log_contact, refused


def _notice(session, gym, *, ends_in=timedelta(days=30)):
    subscription = make_subscription(session, gym, current_period_end=NOW + ends_in)
    return give_notice(session, gym, subscription)


def _outcome(session, gym, case, outcome, locale="en"):
    """The owner records the case's outcome."""
    return cases.record_outcome(
        session,
        gym.organization.id,
        case.id,
        outcome=outcome,
        actor_user_id=gym.owner.id,
        locale=locale,
        now=NOW,
    )


def test_a_logged_contact_acknowledges_the_case_and_makes_its_logger_the_owner(session, gym):
    _, case = _notice(session, gym)
    contact = log_contact(session, gym, case, at=NOW + timedelta(hours=2), note="offered a pause")
    assert (case.acknowledged_at, case.last_contact_at, case.owner_user_id) == (
        NOW + timedelta(hours=2),
        NOW + timedelta(hours=2),
        gym.owner.id,
    )
    assert contact.channel == "phone"


def test_contact_refusals(session, gym):
    _, case = _notice(session, gym)
    for kwargs, code in (
        ({"channel": "pigeon"}, "contact_channel_invalid"),
        ({"contacted_at": NOW + cases.CLOCK_SKEW + timedelta(seconds=1)}, "contact_in_future"),
    ):
        values = {"channel": "phone", "note": None, "contacted_at": None, **kwargs}
        before = snapshot(session)
        with pytest.raises(DomainError) as caught:
            cases.log_contact(
                session,
                gym.organization.id,
                case.id,
                actor_user_id=gym.owner.id,
                now=NOW,
                **values,
            )
        assert (caught.value.code, caught.value.status) == (code, 422)
        assert snapshot(session) == before


def test_a_saved_outcome_withdraws_the_notice_as_staff(session, gym):
    subscription, case = _notice(session, gym)
    _outcome(session, gym, case, RetentionOutcome.saved_offer)
    assert subscription.cancel_at_period_end is False
    assert (subscription.retention_outcome, case.outcome, case.status) == (
        "saved_offer",
        "saved_offer",
        "closed",
    )


@pytest.mark.parametrize(
    "outcome",
    [
        RetentionOutcome.lost_contacted,
        RetentionOutcome.lost_payment,
        RetentionOutcome.saved_member_withdrew,
    ],
)
def test_staff_record_saved_outcomes_only(session, gym, outcome):
    _, case = _notice(session, gym)
    with pytest.raises(DomainError) as caught:
        _outcome(session, gym, case, outcome)
    assert (caught.value.code, caught.value.status) == ("retention_outcome_invalid", 422)


def test_a_saved_outcome_on_an_externally_billed_organization_is_refused(session, gym):
    _, case = _notice(session, gym)
    connect_other_provider(session, gym, "external")
    error = refused(
        session, lambda: _outcome(session, gym, case, RetentionOutcome.saved_offer, "he")
    )
    assert (error.code, error.status) == ("externally_billed", 409)
    assert error.message.startswith("המכון")


def test_a_closed_case_takes_no_more_contacts(session, gym):
    _, case = _notice(session, gym)
    _outcome(session, gym, case, RetentionOutcome.saved_pause)
    with pytest.raises(DomainError) as caught:
        log_contact(session, gym, case)
    assert (caught.value.code, caught.value.status) == ("retention_case_closed", 409)


def _escalations(session):
    return [
        e.payload["stage"]
        for e in session.scalars(
            select(OutboxEvent).where(OutboxEvent.name == "retention.case_escalated")
        )
    ]


def test_an_unacknowledged_case_escalates_once_past_the_48_hour_sla(session, gym):
    _, case = _notice(session, gym)
    assert escalation.escalate(session, now=NOW + timedelta(hours=47, minutes=59)) == {
        "checked": 1,
        "escalated": 0,
    }
    later = NOW + timedelta(hours=48)
    assert escalation.escalate(session, now=later) == {"checked": 1, "escalated": 1}
    assert case.escalated_unacknowledged_at == later
    task = session.get(Task, case.task_id)
    assert (task.priority, task.due_at, task.data["escalated"]) == (
        "urgent",
        later,
        ["unacknowledged"],
    )
    assert escalation.escalate(session, now=later + timedelta(hours=1))["escalated"] == 0
    assert _escalations(session) == ["unacknowledged"]


def test_an_acknowledged_case_does_not_escalate_for_the_sla(session, gym):
    _, case = _notice(session, gym)
    cases.acknowledge(session, gym.organization.id, case.id, actor_user_id=gym.owner.id, now=NOW)
    assert escalation.escalate(session, now=NOW + timedelta(hours=49))["escalated"] == 0


def test_a_notice_ending_within_7_days_without_contact_escalates_once(session, gym):
    _, case = _notice(session, gym, ends_in=timedelta(days=7, hours=1))
    cases.acknowledge(session, gym.organization.id, case.id, actor_user_id=gym.owner.id, now=NOW)
    assert escalation.escalate(session, now=NOW)["escalated"] == 0
    at = NOW + timedelta(hours=1)
    assert escalation.escalate(session, now=at) == {"checked": 1, "escalated": 1}
    assert case.escalated_ending_soon_at == at
    assert escalation.escalate(session, now=at + timedelta(hours=1))["escalated"] == 0
    assert _escalations(session) == ["ending_soon"]


def test_a_contacted_case_ending_soon_does_not_escalate(session, gym):
    _, case = _notice(session, gym, ends_in=timedelta(days=3))
    log_contact(session, gym, case)
    assert escalation.escalate(session, now=NOW + timedelta(hours=1))["escalated"] == 0
    assert session.scalar(select(RetentionContact.id)) is not None


@pytest.mark.embedded
def test_both_stages_escalate_in_one_run_and_never_again(session, gym):
    _notice(session, gym, ends_in=timedelta(days=5))
    at = NOW + timedelta(hours=50)
    assert escalation.escalate(session, now=at) == {"checked": 1, "escalated": 2}
    assert escalation.escalate(session, now=at) == {"checked": 1, "escalated": 0}


def test_a_case_whose_plan_was_cancelled_for_non_payment_is_closed_by_the_pass(session, gym):
    subscription, case = _notice(session, gym)
    subscription.status = SubscriptionStatus.cancelled  # as the lifecycle pass leaves it
    subscription.retention_outcome = "lost_payment"
    assert escalation.escalate(session, now=NOW + timedelta(days=3))["escalated"] == 0
    assert (case.status, case.outcome) == ("closed", "lost_payment")
    assert session.get(Task, case.task_id).status == "done"


def test_staff_close_a_presale_case_as_lost(session, gym):
    from gymctl.retention import presales

    presale = make_subscription(session, gym, presale_opening=NOW + timedelta(days=5))
    _, case = presales.withdraw_presale(
        session,
        gym.organization.id,
        presale.id,
        actor_user_id=gym.member.id,
        by_member=True,
        locale="en",
        now=NOW,
    )
    _outcome(session, gym, case, RetentionOutcome.lost_contacted)
    assert (case.status, case.outcome) == ("closed", "lost_contacted")
