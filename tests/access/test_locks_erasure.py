"""Two members' personal data erased from the same gym at once, on PostgreSQL with real
commits across connections. Erasure ends the membership (memberships.end_membership), which
locks every membership the member's seats touch in one id order (leaving.lock_leaving); but
erasure had locked the member's own membership before it, so the members waiting in their
classes came after it, out of id order: two members each waiting in a class where the other
holds a seat each held their own and waited for the other's ("deadlock detected", answered
503 database_busy). Erasure now takes lock_leaving's locks first."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.erasure import erase_personal_data
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Organization
from tests.billing.test_locks_lifecycle import class_at, locks, run_together
from tests.bookings.conftest import add_member, book_seat
from tests.conftest import NOW
from tests.factories import make_gym

D = timedelta(days=1)


def test_two_members_each_waiting_for_the_others_seat_are_erased_at_once(committed_pg):
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

    def erasure(member):
        def erase() -> None:
            with factory() as staff:
                organization = staff.get(Organization, gym.organization.id)
                erase_personal_data(
                    staff, organization, member.user_id, actor_user_id=gym.owner.id, now=later
                )
                staff.commit()

        return erase

    errors = run_together(
        engine,
        {
            "one": (locks("memberships", two.id), erasure(one)),
            "two": (locks("memberships", one.id), erasure(two)),
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
