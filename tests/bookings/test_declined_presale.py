"""A presale whose opening charge was declined is in debt, and still unpaid: it has not started.

Spec B 2.1: "A presale ... holds no period, quota or credits before it is paid"; spec B 7:
plan_not_started for a "member whose only live plans are unstarted presales"; spec B 3: "a
presale decline enters debt". Inside the debt's grace the decline is no refusal of its own
(booking_blocked_debt waits for day N), but the plan is still one that has not started: it
books nothing, and above all not as an unlimited plan (it holds no quota yet)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.billing.debt import open_debt
from gymctl.errors import DomainError
from gymctl.models import Booking
from gymctl.models.billing import PlanType
from tests.billing.factories import make_billing_settings, make_plan, make_subscription
from tests.bookings.conftest import book_seat
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

OPENING = NOW - timedelta(days=1)  # opened yesterday; its opening charge declined


def _declined_presale(session, gym, type=PlanType.card, **plan):
    plan = make_plan(session, gym.organization, type, **plan)
    presale = make_subscription(session, gym, plan=plan, presale_opening=OPENING)
    open_debt(
        session,
        presale,
        amount_in_cents=presale.price_in_cents,
        reason="charge_failed",
        since=OPENING,
        now=OPENING,
    )
    return presale


def _refused(session, gym, class_session) -> DomainError:
    with pytest.raises(DomainError) as caught:
        book_seat(session, gym, class_session)
    assert session.scalar(select(func.count()).select_from(Booking)) == 0
    return caught.value


def test_a_declined_presale_inside_its_grace_refuses_plan_not_started(session, gym, class_session):
    """Whatever plan_required_to_book says: as for a presale not charged yet."""
    _declined_presale(session, gym)
    error = _refused(session, gym, class_session)
    assert (error.code, error.status, error.details["startsAt"]) == (
        "plan_not_started",
        409,
        OPENING.isoformat(),
    )


def test_a_declined_pack_presale_does_not_book_as_an_unlimited_plan(session, gym, class_session):
    """Where the gym requires a plan: the unpaid pack holds no quota, so it spends none and
    books nothing."""
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    _declined_presale(session, gym, PlanType.pack)
    assert _refused(session, gym, class_session).code == "plan_not_started"


def test_a_declined_presale_beside_a_paid_pack_books_on_the_pack(session, gym, class_session):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    _declined_presale(session, gym)
    pack = make_subscription(session, gym, PlanType.pack)
    left = pack.sessions_remaining

    booking = book_seat(session, gym, class_session)

    assert (booking.subscription_id, pack.sessions_remaining) == (pack.id, left - 1)


def test_a_declined_presale_past_its_grace_refuses_booking_blocked_debt(
    session, gym, class_session
):
    presale = _declined_presale(session, gym)
    presale.debt_since = NOW - timedelta(days=8)
    assert _refused(session, gym, class_session).code == "booking_blocked_debt"
