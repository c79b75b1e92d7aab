"""A seat once taken or waited for: a checked-in seat stays the member's, and a waitlisted
member passed over takes a free seat before a newcomer does."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.debt import restore_from_debt
from gymctl.bookings import attendance
from gymctl.errors import DomainError
from gymctl.models import BookingStatus, OutboxEvent
from gymctl.models.bookings import CheckinMethod
from tests.billing.factories import make_subscription
from tests.bookings.conftest import TOMORROW, add_member, book_seat, cancel_own
from tests.conftest import NOW


def _names(session) -> list[str]:
    return list(session.scalars(select(OutboxEvent.name).order_by(OutboxEvent.id)))


def _fields(booking) -> tuple:
    return (booking.status, booking.cancelled_at, booking.waitlisted_at, booking.updated_at)


@pytest.mark.embedded
def test_a_member_cannot_cancel_a_booking_they_checked_in_to(session, gym, class_session):
    """'Members cancel until the session starts', and not once checked in: the seat was used,
    and a cancel would hand it to the next waitlisted (one more in the room than seats)."""
    seat = book_seat(session, gym, class_session)
    book_seat(session, gym, class_session, add_member(session, gym.organization))
    waiting = book_seat(session, gym, class_session, add_member(session, gym.organization))
    door = TOMORROW - timedelta(minutes=30)
    attendance.check_in(
        session,
        gym.organization.id,
        seat.id,
        method=CheckinMethod.kiosk,
        actor_user_id=gym.owner.id,
        now=door,
    )
    before, events = (_fields(seat), _fields(waiting)), _names(session)

    with pytest.raises(DomainError) as caught:
        cancel_own(session, gym, seat, door + timedelta(minutes=5))

    assert (caught.value.code, caught.value.status) == ("booking_checked_in", 409)
    session.expire_all()
    assert (_fields(seat), _fields(waiting)) == before
    assert seat.checked_in_at == door
    assert _names(session) == events


@pytest.mark.embedded
def test_a_waitlisted_member_passed_over_takes_the_free_seat_before_a_newcomer(
    session, gym, class_session
):
    """'Promotion from waitlist: confirmed, domain event booking.promoted' (spec B 3). One
    passed over when the seat freed (a debt past its grace then) keeps their place; asking
    again is refused as 'an active row gives an already-booked refusal' (spec B 4.3), and the
    next booking of the session, before it seats a newcomer, gives the free seat to those
    waiting who may book now."""
    seated, leaving, newcomer = (add_member(session, gym.organization) for _ in range(3))
    book_seat(session, gym, class_session, seated)
    freed = book_seat(session, gym, class_session, leaving)
    waiting = book_seat(session, gym, class_session)
    plan = make_subscription(session, gym, in_debt_since=NOW - timedelta(days=8))
    cancel_own(session, gym, freed)
    assert waiting.status is BookingStatus.waitlisted  # passed over: the seat stays free
    restore_from_debt(plan, now=NOW)  # paid at the desk
    later = NOW + timedelta(hours=1)
    with pytest.raises(DomainError) as caught:
        book_seat(session, gym, class_session, at=later)
    assert (caught.value.code, caught.value.status) == ("already_booked", 409)
    assert waiting.status is BookingStatus.waitlisted  # refused before anything was written

    late = book_seat(session, gym, class_session, newcomer, at=later)

    session.refresh(waiting)
    assert (waiting.status, waiting.waitlisted_at, waiting.updated_at) == (
        BookingStatus.confirmed,
        None,
        later,
    )
    assert late.status is BookingStatus.waitlisted
    assert _names(session)[-2:] == ["booking.promoted", "booking.created"]


@pytest.mark.embedded
def test_a_waitlisted_member_asking_again_in_a_full_session_refuses_already_booked(
    session, gym, class_session
):
    """'An active row gives an already-booked refusal' (spec B 4.3) while no seat is free."""
    for _ in range(2):
        book_seat(session, gym, class_session, add_member(session, gym.organization))
    waiting = book_seat(session, gym, class_session)
    before, events = _fields(waiting), _names(session)

    with pytest.raises(DomainError) as caught:
        book_seat(session, gym, class_session, at=NOW + timedelta(hours=1))

    assert (caught.value.code, caught.value.status) == ("already_booked", 409)
    assert caught.value.details["bookingStatus"] == "waitlisted"
    session.expire_all()
    assert _fields(waiting) == before
    assert _names(session) == events
