"""A class cancelled after a member checked in at the door (check-in opens an hour before the
class) never took place: the pack session the seat spent comes back."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.bookings import attendance, cancel_class, schedule
from gymctl.models import BookingStatus
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import book_seat
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_class_cancelled_after_a_check_in_gives_the_pack_session_back(engine, session, gym):
    """quota.py: "The session is given back (+1) when the booking ends unused: ... or its class
    cancelled"; cancel_class: "the plan's session it spent comes back". The class is cancelled
    before it starts, 30 minutes after the member checked in at the door: it never happened,
    and the member's pack keeps its session."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=3)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    starts = NOW + timedelta(hours=2)
    row = schedule.schedule_session(session, kind, starts_at=starts, now=NOW)
    seat = book_seat(session, gym, row)
    session.refresh(pack)
    assert pack.sessions_remaining == 2

    door = starts - timedelta(minutes=50)
    attendance.check_in(
        session, gym.organization.id, seat.id, method=CheckinMethod.staff,
        actor_user_id=gym.owner.id, now=door,
    )  # fmt: skip
    cancel_class.cancel_session(
        session, gym.organization.id, row.id, actor_user_id=gym.owner.id,
        now=door + timedelta(minutes=20),
    )  # fmt: skip
    session.expire_all()
    assert seat.status is BookingStatus.cancelled
    assert pack.sessions_remaining == 3
