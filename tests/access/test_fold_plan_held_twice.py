"""One person's two rows, linked (access.folding), each held the same recurring card plan: one
hold a plan (uq_subscriptions_plan_held), so the retired row's stayed there, live, and both
renewed on the person's card: charged twice a month for one plan (s55 noticed, left alone).

The retired row's hold renews no more now: its paid period runs out and the lifecycle ends it
(term_ended), the collector never charges it again, and the staff get a task to return what
the gym owes for the overlap. A held presale never paid is withdrawn (its place back)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from gymctl.access.ownership import link_profiles
from gymctl.billing import collector, lifecycle
from gymctl.billing.forecast import SeededCardProvider
from gymctl.bookings import book, schedule
from gymctl.models import Membership, PaymentTransaction, Subscription, Task
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionStatus, TransactionType
from gymctl.models.bookings import BookingStatus
from tests import factories
from tests.billing.cards import connect_card_provider
from tests.billing.factories import (
    TEST_CIPHER,
    make_billing_settings,
    make_card,
    make_plan,
    make_subscription,
    make_transaction,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def _profile_and_login(session):
    """One person's two rows: the desk's profile (no login) and their own login, proven."""
    profile = factories.user(session, identity_id=None, email="pat@example.test")
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
    return profile, login


@pytest.fixture
def two_rows(session, gym):
    """The desk's profile and the person's own login, both active members holding one plan."""
    organization = gym.organization
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    plan = make_plan(session, organization, PlanType.card)
    profile, login = _profile_and_login(session)
    holds = {}
    for person, started in ((profile, NOW - timedelta(days=20)), (login, NOW - timedelta(days=5))):
        membership = factories.membership(session, user=person, organization=organization)
        card = make_card(session, gym, user=person, token=f"tok_{person.email}_{started.day}")
        holds[person.id] = make_subscription(
            session, gym, plan=plan, membership=membership, now=started, payment_method_id=card.id
        )
    session.flush()
    return profile, login, holds


def _charges(session, subscription_id) -> int:
    return session.scalar(
        select(func.count()).where(
            PaymentTransaction.subscription_id == subscription_id,
            PaymentTransaction.type == TransactionType.recurring,
        )
    )


def test_the_retired_rows_hold_renews_no_more_and_the_staff_are_told(
    session, session_factory, gym, two_rows
):
    _, login, holds = two_rows

    link_profiles(session, login, now=NOW)
    session.commit()

    live = session.scalars(
        select(Subscription).where(Subscription.status == SubscriptionStatus.active)
    ).all()
    kept = next(row for row in live if row.renewal_end is None)
    stopped = next(row for row in holds.values() if row.id != kept.id)
    session.refresh(stopped)
    assert stopped.next_charge_date is None
    assert stopped.renewal_end == stopped.current_period_end
    task = session.scalar(select(Task).where(Task.subject_id == str(stopped.id)))
    assert (task.kind, task.status) == ("plan_held_twice", "open")
    assert task.data["keptSubscriptionId"] == str(kept.id)

    # A year of renewals: the kept hold is charged each month, the stopped one never again.
    at = NOW
    for _ in range(3):
        at = max(kept.next_charge_date, stopped.current_period_end) + timedelta(hours=1)
        collector.daily_sweep(session_factory, SeededCardProvider(), now=at, cipher=TEST_CIPHER)
        with session_factory() as sweep:
            lifecycle.run_lifecycle(sweep, now=at)
            sweep.commit()
        session.refresh(kept)
    session.refresh(stopped)
    assert _charges(session, stopped.id) == 0
    assert _charges(session, kept.id) >= 2
    assert stopped.status == SubscriptionStatus.term_ended
    assert kept.status == SubscriptionStatus.active


def test_a_held_presale_never_paid_is_withdrawn(session, gym):
    """The profile's presale of the plan the login holds active: it would open and charge the
    person a second time; withdrawn at the link (cancelled, held_twice), its place given back."""
    organization = gym.organization
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    plan = make_plan(session, organization, PlanType.card, max_purchases=5)
    profile, login = _profile_and_login(session)
    desk = factories.membership(session, user=profile, organization=organization)
    joined = factories.membership(session, user=login, organization=organization)
    presale = make_subscription(
        session, gym, plan=plan, membership=desk, presale_opening=NOW + timedelta(days=10)
    )
    active = make_subscription(session, gym, plan=plan, membership=joined)
    plan.purchases_count = 2
    session.flush()

    link_profiles(session, login, now=NOW)
    session.flush()

    live = session.scalars(
        select(Subscription).where(
            Subscription.plan_id == plan.id,
            Subscription.status.in_((SubscriptionStatus.active, SubscriptionStatus.scheduled)),
        )
    ).all()
    assert [row.id for row in live] == [active.id]  # the paid one, whichever row held it
    session.refresh(presale)
    assert (presale.status, presale.cancellation_reason) == (
        SubscriptionStatus.cancelled,
        "held_twice",
    )
    session.refresh(plan)
    assert plan.purchases_count == 1  # its place back
    session.refresh(active)
    kept_user = session.scalar(
        select(Membership.user_id).where(Membership.id == active.membership_id)
    )
    assert active.user_id == kept_user  # it follows the person


# --- the person's seats, where the gym requires a plan to book (the review's findings) -------


def _booked_person(session, gym, *, profile_hold, login_hold):
    """The desk's profile (the row kept) and the login (the row retired), each holding the plan
    as asked ("paid": active; "presale": scheduled), the person booked into a class in a week."""
    organization = gym.organization
    make_billing_settings(session, organization, plan_required_to_book=True)
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    plan = make_plan(session, organization, PlanType.card, max_purchases=5)
    profile, login = _profile_and_login(session)
    holds = {}
    for person, kind in ((profile, profile_hold), (login, login_hold)):
        membership = factories.membership(session, user=person, organization=organization)
        card = make_card(session, gym, user=person, token=f"tok_{person.email}_{kind}")
        opening = {"presale_opening": NOW + timedelta(days=20)} if kind == "presale" else {}
        holds[person.id] = make_subscription(
            session, gym, plan=plan, membership=membership, payment_method_id=card.id,
            now=NOW - timedelta(days=5), **opening,
        )  # fmt: skip
    paying = next(row for row in holds.values() if row.status == SubscriptionStatus.active)
    kind = schedule.create_class_type(
        session, organization.id, name="WOD", default_capacity=5, duration_minutes=60, now=NOW
    )
    row = schedule.schedule_session(session, kind, starts_at=NOW + timedelta(days=7), now=NOW)
    payer = session.get(Membership, paying.membership_id)
    seat = book.book(session, organization.id, row.id, payer, actor_user_id=payer.user_id, now=NOW)
    session.flush()
    return profile, login, holds, seat


@pytest.mark.parametrize(
    ("profile_hold", "login_hold"), [("paid", "presale"), ("presale", "paid"), ("paid", "paid")]
)
def test_the_link_leaves_the_persons_seats_booked(session, gym, profile_hold, login_hold):
    """Whichever hold goes (the retired row's presale, the kept row's presale, or neither at
    once), the plan that pays the seat covers it: the seat stays (it was given up as uncovered,
    the ended plan's coverage read by the retired row's user)."""
    _, login, _, seat = _booked_person(
        session, gym, profile_hold=profile_hold, login_hold=login_hold
    )

    link_profiles(session, login, now=NOW)
    session.flush()

    session.refresh(seat)
    assert seat.status == BookingStatus.confirmed
    live = session.scalars(
        select(Subscription).where(
            Subscription.status.in_((SubscriptionStatus.active, SubscriptionStatus.scheduled))
        )
    ).all()
    assert len(live) == (2 if (profile_hold, login_hold) == ("paid", "paid") else 1)


def test_a_stopped_hold_ending_with_its_period_leaves_the_seats_the_kept_one_covers(
    session, session_factory, gym
):
    """Both paid: the retired row's hold ends with its paid period (the lifecycle); the seat
    after it is covered by the kept row's renewing hold and stays."""
    profile, login, holds, _ = _booked_person(session, gym, profile_hold="paid", login_hold="paid")
    stopped = holds[login.id]
    link_profiles(session, login, now=NOW)
    session.commit()
    session.refresh(stopped)
    kind = schedule.create_class_type(
        session, gym.organization.id, name="Late", default_capacity=5, duration_minutes=60, now=NOW
    )
    later = schedule.schedule_session(
        session, kind, starts_at=stopped.current_period_end + timedelta(days=3), now=NOW
    )
    member = session.scalar(select(Membership).where(Membership.user_id == profile.id))
    seat = book.book(
        session, gym.organization.id, later.id, member, actor_user_id=profile.id, now=NOW
    )
    session.commit()

    with session_factory() as sweep:
        lifecycle.run_lifecycle(sweep, now=stopped.current_period_end + timedelta(hours=1))
        sweep.commit()

    session.refresh(stopped)
    session.refresh(seat)
    assert stopped.status == SubscriptionStatus.term_ended
    assert seat.status == BookingStatus.confirmed


def test_with_a_charge_on_its_way_nothing_is_ended_under_it(session, gym):
    """The kept row's presale has its opening charge pending: neither hold is ended by the
    link (the charge would settle on a cancelled plan); the staff's task says so."""
    _, login, holds, _ = _booked_person(session, gym, profile_hold="presale", login_hold="paid")
    presale = next(row for row in holds.values() if row.status == SubscriptionStatus.scheduled)
    make_transaction(
        session, gym, subscription_id=presale.id, user_id=presale.user_id,
        status=TransactionStatus.pending, amount_in_cents=9900,
    )  # fmt: skip
    session.flush()

    link_profiles(session, login, now=NOW)
    session.flush()

    for row in holds.values():
        session.refresh(row)
    assert {row.status for row in holds.values()} == {
        SubscriptionStatus.active,
        SubscriptionStatus.scheduled,
    }
    task = session.scalar(select(Task).where(Task.kind == "plan_held_twice"))
    assert "a charge is on its way" in task.detail
