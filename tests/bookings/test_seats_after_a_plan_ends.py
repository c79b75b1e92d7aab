"""A plan that ends gives up the seats it no longer covers: in a gym that requires a plan to
book, the member's confirmed or waitlisted bookings of classes to come that no other live plan
of theirs covers are given up in the ending's transaction, as a staff cancel gives one up (the
waitlist moves up, the session spent comes back, booking.cancelled). A monthly plan books
classes past its period end (it renews): one that ends instead (a notice maturing, cancelled
for non-payment, ended by `attempts.end_plan`) left them confirmed. See
bookings.book.give_up_uncovered."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import attempts, lifecycle
from gymctl.bookings import schedule
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus, OutboxEvent
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention.notices import give_notice
from gymctl.retention.settlement import period_end_sweep
from tests.billing.conftest import card_server  # noqa: F401 (fixture)
from tests.billing.factories import make_billing_settings, make_plan, make_subscription
from tests.bookings.conftest import add_member, book_seat, renewing_card_plan
from tests.conftest import NOW
from tests.factories import Gym
from tests.retention.conftest import doors, mailer  # noqa: F401 (fixtures)

pytestmark = pytest.mark.embedded


def _class_at(session, gym, starts_at, capacity=5):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=capacity,
        duration_minutes=60, now=NOW,
    )  # fmt: skip
    return schedule.schedule_session(session, kind, starts_at=starts_at, now=NOW)


def _cancelled_events(session, booking):
    session.expire_all()
    return [
        event.payload
        for event in session.scalars(
            select(OutboxEvent).where(
                OutboxEvent.name == "booking.cancelled",
                OutboxEvent.aggregate_id == str(booking.id),
            )
        )
    ]


def _lifecycle(session_factory, now):
    with session_factory() as worker:
        result = lifecycle.run_lifecycle(worker, now=now)
        worker.commit()
    return result


@pytest.fixture
def required(session, gym):
    return make_billing_settings(session, gym.organization, plan_required_to_book=True)


def test_a_matured_notice_gives_up_the_seats_after_its_effective_date(
    session,
    session_factory,
    gym,
    required,
    doors,  # noqa: F811 (fixture)
):
    """Booked next month's class while the plan renewed, then gave notice effective at the
    period end: the period-end sweep cancels the plan and gives that seat up (the next in line
    takes it); a class before the effective date stays booked."""
    card = renewing_card_plan(session, gym)
    end = card.current_period_end
    before, after = (
        _class_at(session, gym, end - timedelta(days=2)),
        _class_at(session, gym, end + timedelta(days=3), capacity=1),
    )
    kept = book_seat(session, gym, before)
    seat = book_seat(session, gym, after)
    other = add_member(session, gym.organization)
    renewing_card_plan(session, Gym.of(other))
    waiting = book_seat(session, gym, after, other, at=NOW + timedelta(seconds=1))
    give_notice(
        session, gym.organization.id, card.id, initiator="member",
        actor_user_id=gym.membership.user_id, locale="en", now=NOW + timedelta(minutes=1),
    )  # fmt: skip
    assert card.cancellation_effective_at == end
    session.commit()

    result = period_end_sweep(session_factory, doors, now=end + timedelta(minutes=5))

    assert result.cancelled == [str(card.id)]
    session.expire_all()
    assert (kept.status, seat.status, waiting.status) == (
        BookingStatus.confirmed,
        BookingStatus.cancelled,
        BookingStatus.confirmed,
    )
    assert [p["planEnded"] for p in _cancelled_events(session, seat)] == [str(card.id)]


def test_a_plan_cancelled_for_non_payment_gives_up_its_seats_to_come(
    session, session_factory, gym, required
):
    """In debt within its grace the member still books; the grace over, the lifecycle cancels
    the plan for non-payment, and its confirmed and waitlisted seats of classes to come go."""
    card = make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    later = NOW + timedelta(days=20)
    seat = book_seat(session, gym, _class_at(session, gym, later))
    full = _class_at(session, gym, later, capacity=1)
    book_seat(session, gym, full, _member_with_plan(session, gym))
    waiting = book_seat(session, gym, full)
    assert waiting.status is BookingStatus.waitlisted
    session.commit()

    assert _lifecycle(session_factory, NOW + timedelta(days=6))["cancelled"] == 1

    session.expire_all()
    assert session.get(type(card), card.id).status is SubscriptionStatus.cancelled
    assert (seat.status, waiting.status) == (BookingStatus.cancelled, BookingStatus.cancelled)
    assert len(_cancelled_events(session, seat)) == 1


def _member_with_plan(session, gym):
    member = add_member(session, gym.organization)
    renewing_card_plan(session, Gym.of(member))
    return member


def test_a_seat_another_live_plan_covers_stays_booked(session, session_factory, gym, required):
    """The member holds a second monthly plan: the class is still paid for, the seat stays."""
    make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    renewing_card_plan(session, gym)
    seat = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=20)))
    session.commit()

    assert _lifecycle(session_factory, NOW + timedelta(days=6))["cancelled"] == 1

    session.expire_all()
    assert seat.status is BookingStatus.confirmed
    assert _cancelled_events(session, seat) == []


def test_a_gym_that_books_without_plans_keeps_the_seats_when_a_plan_ends(
    session, session_factory, gym
):
    make_subscription(session, gym, PlanType.card, in_debt_since=NOW - timedelta(days=2))
    seat = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=20)))
    session.commit()

    assert _lifecycle(session_factory, NOW + timedelta(days=6))["cancelled"] == 1

    session.expire_all()
    assert seat.status is BookingStatus.confirmed


def test_a_plan_ended_at_once_gives_the_pack_session_back_and_keeps_a_started_class(
    session, gym, required
):
    """`attempts.end_plan` (a plan superseded, a removal): the seat in a class to come goes and
    the pack has its session back; a class already started keeps its seat (and the session)."""
    pack = make_subscription(session, gym, PlanType.pack)
    left = pack.sessions_remaining
    started = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(hours=1)))
    to_come = book_seat(session, gym, _class_at(session, gym, NOW + timedelta(days=1)))
    assert pack.sessions_remaining == left - 2
    ending = NOW + timedelta(hours=2)

    pack = attempts.lock_subscription(session, pack.id)
    attempts.end_plan(session, pack, reason=attempts.SUPERSEDED, now=ending)

    session.flush()
    session.expire_all()
    assert (started.status, to_come.status) == (BookingStatus.confirmed, BookingStatus.cancelled)
    assert pack.sessions_remaining == left - 1
    payload = _cancelled_events(session, to_come)[0]
    assert payload["sessionReturnedTo"] == payload["planEnded"] == str(pack.id)


def test_a_free_cash_plan_books_up_to_the_term_the_lifecycle_ends(
    session, session_factory, gym, required
):
    """A free monthly plan kept in cash renews on nothing: the lifecycle ends its term
    (term_ended) at the period end. Until s63 it booked next month's class (read as renewing,
    as a priced monthly plan does) and the seat went when the term ended; the booking rules
    now end it where the lifecycle does (quota.covered_until): the class after its end is
    refused plan_ends_before_session, nothing written, and one at its very end is kept."""
    plan = make_plan(session, gym.organization, PlanType.cash, price_in_cents=0)
    free = make_subscription(session, gym, PlanType.cash, plan=plan)
    late = _class_at(session, gym, free.current_period_end + timedelta(days=3))
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, late)
    assert (refused.value.code, refused.value.status) == ("plan_ends_before_session", 409)
    assert session.scalar(select(func.count()).select_from(Booking)) == 0
    seat = book_seat(session, gym, _class_at(session, gym, free.current_period_end))
    session.commit()

    summary = _lifecycle(session_factory, free.current_period_end + timedelta(hours=1))

    assert (summary["term_ended"], summary["seatsGivenUp"]) == (1, 0)
    session.expire_all()
    assert seat.status is BookingStatus.confirmed
