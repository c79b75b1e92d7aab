"""A waitlisted member passed over while a notice ended their plan before the class withdraws
the notice: the plan covers the class again, and the seat that freed meanwhile is theirs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import book, schedule
from gymctl.models import BookingStatus
from gymctl.retention import notices
from tests.billing.factories import make_billing_settings
from tests.bookings.conftest import add_member, book_seat, cancel_own, renewing_card_plan
from tests.conftest import NOW
from tests.factories import Gym
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded


def test_a_withdrawn_notice_gives_the_waiting_member_the_seat_left_free(engine, session, gym):
    """book.promote_waitlist passes over one whose plan no longer covers the class (booking
    now would be refused plan_ends_before_session); withdrawn, the notice no longer ends it,
    so their turn comes, rather than the seat staying free until the class starts."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    monthly = renewing_card_plan(session, gym)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    starts = monthly.current_period_end + timedelta(days=1)
    row = schedule.schedule_session(session, kind, starts_at=starts, now=NOW)
    other = add_member(session, gym.organization)
    renewing_card_plan(session, Gym.of(other))
    seated = book_seat(session, gym, row, other)
    waiting = book_seat(session, gym, row, at=NOW + timedelta(seconds=1))
    give_notice(session, gym, monthly)  # effective at the period's end, before the class
    cancel_own(session, gym, seated, at=NOW + timedelta(hours=1))
    session.expire_all()
    assert waiting.status is BookingStatus.waitlisted  # passed over: not covered

    notices.withdraw_notice(
        session,
        gym.organization.id,
        monthly.id,
        actor_user_id=gym.member.id,
        by_member=True,
        locale="en",
        now=NOW + timedelta(hours=2),
    )

    session.expire_all()
    assert waiting.status is BookingStatus.confirmed
    assert book.confirmed_count(session, row.id) == 1
