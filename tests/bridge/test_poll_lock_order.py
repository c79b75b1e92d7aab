"""The schedule poll's changes applied in billing's lock order (docs/decisions.md, s45 "bookings
at the joins", the paragraph left open; s46).

The poll applies everything it noticed in one transaction (inbound.apply): a class removed
there, a booking cancelled or made there, a coach changed there each take a class session's
row lock, and a booking made there by a linked member then takes that member's lock
(bookings.book: membership first, shared). Held in that order, the reverse of billing's
(organization, membership, subscription, then the class session), a member leaving at the same
moment (access.leaving: the membership FOR UPDATE, then each seat's session) closed a cycle on
PostgreSQL: one side ended by "deadlock detected", the poll or the staff member's removal.

So did a seat of a leaving member cancelled or promoted by the poll: the mirror's lock of the
member's sync ops (mirror._last_op) was taken under the class's lock, and the leaving member's
first seat given up already held it.

Each test here lets a leaving member hold their membership's lock (and give up their first
seat), runs the poll's application until it waits, and asks from a third connection whether
the poll holds a class session's lock meanwhile (FOR UPDATE NOWAIT). Then the removal goes on
to the other seats: both commit. PostgreSQL only: on the embedded default each write
transaction holds the database's one write lock from BEGIN IMMEDIATE (gymctl.db), there are
no row locks to order.
"""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.access.memberships import end_membership
from gymctl.bookings import book, schedule
from gymctl.bridge import inbound
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus
from gymctl.models.billing import PlanType
from gymctl.models.bridge import BridgeIssue, EntityLink, EntityType, IntegrationConnection, Origin
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import add_member
from tests.conftest import NOW, wait_for_a_lock_wait
from tests.factories import make_gym

STARTS = NOW + timedelta(days=1)


def _link(organization_id, entity_type, platform_id, external_id, data) -> EntityLink:
    return EntityLink(
        id=ids.new_id(),
        organization_id=organization_id,
        entity_type=entity_type,
        platform_id=str(platform_id) if platform_id is not None else None,
        external_id=external_id,
        origin=Origin.poll,
        data=data,
        created_at=NOW,
        updated_at=NOW,
    )


def _registration(organization_id, booking_id, external_id, member, external_class):
    data = {"memberId": str(member.id), "scheduleId": external_class, "status": "booked"}
    return _link(organization_id, EntityType.booking, booking_id, external_id, data)


