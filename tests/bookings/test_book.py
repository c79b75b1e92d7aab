"""Booking (spec B 2.4, 3, 4.3, 7): refusals, seats, waitlist, promotion and revival."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing.lifecycle import NON_PAYMENT
from gymctl.bookings import book, schedule
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus, MembershipStatus, OutboxEvent
from gymctl.models.billing import PlanType, SubscriptionStatus
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import TOMORROW, add_member, book_seat, cancel_own
from tests.conftest import NOW
from tests.factories import Gym


def _refused(session, gym, class_session, member=None, at=NOW) -> DomainError:
    before = session.scalar(select(func.count()).select_from(Booking))
    with pytest.raises(DomainError) as caught:
        book_seat(session, gym, class_session, member, at)
    assert session.scalar(select(func.count()).select_from(Booking)) == before
    return caught.value


def _events(session, name):
    return session.scalars(select(OutboxEvent).where(OutboxEvent.name == name)).all()


def test_a_member_with_a_live_plan_gets_a_confirmed_seat(session, gym, class_session):
    make_subscription(session, gym)
    booking = book_seat(session, gym, class_session)
    assert booking.status == BookingStatus.confirmed
    assert [e.payload["status"] for e in _events(session, "booking.created")] == ["confirmed"]


def test_debt_inside_the_grace_period_still_books(session, gym, class_session):
    make_subscription(session, gym, in_debt_since=NOW - timedelta(days=6, hours=23))
    assert book_seat(session, gym, class_session).status == BookingStatus.confirmed


@pytest.mark.embedded
def test_debt_past_grace_refuses_booking_blocked_debt_with_billing_debt(
    session, gym, class_session
):
    """Day N ends at the organization's midnight (UTC here): pay by then, cancelled from then."""
    since = NOW - timedelta(days=8)  # day 0 = Nov 13; day 7 ends Nov 21 00:00
    make_subscription(session, gym, in_debt_since=since)
    error = _refused(session, gym, class_session)
    day_7_ends = NOW.replace(hour=0)
    assert (error.code, error.status) == ("booking_blocked_debt", 409)
    assert error.details["billingDebt"] == {
        "amountInCents": 9900,
        "currency": "ILS",
        "byCurrency": [{"currency": "ILS", "amountInCents": 9900}],
        "since": since.isoformat(),
        "reason": "charge_failed",
        "payBy": day_7_ends.isoformat(),
        "cancelsAt": day_7_ends.isoformat(),
        "state": "past_grace",
    }


def test_the_organizations_grace_days_decide(session, gym, class_session):
    make_billing_settings(session, gym.organization, billing_grace_days=3)
    make_subscription(session, gym, in_debt_since=NOW - timedelta(days=4))
    assert _refused(session, gym, class_session).code == "booking_blocked_debt"


def test_a_plan_cancelled_for_non_payment_with_open_debt_blocks_even_beside_a_live_plan(
    session, gym, class_session
):
    """'holds a plan cancelled for non-payment with open debt on any plan' (spec B 7)."""
    since = NOW - timedelta(days=10)
    make_subscription(session, gym)
    cancelled = make_subscription(
        session,
        gym,
        in_debt_since=since,
        cancellation_reason=NON_PAYMENT,
        cancelled_at=NOW - timedelta(days=3),
    )
    cancelled.status = SubscriptionStatus.cancelled  # the lifecycle keeps the debt columns
    error = _refused(session, gym, class_session)
    assert error.code == "booking_blocked_debt"
    debt = error.details["billingDebt"]
    assert (debt["state"], debt["cancelsAt"]) == (
        "cancelled",
        (NOW - timedelta(days=3)).isoformat(),
    )


def test_debt_reason_null_reads_as_charge_failed(session, gym, class_session):
    make_subscription(session, gym, in_debt_since=NOW - timedelta(days=8), debt_reason=None)
    error = _refused(session, gym, class_session)
    assert error.details["billingDebt"]["reason"] == "charge_failed"


def test_only_unstarted_presales_refuse_plan_not_started(session, gym, class_session):
    opening = NOW + timedelta(days=20)
    make_subscription(session, gym, presale_opening=opening)
    error = _refused(session, gym, class_session)
    assert (error.code, error.status, error.details["startsAt"]) == (
        "plan_not_started",
        409,
        opening.isoformat(),
    )


