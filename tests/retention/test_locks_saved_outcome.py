"""A saved_* outcome recorded on a notice's retention case withdraws the notice
(`cases.record_outcome` -> `notices.withdraw_notice`), and since df8da58 a withdrawal runs the
lines the member waits in, so it takes the members waiting in the member's classes (shared,
`may_end_at`) before its member's own lock: billing's one id order, as a removal takes them
(`access.leaving.lock_leaving`).

record_outcome takes the subscription's lock first WITHOUT `may_end_at` (its own membership,
exclusively), then calls withdraw_notice, which asks for the waiting members whose ids come
first: after its own. With two members each waiting in a class where the other holds a seat,
staff recording "saved_staff" for A while another staff member removes B (B's id first) each
hold their own member and wait for the other's: PostgreSQL's "deadlock detected", one of the
two requests fails (a 5xx on the route)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from gymctl.models import Membership, MembershipStatus, RetentionCase, Subscription
from gymctl.models.billing import PlanType
from gymctl.models.retention import RetentionOutcome
from gymctl.retention import cases, notices
from tests.billing import factories as bf
from tests.billing.factories import make_billing_settings
from tests.bookings.conftest import add_member
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import locks, mutual_waits, removed_by_staff, run_together

D = timedelta(days=1)
LATER = NOW + timedelta(hours=1)


def test_a_saved_outcome_and_a_removal_with_mutual_waits_both_commit(committed_pg):
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        make_billing_settings(session, gym.organization, plan_required_to_book=True)
        removed, kept = sorted(
            (add_member(session, gym.organization), add_member(session, gym.organization)),
            key=lambda membership: membership.id,
        )
        plan = bf.make_plan(session, gym.organization, PlanType.card)
        noticed = bf.make_subscription(session, Gym.of(kept), plan=plan, membership=kept)
        bf.make_subscription(session, Gym.of(removed), PlanType.card, membership=removed)
        mutual_waits(session, gym, kept, removed)
        _, case = notices.give_notice(
            session, gym.organization.id, noticed.id, initiator="member",
            actor_user_id=kept.user_id, locale="en", now=NOW - D,
        )  # fmt: skip
        session.commit()

    def saved() -> None:
        with factory() as staff:
            cases.record_outcome(
                staff, gym.organization.id, case.id, outcome=RetentionOutcome.saved_staff,
                actor_user_id=gym.owner.id, locale="en", now=LATER,
            )  # fmt: skip
            staff.commit()

    errors = run_together(
        engine,
        {
            "outcome": (locks("memberships"), saved),
            "removal": (
                locks("memberships", kept.id),
                lambda: removed_by_staff(factory, gym, removed, LATER),
            ),
        },
    )

    assert errors == [], errors
    with factory() as session:
        assert session.get(Subscription, noticed.id).cancel_at_period_end is False
        assert session.get(RetentionCase, case.id).outcome == "saved_staff"
        assert session.get(Membership, removed.id).status is MembershipStatus.cancelled
