"""A plan's quota and validity at the join of bookings and billing (spec B 2.1: plans hold "a
period, quota or credits"; spec B 3: "pack or drop-in past validity -> expired").

In a gym that requires a plan to book, a pack or drop-in spends a session per booking and has
it back when the booking ends unused; a plan that is not valid when the class starts books
nothing. See gymctl.bookings.quota.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl import ids
from gymctl.access.memberships import end_membership
from gymctl.bookings import attendance, book, schedule
from gymctl.bridge import inbound
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus, OutboxEvent
from gymctl.models.billing import PlanType
from gymctl.models.bookings import CheckinMethod
from gymctl.models.bridge import EntityLink, EntityType, Origin
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, add_member, book_seat, cancel_own, renewing_card_plan
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def required(session, gym):
    """The gym requires a plan to book."""
    return make_billing_settings(session, gym.organization, plan_required_to_book=True)


def _sessions(session, gym, n, start=TOMORROW, capacity=10, step=timedelta(days=1)):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=capacity,
        duration_minutes=60, now=NOW,
    )  # fmt: skip
    return [
        schedule.schedule_session(session, kind, starts_at=start + step * i, now=NOW)
        for i in range(n)
    ]


def _left(session, subscription) -> int | None:
    session.refresh(subscription)
    return subscription.sessions_remaining


def _state(session, subscription):
    """What a refusal must leave as it was: the bookings, the quota, the outbox."""
    return (
        session.scalar(select(func.count()).select_from(Booking)),
        _left(session, subscription),
        session.scalar(select(func.count()).select_from(OutboxEvent)),
    )


def _refused(session, gym, class_session, code, subscription):
    before = _state(session, subscription)
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, class_session)
    assert (refused.value.code, refused.value.status) == (code, 409)
    assert _state(session, subscription) == before
    return refused.value


def _staff_cancel(session, gym, booking, at=NOW):
    return book.cancel(session, gym.organization.id, booking.id, actor_user_id=gym.owner.id,
                       by_staff=True, now=at)  # fmt: skip


# Spending


def test_a_booking_on_a_pack_spends_one_session_and_records_the_pack(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=3)
    (a,) = _sessions(session, gym, 1)

    booking = book_seat(session, gym, a)

    assert booking.status == BookingStatus.confirmed
    assert booking.subscription_id == pack.id
    assert _left(session, pack) == 2
    created = session.scalar(
        select(OutboxEvent).where(
            OutboxEvent.name == "booking.created", OutboxEvent.aggregate_id == str(booking.id)
        )
    )
    assert created.payload["subscriptionId"] == str(pack.id)


def test_a_pack_with_no_session_left_refuses_plan_sessions_used_up(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=0)
    (a,) = _sessions(session, gym, 1)

    _refused(session, gym, a, "plan_sessions_used_up", pack)


def test_a_pack_with_one_session_left_books_one_class_and_refuses_the_next(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    a, b = _sessions(session, gym, 2)

    book_seat(session, gym, a)

    assert _left(session, pack) == 0
    _refused(session, gym, b, "plan_sessions_used_up", pack)


def test_a_drop_in_books_once(session, gym, required):
    """A drop-in's quota is one session."""
    drop_in = make_subscription(session, gym, PlanType.drop_in)
    a, b = _sessions(session, gym, 2, start=NOW + timedelta(hours=3), step=timedelta(hours=3))

    book_seat(session, gym, a)

    _refused(session, gym, b, "plan_sessions_used_up", drop_in)


def test_a_pack_past_its_validity_not_yet_expired_refuses_plan_ends_before_session(
    session, gym, required
):
    """'pack or drop-in past validity -> expired': the hourly lifecycle has not run yet (still
    active), but its validity is over, so it books nothing."""
    pack = make_subscription(session, gym, PlanType.pack, now=NOW - timedelta(days=91))
    (a,) = _sessions(session, gym, 1)

    refusal = _refused(session, gym, a, "plan_ends_before_session", pack)
    assert refusal.details["planEndsAt"] == pack.current_period_end.isoformat()


