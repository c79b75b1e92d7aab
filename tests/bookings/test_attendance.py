"""Check-in and no-shows (spec B 3, 6): booking.attended, booking.no_show, and the pass after
each session ends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bookings import attendance
from gymctl.errors import DomainError
from gymctl.models import BookingStatus, OutboxEvent
from gymctl.models.bookings import CheckinMethod
from tests.bookings.conftest import TOMORROW, add_member, book_seat, cancel_own
from tests.conftest import NOW

AFTER = TOMORROW + timedelta(hours=1)  # the session ends


def _check_in(session, gym, booking, at, method=CheckinMethod.staff, actor=None):
    """Staff (the owner) check the member in unless another actor is named."""
    return attendance.check_in(
        session,
        gym.organization.id,
        booking.id,
        method=method,
        actor_user_id=actor or gym.owner.id,
        now=at,
    )


def _names(session):
    return [e.name for e in session.scalars(select(OutboxEvent).order_by(OutboxEvent.id))]


def test_check_in_records_time_and_method_once(session, gym, class_session):
    booking = book_seat(session, gym, class_session)
    for at in (TOMORROW, TOMORROW + timedelta(minutes=5)):
        _check_in(session, gym, booking, at, CheckinMethod.kiosk)
    assert (booking.checked_in_at, booking.checkin_method) == (TOMORROW, "kiosk")
    assert _names(session).count("booking.attended") == 1


def test_check_in_opens_an_hour_before_class_and_needs_a_confirmed_seat(
    session, gym, class_session
):
    booking = book_seat(session, gym, class_session)
    with pytest.raises(DomainError) as early:
        _check_in(session, gym, booking, TOMORROW - timedelta(minutes=61))
    assert (early.value.code, early.value.status) == ("checkin_not_open", 409)
    cancel_own(session, gym, booking)
    with pytest.raises(DomainError) as cancelled:
        _check_in(session, gym, booking, TOMORROW)
    assert cancelled.value.code == "booking_not_confirmed"


def test_staff_mark_a_no_show_after_the_start_only(session, gym, class_session):
    booking = book_seat(session, gym, class_session)
    with pytest.raises(DomainError) as early:
        attendance.mark_no_show(
            session, gym.organization.id, booking.id, actor_user_id=gym.owner.id, now=NOW
        )
    assert early.value.code == "session_not_started"
    attendance.mark_no_show(
        session, gym.organization.id, booking.id, actor_user_id=gym.owner.id, now=TOMORROW
    )
    assert booking.no_show_at == TOMORROW
    assert "booking.no_show" in _names(session)


def test_a_checked_in_member_is_no_no_show(session, gym, class_session):
    booking = book_seat(session, gym, class_session)
    _check_in(session, gym, booking, TOMORROW, CheckinMethod.self, actor=gym.member.id)
    with pytest.raises(DomainError) as caught:
        attendance.mark_no_show(
            session, gym.organization.id, booking.id, actor_user_id=gym.owner.id, now=AFTER
        )
    assert (caught.value.code, caught.value.status) == ("booking_checked_in", 409)


@pytest.mark.embedded
def test_the_pass_after_the_session_marks_the_missing_once(session, gym, class_session):
    came, missed = (add_member(session, gym.organization) for _ in range(2))
    late = add_member(session, gym.organization)
    attended = book_seat(session, gym, class_session, came)
    absent = book_seat(session, gym, class_session, missed)
    waiting = book_seat(session, gym, class_session, late)  # waitlisted: never a no-show
    _check_in(session, gym, attended, TOMORROW)
    assert attendance.no_show_pass(session, now=AFTER - timedelta(minutes=1)) == {
        "sessions": 0,
        "noShows": 0,
        "waitlistsClosed": 1,  # the class started: no seat comes to the waiting any more
    }
    assert waiting.status == BookingStatus.cancelled
    assert attendance.no_show_pass(session, now=AFTER) == {
        "sessions": 1,
        "noShows": 1,
        "waitlistsClosed": 0,
    }
    assert (absent.no_show_at, attended.no_show_at, waiting.no_show_at) == (AFTER, None, None)
    assert attendance.no_show_pass(session, now=AFTER + timedelta(hours=1)) == {
        "sessions": 0,
        "noShows": 0,
        "waitlistsClosed": 0,
    }
    assert _names(session).count("booking.no_show") == 1
