"""A pack's sessions raced for on PostgreSQL (committed data, threads; see test_races.py).

The plan that pays a seat is locked before the session, by book() and by a cancel (billing's
order: organization, membership, subscription, then session): two bookings never spend one
session twice, and a cancel never waits on a plan while holding a session a booking waits for.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.bookings import book, schedule
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, Subscription
from gymctl.models.billing import PlanType
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.test_races import _refused, race
from tests.conftest import NOW
from tests.factories import make_gym

STARTS = NOW + timedelta(days=1)


class PackScene:
    """A gym that requires a plan, its member's pack with `left` sessions, two classes (the
    first linked to the external system, so the bridge can remove it)."""

    def __init__(self, url: str, left: int) -> None:
        self.engine = get_engine(url)
        with Session(self.engine, expire_on_commit=False) as session:
            gym = make_gym(session)
            make_billing_settings(session, gym.organization, plan_required_to_book=True)
            pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=left)
            kind = schedule.create_class_type(
                session,
                gym.organization.id,
                name="WOD",
                default_capacity=5,
                duration_minutes=60,
                now=NOW,
            )
            self.classes = [
                schedule.schedule_session(
                    session, kind, starts_at=STARTS + timedelta(days=i), now=NOW
                ).id
                for i in range(2)
            ]
            link = EntityLink(id=ids.new_id(), organization_id=gym.organization.id,
                              entity_type=EntityType.schedule, platform_id=str(self.classes[0]),
                              external_id="class-1", origin=Origin.poll, data={},
                              created_at=NOW, updated_at=NOW)  # fmt: skip
            session.add(link)
            session.commit()
            self.organization_id, self.membership_id = gym.organization.id, gym.membership.id
            self.pack_id, self.link_id = pack.id, link.id

    def booker(self, index: int):
        def work(session: Session) -> Booking:
            member = session.get(Membership, self.membership_id)
            return book.book(session, self.organization_id, self.classes[index], member,
                             actor_user_id=member.user_id, now=NOW)  # fmt: skip

        return work

    def canceller(self, booking_id):
        def work(session: Session) -> Booking:
            return book.cancel(session, self.organization_id, booking_id, actor_user_id=None,
                               by_staff=False, now=NOW)  # fmt: skip

        return work

    def remove_first_class(self, session: Session) -> str:
        from gymctl.bridge import inbound

        link = session.get(EntityLink, self.link_id)
        return inbound.class_removed(session, self.organization_id, link, NOW)

    def left(self) -> int:
        with Session(self.engine) as session:
            return session.get(Subscription, self.pack_id).sessions_remaining

    def bookings(self) -> list[Booking]:
        with Session(self.engine) as session:
            rows = session.scalars(
                select(Booking).where(Booking.membership_id == self.membership_id)
            )
            return list(rows)


@pytest.fixture
def one_left(committed_pg) -> PackScene:
    return PackScene(committed_pg, left=1)


def test_two_bookings_spending_a_packs_last_session_book_exactly_one(one_left):
    """The second booking waits on the pack's lock, reads it again (no session left) and is
    refused: the pack's last session pays one seat, not two."""
    held, waiter = race(one_left.engine, one_left.booker(0), one_left.booker(1))

    _refused(waiter, "plan_sessions_used_up", 409)
    assert one_left.left() == 0
    assert [(b.id, b.subscription_id) for b in one_left.bookings()] == [
        (held.result.id, one_left.pack_id)
    ]


def test_a_booking_waiting_on_a_cancel_spends_from_what_the_cancel_gave_back(committed_pg):
    """The cancel locks the pack before the session; the member's booking of another class
    waits on the pack (no deadlock), then reads it again: the session given back is counted."""
    scene = PackScene(committed_pg, left=2)
    with Session(scene.engine, expire_on_commit=False) as session:
        first = scene.booker(0)(session)
        session.commit()
    assert scene.left() == 1

    cancel, waiter = race(scene.engine, scene.canceller(first.id), scene.booker(1))

    assert (cancel.error, waiter.error) == (None, None)
    assert scene.left() == 1
    assert {(b.class_session_id, b.status, b.subscription_id) for b in scene.bookings()} == {
        (scene.classes[0], BookingStatus.cancelled, None),
        (scene.classes[1], BookingStatus.confirmed, scene.pack_id),
    }


def test_a_class_removed_while_a_member_books_on_a_pack_gives_that_session_back(one_left):
    """The bridge waits on the session the booking holds, cancels the booking committed
    meanwhile, and gives its session back, taking the pack's lock the booking let go."""
    _, remover = race(one_left.engine, one_left.booker(0), one_left.remove_first_class)

    assert (remover.error, remover.result) == (None, "cancelled")
    assert one_left.left() == 1
    assert [(b.status, b.subscription_id) for b in one_left.bookings()] == [
        (BookingStatus.cancelled, None)
    ]
