"""The period-end sweep settling a notice while another member is removed, on PostgreSQL with
real commits across connections. The settlement locks its member's membership exclusively
(attempts.lock_subscription, skip_locked on its first try) and the plan it ends gives up the
seats it alone paid for (bookings.book.give_up_uncovered), locking the members waiting in those
classes shared after it. A removal locks every membership its member's seats touch in one id
order first (access.leaving.lock_leaving). With each member waiting in a class where the other
holds a seat and the removed one's id first, each held its own and waited for the other's:
"deadlock detected". The settlement now takes the waiting members whose ids come first before
its member's own lock (`may_end_at`), as every path that may end a plan: one id order."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.access.memberships import remove_member
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention.settlement import period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import make_billing_settings
from tests.bookings.conftest import add_member, book_seat
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import class_at, locks, run_together
from tests.retention.conftest import give_notice, paid_card_subscription

D = timedelta(days=1)
LATER = NOW + timedelta(hours=1)


def test_a_notice_settled_and_a_removal_with_mutual_waits_both_commit(
    committed_pg, card_server, doors
):
    """Member A's notice matures: the sweep cancels A's plan and gives up A's seat it alone
    covered; staff remove member B at that moment. A holds a seat in one class where B waits;
    B holds a seat in another where A waits; B's id first. Both commit, the notice settled in
    this pass."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        make_billing_settings(session, gym.organization, plan_required_to_book=True)
        connect_card_provider(session, gym, since=NOW - 400 * D)
        removed, ending = sorted(
            (add_member(session, gym.organization), add_member(session, gym.organization)),
            key=lambda membership: membership.id,
        )
        noticed, _ = paid_card_subscription(
            session, Gym.of(ending), card_server, membership=ending,
            current_period_end=NOW + 40 * D,
        )  # fmt: skip
        bf.make_subscription(session, Gym.of(removed), PlanType.card)
        theirs = class_at(session, gym, NOW + 20 * D, capacity=1)
        others = class_at(session, gym, NOW + 21 * D, capacity=1)
        seat = book_seat(session, gym, theirs, ending)
        book_seat(session, gym, others, removed)
        book_seat(session, gym, theirs, removed, at=NOW + timedelta(seconds=1))
        book_seat(session, gym, others, ending, at=NOW + timedelta(seconds=1))
        give_notice(session, Gym.of(ending), noticed, now=NOW - 30 * D)
        noticed.cancellation_effective_at = NOW
        session.commit()

    def sweep() -> None:
        result = period_end_sweep(factory, doors, now=LATER)
        assert (result.cancelled, result.errors) == ([str(noticed.id)], 0), result

    def removal() -> None:
        with factory() as staff:
            remove_member(
                staff, gym.organization.id, removed.user_id, actor=gym.owner_membership,
                actor_user_id=gym.owner.id, now=LATER,
            )  # fmt: skip
            staff.commit()

    errors = run_together(
        engine,
        {
            "sweep": (locks("memberships", removed.id), sweep),
            "removal": (locks("memberships", ending.id), removal),
        },
    )

    assert errors == []
    with factory() as session:
        assert session.get(Subscription, noticed.id).status is SubscriptionStatus.cancelled
        assert session.get(Membership, removed.id).status is MembershipStatus.cancelled
        assert session.get(Booking, seat.id).status is BookingStatus.cancelled
        left = session.scalars(
            select(Booking.id).where(
                Booking.membership_id == removed.id,
                Booking.status != BookingStatus.cancelled,
            )
        ).all()
        assert left == []
