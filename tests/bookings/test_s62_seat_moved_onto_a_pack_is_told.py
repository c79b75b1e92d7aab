"""A seat a pack keeps when the plan that paid it ends says so: `booking.plan_changed` (s62).

s59 made the kept seat spend a session of the covering pack (book._pay_with_pack) and noticed
it wrote no event: the pack's count moved without the member's asking and nothing in the
gym's event stream said why, while every other move of a session does (booking.created names
the plan spent, booking.cancelled the plan a session went back to)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models import BookingStatus
from gymctl.models.billing import PlanType
from tests.billing.factories import make_subscription
from tests.bookings.conftest import book_seat
from tests.bookings.test_s59_kept_seat_spends_the_pack import (
    ENDED_AT,
    _events,
    _left,
    _lifecycle,
    required,  # noqa: F401 (a fixture)
)
from tests.bookings.test_seats_after_a_plan_ends import _class_at
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_the_seat_a_pack_keeps_names_the_pack_and_the_plan_that_ended(
    session,
    session_factory,
    gym,
    required,  # noqa: F811
):
    monthly = make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=10)
    seat = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=20)))
    session.commit()

    assert _lifecycle(session_factory, ENDED_AT)["cancelled"] == 1

    session.expire_all()
    assert (seat.status, seat.subscription_id) == (BookingStatus.confirmed, pack.id)
    assert _left(session, pack) == 9
    [changed] = _events(session, "booking.plan_changed", seat)
    assert changed == {
        "classSessionId": str(seat.class_session_id),
        "userId": str(seat.user_id),
        "status": "confirmed",
        "subscriptionId": str(pack.id),
        "planEnded": str(monthly.id),
    }  # the unlimited plan spent nothing: no session goes back to it


def test_a_seat_given_up_is_told_as_before_and_not_as_moved(
    session,
    session_factory,
    gym,
    required,  # noqa: F811
):
    make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    seat = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=20)))
    session.commit()

    assert _lifecycle(session_factory, ENDED_AT)["seatsGivenUp"] == 1

    assert _events(session, "booking.plan_changed", seat) == []
    [cancelled] = _events(session, "booking.cancelled", seat)
    assert cancelled["status"] == "cancelled"
