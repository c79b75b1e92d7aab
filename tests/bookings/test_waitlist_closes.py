"""A waitlist closes when its class starts or is cancelled (spec B 2.4: a booking is
confirmed, waitlisted or cancelled; spec B 3: promotion is the only way out of the waitlist,
and none comes after the start). The booking_no_shows pass (attendance.no_show_pass, every 5
minutes, in the job's one transaction) cancels the waitlisted bookings of started or cancelled
classes, gives back a pack's session they held, and writes booking.cancelled with reason
waitlist_closed: the member's app no longer shows them pending for ever."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.bookings import attendance, book
from gymctl.models import Booking, BookingStatus, OutboxEvent, Role
from gymctl.models.billing import PlanType
from tests.access import conftest as access
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import (
    TOMORROW,
    add_member,
    book_over_http,
    book_seat,
    schedule_over_http,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym


def _roster(client, gym, class_session) -> dict[str, str]:
    answer = client.get(
        f"/organizations/{gym.id}/sessions/{class_session['id']}/bookings",
        headers=gym[Role.coach].headers,
    )
    return {row["id"]: row["status"] for row in answer.json["data"]}


def test_a_waitlisted_booking_is_cancelled_once_its_class_starts(engine, client, session, gym):
    class_session = schedule_over_http(client, gym)
    seat = book_over_http(client, gym, class_session["id"], Role.member)
    waiting = book_over_http(client, gym, class_session["id"], Role.admin)
    assert waiting["status"] == "waitlisted"

    before = attendance.no_show_pass(session, now=TOMORROW - timedelta(minutes=1))
    session.commit()
    assert _roster(client, gym, class_session)[waiting["id"]] == "waitlisted"  # may still move
    assert before["waitlistsClosed"] == 0

    started = TOMORROW + timedelta(minutes=5)
    first = attendance.no_show_pass(session, now=started)
    session.commit()
    assert first["waitlistsClosed"] == 1
    assert _roster(client, gym, class_session) == {
        seat["id"]: "confirmed",
        waiting["id"]: "cancelled",
    }
    row = session.get(Booking, uuid.UUID(waiting["id"]))
    assert (row.cancelled_at, row.waitlisted_at) == (started, None)
    event = session.scalars(
        select(OutboxEvent).where(
            OutboxEvent.name == "booking.cancelled",
            OutboxEvent.aggregate_id == waiting["id"],
        )
    ).one()
    assert event.payload["reason"] == "waitlist_closed"

    again = attendance.no_show_pass(session, now=started + timedelta(hours=2))
    assert again["waitlistsClosed"] == 0  # idempotent: nothing left waiting


def test_the_waitlist_of_a_cancelled_class_closes_at_once(engine, session, gym):
    """A class cancelled by a path that left its waitlist (a row cancelled before this rule):
    the next pass cancels the waiting, without waiting for the start."""
    from gymctl.bookings import schedule

    kind = schedule.create_class_type(
        session, gym.organization.id, name="Yoga", default_capacity=1, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=TOMORROW, now=NOW)
    book_seat(session, gym, row)
    waiting = book_seat(session, gym, row, add_member(session, gym.organization))
    assert waiting.status == BookingStatus.waitlisted
    row.cancelled_at = NOW

    done = attendance.no_show_pass(session, now=NOW + timedelta(minutes=5))

    session.refresh(waiting)
    assert (done["waitlistsClosed"], waiting.status) == (1, BookingStatus.cancelled)


def test_a_closed_waitlist_gives_the_pack_its_session_back(engine, session, gym):
    from gymctl.bookings import schedule

    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    other = add_member(session, gym.organization)
    make_subscription(session, gym, PlanType.pack, sessions_remaining=5)
    pack = make_subscription(session, gym, PlanType.pack, membership=other, sessions_remaining=5)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="Yoga", default_capacity=1, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=TOMORROW, now=NOW)
    book_seat(session, gym, row)
    waiting = book_seat(session, gym, row, other)
    session.refresh(pack)
    assert (waiting.status, pack.sessions_remaining) == (BookingStatus.waitlisted, 4)

    attendance.no_show_pass(session, now=TOMORROW + timedelta(minutes=5))

    session.refresh(pack)
    session.refresh(waiting)
    assert (waiting.status, waiting.subscription_id, pack.sessions_remaining) == (
        BookingStatus.cancelled,
        None,
        5,
    )
    # revived later (a class in the past cannot be booked): nothing is given back twice
    assert book.is_active(waiting) is False
