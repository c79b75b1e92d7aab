"""The forecast copies the classes to come and their bookings (forecast.UPCOMING): a plan the
forecast ends gives up its seats as the daemons' lifecycle does (bookings.book.give_up_uncovered:
"an unused session comes back", "the waitlist moves up"). Without them the forecast's plan kept
the session its seat spent, and its rows differed from the daemons' (issue 24: "compares every
subscription's status, dates and ledger: identical")."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import forecast as fc
from gymctl.billing.debt import CHARGE_FAILED, NOTICE_OPENED
from gymctl.bookings import book, schedule
from gymctl.models import Booking, BookingStatus, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from tests import factories
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_forecast import _rows, run_daemons_hourly
from tests.conftest import NOW


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_plan_the_forecast_ends_gives_its_seat_and_session_back_as_the_daemons_do(
    session, session_factory, tmp_path
):
    """A's 8-class card plan is in debt with one day of grace; its seat in a full class four
    days out spent a session, and B waits for the seat. The lifecycle cancels A's plan for
    non-payment tonight: the seat is given up, the session comes back (8), B takes the seat."""
    gym = bf.make_gym(session)
    org = gym.organization
    connect_card_provider(session, gym, since=NOW - timedelta(days=400))
    bf.make_billing_settings(session, org, billing_grace_days=1, plan_required_to_book=True)

    def member():
        user = factories.user(session)
        return user, factories.membership(session, user=user, organization=org)

    user_a, member_a = member()
    card = bf.make_card(session, gym, user=user_a)
    quota_plan = bf.make_plan(session, org, PlanType.card, sessions_quota=8)
    plan_a = bf.make_subscription(
        session, gym, PlanType.card, plan=quota_plan, membership=member_a,
        payment_method_id=card.id, now=NOW - timedelta(days=10), sessions_remaining=8,
    )  # fmt: skip
    user_b, member_b = member()
    bf.make_subscription(session, gym, PlanType.pack, membership=member_b, now=NOW)
    kind = schedule.create_class_type(
        session, org.id, name="WOD", default_capacity=1, duration_minutes=60, now=NOW
    )
    schedule.schedule_session(session, kind, starts_at=NOW - timedelta(days=2), now=NOW)
    wod = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=4), now=NOW)
    seat = book.book(
        session, org.id, wod.id, member_a, actor_user_id=user_a.id, now=NOW - timedelta(hours=5)
    )
    waiting = book.book(
        session, org.id, wod.id, member_b, actor_user_id=user_b.id, now=NOW - timedelta(hours=4)
    )
    assert (seat.status, waiting.status) == (BookingStatus.confirmed, BookingStatus.waitlisted)
    plan_a.status = SubscriptionStatus.debt
    plan_a.debt_since = NOW - timedelta(days=1)
    plan_a.debt_amount_in_cents = plan_a.price_in_cents
    plan_a.debt_reason = CHARGE_FAILED
    plan_a.debt_notice_stage = NOTICE_OPENED
    plan_a.retry_at = NOW + timedelta(days=20)
    session.commit()
    assert session.get(Subscription, plan_a.id).sessions_remaining == 7
    copied = {table.name: rows for table, rows in fc._read_organization(session, org.id, NOW)}
    assert [row["id"] for row in copied["class_sessions"]] == [wod.id]  # not the past class
    session.commit()
    until = NOW + timedelta(days=3)

    forecast = fc.simulate(
        session, org.id, now=NOW, until=until, cipher=TEST_CIPHER, scratch_dir=tmp_path
    )
    run_daemons_hourly(session_factory, until, fc.SeededCardProvider())

    session.expire_all()
    real = session.get(Subscription, plan_a.id)
    assert (real.status, real.sessions_remaining) == (SubscriptionStatus.cancelled, 8)
    assert session.scalar(select(Booking.status).where(Booking.id == waiting.id)) == (
        BookingStatus.confirmed
    )
    real_subs = [
        dict(r._mapping)
        for r in session.execute(
            select(Subscription.__table__).where(Subscription.organization_id == org.id)
        )
    ]
    assert _rows(forecast.final["subscriptions"]) == _rows(real_subs)
