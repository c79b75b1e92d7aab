"""Seat decisions racing each other on PostgreSQL: real connections, committed data, threads.

Each test lets one transaction do its work and hold its locks, starts a second that must wait
on one of them, then commits the first: the second goes on from what the first committed. On
the embedded default every write transaction holds the database's one write lock from its
BEGIN IMMEDIATE (gymctl.db), so none of these interleavings can happen there.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access.gyms import delete_organization
from gymctl.access.memberships import end_membership
from gymctl.bookings import attendance, book, schedule
from gymctl.bridge import inbound
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import (
    Booking,
    BookingStatus,
    ClassSession,
    Membership,
    MembershipStatus,
    Organization,
    OutboxEvent,
)
from gymctl.models.bookings import CheckinMethod
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.bookings.conftest import add_member
from tests.conftest import NOW, wait_for_a_lock_wait
from tests.factories import make_gym

STARTS = NOW + timedelta(days=1)


class Transaction(threading.Thread):
    """`work(session)` in a transaction of its own: `done` is set once it has run (its locks
    still held); it commits when `release` is set, or rolls back a refusal as a request does."""

    def __init__(self, factory: sessionmaker[Session], work: Callable[[Session], Any]) -> None:
        super().__init__(daemon=True)
        self.factory, self.work = factory, work
        self.done, self.release = threading.Event(), threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        with self.factory() as session:
            try:
                self.result = self.work(session)
            except BaseException as error:  # asserted by the test
                self.error = error
            self.done.set()
            self.release.wait(30)
            if self.error is None:
                session.commit()
            else:
                session.rollback()


def race(
    engine, first: Callable[[Session], Any], second: Callable[[Session], Any]
) -> tuple[Transaction, Transaction]:
    """`first` runs and holds its locks, `second` waits on one of them, then `first` commits."""
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    holder, waiter = Transaction(factory, first), Transaction(factory, second)
    waiter.release.set()
    holder.start()
    try:
        assert holder.done.wait(20)
        assert holder.error is None, holder.error
        waiter.start()
        wait_for_a_lock_wait(engine)
    finally:
        holder.release.set()
        holder.join()
        if waiter.ident is not None:
            waiter.join()
    return holder, waiter


class Scene:
    """A gym with a member (no plan: the gym books without one) and a session tomorrow, linked
    to its twin in the external system (the bridge's class_removed finds it by that link)."""

    def __init__(self, url: str) -> None:
        self.engine = get_engine(url)
        with Session(self.engine, expire_on_commit=False) as session:
            gym = make_gym(session)
            kind = schedule.create_class_type(
                session,
                gym.organization.id,
                name="Open box",
                default_capacity=5,
                duration_minutes=60,
                now=NOW,
            )
            row = schedule.schedule_session(session, kind, starts_at=STARTS, now=NOW)
            member = add_member(session, gym.organization)
            link = EntityLink(
                id=ids.new_id(),
                organization_id=gym.organization.id,
                entity_type=EntityType.schedule,
                platform_id=str(row.id),
                external_id="class-1",
                origin=Origin.poll,
                data={},
                created_at=NOW,
                updated_at=NOW,
            )
            session.add(link)
            session.commit()
            self.organization_id, self.session_id = gym.organization.id, row.id
            self.membership_id, self.link_id, self.owner_id = member.id, link.id, gym.owner.id

    def book(self, session: Session, at=NOW) -> Booking:
        member = session.get(Membership, self.membership_id)
        return book.book(
            session,
            self.organization_id,
            self.session_id,
            member,
            actor_user_id=member.user_id,
            now=at,
        )

    def remove_class(self, session: Session) -> str:
        link = session.get(EntityLink, self.link_id)
        return inbound.class_removed(session, self.organization_id, link, NOW)

    def end_membership(self, session: Session) -> dict:
        member = session.get(Membership, self.membership_id)
        return end_membership(session, member, actor_user_id=self.owner_id, now=NOW)

    def delete_gym(self, session: Session) -> Organization:
        gym = session.get(Organization, self.organization_id)
        return delete_organization(session, gym, actor_user_id=self.owner_id, now=NOW)

    def bookings(self) -> list[Booking]:
        with Session(self.engine) as session:
            return list(
                session.scalars(select(Booking).where(Booking.class_session_id == self.session_id))
            )

    def event_names(self, aggregate_id: uuid.UUID) -> list[str]:
        with Session(self.engine) as session:
            return list(
                session.scalars(
                    select(OutboxEvent.name).where(OutboxEvent.aggregate_id == str(aggregate_id))
                )
            )


@pytest.fixture
def scene(committed_pg) -> Scene:
    return Scene(committed_pg)


def _refused(waiter: Transaction, code: str, status: int) -> None:
    assert isinstance(waiter.error, DomainError), waiter.error
    assert (waiter.error.code, waiter.error.status) == (code, status)


def test_a_class_cancelled_while_a_member_waits_for_its_seat_refuses_session_cancelled(scene):
    """'Every seat decision of a session happens under that session's row lock': the booking
    that waited on it while the class was removed reads the session again and is refused."""
    _, booker = race(scene.engine, scene.remove_class, scene.book)

    _refused(booker, "session_cancelled", 409)
    assert scene.bookings() == []


def test_a_class_removed_while_a_member_books_cancels_that_booking_too(scene):
    """'Every seat decision of a session happens under that session's row lock': the bridge
    reads the roster it cancels under that lock, so a booking committed meanwhile is in it."""
    held, remover = race(scene.engine, scene.book, scene.remove_class)

    assert (remover.error, remover.result) == (None, "cancelled")
    assert [(b.id, b.status) for b in scene.bookings()] == [
        (held.result.id, BookingStatus.cancelled)
    ]


def test_a_member_removed_before_their_booking_commits_refuses_membership_not_active(scene):
    """'What a membership holds ends with it': a booking waits on the membership's lock while
    staff remove the member, then reads the ended membership and takes no seat."""
    _, booker = race(scene.engine, scene.end_membership, scene.book)

    _refused(booker, "membership_not_active", 409)
    assert scene.bookings() == []


def test_a_member_removed_while_booking_gives_the_seat_up(scene):
    """'Seats in sessions to come are given up as staff would give them up': the removal
    waits for the booking in flight and gives its seat up with the rest."""
    held, remover = race(scene.engine, scene.book, scene.end_membership)

    assert remover.error is None
    assert remover.result["seatsGivenUp"] == 1
    assert [(b.id, b.status) for b in scene.bookings()] == [
        (held.result.id, BookingStatus.cancelled)
    ]
    with Session(scene.engine) as session:
        assert session.get(Membership, scene.membership_id).status is MembershipStatus.cancelled


def test_a_gym_deleted_while_a_member_books_gives_the_seat_up(scene):
    """'What a membership holds ends with it' in a deleted gym too: the deletion gives up each
    membership's seats under its lock, so it waits for the booking in flight and finds it."""
    held, deleter = race(scene.engine, scene.book, scene.delete_gym)

    assert deleter.error is None
    assert [(b.id, b.status) for b in scene.bookings()] == [
        (held.result.id, BookingStatus.cancelled)
    ]


def test_a_booking_that_waited_on_a_gym_deletion_is_refused_organization_not_found(scene):
    """'The gym disappears from every member's list': a booking that read the gym before its
    deletion and waited on the membership's lock the deletion held reads the gym again under
    that lock, and books nothing in a deleted gym."""
    _, booker = race(scene.engine, scene.delete_gym, scene.book)

    _refused(booker, "organization_not_found", 404)
    assert scene.bookings() == []


def test_a_gym_deleted_while_a_later_member_books_gives_both_seats_up_without_a_deadlock(
    scene,
):
    """Billing's order, membership before session, in a gym's deletion too: it gave up one
    member's seats (that class session's lock) and only then locked the next membership, which
    a booking in flight held shared while it waited for that session: "deadlock detected".
    The deletion locks its memberships first, so it waits for the booking and gives its seat
    up with the others."""
    with Session(scene.engine, expire_on_commit=False) as session:
        first = scene.book(session)  # the gym's first member holds a seat in the class
        later = add_member(session, session.get(Organization, scene.organization_id))
        # The deletion reaches it after the first member.
        later.created_at = session.get(Membership, scene.membership_id).created_at + timedelta(
            minutes=1
        )
        session.commit()
    factory = sessionmaker(bind=scene.engine, expire_on_commit=False)
    holding, go = threading.Event(), threading.Event()

    def booking(session: Session) -> Booking:
        member = session.get(Membership, later.id)
        book._lock_active_member(session, scene.organization_id, member)  # book()'s first lock
        holding.set()
        assert go.wait(20)
        return book.book(
            session,
            scene.organization_id,
            scene.session_id,
            member,
            actor_user_id=member.user_id,
            now=NOW,
        )

    booker, deleter = Transaction(factory, booking), Transaction(factory, scene.delete_gym)
    booker.release.set()
    deleter.release.set()
    booker.start()
    try:
        assert holding.wait(20)
        deleter.start()
        wait_for_a_lock_wait(scene.engine)  # the deletion waits on the later membership
    finally:
        go.set()
        booker.join()
        deleter.join()

    assert booker.error is None, booker.error
    assert deleter.error is None, deleter.error
    assert {(b.id, b.status) for b in scene.bookings()} == {
        (first.id, BookingStatus.cancelled),
        (booker.result.id, BookingStatus.cancelled),
    }


def test_a_member_checked_in_while_the_no_show_pass_runs_is_no_no_show(scene):
    """'Every confirmed booking without a check-in' is a no-show: the pass reads the bookings
    under their locks, so a check-in committed meanwhile is left out, never marked both."""
    with Session(scene.engine, expire_on_commit=False) as session:
        booking = scene.book(session)
        session.commit()
    ended = STARTS + timedelta(hours=1, minutes=1)

    def check_in(session: Session) -> Booking:
        return attendance.check_in(
            session,
            scene.organization_id,
            booking.id,
            method=CheckinMethod.kiosk,
            actor_user_id=scene.owner_id,
            now=ended,
        )

    _, daemon = race(
        scene.engine, check_in, lambda session: attendance.no_show_pass(session, now=ended)
    )

    assert (daemon.error, daemon.result) == (
        None,
        {"sessions": 1, "noShows": 0, "waitlistsClosed": 0},
    )
    [stored] = scene.bookings()
    assert (stored.checked_in_at, stored.no_show_at) == (ended, None)
    assert "booking.no_show" not in scene.event_names(booking.id)
    with Session(scene.engine) as session:
        assert session.get(ClassSession, scene.session_id).attendance_closed_at == ended
