"""A booking.create refused at its first attempt looks for the member's own registration, as a
retry does: a member already registered in the class there (booked there directly, or by an
answer lost) is linked to it, not parked as rejected. A refusal with no registration behind it
still parks."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.bookings import book
from gymctl.bridge import entity_map
from gymctl.models.bridge import EntityType, OpStatus, OpType, Origin, SyncOp
from tests.bridge.conftest import run
from tests.bridge.test_class_order import _external_users, _linked_class, _members
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

BOOK = "POST /v3/schedule/bookSession"


def _create(session) -> SyncOp:
    return session.scalars(select(SyncOp).where(SyncOp.op_type == OpType.booking_create)).one()


def _scene(session, org, fake, account, bridge_settings, clock, capacity=5):
    """A linked member with their bridge membership there, and a linked class."""
    (member,) = _members(session, org, ["Dana Levi"])
    row, external = _linked_class(session, org, fake, account, capacity=capacity)
    run(session, org.id, bridge_settings, clock)
    return member, row, external, _external_users(session, org)[str(member.id)]


def test_a_first_attempt_refused_as_already_registered_links_the_registration(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    member, row, external, user = _scene(session, org, fake, account, bridge_settings, clock)
    there = fake.add_registration(account, user, external)  # booked there directly
    booking = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()

    run(session, org.id, bridge_settings, clock)
    op = _create(session)
    assert (op.status, op.attempts, op.issue_code) == (OpStatus.succeeded, 1, None)
    link = entity_map.find(session, org.id, EntityType.booking, booking.id)
    assert (link.external_id, link.data["status"]) == (there, "booked")
    assert len(fake.calls_to(BOOK)) == 1  # refused once, then looked up: never sent again
    assert external not in fake.class_effects  # nothing booked there by us


def test_the_registration_the_poll_saw_unclaimed_is_taken_over(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """The reconcile left the registration unclaimed (the member had no seat here then)."""
    member, row, external, user = _scene(session, org, fake, account, bridge_settings, clock)
    there = fake.add_registration(account, user, external)
    entity_map.link(session, org.id, EntityType.booking, platform_id=None, external_id=there,
                    origin=Origin.poll, now=NOW,
                    data={"memberId": str(member.id), "scheduleId": external,
                          "status": "booked"})  # fmt: skip
    booking = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()

    run(session, org.id, bridge_settings, clock)
    assert _create(session).status is OpStatus.succeeded
    link = entity_map.find(session, org.id, EntityType.booking, booking.id)
    assert (link.external_id, link.platform_id) == (there, str(booking.id))


def test_a_refusal_with_no_registration_behind_it_still_parks(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """The external class is full of others: the look-up finds no registration of the member."""
    member, row, external, _user = _scene(
        session, org, fake, account, bridge_settings, clock, capacity=1
    )
    other = fake.add_user(account, "other@example.test")
    fake.add_registration(account, other, external)
    booking = book.book(session, org.id, row.id, member, actor_user_id=member.user_id, now=NOW)
    session.commit()

    run(session, org.id, bridge_settings, clock)
    op = _create(session)
    assert (op.status, op.issue_code) == (OpStatus.parked, "rejected")
    assert op.last_error == f"{BOOK}: 422"
    assert entity_map.find(session, org.id, EntityType.booking, booking.id) is None