def test_a_plan_whose_page_is_not_paid_yet_neither_books_nor_refuses(session, gym, class_session):
    """A plan bought online is scheduled until its hosted page is paid (no opening day: not
    a presale). It is not a plan that has not started: where the gym books without plans the
    member still books; where it requires one, the refusal is that they hold none."""
    make_subscription(session, gym, status=SubscriptionStatus.scheduled)
    assert book_seat(session, gym, class_session).status == BookingStatus.confirmed
    other = add_member(session, gym.organization)
    make_subscription(session, gym, membership=other, status=SubscriptionStatus.scheduled)
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    error = _refused(session, gym, class_session, other)
    assert (error.code, error.status) == ("plan_required_to_book", 409)


def test_a_started_plan_beside_a_presale_books(session, gym, class_session):
    make_subscription(session, gym, presale_opening=NOW + timedelta(days=20))
    make_subscription(session, gym, PlanType.pack)
    assert book_seat(session, gym, class_session).status == BookingStatus.confirmed


def test_plan_required_to_book_is_honoured(session, gym, class_session):
    assert book_seat(session, gym, class_session).status == BookingStatus.confirmed  # not required
    other = add_member(session, gym.organization)
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    error = _refused(session, gym, class_session, other)
    assert (error.code, error.status) == ("plan_required_to_book", 409)


def test_a_paused_plan_books_nothing_when_a_plan_is_required(session, gym, class_session):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    make_subscription(session, gym, status=SubscriptionStatus.paused)
    assert _refused(session, gym, class_session).code == "plan_required_to_book"


@pytest.mark.parametrize("status", [MembershipStatus.suspended, MembershipStatus.cancelled])
def test_a_membership_that_is_not_active_books_nothing(session, gym, class_session, status):
    """Staff book by user id; a suspended or cancelled member must not get a seat."""
    member = add_member(session, gym.organization)
    make_subscription(session, gym, membership=member)
    member.status = status
    error = _refused(session, gym, class_session, member)
    assert (error.code, error.status) == ("membership_not_active", 409)


def test_an_active_booking_refuses_already_booked(session, gym, class_session):
    first = book_seat(session, gym, class_session)
    error = _refused(session, gym, class_session)
    assert (error.code, error.status, error.details["bookingId"]) == (
        "already_booked",
        409,
        str(first.id),
    )


@pytest.mark.embedded
def test_full_sessions_waitlist_and_a_cancel_promotes_the_first_waitlisted(
    session, gym, class_session
):
    members = [add_member(session, gym.organization) for _ in range(4)]
    rows = [
        book_seat(session, gym, class_session, m, NOW + timedelta(seconds=i))
        for i, m in enumerate(members)
    ]
    assert [r.status for r in rows] == [BookingStatus.confirmed] * 2 + [
        BookingStatus.waitlisted
    ] * 2
    cancel_own(session, gym, rows[0], NOW + timedelta(minutes=5))
    assert rows[2].status == BookingStatus.confirmed  # the first waitlisted
    assert rows[3].status == BookingStatus.waitlisted
    promoted = _events(session, "booking.promoted")
    assert [e.aggregate_id for e in promoted] == [str(rows[2].id)]


def test_cancelling_a_waitlisted_booking_promotes_nobody(session, gym, class_session):
    members = [add_member(session, gym.organization) for _ in range(3)]
    rows = [book_seat(session, gym, class_session, m) for m in members]
    cancel_own(session, gym, rows[2])
    assert _events(session, "booking.promoted") == []


@pytest.mark.embedded
def test_a_cancelled_row_is_revived_with_the_same_id_and_fields_cleared(
    session, gym, class_session
):
    first = book_seat(session, gym, class_session)
    first.checked_in_at, first.checkin_method = NOW, "staff"  # as a stale row might carry
    book.cancel(  # by staff: a member does not cancel a checked-in booking
        session, gym.organization.id, first.id, actor_user_id=gym.owner.id, by_staff=True, now=NOW
    )
    again = book_seat(session, gym, class_session, at=NOW + timedelta(hours=1))
    assert again.id == first.id
    assert again.status == BookingStatus.confirmed
    assert (again.cancelled_at, again.checked_in_at, again.checkin_method, again.deleted_at) == (
        None,
        None,
        None,
        None,
    )
    assert session.scalar(select(func.count()).select_from(Booking)) == 1