def test_a_pack_valid_now_refuses_a_class_after_its_validity(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, now=NOW - timedelta(days=88))
    (late,) = _sessions(session, gym, 1, start=NOW + timedelta(days=30))

    _refused(session, gym, late, "plan_ends_before_session", pack)
    (soon,) = _sessions(session, gym, 1)
    assert book_seat(session, gym, soon).subscription_id == pack.id


def test_a_monthly_plan_books_a_class_past_its_period_end_since_it_renews(session, gym, required):
    """A renewing plan is not bounded by its period: next month's class books on it."""
    card = renewing_card_plan(session, gym)
    (late,) = _sessions(session, gym, 1, start=card.current_period_end + timedelta(days=3))

    booking = book_seat(session, gym, late)

    assert (booking.status, booking.subscription_id) == (BookingStatus.confirmed, None)


def test_an_unlimited_plan_is_preferred_and_spends_nothing(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=5)
    renewing_card_plan(session, gym)
    (a,) = _sessions(session, gym, 1)

    booking = book_seat(session, gym, a)

    assert booking.subscription_id is None
    assert _left(session, pack) == 5


def test_the_pack_whose_period_ends_first_is_spent_first(session, gym, required):
    later = make_subscription(session, gym, PlanType.pack, sessions_remaining=5)
    sooner = make_subscription(
        session, gym, PlanType.pack, sessions_remaining=5, now=NOW - timedelta(days=30)
    )
    (a,) = _sessions(session, gym, 1)

    assert book_seat(session, gym, a).subscription_id == sooner.id
    assert (_left(session, sooner), _left(session, later)) == (4, 5)


def test_a_used_up_pack_passes_to_the_next_one(session, gym, required):
    spent = make_subscription(
        session, gym, PlanType.pack, sessions_remaining=0, now=NOW - timedelta(days=30)
    )
    fresh = make_subscription(session, gym, PlanType.pack, sessions_remaining=2)
    (a,) = _sessions(session, gym, 1)

    assert book_seat(session, gym, a).subscription_id == fresh.id
    assert (_left(session, spent), _left(session, fresh)) == (0, 1)


def test_a_gym_that_books_without_plans_spends_nothing(session, gym):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    a, b = _sessions(session, gym, 2)

    assert book_seat(session, gym, a).subscription_id is None
    book_seat(session, gym, b)
    assert _left(session, pack) == 1


def test_a_waitlisted_booking_spends_and_its_promotion_spends_nothing_more(session, gym, required):
    """The waitlist holds a seat: the session is spent when waitlisted, not again promoted."""
    (a,) = _sessions(session, gym, 1, capacity=1)
    other = add_member(session, gym.organization)
    make_subscription(session, gym, PlanType.card, membership=other)
    first = book_seat(session, gym, a, member=other)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=2)

    waiting = book_seat(session, gym, a)
    assert (waiting.status, waiting.subscription_id) == (BookingStatus.waitlisted, pack.id)
    assert _left(session, pack) == 1

    cancel_own(session, gym, first)
    session.refresh(waiting)
    assert waiting.status == BookingStatus.confirmed
    assert _left(session, pack) == 1


# Giving back


def test_a_members_cancel_before_the_class_gives_the_session_back(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)

    cancel_own(session, gym, booking)

    assert _left(session, pack) == 1
    assert booking.subscription_id is None  # given back once
    cancelled = session.scalar(
        select(OutboxEvent).where(
            OutboxEvent.name == "booking.cancelled", OutboxEvent.aggregate_id == str(booking.id)
        )
    )
    assert cancelled.payload["sessionReturnedTo"] == str(pack.id)


def test_booking_again_after_a_cancel_spends_again(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)
    cancel_own(session, gym, booking)

    again = book_seat(session, gym, a)

    assert (again.id, again.subscription_id) == (booking.id, pack.id)
    assert _left(session, pack) == 0


def test_a_staff_cancel_or_removal_before_the_class_gives_the_session_back(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=2)
    a, b = _sessions(session, gym, 2)
    first, second = book_seat(session, gym, a), book_seat(session, gym, b)
    assert _left(session, pack) == 0

    _staff_cancel(session, gym, first)
    assert _left(session, pack) == 1
    book.remove(session, gym.organization.id, second.id, actor_user_id=gym.owner.id, now=NOW)
    assert _left(session, pack) == 2


