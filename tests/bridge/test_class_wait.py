"""How far a booking.create's wait on its class's cancels reaches (spec B 3: a parked op "blocks
later ops of the same aggregate only"). The order across members only matters while the class is
full there and a cancel on its way would free the seat the create needs: a parked cancel, or a
cancel stuck behind its own member's parked op, holds no one else; and a create waits for only
as many cancels as it needs to find one free seat."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bookings import book
from gymctl.models import BookingStatus
from gymctl.models.bridge import OpStatus, OpType, SyncOp
from tests.bridge.conftest import run
from tests.bridge.test_class_order import _external_users, _linked_class, _members
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

CANCEL = "POST /v3/schedule/cancelUserBooking"
BOOK = "POST /v3/schedule/bookSession"


def _op(session, op_type: OpType, booking) -> SyncOp:
    return session.scalars(
        select(SyncOp)
        .where(
            SyncOp.op_type == op_type, SyncOp.payload["bookingId"].as_string() == str(booking.id)
        )
        .order_by(SyncOp.id.desc())
    ).first()


def _cancel(session, org, seat, member) -> None:
    book.cancel(session, org.id, seat.id, actor_user_id=member.user_id, by_staff=False, now=NOW)
    session.commit()


def test_a_parked_cancel_holds_only_its_member(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """The first member's cancel is refused (400) and parks; the seat was freed there by hand
    meanwhile. The promoted member's create is sent: it does not wait for an operator."""
    first, second = _members(session, org, ["First One", "Second Two"])
    row, external = _linked_class(session, org, fake, account, capacity=1)
    seat = book.book(session, org.id, row.id, first, actor_user_id=first.user_id, now=NOW)
    waiting = book.book(session, org.id, row.id, second, actor_user_id=second.user_id, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    account.registrations.clear()  # the gym's desk cancelled the seat there
    fake.fail(CANCEL, 400)
    _cancel(session, org, seat, first)
    session.refresh(waiting)
    assert waiting.status is BookingStatus.confirmed

    run(session, org.id, bridge_settings, clock)
    cancel, create = (
        _op(session, OpType.booking_cancel, seat),
        _op(session, OpType.booking_create, waiting),
    )
    assert (cancel.status, cancel.issue_code) == (OpStatus.parked, "rejected")
    assert create.class_key == f"class:{row.id}"  # it did have to mind the class
    assert (create.status, create.attempts) == (OpStatus.succeeded, 1)
    two = _external_users(session, org)[str(second.id)]
    assert fake.class_effects[external][-1] == f"book:{two}"
    assert fake.full == []


def test_a_cancel_behind_its_members_parked_op_holds_no_one_else(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """The first member's booking never reached the external system (its create parked), so
    their cancel, stuck behind it, frees no seat there: the promoted member books at once."""
    first, second = _members(session, org, ["First One", "Second Two"])
    row, external = _linked_class(session, org, fake, account, capacity=1)
    run(session, org.id, bridge_settings, clock)  # users and bridge memberships
    fake.fail(BOOK, 400)
    seat = book.book(session, org.id, row.id, first, actor_user_id=first.user_id, now=NOW)
    waiting = book.book(session, org.id, row.id, second, actor_user_id=second.user_id, now=NOW)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    assert _op(session, OpType.booking_create, seat).status is OpStatus.parked
    _cancel(session, org, seat, first)

    run(session, org.id, bridge_settings, clock)
    assert _op(session, OpType.booking_cancel, seat).status is OpStatus.pending  # its aggregate
    create = _op(session, OpType.booking_create, waiting)
    assert create.class_key == f"class:{row.id}"
    assert (create.status, create.attempts) == (OpStatus.succeeded, 1)
    two = _external_users(session, org)[str(second.id)]
    assert fake.class_effects[external] == [f"book:{two}"]
    assert fake.full == []


def test_a_create_waits_for_one_freed_seat_not_for_every_cancel(
    engine, session, org, connected, fake, account, bridge_settings, clock
):
    """Two seats, both held there; both members cancel and a third books while both cancels
    are unsent. One cancel goes through, the other fails and waits on the ladder: one seat is
    free there, all the create needs, so it goes now rather than after the other's ladder."""
    first, second, third = _members(session, org, ["Ann A", "Bo B", "Cy C"])
    row, external = _linked_class(session, org, fake, account, capacity=2)
    seats = [book.book(session, org.id, row.id, m, actor_user_id=m.user_id, now=NOW)
             for m in (first, second)]  # fmt: skip
    session.commit()
    run(session, org.id, bridge_settings, clock)
    for seat, member in zip(seats, (first, second), strict=True):
        _cancel(session, org, seat, member)
    late = book.book(session, org.id, row.id, third, actor_user_id=third.user_id, now=NOW)
    session.commit()
    assert _op(session, OpType.booking_create, late).class_key == f"class:{row.id}"
    fake.fail(CANCEL, 503)  # the first cancel sent fails once

    run(session, org.id, bridge_settings, clock)
    users = _external_users(session, org)
    one, two, three = (users[str(m.id)] for m in (first, second, third))
    assert _op(session, OpType.booking_cancel, seats[0]).status is OpStatus.failed
    assert _op(session, OpType.booking_create, late).status is OpStatus.succeeded
    assert fake.class_effects[external] == [
        f"book:{one}", f"book:{two}", f"cancel:{two}", f"book:{three}",
    ]  # fmt: skip
    assert fake.full == []

    clock.set(clock.now() + timedelta(minutes=2))
    run(session, org.id, bridge_settings, clock)
    assert fake.class_effects[external][-1] == f"cancel:{one}"
    statuses = session.scalars(select(SyncOp.status).where(SyncOp.organization_id == org.id))
    assert set(statuses) == {OpStatus.succeeded}
