"""A debt paid on a plan the member holds again ends that plan (superseded) while another
member is removed, on PostgreSQL with real commits across connections: through the collector's
charge (`attempts.apply_outcome`), the member's own payment (`debt_payments.pay_own_debt`) and
the desk's (`debt_payments.clear_debt_at_desk`). Each locks its member's membership exclusively
(attempts.lock_subscription), and the plan it ends gives up the seats it alone paid for
(bookings.book.give_up_uncovered), locking the members waiting in those classes shared after
it. A removal locks every membership its member's seats touch in one id order first
(access.leaving.lock_leaving). With each member waiting in a class where the other holds a seat
and the removed one's id first, each held its own and waited for the other's: "deadlock
detected". A path that may end the plan takes the waiting members whose ids come before its
member's before its member's own lock (`may_end_at`): one id order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy.orm import sessionmaker

from gymctl.billing import attempts
from gymctl.billing.debt_payments import clear_debt_at_desk, pay_own_debt
from gymctl.db import get_engine
from gymctl.models import Booking, BookingStatus, Membership, MembershipStatus, Plan, Subscription
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.providers.card import ChargeResult, Outcome
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing import factories as bf
from tests.billing.cards import connect_card_provider
from tests.billing.factories import TEST_CIPHER, make_billing_settings
from tests.billing_ops.helpers import card_subscription
from tests.bookings.conftest import add_member
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import locks, mutual_waits, removed_by_staff, run_together, seats_left

D = timedelta(days=1)
LATER = NOW + timedelta(hours=1)


def _collector_charges(factory, card_server, gym, in_debt):
    """The collector's debt attempt, stored before the race; the flow applies its approval."""
    with factory() as session:
        began = attempts.begin_attempt(session, in_debt.id, now=LATER, cipher=TEST_CIPHER)
        assert began.outcome == "started", began
        session.commit()
    approved = ChargeResult(
        outcome=Outcome.approved,
        unique_id=began.attempt["externalAttemptId"],
        transaction_id="deal-1",
        amount_in_cents=began.attempt["amountInCents"],
        currency=began.attempt["currency"],
        terminal=began.attempt["terminal"],
    )

    def charge() -> None:
        with factory() as worker:
            applied = attempts.apply_outcome(worker, began.transaction_id, approved, now=LATER)
            assert applied.outcome == "charged", applied
            worker.commit()

    return charge


def _member_pays(factory, card_server, gym, in_debt):
    """The member pays the debt with the saved card (the pay-debt door)."""

    def pay() -> None:
        outcome = pay_own_debt(
            factory, card_server.provider(timeout=5.0), organization_id=gym.organization.id,
            subscription_id=in_debt.id, user_id=in_debt.user_id, now=LATER, cipher=TEST_CIPHER,
        )  # fmt: skip
        assert outcome == "charged", outcome

    return pay


def _desk_clears(factory, card_server, gym, in_debt):
    """Staff take the debt in cash at the desk (the clear-debt door)."""

    def clear() -> None:
        with factory() as staff:
            clear_debt_at_desk(
                staff, organization_id=gym.organization.id, subscription_id=in_debt.id,
                actor_user_id=gym.owner.id, now=LATER, documents=LocalDocumentProvider(),
            )  # fmt: skip
            staff.commit()

    return clear


@pytest.mark.parametrize(
    "paying",
    [_collector_charges, _member_pays, _desk_clears],
    ids=["collector", "member", "desk"],
)
def test_a_debt_paid_ending_a_plan_and_a_removal_with_mutual_waits_both_commit(
    committed_pg, card_server, paying
):
    """Member A's debt is paid while A holds the plan again (the debt's plan ends, superseded,
    and A's seat it alone covered is given up); staff remove member B at that moment. A holds a
    seat in one class where B waits; B holds a seat in another where A waits; B's id first.
    Both commit."""
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        make_billing_settings(session, gym.organization, plan_required_to_book=True)
        connect_card_provider(session, gym, since=NOW - 30 * D)
        removed, ending = sorted(
            (add_member(session, gym.organization), add_member(session, gym.organization)),
            key=lambda membership: membership.id,
        )
        in_debt = card_subscription(session, Gym.of(ending), card_server, in_debt_since=NOW - 2 * D)
        held_again = bf.make_subscription(
            session, Gym.of(ending), PlanType.card, plan=session.get(Plan, in_debt.plan_id)
        )
        bf.make_subscription(session, Gym.of(removed), PlanType.card)
        seat = mutual_waits(session, gym, ending, removed)
        # The plan held again is under notice: it covers no class after its effective date,
        # so the seat the debt's plan covered is given up when that plan ends.
        held_again.cancel_at_period_end = True
        held_again.cancellation_effective_at = NOW + 10 * D
        session.commit()
    pay = paying(factory, card_server, gym, in_debt)

    errors = run_together(
        engine,
        {
            "pay": (locks("memberships", removed.id), pay),
            "removal": (
                locks("memberships", ending.id),
                lambda: removed_by_staff(factory, gym, removed, LATER),
            ),
        },
    )

    assert errors == []
    with factory() as session:
        ended = session.get(Subscription, in_debt.id)
        assert (ended.status, ended.cancellation_reason) == (
            SubscriptionStatus.cancelled,
            "superseded",
        )
        assert session.get(Membership, removed.id).status is MembershipStatus.cancelled
        assert session.get(Booking, seat.id).status is BookingStatus.cancelled
        assert seats_left(session, removed) == []
