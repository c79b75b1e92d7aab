"""Staff cancel a class (cancel_class.cancel_session), or cancel or remove a seat (book.cancel,
book.remove), while the seat's member is being removed (access.leaving.end_holdings), in a gym
with a bridge: billing's lock order at these doors too (docs/decisions.md: membership (shared),
the plan (FOR UPDATE), then the session).

The leaving member holds their membership's lock and, from their first seat given up, the
mirror's lock of their sync ops (mirror._last_op); they then wait for the next seat's class
session. The class cancel took that class's lock first and, cancelling the leaving member's
seat there, waited for the member's sync-op lock: "deadlock detected" (503 database_busy). So
did a staff cancel or removal of the leaving member's seat (book._lock_pair). Each door now
locks the memberships of the seats it ends (and of those waiting in the class) shared, in one
id order, before any plan's or class's lock: it waits for the removal, holding no class, and
finds the seat given up once.

Two gyms: one booking without plans (the hunt's), and one requiring a plan where the leaving
member books on an unlimited plan (their seats spend nothing, so no plan's lock waits for
their membership first) and the other member on a pack. PostgreSQL only: on the embedded
default each write transaction holds the database's one write lock (gymctl.db), there are no
row locks to order.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from gymctl.bookings import book, cancel_class, codes
from gymctl.errors import DomainError
from gymctl.models import (
    Booking,
    BookingStatus,
    ClassSession,
    Membership,
    MembershipStatus,
    OutboxEvent,
    Subscription,
)
from gymctl.models.billing import PlanType
from tests.billing.factories import make_subscription
from tests.bridge.test_poll_lock_order import Scene, Step, _leaving, _session_lock_free
from tests.conftest import NOW, wait_for_a_lock_wait
from tests.factories import Gym


def _leaver_on_an_unlimited_plan(scene: Scene) -> None:
    """The leaving member booked on a monthly cash plan (unlimited: it pays without spending):
    their seats record no plan and their pack keeps its five sessions."""
    with Session(scene.engine) as session:
        leaver = session.get(Membership, scene.leaver)
        make_subscription(session, Gym.of(leaver), PlanType.cash, membership=leaver)
        session.execute(
            update(Booking).where(Booking.membership_id == leaver.id).values(subscription_id=None)
        )
        session.execute(
            update(Subscription)
            .where(Subscription.membership_id == leaver.id, Subscription.plan_type == PlanType.pack)
            .values(sessions_remaining=5)
        )
        session.commit()


@pytest.fixture(params=["no_plans", "packs"])
def scene(request, committed_pg) -> Scene:
    packs = request.param == "packs"
    made = Scene(committed_pg, packs=packs)
    if packs:
        _leaver_on_an_unlimited_plan(made)
    made.packs = packs
    return made


def _race(scene: Scene, work, class_id) -> tuple[Step, Step, bool]:
    """The removal holds the leaving member's lock and their first seat's sync-op lock; `work`
    runs on a staff session until it waits. Whether the class was free meanwhile, then both
    go on."""
    leaving_holds, go_on = threading.Event(), threading.Event()
    leaver, staff = (Session(scene.engine, expire_on_commit=False) for _ in range(2))
    removal = Step(leaver, _leaving(scene, leaver, leaving_holds, go_on))
    other = Step(staff, lambda: work(staff))
    try:
        removal.start()
        assert leaving_holds.wait(20), removal.error
        other.start()
        wait_for_a_lock_wait(scene.engine, rival=other)
        class_free = _session_lock_free(scene.engine, class_id)
    finally:
        go_on.set()
        removal.join(30)
        other.join(30)
    assert (removal.is_alive(), other.is_alive()) == (False, False), "a side still waits"
    return removal, other, class_free


def _seat(session: Session, class_id, member_id) -> Booking:
    return session.scalar(
        select(Booking).where(
            Booking.class_session_id == class_id, Booking.membership_id == member_id
        )
    )


def _events(session: Session, name: str, aggregate_id) -> list[dict]:
    return [
        event.payload
        for event in session.scalars(
            select(OutboxEvent).where(
                OutboxEvent.name == name, OutboxEvent.aggregate_id == str(aggregate_id)
            )
        )
    ]


def _pack_left(session: Session, member_id) -> int | None:
    return session.scalar(
        select(Subscription.sessions_remaining).where(
            Subscription.membership_id == member_id, Subscription.plan_type == PlanType.pack
        )
    )


def _the_removal_went_through(session: Session, scene: Scene, removal: Step) -> None:
    assert session.get(Membership, scene.leaver).status is MembershipStatus.cancelled
    assert removal.result["seatsGivenUp"] == 2  # A and W (C first, in _leaving)
    kept = session.scalars(
        select(Booking).where(
            Booking.membership_id == scene.leaver, Booking.status.in_(book.ACTIVE)
        )
    ).all()
    assert kept == []


def test_staff_cancel_a_class_waits_for_a_member_in_it_being_removed(scene):
    """The class cancel locks the members of the class's seats (and its waiting) before the
    class: it waits for the removal, which gives its seat up, then cancels the class and the
    other seat; the leaving member's seat is cancelled once, each pack session given back once
    (was: "deadlock detected", one side ended)."""
    a = scene.classes["a"]
    with Session(scene.engine) as session:
        other_id = session.scalar(
            select(Booking.membership_id).where(
                Booking.class_session_id == a, Booking.membership_id != scene.leaver
            )
        )
        leavers_seat, others_seat = (_seat(session, a, m).id for m in (scene.leaver, other_id))

    def cancel(staff: Session) -> int:
        _row, count = cancel_class.cancel_session(
            staff, scene.organization_id, a, actor_user_id=scene.owner_id, now=NOW
        )
        staff.commit()
        return count

    removal, cancelling, class_free = _race(scene, cancel, a)
    assert (removal.error, cancelling.error) == (None, None)  # was: "deadlock detected"
    assert class_free, "the class cancel held the class's lock while it waited for a member"
    assert cancelling.result == 1  # the other member's: the leaving member's was given up
    with Session(scene.engine) as session:
        _the_removal_went_through(session, scene, removal)
        assert session.get(ClassSession, a).cancelled_at == NOW
        assert (
            session.scalars(select(Booking.status).where(Booking.class_session_id == a)).all()
            == [BookingStatus.cancelled] * 2
        )
        [given_up] = _events(session, "booking.cancelled", leavers_seat)
        assert "reason" not in given_up  # by the removal, not the class cancel
        [cancelled] = _events(session, "booking.cancelled", others_seat)
        assert cancelled["reason"] == cancel_class.SESSION_CANCELLED
        [event] = _events(session, "class_session.cancelled", a)
        assert event["cancelledBookings"] == 1
        if scene.packs:
            # The other member spent A and W (5 - 2), A's comes back once; the leaving
            # member's seats spent nothing of their pack.
            assert cancelled["sessionReturnedTo"]
            assert (_pack_left(session, other_id), _pack_left(session, scene.leaver)) == (4, 5)
            assert session.scalars(
                select(Booking.subscription_id).where(Booking.class_session_id == a)
            ).all() == [None, None]


@pytest.mark.parametrize("door", ["cancel", "remove"])
def test_staff_end_a_seat_of_a_member_being_removed_wait_for_the_removal(scene, door):
    """A staff cancel or removal of the leaving member's seat locks that member (and the
    class's waiting) before the class: it waits for the removal, which gives the seat up; the
    cancel then answers 409 booking_not_active (not 503), the removal soft-deletes the
    cancelled row, giving nothing back again (was: "deadlock detected")."""
    a = scene.classes["a"]
    with Session(scene.engine) as session:
        seat = _seat(session, a, scene.leaver).id
        packs_before = session.execute(
            select(Subscription.id, Subscription.sessions_remaining).order_by(Subscription.id)
        ).all()

    def end(staff: Session) -> Booking:
        if door == "cancel":
            ended = book.cancel(staff, scene.organization_id, seat, actor_user_id=scene.owner_id,
                                by_staff=True, now=NOW)  # fmt: skip
        else:
            ended = book.remove(staff, scene.organization_id, seat,
                                actor_user_id=scene.owner_id, now=NOW)  # fmt: skip
        staff.commit()
        return ended

    removal, ending, class_free = _race(scene, end, a)
    assert removal.error is None  # was: "deadlock detected", either side
    if door == "cancel":
        assert isinstance(ending.error, DomainError), ending.error
        assert ending.error.code == codes.BOOKING_NOT_ACTIVE  # given up by the removal
    else:
        assert ending.error is None
    assert class_free, "the staff door held the class's lock while it waited for a member"
    with Session(scene.engine) as session:
        _the_removal_went_through(session, scene, removal)
        row = session.get(Booking, seat)
        assert row.status is BookingStatus.cancelled
        assert (row.deleted_at is not None) == (door == "remove")
        assert len(_events(session, "booking.cancelled", seat)) == 1
        removed = _events(session, "booking.removed", seat)
        assert len(removed) == (door == "remove")
        assert all("sessionReturnedTo" not in event for event in removed)
        # Nothing given back by the staff door: only the removal's plans moved (ended).
        packs_after = session.execute(
            select(Subscription.id, Subscription.sessions_remaining).order_by(Subscription.id)
        ).all()
        assert packs_after == packs_before
