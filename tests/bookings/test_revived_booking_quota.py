"""A revived booking spends one session for its class, not a second one.

Spec B 3: booking again "same session" revives the row, "cancelled_at, checked_in_at,
checkin_method, deleted_at cleared". bookings.quota records on the booking the plan whose
session it spent, and gives a session back "once: the booking stops recording the plan". A row
staff cancelled or removed after its check-in keeps its session spent and still records it;
revived, it is a fresh booking (its check-in cleared): the session it recorded is given back
before it spends again, so a plan's spent sessions stay those its bookings record."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.bookings import attendance, book
from gymctl.models import Booking
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, book_seat, cancel_own

pytestmark = pytest.mark.embedded

DOOR = TOMORROW - timedelta(minutes=30)  # check-in is open


@pytest.fixture
def pack(session, gym):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    return make_subscription(session, gym, PlanType.pack, sessions_remaining=10)


def _recording(session, pack) -> int:
    return session.scalar(
        select(func.count()).select_from(Booking).where(Booking.subscription_id == pack.id)
    )


def _checked_in_then_ended_by_staff(session, gym, class_session, how):
    booking = book_seat(session, gym, class_session)
    attendance.check_in(
        session,
        gym.organization.id,
        booking.id,
        method=CheckinMethod.kiosk,
        actor_user_id=gym.owner.id,
        now=DOOR,
    )
    if how == "cancel":
        book.cancel(
            session,
            gym.organization.id,
            booking.id,
            actor_user_id=gym.owner.id,
            by_staff=True,
            now=DOOR,
        )
    else:
        book.remove(session, gym.organization.id, booking.id, actor_user_id=gym.owner.id, now=DOOR)
    return booking


@pytest.mark.parametrize("how", ["cancel", "remove"])
def test_a_revived_booking_spends_its_class_once(session, gym, class_session, pack, how):
    booking = _checked_in_then_ended_by_staff(session, gym, class_session, how)
    assert (pack.sessions_remaining, booking.subscription_id) == (9, pack.id)  # kept spent

    again = book_seat(session, gym, class_session, at=DOOR + timedelta(minutes=5))

    session.refresh(pack)
    assert again.id == booking.id
    assert (pack.sessions_remaining, again.subscription_id) == (9, pack.id)
    assert _recording(session, pack) == 10 - pack.sessions_remaining


@pytest.mark.parametrize("how", ["cancel", "remove"])
def test_a_revived_booking_cancelled_before_the_class_loses_the_member_no_session(
    session, gym, class_session, pack, how
):
    booking = _checked_in_then_ended_by_staff(session, gym, class_session, how)
    book_seat(session, gym, class_session, at=DOOR + timedelta(minutes=5))

    cancel_own(session, gym, booking, DOOR + timedelta(minutes=10))

    session.refresh(pack)
    assert (pack.sessions_remaining, _recording(session, pack)) == (10, 0)
