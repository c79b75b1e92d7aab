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

import threading
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.retention import settlement
from gymctl.retention.settlement import period_end_sweep
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import make_billing_settings
from tests.bookings.conftest import add_member
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import locks, mutual_waits, removed_by_staff, run_together, seats_left
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
    gym, removed, ending, noticed, seat = _mutual_waits_with_a_notice(factory, card_server)

    def sweep() -> None:
        result = period_end_sweep(factory, doors, now=LATER)
        assert (result.cancelled, result.errors) == ([str(noticed.id)], 0), result

    errors = run_together(
        engine,
        {
            "sweep": (locks("memberships", removed.id), sweep),
            "removal": (
                locks("memberships", ending.id),
                lambda: removed_by_staff(factory, gym, removed, LATER),
            ),
        },
    )

    assert errors == []
    with factory() as session:
        assert session.get(Subscription, noticed.id).status is SubscriptionStatus.cancelled
        assert session.get(Membership, removed.id).status is MembershipStatus.cancelled
        assert session.get(Booking, seat.id).status is BookingStatus.cancelled
        assert seats_left(session, removed) == []


def _mutual_waits_with_a_notice(factory, card_server):
    """Member A's notice matured (its plan ends at the sweep); A holds a seat in one class where
    B waits, B in another where A waits; B's id first: (gym, B, A, A's plan, A's seat)."""
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
        seat = mutual_waits(session, gym, ending, removed)
        give_notice(session, Gym.of(ending), noticed, now=NOW - 30 * D)
        noticed.cancellation_effective_at = NOW
        session.commit()
    return gym, removed, ending, noticed, seat


def test_a_waiting_member_held_idle_stops_neither_try_of_the_sweep(
    committed_pg, card_server, doors, monkeypatch
):
    """The first try skips a held plan, but the members it locks first (`may_end_at`) it waits
    for: without a lock_timeout there, a transaction left idle holding one of them stopped the
    sweep (and every notice after it) for as long as it stayed. Both tries wait at most
    WAIT_FOR_ROWS; the next pass settles the notice."""
    monkeypatch.setattr(settlement, "WAIT_FOR_ROWS", "200ms")
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    _gym, removed, _ending, noticed, _seat = _mutual_waits_with_a_notice(factory, card_server)
    swept: list = []
    with factory() as idle_holder:
        idle_holder.execute(
            select(Membership.id).where(Membership.id == removed.id).with_for_update()
        )
        sweep = threading.Thread(
            target=lambda: swept.append(period_end_sweep(factory, doors, now=LATER))
        )
        sweep.start()
        sweep.join(timeout=20)
        stopped = sweep.is_alive()
        idle_holder.rollback()
    sweep.join()

    assert not stopped, "the sweep waited on the idle holder past both tries"
    assert swept[0].cancelled == []
    assert period_end_sweep(factory, doors, now=LATER).cancelled == [str(noticed.id)]
