"""A relinked seat moves by booking the new external class first and cancelling the old
registration only once the new one stands (s59). It cancelled first, so a full new class left
the member registered nowhere while the op parked for the owner. Decisions, issue 18: "a
mirrored booking gone there [...] is cancelled here", so a member registered nowhere there
would lose the seat here at the next reconcile; the owner's pick (`link_class`) "moves the
seats already registered at the old class to the new one", never drops them."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.bridge import classes, queue
from gymctl.models.bridge import EntityLink, EntityType, OpStatus, SyncOp
from tests.bridge.conftest import run
from tests.bridge.test_classes import _registered_at, _seat_sent_to_the_first_of_two
from tests.bridge.test_dispatch import _later

pytestmark = pytest.mark.embedded  # the move is walked on both engines


def _link(session, org, booking_id) -> tuple[str, str, str]:
    """The booking's link as stored (columns: no object kept in the test's session, which the
    dispatcher's writes by Core would leave stale for its reconcile)."""
    external_id, data = session.execute(
        select(EntityLink.external_id, EntityLink.data).where(
            EntityLink.organization_id == org.id,
            EntityLink.entity_type == EntityType.booking,
            EntityLink.platform_id == str(booking_id),
        )
    ).one()
    return external_id, data["scheduleId"], data["status"]


def _move_op(session):
    return session.scalars(
        select(SyncOp).where(SyncOp.op_type == "booking.create").order_by(SyncOp.id.desc())
    ).first()


def _relinked(session, org, fake, account, bridge_settings, clock, *, new_class_seats=20):
    first, chosen, row = _seat_sent_to_the_first_of_two(
        session, org, fake, account, bridge_settings, clock
    )
    account.classes[chosen]["max_users"] = new_class_seats
    (user_id,) = _registered_at(account, first)
    assert classes.link_class(session, org.id, row.id, chosen, now=clock.now())["seatsMoved"] == 1
    session.commit()
    return first, chosen, row, user_id


def test_a_full_new_class_leaves_the_member_registered_at_the_old_one(
    session, org, connected, fake, account, bridge_settings, clock
):
    first, chosen, _row, user_id = _relinked(
        session, org, fake, account, bridge_settings, clock, new_class_seats=0
    )
    run(session, org.id, bridge_settings, clock)
    op = _move_op(session)
    assert (op.status, op.issue_code) == (OpStatus.parked, "rejected")
    assert _registered_at(account, first) == [user_id]  # still registered somewhere
    assert fake.calls_to("POST /v3/schedule/cancelUserBooking") == []
    old = _link(session, org, op.payload["bookingId"])
    assert old[1:] == (first, "booked")
    assert account.registrations[old[0]]["schedule_id"] == first
    # The owner makes room there and retries: the seat moves then.
    account.classes[chosen]["max_users"] = 20
    queue.retry(session, op.id, now=clock.now(), organization_id=org.id)
    session.commit()
    run(session, org.id, bridge_settings, clock)
    assert _move_op(session).status is OpStatus.succeeded
    assert (_registered_at(account, first), _registered_at(account, chosen)) == ([], [user_id])
    assert fake.duplicates == []


def test_the_new_class_is_booked_before_the_old_registration_is_cancelled(
    session, org, connected, fake, account, bridge_settings, clock
):
    first, chosen, _row, user_id = _relinked(session, org, fake, account, bridge_settings, clock)
    run(session, org.id, bridge_settings, clock)
    assert _move_op(session).status is OpStatus.succeeded
    assert fake.effects[user_id][-2:] == [f"book:{chosen}", f"cancel:{first}"]
    assert (_registered_at(account, first), _registered_at(account, chosen)) == ([], [user_id])


def test_an_old_registration_whose_cancel_failed_is_cancelled_by_the_retry(
    session, org, connected, fake, account, bridge_settings, clock
):
    """The new seat was booked, the old one's cancel answered 503: the retry finds the new
    registration (never books twice) and cancels the old one; the member ends at the new
    class only, and the map names the new registration."""
    first, chosen, _row, user_id = _relinked(session, org, fake, account, bridge_settings, clock)
    fake.fail("POST /v3/schedule/cancelUserBooking", 503)
    run(session, org.id, bridge_settings, clock)
    op = _move_op(session)
    assert op.status is OpStatus.failed
    assert sorted(_registered_at(account, first) + _registered_at(account, chosen)) == [
        user_id,
        user_id,
    ]
    _later(clock)
    run(session, org.id, bridge_settings, clock)
    assert _move_op(session).status is OpStatus.succeeded
    assert (_registered_at(account, first), _registered_at(account, chosen)) == ([], [user_id])
    assert fake.duplicates == []
    (registration,) = [
        r for r, reg in account.registrations.items() if reg["schedule_id"] == chosen
    ]
    assert _link(session, org, op.payload["bookingId"]) == (registration, chosen, "booked")
