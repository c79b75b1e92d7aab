"""50 members booking the last 5 seats at once on PostgreSQL (spec B tests): exactly 5
confirmed, the rest waitlisted, never more. Real connections, committed data, threads."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.bookings import book, schedule
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus
from tests.billing.factories import make_gym
from tests.bookings.conftest import add_member
from tests.conftest import NOW

MEMBERS = 50
LAST_SEATS = 5


def test_fifty_members_racing_for_the_last_five_seats_confirm_exactly_five(committed_pg):
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        class_type = schedule.create_class_type(
            session,
            gym.organization.id,
            name="Open box",
            default_capacity=20,
            duration_minutes=60,
            now=NOW,
        )
        row = schedule.schedule_session(
            session, class_type, starts_at=NOW + timedelta(days=1), now=NOW
        )
        early = [add_member(session, gym.organization) for _ in range(20 - LAST_SEATS)]
        racers = [add_member(session, gym.organization) for _ in range(MEMBERS)]
        for member in early:
            book.book(
                session, gym.organization.id, row.id, member, actor_user_id=member.user_id, now=NOW
            )
        session.commit()
        org_id, session_id = gym.organization.id, row.id

    start = threading.Barrier(MEMBERS)
    errors: list[BaseException] = []

    def race(member) -> None:
        try:
            start.wait()
            with factory() as mine:
                book.book(mine, org_id, session_id, member, actor_user_id=member.user_id, now=NOW)
                mine.commit()
        except BaseException as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=race, args=(member,)) for member in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with factory() as session:
        statuses = [
            b.status
            for b in session.scalars(
                select(Booking).where(Booking.membership_id.in_([m.id for m in racers]))
            )
        ]
    assert statuses.count(BookingStatus.confirmed) == LAST_SEATS
    assert statuses.count(BookingStatus.waitlisted) == MEMBERS - LAST_SEATS