class Scene:
    """A gym with a bridge and four classes tomorrow, each linked to its external twin: C
    (first), A, B, and W (one seat). The leaving member holds seats in C and A and waits in W;
    another member holds seats in A and W. At the external system's desk the leaving member was
    booked into B and a third member into A (registrations not yet placed here); the owner is
    linked as staff coach-9. With `packs`, the gym requires a plan and each seat spends a
    session of the member's pack."""

    def __init__(self, url: str, *, packs: bool) -> None:
        self.engine = get_engine(url)
        with Session(self.engine, expire_on_commit=False) as session:
            gym = make_gym(session)
            org = gym.organization.id
            if packs:
                make_billing_settings(session, gym.organization, plan_required_to_book=True)
            kind = schedule.create_class_type(
                session, org, name="Open box", default_capacity=5, duration_minutes=60, now=NOW
            )
            classes = {
                name: schedule.schedule_session(
                    session, kind, starts_at=STARTS + timedelta(hours=hours), now=NOW
                )
                for name, hours in (("c", -2), ("a", 0), ("b", 2), ("w", 4))
            }
            classes["w"].capacity = 1
            leaver, other, newcomer = (add_member(session, gym.organization) for _ in range(3))
            for member in (leaver, other, newcomer) if packs else ():
                make_subscription(
                    session, gym, PlanType.pack, membership=member, sessions_remaining=5
                )
            seats = {
                (member.id, name): book.book(
                    session, org, classes[name].id, member, actor_user_id=member.user_id, now=NOW
                )
                for member, name in ((leaver, "c"), (leaver, "a"), (other, "a"), (other, "w"),
                                     (leaver, "w"))
            }  # fmt: skip
            assert seats[leaver.id, "w"].status is BookingStatus.waitlisted
            links = [
                *(
                    _link(org, EntityType.schedule, row.id, f"class-{name}", {"coachId": "coach-1"})
                    for name, row in classes.items()
                ),
                _link(org, EntityType.staff, gym.owner_membership.id, "coach-9", {}),
                _registration(org, None, "reg-leaver-b", leaver, "class-b"),
                _registration(org, None, "reg-new-a", newcomer, "class-a"),
                _registration(org, seats[leaver.id, "a"].id, "reg-leaver-a", leaver, "class-a"),
                _registration(org, seats[other.id, "a"].id, "reg-other-a", other, "class-a"),
                _registration(org, seats[other.id, "w"].id, "reg-other-w", other, "class-w"),
            ]
            session.add_all(links)
            session.add(IntegrationConnection(organization_id=org, status="active",
                                              credentials_ciphertext=None))  # fmt: skip
            session.commit()
            self.organization_id, self.owner_id = org, gym.owner.id
            self.classes = {name: row.id for name, row in classes.items()}
            self.leaver, self.first_seat = leaver.id, seats[leaver.id, "c"].id
            self.links = {row.external_id: row.id for row in links}

    def noticed(self, session: Session, case: str) -> list[tuple[str, EntityLink]]:
        """What a poll noticed, in the order serve_polls hands it over (the schedule's notices
        before the reconcile's)."""
        link = {name: session.get(EntityLink, row) for name, row in self.links.items()}

        def changed(name: str, **data) -> EntityLink:
            link[name].data = {**link[name].data, **data}
            return link[name]

        cancelled = {"status": "cancelled_externally"}
        return {
            "class_removed": [("class_removed", changed("class-a", removed=True))],
            "booking_cancelled": [("booking_cancelled", changed("reg-leaver-a", **cancelled))],
            "booking_cancelled_promoting": [
                ("booking_cancelled", changed("reg-other-w", **cancelled))
            ],
            "class_removed_then_seen": [
                ("class_removed", changed("class-a", removed=True)),
                ("booking_seen", link["reg-leaver-b"]),
            ],
            "booking_cancelled_then_seen": [
                ("booking_cancelled", changed("reg-other-a", **cancelled)),
                ("booking_seen", link["reg-leaver-b"]),
            ],
            "booking_seen_then_seen": [
                ("booking_seen", link["reg-new-a"]),
                ("booking_seen", link["reg-leaver-b"]),
            ],
            "coach_changed_then_seen": [
                ("coach_changed", changed("class-a", coachId="coach-9")),
                ("booking_seen", link["reg-leaver-b"]),
            ],
        }[case]


@pytest.fixture(params=[False, True], ids=["no_plans", "packs"])
def scene(request, committed_pg) -> Scene:
    return Scene(committed_pg, packs=request.param)


class Step(threading.Thread):
    """`work()` on `session` in a thread; a failure rolls back (an aborted transaction holds
    its locks until then) and is kept for the test."""

    def __init__(self, session: Session, work) -> None:
        super().__init__(daemon=True)
        self.session, self.work, self.result, self.error = session, work, None, None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as error:  # asserted by the test
            self.error = error
            self.session.rollback()
        finally:
            self.session.close()


def _session_lock_free(engine, session_id: uuid.UUID) -> bool:
    """Whether another transaction could lock the class session now (nobody holds its row)."""
    with engine.connect() as probe:
        try:
            probe.execute(
                text("SELECT id FROM class_sessions WHERE id = :id FOR UPDATE NOWAIT"),
                {"id": session_id},
            )
            return True
        except OperationalError:
            return False
        finally:
            probe.rollback()


def _leaving(scene: Scene, leaver: Session, holds: threading.Event, go_on: threading.Event):
    """The leaving member's removal (access.leaving): the membership's lock, then the seats one
    by one; `holds` is set once the first (C's) is given up, and it goes on at `go_on`."""

    def leave() -> dict[str, Any]:
        leaver.scalar(select(Membership.id).where(Membership.id == scene.leaver).with_for_update())
        book.cancel(leaver, scene.organization_id, scene.first_seat, actor_user_id=scene.owner_id,
                    by_staff=True, now=NOW)  # fmt: skip
        holds.set()
        assert go_on.wait(20)
        member = leaver.get(Membership, scene.leaver)
        result = end_membership(leaver, member, actor_user_id=scene.owner_id, now=NOW)
        leaver.commit()
        return result

    return leave


