"""A debt paid on a plan the member holds again ends the old subscription (superseded, see
docs/decisions.md s27-h19c): its bridge membership is cancelled like any other ending, and the
new subscription's stays live."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing.debt_payments import clear_debt_at_desk
from gymctl.bridge import mirror
from gymctl.models.billing import PlanType, SubscriptionStatus
from gymctl.models.bridge import SyncOp
from gymctl.providers.documents import LocalDocumentProvider
from tests.billing.factories import make_plan, make_subscription
from tests.bridge.test_mirror import gym_member  # noqa: F401 (fixture)
from tests.conftest import NOW
from tests.factories import Gym

pytestmark = pytest.mark.embedded


def test_clearing_the_debt_of_a_plan_held_again_cancels_only_the_old_bridge_membership(
    session,
    org,
    connected,
    gym_member,  # noqa: F811
):
    plan = make_plan(session, org, PlanType.card)
    gym = Gym.of(gym_member)
    old = make_subscription(session, gym, plan=plan, in_debt_since=NOW - timedelta(days=1))
    new = make_subscription(session, gym, plan=plan)
    for subscription in (old, new):
        mirror.subscription_changed(session, subscription, now=NOW)
    session.commit()
    later = NOW + timedelta(hours=1)
    clear_debt_at_desk(
        session,
        organization_id=org.id,
        subscription_id=old.id,
        actor_user_id=None,
        now=later,
        documents=LocalDocumentProvider(),
    )
    session.commit()
    session.expire_all()
    assert (old.status, old.cancellation_reason) == (SubscriptionStatus.cancelled, "superseded")
    assert new.status is SubscriptionStatus.active
    rows = session.scalars(
        select(SyncOp).where(SyncOp.organization_id == org.id).order_by(SyncOp.id)
    ).all()
    memberships = [
        (op.op_type.value, op.payload["subscriptionId"])
        for op in rows
        if op.op_type.value.startswith("membership.")
    ]
    assert memberships == [
        ("membership.assign", str(old.id)),
        ("membership.assign", str(new.id)),
        ("membership.cancel", str(old.id)),
    ]
