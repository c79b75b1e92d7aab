"""A member removed while holding two unpaid presales gives both plans their places back
(s54: `attempts.end_plan`), while another member switches their presale between the same two
plans, on PostgreSQL with real commits across connections. The session's review found the
removal taking the plans' rows in the order of its subscriptions' ids and the switch in its
own (its new plan, then its old): each could hold one plan and wait for the other's ("deadlock
detected"). Both now take the plans' rows in id order (`plans.lock_plans`), after their
subscriptions; both commit."""

from __future__ import annotations

import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import sessionmaker

from gymctl.db import get_engine
from gymctl.models import Membership, MembershipStatus, Plan, Subscription
from gymctl.retention.plan_change import change_plan
from tests.billing import factories as bf
from tests.bookings.conftest import add_member
from tests.conftest import NOW
from tests.factories import Gym, make_gym
from tests.lock_order import removed_by_staff, run_together

OPENING = NOW + timedelta(days=20)
PLAN_ROW = re.compile(r"(UPDATE plans\b|FROM plans\b.*FOR UPDATE)", re.S)


def _locks_plan(plan_id):
    """A statement updating or locking the plan's row."""

    def matches(statement: str, parameters) -> bool:
        values = parameters.values() if isinstance(parameters, dict) else parameters or ()
        return bool(PLAN_ROW.search(statement)) and plan_id in values

    return matches


def test_a_removal_giving_places_back_and_a_presale_switch_both_commit(committed_pg):
    engine = get_engine(committed_pg)
    factory = sessionmaker(bind=engine, expire_on_commit=False)
    with factory() as session:
        gym = make_gym(session)
        plans = [
            bf.make_plan(session, gym.organization, name=name, plan_group="launch",
                         max_purchases=10, purchases_count=3)
            for name in ("Launch A", "Launch B")
        ]  # fmt: skip
        leaving = add_member(session, gym.organization)
        switching = add_member(session, gym.organization)
        held = sorted(
            (
                bf.make_subscription(session, Gym.of(leaving), plan=plan, presale_opening=OPENING)
                for plan in plans
            ),
            key=lambda row: row.id,
        )
        # The removal meets its plans in its subscriptions' id order: first, then second.
        first, second = (session.get(Plan, row.plan_id) for row in held)
        switched = bf.make_subscription(
            session, Gym.of(switching), plan=first, presale_opening=OPENING
        )
        session.commit()

    def switch() -> None:  # second (its new plan), then first (its old), before s54
        with factory() as session:
            change_plan(
                session, gym.organization.id, switched.id, second.id,
                actor_user_id=switching.user_id, locale="en", now=NOW,
            )  # fmt: skip
            session.commit()

    errors = run_together(
        engine,
        {
            "removal": (
                _locks_plan(second.id),
                lambda: removed_by_staff(factory, gym, leaving, NOW),
            ),
            "switch": (_locks_plan(first.id), switch),
        },
    )

    assert errors == []
    with factory() as session:
        assert session.get(Membership, leaving.id).status is MembershipStatus.cancelled
        assert session.get(Subscription, switched.id).plan_id == second.id
        counts = dict(session.execute(select(Plan.id, Plan.purchases_count)).all())
        # Each of the leaver's presales gives a place back; the switch moves one to second.
        assert (counts[first.id], counts[second.id]) == (3 - 1 - 1, 3 - 1 + 1)
