"""A seat kept when its unlimited plan ends is paid by the pack that keeps it.

Spec B 2.1: a plan holds "a period, quota or credits"; a pack's quota pays one class a session
(bookings.quota: "the pack or drop-in with a session left ... spends one (-1), recorded on the
booking"; given back when the booking ends unused). When an unlimited plan ends, its seats in
classes to come stay where another plan of the member pays the day (book.give_up_uncovered,
quota.pays). A seat kept because a pack has a session left stayed recorded on nothing and the
pack's count did not move (docs/decisions.md, s47: "noticed and left alone"): the member had
the class for free and could book another on the very session that kept it. Now the kept seat
spends that session and records the pack, as booking it on the pack would have, and a cancel
before the class gives it back; a pack that runs out on the earlier classes pays for no later
one, which is given up (the line moves up)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import lifecycle
from gymctl.models import BookingStatus, OutboxEvent, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import add_member, book_seat, cancel_own
from tests.bookings.test_seats_after_a_plan_ends import _class_at
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded

ENDED_AT = NOW + timedelta(days=6)  # the grace over: cancelled for non-payment


@pytest.fixture
def required(session, gym):
    return make_billing_settings(session, gym.organization, plan_required_to_book=True)


def _lifecycle(session_factory, now):
    with session_factory() as worker:
        result = lifecycle.run_lifecycle(worker, now=now)
        worker.commit()
    return result


def _left(session, pack) -> int:
    session.expire_all()
    return session.get(Subscription, pack.id).sessions_remaining


def _events(session, name, booking) -> list[dict]:
    return [
        event.payload
        for event in session.scalars(
            select(OutboxEvent).where(
                OutboxEvent.name == name, OutboxEvent.aggregate_id == str(booking.id)
            )
        )
    ]


def test_a_seat_kept_by_a_pack_when_the_unlimited_plan_ends_spends_a_session_of_it(
    session, session_factory, gym, required
):
    """Booked on the unlimited monthly plan (nothing spent) while holding a pack of 10; the
    lifecycle cancels the monthly plan for non-payment. The pack covers the class and keeps
    the seat: it pays for it (9 left, the booking records the pack). Cancelled before the
    class, the session comes back."""
    monthly = make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=10)
    seat = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=20)))
    assert seat.subscription_id is None  # paid by the unlimited plan
    session.commit()

    assert _lifecycle(session_factory, ENDED_AT)["cancelled"] == 1

    session.expire_all()
    assert session.get(Subscription, monthly.id).status is SubscriptionStatus.cancelled
    assert (seat.status, seat.subscription_id) == (BookingStatus.confirmed, pack.id)
    assert _left(session, pack) == 9
    assert _events(session, "booking.cancelled", seat) == []

    cancel_own(session, gym, seat, at=ENDED_AT + timedelta(days=1))
    session.flush()

    assert _left(session, pack) == 10  # the unused session comes back
    [cancelled] = _events(session, "booking.cancelled", seat)
    assert cancelled["sessionReturnedTo"] == str(pack.id)


def test_a_pack_pays_the_earlier_classes_and_the_later_seat_is_given_up(
    session, session_factory, gym, required
):
    """A pack with one session left keeps one seat, not every seat: the earliest class spends
    it, and the later one, paid by no plan now, is given up to the one waiting."""
    make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    early = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=10)))
    full = _class_at(session, gym, NOW + timedelta(days=20), capacity=1)
    late = book_seat(session, gym, full)
    other = add_member(session, gym.organization)
    make_subscription(session, Gym.of(other), PlanType.card)
    waiting = book_seat(session, gym, full, other, at=NOW + timedelta(seconds=1))
    assert waiting.status is BookingStatus.waitlisted
    session.commit()

    summary = _lifecycle(session_factory, ENDED_AT)

    assert (summary["cancelled"], summary["seatsGivenUp"]) == (1, 1)
    session.expire_all()
    assert (early.status, early.subscription_id) == (BookingStatus.confirmed, pack.id)
    assert (late.status, waiting.status) == (BookingStatus.cancelled, BookingStatus.confirmed)
    assert late.subscription_id is None
    assert _left(session, pack) == 0
