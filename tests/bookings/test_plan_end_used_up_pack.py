"""A plan that ends gives up the seats it alone paid for (docs/decisions.md, s47;
bookings.book.give_up_uncovered): a pack with no session left covers the class and pays for
no seat."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import attempts
from gymctl.bookings import book
from gymctl.errors import DomainError
from gymctl.models import BookingStatus
from gymctl.models.billing import PlanType
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import add_member, book_seat, cancel_own, renewing_card_plan
from tests.bookings.test_seats_after_a_plan_ends import _class_at
from tests.conftest import NOW
from tests.factories import Gym
from tests.retention.conftest import give_notice

pytestmark = pytest.mark.embedded


@pytest.fixture
def required(session, gym):
    return make_billing_settings(session, gym.organization, plan_required_to_book=True)


def test_a_seat_the_ended_unlimited_plan_paid_is_given_up_when_only_a_used_up_pack_is_left(
    engine, session, gym, required
):
    """The member books on an unlimited monthly plan while holding a pack with no session left.
    The monthly plan ends at once (attempts.end_plan). Booking that class now would be refused
    plan_sessions_used_up: no plan of theirs can pay the seat, so it must be given up (and the
    next in line takes it), not kept for free with the pack at 0 (or below)."""
    monthly = renewing_card_plan(session, gym)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=0)
    full = _class_at(session, gym, NOW + timedelta(days=2), capacity=1)
    seat = book_seat(session, gym, full)
    assert seat.subscription_id is None  # paid by the unlimited plan, nothing spent
    other = add_member(session, gym.organization)
    renewing_card_plan(session, Gym.of(other))
    waiting = book_seat(session, gym, full, other, at=NOW + timedelta(seconds=1))
    assert waiting.status is BookingStatus.waitlisted

    monthly = attempts.lock_subscription(session, monthly.id)
    attempts.end_plan(session, monthly, reason=attempts.SUPERSEDED, now=NOW + timedelta(hours=1))
    session.flush()
    session.expire_all()

    # what a new booking of that class would answer now
    twin = _class_at(session, gym, full.starts_at)
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, twin, at=NOW + timedelta(hours=1))
    assert refused.value.code == "plan_sessions_used_up"
    session.expire_all()
    assert pack.sessions_remaining == 0
    assert (seat.status, waiting.status) == (BookingStatus.cancelled, BookingStatus.confirmed)


def test_a_waitlisted_seat_is_not_promoted_onto_a_used_up_pack(engine, session, gym, required):
    """The line's turn comes to one the booking rules do not refuse (book.promote_waitlist):
    the member waited on their renewing unlimited plan, then gave notice ending it before the
    class; a pack with no session left covers the day and pays for nothing, so they are passed
    over, not given the seat for free."""
    monthly = renewing_card_plan(session, gym)
    make_subscription(session, gym, PlanType.pack, sessions_remaining=0)
    full = _class_at(session, gym, monthly.current_period_end + timedelta(days=1), capacity=1)
    other = add_member(session, gym.organization)
    renewing_card_plan(session, Gym.of(other))
    seated = book_seat(session, gym, full, other)
    waiting = book_seat(session, gym, full, at=NOW + timedelta(seconds=1))
    assert (waiting.status, waiting.subscription_id) == (BookingStatus.waitlisted, None)
    give_notice(session, gym, monthly)  # effective at its period's end, before the class

    cancel_own(session, gym, seated, at=NOW + timedelta(hours=1))

    session.expire_all()
    assert waiting.status is BookingStatus.waitlisted
    assert book.confirmed_count(session, full.id) == 0
