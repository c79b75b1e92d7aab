"""A renewing plan's session quota is the quota of each period (spec B 2.1: a plan holds "a
period, quota or credits"; plans.refill_sessions): a monthly card plan of 2 classes books 2
classes a month, not 2 for ever. Renewed by the collector's charge, by a lapsed cash plan paid
at the desk, or rolled free by the lifecycle, the new period holds the plan's quota again; what
the last period left lapses with it, and a session its bookings give back after the renewal
lapses too. The booking rules bound a quota plan's classes by its period (bookings.quota), so a
class of the next period waits for the renewal."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.billing import attempts, collector, lifecycle
from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.billing.forecast import SeededCardProvider
from gymctl.bookings import attendance, schedule
from gymctl.errors import DomainError
from gymctl.models import Role
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.documents import LocalDocumentProvider
from tests.access import conftest as access
from tests.billing.cards import connect_card_provider
from tests.billing.factories import (
    TEST_CIPHER,
    make_billing_settings,
    make_card,
    make_plan,
    make_subscription,
)
from tests.bookings.conftest import book_seat, cancel_own
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

gym = access.gym
QUOTA = 2


@pytest.fixture
def member(session, gym):
    make_billing_settings(session, gym.organization, plan_required_to_book=True)
    return gym[Role.member].membership


def _classes(session, gym, *starts, capacity=5):
    kind = schedule.create_class_type(
        session, gym.organization.id, name="WOD", default_capacity=capacity,
        duration_minutes=60, now=NOW,
    )  # fmt: skip
    return [schedule.schedule_session(session, kind, starts_at=at, now=NOW) for at in starts]


def _card_plan(session, gym, member, **plan):
    """A monthly card plan of QUOTA classes, its first period ending in three days."""
    connect_card_provider(session, gym, since=NOW - timedelta(days=60))
    card = make_card(session, gym, user=member.user)
    quota_plan = make_plan(session, gym.organization, PlanType.card, sessions_quota=QUOTA, **plan)
    return make_subscription(
        session, gym, PlanType.card, plan=quota_plan, membership=member,
        now=NOW - timedelta(days=27), payment_method_id=card.id, sessions_remaining=QUOTA,
    )  # fmt: skip


def _lifecycle_pass(session_factory, *, at):
    with session_factory() as sweep:
        lifecycle.run_lifecycle(sweep, now=at)
        sweep.commit()


def _paid_at_desk(session_factory, gym, plan, *, at):
    """Staff take the plan's debt in cash (the desk's clear-debt)."""
    with session_factory() as desk:
        clear_debt_at_desk(
            desk, organization_id=gym.organization.id, subscription_id=plan.id,
            actor_user_id=gym.owner.id, now=at, documents=LocalDocumentProvider(),
        )  # fmt: skip
        desk.commit()


def _book_over_http(client, idp, gym, row, at):
    token = idp.token(f"user_{Role.member.value}", now=at)
    return client.post(
        f"/organizations/{gym.id}/sessions/{row.id}/book",
        json={},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_a_card_plan_renewed_by_the_collector_books_its_quota_again(
    engine, client, clock, idp, session, session_factory, gym, member
):
    """Through the API: the quota spent, the next period's class waits for the renewal; the
    collector's charge renews the plan, and the new period books QUOTA classes again."""
    plan = _card_plan(session, gym, member)
    end = plan.current_period_end
    this_period = _classes(session, gym, NOW + timedelta(days=1), NOW + timedelta(days=2))
    (next_period,) = _classes(session, gym, end + timedelta(days=1))
    session.commit()
    clock.set(NOW)
    for row in this_period:
        assert _book_over_http(client, idp, gym, row, NOW).status_code == 201
    session.refresh(plan)
    assert plan.sessions_remaining == 0
    early = _book_over_http(client, idp, gym, next_period, NOW)
    assert (early.status_code, early.json["code"]) == (409, "plan_ends_before_session")

    collector.daily_sweep(session_factory, SeededCardProvider(), now=end, cipher=TEST_CIPHER)

    session.refresh(plan)
    assert plan.status == SubscriptionStatus.active
    assert plan.current_period_start == end
    assert plan.sessions_remaining == QUOTA
    clock.set(end)
    booked = _book_over_http(client, idp, gym, next_period, end)
    assert booked.status_code == 201, booked.json
    session.refresh(plan)
    assert plan.sessions_remaining == QUOTA - 1


def test_what_a_period_left_lapses_with_it(session, session_factory, gym, member):
    """One class of two booked: the renewed period holds QUOTA, not QUOTA + 1."""
    plan = _card_plan(session, gym, member)
    (row,) = _classes(session, gym, NOW + timedelta(days=1))
    book_seat(session, gym, row, member)
    session.commit()

    collector.daily_sweep(
        session_factory, SeededCardProvider(), now=plan.current_period_end, cipher=TEST_CIPHER
    )

    session.refresh(plan)
    assert plan.sessions_remaining == QUOTA


def test_a_declined_renewal_paid_later_gives_the_new_period_its_quota(
    session, session_factory, gym, member
):
    """In debt the plan keeps what it had; the debt paid (grant_period), the period the debt
    stood for starts with the quota."""
    plan = _card_plan(session, gym, member)
    end = plan.current_period_end
    (row,) = _classes(session, gym, NOW + timedelta(days=1))
    book_seat(session, gym, row, member)
    session.commit()
    collector.daily_sweep(
        session_factory, SeededCardProvider(decline_rate=1.0), now=end, cipher=TEST_CIPHER
    )
    session.refresh(plan)
    assert (plan.status, plan.sessions_remaining) == (SubscriptionStatus.debt, QUOTA - 1)

    _paid_at_desk(session_factory, gym, plan, at=end + timedelta(days=1))

    session.refresh(plan)
    assert (plan.status, plan.current_period_start) == (SubscriptionStatus.active, end)
    assert plan.sessions_remaining == QUOTA


