"""A plan under notice stops renewing: in a gym that requires a plan to book, it books the
classes up to its notice's effective date and none after (bookings.quota: "A plan that does
not renew itself ... covers classes up to its period end"; spec B 3: notice given sets
cancel_at_period_end and the effective date, and the period-end sweep then cancels it)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.bookings import schedule
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus
from gymctl.retention.notices import give_notice, withdraw_notice
from tests.billing.factories import make_billing_settings
from tests.bookings.conftest import add_member, book_seat, cancel_own, renewing_card_plan
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


@pytest.fixture
def card(session, gym):
    """A monthly card plan in a gym that requires a plan to book; the member gives notice."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    plan = renewing_card_plan(session, gym)
    give_notice(
        session,
        gym.organization.id,
        plan.id,
        initiator="member",
        actor_user_id=gym.membership.user_id,
        locale="en",
        now=NOW,
    )
    return plan


def _class_at(session, gym, starts_at):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    return schedule.schedule_session(session, kind, starts_at=starts_at, now=NOW)


def test_a_plan_under_notice_refuses_a_class_after_its_effective_date(session, gym, card):
    """Notice effective at the period end: the plan will not renew, so next month's class is
    refused plan_ends_before_session (planEndsAt: the effective date), nothing written."""
    late = _class_at(session, gym, card.cancellation_effective_at + timedelta(days=3))
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, late)
    assert (refused.value.code, refused.value.status) == ("plan_ends_before_session", 409)
    assert refused.value.details["planEndsAt"] == card.cancellation_effective_at.isoformat()
    assert session.scalar(select(func.count()).select_from(Booking)) == 0


def test_a_plan_under_notice_books_up_to_its_effective_date(session, gym, card):
    last = _class_at(session, gym, card.cancellation_effective_at)
    assert book_seat(session, gym, last).status is BookingStatus.confirmed


def test_a_withdrawn_notice_books_past_the_period_end_again(session, gym, card):
    withdraw_notice(
        session,
        gym.organization.id,
        card.id,
        actor_user_id=gym.membership.user_id,
        by_member=True,
        locale="en",
        now=NOW,
    )
    late = _class_at(session, gym, card.current_period_end + timedelta(days=3))
    assert book_seat(session, gym, late).status is BookingStatus.confirmed


def test_a_freed_seat_passes_over_a_waitlisted_member_whose_plan_no_longer_covers_the_class(
    session, gym
):
    """'A turn comes to one who may book now, as `book` would have it' (promote_waitlist): the
    member waited on a monthly plan that covered next month's class, then gave notice effective
    before it. Booking it now is refused plan_ends_before_session, so the freed seat passes
    them over (they keep their place) and goes to the next in line."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    card = renewing_card_plan(session, gym)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    late = schedule.schedule_session(
        session, kind, starts_at=card.current_period_end + timedelta(days=3), now=NOW
    )
    seated, next_in_line = (add_member(session, gym.organization) for _ in range(2))
    for member in (seated, next_in_line):
        renewing_card_plan(session, Gym.of(member))
    seat = book_seat(session, gym, late, seated)
    waiting = book_seat(session, gym, late, at=NOW + timedelta(seconds=1))
    after = book_seat(session, gym, late, next_in_line, at=NOW + timedelta(seconds=2))
    give_notice(
        session,
        gym.organization.id,
        card.id,
        initiator="member",
        actor_user_id=gym.membership.user_id,
        locale="en",
        now=NOW + timedelta(minutes=1),
    )

    cancel_own(session, gym, seat, NOW + timedelta(minutes=2))

    assert (waiting.status, after.status) == (BookingStatus.waitlisted, BookingStatus.confirmed)
