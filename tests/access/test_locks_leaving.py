"""Two members removed from the same gym at once, on PostgreSQL with real commits across
connections. Each removal gives up the member's seats to come and locks the members waiting in
those classes first (shared, as every door that may promote does): with the removed member's
own membership locked first and the others' after it, two members each waiting in a class
where the other holds a seat each held their own and waited for the other's, and PostgreSQL
ended one ("deadlock detected", answered 503 database_busy). The removal now locks every
membership it touches in one id order (its own exclusively) before anything else. Erasure
ends the membership the same way, but had locked the member's own membership before it, so
the waiting members came after it, out of id order: it takes the same locks first now."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.erasure import erase_personal_data
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Organization
from tests.bookings.conftest import add_member, book_seat
from tests.conftest import NOW
from tests.factories import make_gym
from tests.lock_order import class_at, locks, removed_by_staff, run_together

D = timedelta(days=1)


def _erased(factory, gym, member, now) -> None:
    with factory() as staff:
        organization = staff.get(Organization, gym.organization.id)
        erase_personal_data(
            staff, organization, member.user_id, actor_user_id=gym.owner.id, now=now
        )
        staff.commit()


@pytest.mark.parametrize("leave", [removed_by_staff, _erased], ids=["removed", "erased"])
def test_two_members_each_waiting_for_the_others_seat_leave_at_once(committed_pg, leave):
    """Each holds a seat in one class and waits in the other's: staff remove (or erase) both
    at the same moment. Both commit, every seat of the two is given up."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        one, two = gym.membership, add_member(session, gym.organization)
        first = class_at(session, gym, NOW + 2 * D, capacity=1)
        second = class_at(session, gym, NOW + 3 * D, capacity=1)
        book_seat(session, gym, first, one)
        book_seat(session, gym, second, two)
        book_seat(session, gym, first, two, at=NOW + timedelta(seconds=1))
        book_seat(session, gym, second, one, at=NOW + timedelta(seconds=1))
        session.commit()
    later = NOW + timedelta(hours=1)

    errors = run_together(
        engine,
        {
            "one": (locks("memberships", two.id), lambda: leave(factory, gym, one, later)),
            "two": (locks("memberships", one.id), lambda: leave(factory, gym, two, later)),
        },
    )

    assert errors == []
    with factory() as session:
        assert session.get(Membership, one.id).status is MembershipStatus.cancelled
        assert session.get(Membership, two.id).status is MembershipStatus.cancelled
        left = session.scalars(
            select(Booking.id).where(
                Booking.class_session_id.in_((first.id, second.id)),
                Booking.status != BookingStatus.cancelled,
            )
        ).all()
        assert left == []