def test_a_lapsed_cash_plan_paid_at_the_desk_gives_the_new_period_its_quota(
    session, session_factory, gym, member
):
    quota_plan = make_plan(session, gym.organization, PlanType.cash, sessions_quota=QUOTA)
    plan = make_subscription(
        session, gym, PlanType.cash, plan=quota_plan, membership=member,
        now=NOW - timedelta(days=32), sessions_remaining=0,
    )  # fmt: skip
    session.commit()
    _lifecycle_pass(session_factory, at=NOW)
    session.refresh(plan)
    assert plan.status == SubscriptionStatus.debt
    lapsed = plan.current_period_end

    _paid_at_desk(session_factory, gym, plan, at=NOW)

    session.refresh(plan)
    assert (plan.status, plan.current_period_start) == (SubscriptionStatus.active, lapsed)
    assert plan.sessions_remaining == QUOTA


def test_a_free_plan_rolled_by_the_lifecycle_gives_the_new_period_its_quota(
    session, session_factory, gym, member
):
    """The roll renews many rows in one statement on both engines (lifecycle.rolled)."""
    free = make_plan(session, gym.organization, PlanType.card, price_in_cents=0,
                     sessions_quota=QUOTA)  # fmt: skip
    plan = make_subscription(
        session, gym, PlanType.card, plan=free, membership=member,
        now=NOW - timedelta(days=40), sessions_remaining=0,
    )  # fmt: skip
    unlimited = make_subscription(
        session, gym, PlanType.card, plan=make_plan(session, gym.organization, price_in_cents=0),
        membership=gym[Role.coach].membership, now=NOW - timedelta(days=40),
    )  # fmt: skip
    session.commit()

    _lifecycle_pass(session_factory, at=NOW)

    session.refresh(plan)
    session.refresh(unlimited)
    assert plan.current_period_end > NOW
    assert plan.sessions_remaining == QUOTA
    assert unlimited.current_period_end > NOW
    assert unlimited.sessions_remaining is None  # no quota: none granted


@pytest.mark.parametrize("before_end", [timedelta(hours=1), timedelta(0)])
def test_a_session_given_back_after_the_renewal_lapses_with_its_period(
    session, session_factory, gym, member, before_end
):
    """Waitlisted for the last class of a period, the booking spent a session of that period;
    its waitlist closes after the renewal: the new period keeps QUOTA, not QUOTA + 1."""
    plan = _card_plan(session, gym, member)
    end = plan.current_period_end
    (last,) = _classes(session, gym, end - before_end, capacity=1)  # the period's last
    coach = gym[Role.coach].membership
    make_subscription(session, gym, PlanType.card, membership=coach)  # unlimited
    book_seat(session, gym, last, coach)
    waiting = book_seat(session, gym, last, member)
    session.commit()
    session.refresh(plan)
    assert plan.sessions_remaining == QUOTA - 1

    collector.daily_sweep(session_factory, SeededCardProvider(), now=end, cipher=TEST_CIPHER)
    with session_factory() as closing:
        attendance.close_waitlists(closing, now=end + timedelta(minutes=5))
        closing.commit()

    session.refresh(plan)
    session.refresh(waiting)
    assert waiting.subscription_id is None  # it lets go of the spent session
    assert plan.sessions_remaining == QUOTA


def test_a_pack_gives_a_session_back_as_before(session, gym, member):
    """A plan that does not renew keeps its one period: a cancelled booking's session comes
    back to it."""
    pack = make_subscription(session, gym, PlanType.pack, membership=member, sessions_remaining=1)
    (row,) = _classes(session, gym, NOW + timedelta(days=1))
    booking = book_seat(session, gym, row, member)
    session.refresh(pack)
    assert pack.sessions_remaining == 0

    cancel_own(session, gym, booking)

    session.refresh(pack)
    assert pack.sessions_remaining == 1


def test_grant_period_of_a_first_period_sets_the_quota_and_a_renewal_refills_it(
    session, gym, member
):
    """The first period (a presale paid) sets the quota; each renewal sets it again."""
    quota_plan = make_plan(session, gym.organization, PlanType.card, sessions_quota=QUOTA)
    plan = make_subscription(
        session, gym, PlanType.card, plan=quota_plan, membership=member,
        presale_opening=NOW + timedelta(days=1),
    )  # fmt: skip
    assert plan.sessions_remaining is None

    attempts.grant_period(session, plan, now=NOW + timedelta(days=1))
    assert plan.sessions_remaining == QUOTA
    plan.sessions_remaining = 0
    attempts.grant_period(session, plan, now=plan.current_period_end)
    assert plan.sessions_remaining == QUOTA


def test_a_class_refused_is_refused_with_nothing_spent(session, gym, member):
    """The refusal the quota gives (409 plan_sessions_used_up) leaves the plan as it was."""
    plan = _card_plan(session, gym, member)
    plan.sessions_remaining = 0
    (row,) = _classes(session, gym, NOW + timedelta(days=1))
    session.flush()
    with pytest.raises(DomainError) as refused:
        book_seat(session, gym, row, member)
    assert (refused.value.code, refused.value.status) == ("plan_sessions_used_up", 409)
    session.refresh(plan)
    assert plan.sessions_remaining == 0
