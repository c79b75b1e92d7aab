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
from gymctl.models import Membership, PaymentTransaction, Subscription, Task
from gymctl.models.billing import PlanType, SubscriptionStatus, TransactionType
from tests import factories
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER, make_card, make_plan, make_subscription
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def two_rows(session, gym):
    """The desk's profile and the person's own login, both active members holding one plan."""
    organization = gym.organization
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    plan = make_plan(session, organization, PlanType.card)
    profile = factories.user(session, identity_id=None, email="pat@example.test")
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
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
    profile = factories.user(session, identity_id=None, email="pat@example.test")
    login = factories.user(
        session, identity_id="user_pat", email="pat@example.test", email_verified_at=NOW
    )
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
