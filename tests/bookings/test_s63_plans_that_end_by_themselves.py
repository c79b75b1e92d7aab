"""The booking rules end a plan where the lifecycle ends it (spec B 3: "active | lifecycle pass |
paid card plan with no card and no renewal end | term_ended"). A hunt in s63 found three plans
the lifecycle ends at their period end that the booking rules read as renewing: a priced card
plan with no saved card, a fixed-term plan sold for cash, a free card plan of a fixed term. A
class after that end was booked, then its seat given up (cancelled) when the hourly pass ended
the plan, holding a seat the waitlist could have had meanwhile. Each is now refused
plan_ends_before_session (409), nothing written, and the pass ends the plan at the instant the
refusal names."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing import lifecycle
from gymctl.bookings import schedule
from gymctl.errors import DomainError
from gymctl.models import Booking, BookingStatus
from gymctl.models.billing import CollectionMethod, PlanType, SubscriptionStatus
from tests.billing.factories import make_billing_settings, make_plan, make_subscription
from tests.bookings.conftest import book_seat
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _no_card(session, gym):
    return make_subscription(session, gym, PlanType.card)  # a next charge, no saved card


def _fixed_term_in_cash(session, gym):
    fixed = make_plan(session, gym.organization, PlanType.card, open_ended=False)
    plan = make_subscription(
        session, gym, plan=fixed, payment_collection_method=CollectionMethod.cash,
        next_charge_date=None,
    )  # fmt: skip
    plan.cash_prepaid_through = plan.current_period_end
    return plan


def _free_fixed_term(session, gym):
    fixed = make_plan(session, gym.organization, PlanType.card, price_in_cents=0, open_ended=False)
    return make_subscription(session, gym, plan=fixed)


def _class_at(session, gym, starts_at):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    return schedule.schedule_session(session, kind, starts_at=starts_at, now=NOW)


@pytest.mark.parametrize("make", [_no_card, _fixed_term_in_cash, _free_fixed_term])
def test_a_plan_the_lifecycle_ends_refuses_a_class_after_its_end(session, gym, make):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    plan = make(session, gym)
    end = plan.current_period_end
    late = _class_at(session, gym, end + timedelta(days=3))

    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, late)

    assert (refused.value.code, refused.value.status) == ("plan_ends_before_session", 409)
    assert refused.value.details["planEndsAt"] == end.isoformat()
    assert session.scalar(select(func.count()).select_from(Booking)) == 0
    # Up to its end it books; the pass then ends it at the instant the refusal named.
    assert book_seat(session, gym, _class_at(session, gym, end)).status is BookingStatus.confirmed
    lifecycle.run_lifecycle(session, now=end - timedelta(seconds=1))
    assert plan.status is SubscriptionStatus.active
    lifecycle.run_lifecycle(session, now=end)
    session.refresh(plan)
    assert plan.status is SubscriptionStatus.term_ended


def test_a_plan_renewing_at_the_desk_books_past_its_paid_through_day(session, gym):
    """A cash plan lapses into debt at its paid-through day rather than ending: it books past
    it (the debt, once open, blocks by its own rule)."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    plan = make_subscription(session, gym, PlanType.cash, next_charge_date=None)
    plan.cash_prepaid_through = plan.current_period_end
    late = _class_at(session, gym, plan.current_period_end + timedelta(days=3))
    assert book_seat(session, gym, late).status is BookingStatus.confirmed