CASES = {  # what the poll applies, and what it counts once the leaving member is gone
    "class_removed": {"class_removed:cancelled": 1},
    "booking_cancelled": {"booking_cancelled:already_inactive": 1},
    "booking_cancelled_promoting": {"booking_cancelled:cancelled": 1},
    "class_removed_then_seen": {"class_removed:cancelled": 1, "booking_seen:issue": 1},
    "booking_cancelled_then_seen": {"booking_cancelled:cancelled": 1, "booking_seen:issue": 1},
    "booking_seen_then_seen": {"booking_seen:booked": 1, "booking_seen:issue": 1},
    "coach_changed_then_seen": {"coach_changed:applied": 1, "booking_seen:issue": 1},
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_poll_waits_for_a_leaving_member_holding_no_class_session_lock(scene, case):
    """Billing's fixed order, "organization, membership, subscription, then the class
    session": the poll that books, cancels or promotes a leaving member's seat waits for the
    membership's lock before any class session's, so the removal gives the member's seats up
    and both commit (the poll was ended by "deadlock detected")."""
    leaving_holds = threading.Event()
    go_on = threading.Event()
    leaver = Session(scene.engine, expire_on_commit=False)
    poll = Session(scene.engine, expire_on_commit=False)

    def apply() -> dict[str, int]:
        noticed = scene.noticed(poll, case)
        counts = inbound.apply(poll, _Connection(scene.organization_id), noticed, NOW)
        poll.commit()
        return counts

    removal = Step(leaver, _leaving(scene, leaver, leaving_holds, go_on))
    applying = Step(poll, apply)
    try:
        removal.start()
        assert leaving_holds.wait(20), removal.error
        applying.start()
        wait_for_a_lock_wait(scene.engine)  # the poll waits on what the leaving member holds
        held = [
            name
            for name in ("a", "b", "w")
            if not _session_lock_free(scene.engine, scene.classes[name])
        ]
    finally:
        go_on.set()
        removal.join(30)
        applying.join(30)

    assert (removal.error, applying.error) == (None, None)  # was: "deadlock detected"
    assert held == [], "the poll held a class's lock while it waited for a member"
    assert removal.result["seatsGivenUp"] == 2  # A and W (C first, above)
    assert applying.result == CASES[case]
    with Session(scene.engine) as session:
        assert session.get(Membership, scene.leaver).status is MembershipStatus.cancelled
        kept = session.scalars(
            select(Booking).where(
                Booking.membership_id == scene.leaver, Booking.status.in_(book.ACTIVE)
            )
        ).all()
        assert kept == []  # not booked into B, not promoted in W
        if "booking_seen:issue" in CASES[case]:
            [issue] = session.scalars(
                select(BridgeIssue).where(BridgeIssue.subject == "reg-leaver-b")
            ).all()
            assert issue.details["reason"] == "membership_not_active"


class _Connection:
    """inbound.apply reads only the connection's organization."""

    def __init__(self, organization_id: uuid.UUID) -> None:
        self.organization_id = organization_id


def test_a_cancel_that_may_promote_a_leaving_member_waits_for_them_first(scene):
    """Billing's order at every door that promotes: a seat freed goes to the first waiting, and
    in a gym connected to the external system the promotion takes that member's sync-op lock
    (mirror._last_op). Taken under the class's lock, it waited for a member leaving at that
    moment (who held it since their first seat given up) while they waited for the class:
    "deadlock detected". The cancel takes the waiting members' locks before the class's."""
    leaving_holds, go_on = threading.Event(), threading.Event()
    leaver, staff = (Session(scene.engine, expire_on_commit=False) for _ in range(2))
    w = scene.classes["w"]
    seat = staff.scalar(
        select(Booking.id).where(
            Booking.class_session_id == w, Booking.status == BookingStatus.confirmed
        )
    )

    def cancel() -> Booking:
        cancelled = book.cancel(staff, scene.organization_id, seat, actor_user_id=scene.owner_id,
                                by_staff=True, now=NOW)  # fmt: skip
        staff.commit()
        return cancelled

    removal = Step(leaver, _leaving(scene, leaver, leaving_holds, go_on))
    cancelling = Step(staff, cancel)
    try:
        removal.start()
        assert leaving_holds.wait(20), removal.error
        cancelling.start()
        wait_for_a_lock_wait(scene.engine)  # the cancel waits on what the leaving member holds
        class_free = _session_lock_free(scene.engine, w)
    finally:
        go_on.set()
        removal.join(30)
        cancelling.join(30)

    assert (removal.error, cancelling.error) == (None, None)  # was: "deadlock detected"
    assert class_free, "the cancel held the class's lock while it waited for a member"
    with Session(scene.engine) as session:
        assert session.get(Membership, scene.leaver).status is MembershipStatus.cancelled
        assert session.get(Booking, seat).status is BookingStatus.cancelled
        kept = session.scalars(
            select(Booking).where(
                Booking.membership_id == scene.leaver, Booking.status.in_(book.ACTIVE)
            )
        ).all()
        assert kept == []  # not promoted into W after leaving