def test_a_soft_deleted_row_is_revived_and_its_freed_seat_was_promoted(session, gym, class_session):
    members = [add_member(session, gym.organization) for _ in range(3)]
    rows = [book_seat(session, gym, class_session, m) for m in members]
    book.remove(session, gym.organization.id, rows[0].id, actor_user_id=gym.owner.id, now=NOW)
    assert rows[0].deleted_at == NOW
    assert rows[2].status == BookingStatus.confirmed
    revived = book_seat(session, gym, class_session, members[0])
    assert (revived.id, revived.status, revived.deleted_at) == (
        rows[0].id,
        BookingStatus.waitlisted,
        None,
    )


def test_sessions_that_started_or_were_cancelled_refuse(session, gym, class_session):
    assert _refused(session, gym, class_session, at=TOMORROW).code == "session_started"
    class_session.cancelled_at = NOW
    assert _refused(session, gym, class_session).code == "session_cancelled"


def test_a_session_of_another_organization_is_not_found(session, gym, class_session):
    from tests.billing.factories import make_gym

    other = make_gym(session)
    with pytest.raises(DomainError) as caught:
        book.book(
            session,
            other.organization.id,
            class_session.id,
            other.membership,
            actor_user_id=other.member.id,
            now=NOW,
        )
    assert (caught.value.code, caught.value.status) == ("session_not_found", 404)


def test_bookings_are_unique_per_session_and_membership_across_statuses(
    session, gym, class_session
):
    from sqlalchemy.exc import IntegrityError

    first = book_seat(session, gym, class_session)
    cancel_own(session, gym, first)
    duplicate = Booking(
        organization_id=gym.organization.id,
        class_session_id=class_session.id,
        membership_id=gym.membership.id,
        user_id=gym.member.id,
        status=BookingStatus.confirmed,
        created_at=NOW,
        updated_at=NOW,
    )
    with session.begin_nested():
        session.add(duplicate)
        with pytest.raises(IntegrityError):
            session.flush()


def test_capacity_and_times_are_validated(session, class_type):
    for kwargs, code in (
        ({"capacity": -1}, "capacity_invalid"),
        ({"ends_at": TOMORROW}, "session_times_invalid"),
    ):
        with pytest.raises(DomainError) as caught:
            schedule.schedule_session(session, class_type, starts_at=TOMORROW, now=NOW, **kwargs)
        assert caught.value.code == code


@pytest.mark.embedded
def test_a_freed_seat_passes_over_who_may_not_book_now_and_goes_to_the_next_in_line(
    session, gym, class_type
):
    """A turn comes to one who may book now: the first in line whose debt went past its grace
    (booking_blocked_debt) and one whose membership ended were each confirmed into the seat;
    they keep their place and are passed over."""
    row = schedule.schedule_session(session, class_type, starts_at=NOW + timedelta(days=5), now=NOW)
    seated, owing, gone, next_in_line = (add_member(session, gym.organization) for _ in range(4))
    make_subscription(session, Gym.of(owing), in_debt_since=NOW - timedelta(days=6))
    booked = [
        book_seat(session, gym, row, member, NOW + timedelta(seconds=n))
        for n, member in enumerate([gym.membership, seated, owing, gone, next_in_line])
    ]
    assert [b.status for b in booked[2:]] == [BookingStatus.waitlisted] * 3
    gone.status = MembershipStatus.cancelled

    cancel_own(session, gym, booked[1], NOW + timedelta(days=2))  # the owing one's grace is over

    assert [b.status for b in booked[2:]] == [
        BookingStatus.waitlisted,
        BookingStatus.waitlisted,
        BookingStatus.confirmed,
    ]
    assert [e.aggregate_id for e in _events(session, "booking.promoted")] == [str(booked[4].id)]


@pytest.mark.embedded
def test_a_seat_given_up_in_a_deleted_gym_passes_to_no_one(session, gym, class_session):
    """A gym's deletion gives up its members' seats one by one: each would have been passed to
    the next waiting member, whose own seat is given up in turn (booking.promoted and mirror
    ops for seats no one can use)."""
    members = [add_member(session, gym.organization) for _ in range(3)]
    rows = [book_seat(session, gym, class_session, m) for m in members]
    gym.organization.deleted_at = NOW

    cancel_own(session, gym, rows[0])

    assert rows[2].status == BookingStatus.waitlisted
    assert _events(session, "booking.promoted") == []