def test_a_staff_cancel_after_the_start_keeps_the_session_spent(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)

    _staff_cancel(session, gym, booking, at=a.starts_at + timedelta(minutes=5))

    assert _left(session, pack) == 0
    assert booking.subscription_id == pack.id


def test_a_checked_in_booking_cancelled_by_staff_keeps_the_session_spent(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)
    at = a.starts_at - timedelta(minutes=30)
    attendance.check_in(session, gym.organization.id, booking.id, method=CheckinMethod.staff,
                        actor_user_id=gym.owner.id, now=at)  # fmt: skip

    _staff_cancel(session, gym, booking, at=at)

    assert _left(session, pack) == 0


def test_a_no_show_keeps_the_session_spent(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)

    attendance.no_show_pass(session, now=a.ends_at + timedelta(minutes=1))

    session.refresh(booking)
    assert booking.no_show_at is not None
    assert (_left(session, pack), booking.subscription_id) == (0, pack.id)


def test_a_class_removed_by_the_bridge_gives_every_session_back(session, gym, required):
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    (a,) = _sessions(session, gym, 1)
    booking = book_seat(session, gym, a)
    link = EntityLink(id=ids.new_id(), organization_id=gym.organization.id,
                      entity_type=EntityType.schedule, platform_id=str(a.id),
                      external_id="class-1", origin=Origin.poll, data={}, created_at=NOW,
                      updated_at=NOW)  # fmt: skip
    session.add(link)
    session.flush()

    assert inbound.class_removed(session, gym.organization.id, link, NOW) == "cancelled"

    session.refresh(booking)
    assert booking.status == BookingStatus.cancelled
    assert _left(session, pack) == 1


def test_a_member_leaving_gives_the_sessions_of_their_seats_back(session, gym, required):
    """'What a membership holds ends with it': the seats given up return their sessions (to a
    plan now ended, on the record)."""
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=2)
    a, b = _sessions(session, gym, 2)
    book_seat(session, gym, a)
    book_seat(session, gym, b)

    end_membership(session, gym.membership, actor_user_id=gym.owner.id, now=NOW)

    assert _left(session, pack) == 2
    held = session.scalars(select(Booking).where(Booking.membership_id == gym.membership.id))
    assert {(b.status, b.subscription_id) for b in held} == {(BookingStatus.cancelled, None)}


def test_a_booking_still_waitlisted_when_the_class_ends_has_its_session_back(
    session, gym, required
):
    """Waiting is no seat: the no-show pass closes the waitlist (cancelled: it never had a
    seat) and gives the session back (and marks no no-show)."""
    (a,) = _sessions(session, gym, 1, capacity=1)
    other = add_member(session, gym.organization)
    make_subscription(session, gym, PlanType.card, membership=other)
    book_seat(session, gym, a, member=other)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    waiting = book_seat(session, gym, a)
    assert _left(session, pack) == 0

    result = attendance.no_show_pass(session, now=a.ends_at + timedelta(minutes=1))

    assert result == {"sessions": 1, "noShows": 1, "waitlistsClosed": 1}  # the other's seat
    session.refresh(waiting)
    assert (waiting.status, waiting.subscription_id, waiting.no_show_at) == (
        BookingStatus.cancelled,
        None,
        None,
    )
    assert _left(session, pack) == 1
    attendance.no_show_pass(session, now=a.ends_at + timedelta(hours=1))
    assert _left(session, pack) == 1  # a second pass gives nothing back again


def test_a_waitlisted_booking_cancelled_by_staff_after_the_start_has_its_session_back(
    session, gym, required
):
    (a,) = _sessions(session, gym, 1, capacity=0)
    pack = make_subscription(session, gym, PlanType.pack, sessions_remaining=1)
    waiting = book_seat(session, gym, a)
    assert waiting.status == BookingStatus.waitlisted

    _staff_cancel(session, gym, waiting, at=a.starts_at + timedelta(minutes=5))

    assert _left(session, pack) == 1
