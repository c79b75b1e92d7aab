"""Bookings of different members in one class: a booking.create whose seat may still be held at
the external system (a waitlist promotion, or any booking while cancels of the class wait to be
sent) never reaches it before those cancels; creates into a class with room wait for no one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.plans import grant_plan
from gymctl.bookings import book, schedule
from gymctl.bridge import entity_map, queue
from gymctl.models import BookingStatus, Role
from gymctl.models.billing import CollectionMethod, PlanType
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, OpType, Origin, SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from tests import factories
from tests.billing.factories import make_plan
from tests.bridge.conftest import run
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _members(session, org, names):
    owner = factories.user(session)
    factories.membership(session, user=owner, organization=org, role=Role.owner)
    plan = make_plan(session, org, PlanType.cash)
    members = []
    for name in names:
        user = factories.user(session, name=name)
        member = factories.membership(session, user=user, organization=org, role=Role.member)
        grant_plan(session, plan, member, method=CollectionMethod.cash, now=NOW,
                   actor_user_id=owner.id, documents=LocalDocumentProvider())  # fmt: skip
        members.append(member)
    session.commit()
    return members


def _linked_class(session, org, fake, account, capacity):
    """A platform session and its external class, both with `capacity` seats."""
    kind = schedule.create_class_type(session, org.id, name="WOD", default_capacity=capacity,
                                      duration_minutes=60, now=NOW)  # fmt: skip
    row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=1), now=NOW)
    day = row.starts_at.date().isoformat()
    external = fake.add_class(account, day, max_users=capacity)
    entity_map.link(session, org.id, EntityType.schedule, platform_id=row.id,
                    external_id=external, origin=Origin.manual, now=NOW,
                    data={"date": day})  # fmt: skip
    session.commit()
    return row, external


def _external_users(session, org) -> dict[str, str]:
    links = session.scalars(
        select(EntityLink).where(
            EntityLink.organization_id == org.id, EntityLink.entity_type == EntityType.member
        )
    )
    return {link.platform_id: link.external_id for link in links}


def test_a_promotion_waits_for_the_cancel_that_freed_its_seat(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """The cancel fails once (503) and waits on the ladder: the promoted member's create waits
    behind it, uncharged, instead of meeting a full class there and parking."""
    first, second = _members(session, org, ["First One", "Second Two"])
    row, external = _linked_class(session, org, fake, account, capacity=1)
    seat = book.book(session, org.id, row.id, first, actor_user_id=first.user_id, now=NOW)
    waiting = book.book(session, org.id, row.id, second, actor_user_id=second.user_id, now=NOW)
    session.commit()
    assert waiting.status is BookingStatus.waitlisted
    run(session, org.id, bridge_settings, clock)
    fake.fail("POST /v3/schedule/cancelUserBooking", 503)
    book.cancel(session, org.id, seat.id, actor_user_id=first.user_id, by_staff=False, now=NOW)
    session.commit()
    session.refresh(waiting)
    assert waiting.status is BookingStatus.confirmed  # promoted in the cancel's transaction

    run(session, org.id, bridge_settings, clock)
    bookings = session.scalars(
        select(SyncOp)
        .where(SyncOp.op_type.in_([OpType.booking_create, OpType.booking_cancel]))
        .order_by(SyncOp.id)
    ).all()
    key = f"class:{row.id}"
    assert [(op.op_type, op.class_key, op.status, op.attempts) for op in bookings] == [
        (OpType.booking_create, None, OpStatus.succeeded, 1),  # the class had room
        (OpType.booking_cancel, key, OpStatus.failed, 1),
        (OpType.booking_create, key, OpStatus.pending, 0),  # not sent: no free seat there yet
    ]
    assert fake.full == []

    clock.set(clock.now() + timedelta(minutes=2))  # the cancel's ladder step
    run(session, org.id, bridge_settings, clock)
    users = _external_users(session, org)
    one, two = users[str(first.id)], users[str(second.id)]
    assert fake.class_effects[external] == [f"book:{one}", f"cancel:{one}", f"book:{two}"]
    assert fake.full == []
    statuses = session.scalars(select(SyncOp.status).where(SyncOp.organization_id == org.id))
    assert set(statuses) == {OpStatus.succeeded}


def test_creates_of_one_class_are_claimed_together(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """Only seat-freeing orders members against each other: the class is not serialised."""
    members = _members(session, org, ["Ann A", "Bo B", "Cy C"])
    row, _external = _linked_class(session, org, fake, account, capacity=3)
    run(session, org.id, bridge_settings, clock)  # users and bridge memberships
    for member in members:
        book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()
    claimed = queue.claim(session, org.id, now=NOW, limit=10, lease=timedelta(minutes=5),
                          owner="test")  # fmt: skip
    assert [(op.op_type, op.class_key) for op in claimed] == [(OpType.booking_create, None)] * 3


def test_cancels_not_yet_sent_count_as_taken_seats(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """Two seats, both booked there; both members cancel, but the cancels fail and wait. A third
    member books a seat the platform has free: at the external system both seats are still
    taken, so the create waits for the cancels."""
    first, second, third = _members(session, org, ["Ann A", "Bo B", "Cy C"])
    row, external = _linked_class(session, org, fake, account, capacity=2)
    seats = [book.book(session, org.id, row.id, m, actor_user_id=m.user_id, now=NOW)
             for m in (first, second)]  # fmt: skip
    session.commit()
    run(session, org.id, bridge_settings, clock)
    fake.fail("POST /v3/schedule/cancelUserBooking", 503, times=2)
    for seat, member in zip(seats, (first, second), strict=True):
        book.cancel(session, org.id, seat.id, actor_user_id=member.user_id, by_staff=False,
                    now=NOW)  # fmt: skip
    session.commit()
    run(session, org.id, bridge_settings, clock)  # both cancels fail once
    late = book.book(session, org.id, row.id, third, actor_user_id=third.user_id, now=NOW)
    session.commit()
    assert late.status is BookingStatus.confirmed  # one of two seats taken on the platform
    run(session, org.id, bridge_settings, clock)
    create = session.scalars(
        select(SyncOp).where(SyncOp.op_type == OpType.booking_create).order_by(SyncOp.id.desc())
    ).first()
    assert (create.class_key, create.status, create.attempts) == (
        f"class:{row.id}", OpStatus.pending, 0,
    )  # fmt: skip
    clock.set(clock.now() + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    users = _external_users(session, org)
    one, two, three = (users[str(m.id)] for m in (first, second, third))
    assert fake.class_effects[external] == [
        f"book:{one}", f"book:{two}", f"cancel:{one}", f"cancel:{two}", f"book:{three}",
    ]  # fmt: skip
    assert fake.full == []
