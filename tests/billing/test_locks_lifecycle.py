"""The hourly lifecycle pass takes billing's fixed lock order (spec B 4.1: organization,
membership, subscription, then a class session) on PostgreSQL, with real commits across
connections: a plan it ends gives up the seats it alone paid for (bookings.book
.give_up_uncovered), which needs the member's membership lock, and a member's removal at that
moment holds the membership and waits for the plan. Taken after the plans (the set-based
transitions lock them), the two waited on each other and PostgreSQL ended one: "deadlock
detected". Each test makes the two flows meet just before the lock each takes second."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.memberships import remove_member
from gymctl.billing import lifecycle
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from tests.billing.factories import make_billing_settings, make_subscription
from tests.bookings.conftest import add_member, book_seat
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import class_at, locks, run_together

D = timedelta(days=1)


def test_a_member_removed_while_the_lifecycle_cancels_their_plan_deadlocks_with_nothing(
    committed_pg,
):
    """The grace over, the pass cancels the plan for non-payment and would give its seat up;
    staff remove the member at that moment (membership first, then the plan). Both commit:
    the pass waits for the removal, which ended the plan and gave the seat up itself. Before,
    the pass held the plan and waited for the membership the removal held while it waited
    for the plan: "deadlock detected"."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        make_billing_settings(session, gym.organization, plan_required_to_book=True)
        plan = make_subscription(session, gym, PlanType.card, in_debt_since=NOW - 2 * D)
        seat = book_seat(session, gym, class_at(session, gym, NOW + 20 * D))
        session.commit()
    later = NOW + 6 * D

    def pass_() -> None:
        with factory() as worker:
            lifecycle.run_lifecycle(worker, now=later)
            worker.commit()

    def removal() -> None:
        with factory() as staff:
            remove_member(
                staff, gym.organization.id, gym.member.id, actor=None,
                actor_user_id=gym.owner.id, platform_admin=True, now=later,
            )  # fmt: skip
            staff.commit()

    errors = run_together(
        engine,
        {
            "pass": (locks("memberships"), pass_),
            "removal": (locks("subscriptions", strength="FOR UPDATE"), removal),
        },
    )

    assert errors == []
    with factory() as session:
        assert session.get(Membership, gym.membership.id).status is MembershipStatus.cancelled
        assert session.get(Subscription, plan.id).status is SubscriptionStatus.cancelled
        assert session.get(Booking, seat.id).status is BookingStatus.cancelled


def test_a_pass_ending_two_plans_waits_for_a_removal_before_any_class_lock(committed_pg):
    """The pass cancels two members' plans and gives up their seats: the first's in a class
    the removed member also sits in, the second's in a class the removed member waits for.
    The pass locks every membership it needs (the waiting ones too) before any class's lock,
    so it waits for the removal, which goes on to give up its seats: both commit. Before, the
    pass held the first class (its seat given up) and waited for the removed member's
    membership while the removal waited for that class: "deadlock detected"."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        make_billing_settings(session, gym.organization, plan_required_to_book=True)
        # The pass gives seats up member by member, in membership id order.
        first, second = sorted((gym.membership, add_member(session, gym.organization)), key=_id)
        removed = add_member(session, gym.organization)
        plans = [
            make_subscription(session, Gym.of(m), PlanType.card, in_debt_since=NOW - 2 * D)
            for m in (first, second)
        ]
        make_subscription(session, Gym.of(removed), PlanType.card)
        shared = class_at(session, gym, NOW + 20 * D, capacity=2)
        full = class_at(session, gym, NOW + 21 * D, capacity=1)
        seats = [book_seat(session, gym, shared, first), book_seat(session, gym, full, second)]
        book_seat(session, gym, shared, removed)
        book_seat(session, gym, full, removed, at=NOW + timedelta(seconds=1))
        session.commit()
    later = NOW + 6 * D

    def pass_() -> None:
        with factory() as worker:
            lifecycle.run_lifecycle(worker, now=later)
            worker.commit()

    def removal() -> None:
        with factory() as staff:
            remove_member(
                staff, gym.organization.id, removed.user_id, actor=None,
                actor_user_id=gym.owner.id, platform_admin=True, now=later,
            )  # fmt: skip
            staff.commit()

    errors = run_together(
        engine,
        {
            "pass": (locks("memberships", removed.id), pass_),
            "removal": (locks("class_sessions", strength="FOR UPDATE"), removal),
        },
    )

    assert errors == []
    with factory() as session:
        assert [session.get(Subscription, p.id).status for p in plans] == [
            SubscriptionStatus.cancelled
        ] * 2
        assert session.get(Membership, removed.id).status is MembershipStatus.cancelled
        left = session.scalars(
            select(Booking.id).where(
                Booking.class_session_id.in_((shared.id, full.id)),
                Booking.status != BookingStatus.cancelled,
            )
        ).all()
        assert left == []
        assert all(session.get(Booking, s.id).status is BookingStatus.cancelled for s in seats)


def _id(membership):
    return membership.id
