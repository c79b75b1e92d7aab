"""A plan on its last period books no class after it: in a gym that requires a plan to book,
bookings.quota's "A plan that does not renew itself ... covers classes up to its period end"
holds for a priced card plan with no next charge (its renewal end reached: the collector
charges it no more) and for a plan on pay-later terms (one term): the lifecycle ends both at
their period end (spec B 3 term_ended)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.bookings import schedule
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus
from gymctl.models.billing import PlanType
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import book_seat
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def last_period(session, gym):
    """A monthly card plan in its last period: no next charge, its renewal end its period's."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    plan = make_subscription(session, gym, PlanType.card)
    plan.renewal_end, plan.next_charge_date = plan.current_period_end, None
    return plan


def _class_at(session, gym, starts_at):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    return schedule.schedule_session(session, kind, starts_at=starts_at, now=NOW)


def test_a_card_plan_with_no_next_charge_refuses_a_class_after_its_period(
    session, gym, last_period
):
    late = _class_at(session, gym, last_period.current_period_end + timedelta(days=3))
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, late)
    assert (refused.value.code, refused.value.status) == ("plan_ends_before_session", 409)
    assert refused.value.details["planEndsAt"] == last_period.current_period_end.isoformat()
    assert session.scalar(select(func.count()).select_from(Booking)) == 0


def test_a_card_plan_with_no_next_charge_books_up_to_its_period_end(session, gym, last_period):
    last = _class_at(session, gym, last_period.current_period_end)
    assert book_seat(session, gym, last).status is BookingStatus.confirmed


def test_a_free_open_ended_card_plan_rolls_and_books_past_its_period(session, gym):
    """A zero-price open-ended card plan rolls on instead of ending (spec B 3)."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    free = make_subscription(session, gym, PlanType.card, price_in_cents=0, next_charge_date=None)
    late = _class_at(session, gym, free.current_period_end + timedelta(days=3))
    assert book_seat(session, gym, late).status is BookingStatus.confirmed


def test_a_pay_later_plan_refuses_a_class_after_its_one_term(session, gym):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    term = make_subscription(session, gym, PlanType.card, pay_later_due=NOW + timedelta(days=10))
    late = _class_at(session, gym, term.current_period_end + timedelta(days=3))
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, late)
    assert (refused.value.code, refused.value.status) == ("plan_ends_before_session", 409)
    soon = _class_at(session, gym, NOW + timedelta(days=1))
    assert book_seat(session, gym, soon).status is BookingStatus.confirmed
