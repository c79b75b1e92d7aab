"""One person's two rows folded into one (access.folding, spec A 5.3) hold one seat a class."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.access.ownership import link_profiles
from gymctl.bookings import book
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus
from tests import factories
from tests.bookings.conftest import book_seat, class_session, class_type  # noqa: F401
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_link_leaves_the_person_one_seat_of_a_class_both_rows_booked(
    session,
    gym,
    class_session,  # noqa: F811
):
    """The gym's desk profile and the person's own login are both active members and both
    booked tomorrow's class. The link ended the login's membership but left its seat confirmed
    (now naming the person): one person held two of the class's seats, and the waitlisted
    member behind them never got the freed one."""
    organization = gym.organization
    profile = factories.user(session, identity_id=None, email="pat@example.test")
    desk = factories.membership(session, user=profile, organization=organization)
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
    joined = factories.membership(session, user=login, organization=organization)
    book_seat(session, gym, class_session, desk)
    book_seat(session, gym, class_session, joined)  # capacity 2: the class is full
    waiting = book_seat(session, gym, class_session)  # the gym's member: waitlisted
    assert waiting.status is BookingStatus.waitlisted

    linked = link_profiles(session, login, now=NOW)
    session.flush()
    session.expire_all()

    assert linked.id == profile.id
    assert session.get(Membership, joined.id).status is MembershipStatus.cancelled
    seats = session.scalars(
        select(Booking).where(
            Booking.class_session_id == class_session.id,
            Booking.user_id == profile.id,
            Booking.status.in_(book.ACTIVE),
        )
    ).all()
    assert [seat.membership_id for seat in seats] == [desk.id]
    assert session.get(Booking, waiting.id).status is BookingStatus.confirmed
    assert book.confirmed_count(session, class_session.id) == 2
