"""A hosted page abandoned (the sweep cancelled its plan), then the member removed, then the
page paid after all: the late completion must not revive the plan nor make the removed
membership active again."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.access import memberships
from gymctl.billing import checkout
from gymctl.models import Membership, PaymentTransaction, Role, Subscription, Task
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.models.organizations import MembershipStatus
from tests.access.conftest import gym  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.mark.parametrize("since", [MembershipStatus.cancelled, MembershipStatus.invited])
def test_a_late_page_does_not_revive_the_plan_of_a_removed_member(
    client, org, card_server, session, session_factory, since
):
    """Removed, or removed and invited back without having accepted yet."""
    plan = create_plan(client, org)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    page_id = answer.json["data"]["checkout"]["pageId"]
    subscription_id = uuid.UUID(answer.json["data"]["subscription"]["id"])
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    swept = checkout.abandoned_sweep(
        session_factory, card_server.provider(), now=later, cipher=TEST_CIPHER
    )
    assert swept["abandoned"] == [str(subscription_id)]
    member = org[Role.member].user
    memberships.remove_member(
        session,
        org.id,
        member.id,
        actor=None,
        actor_user_id=org[Role.owner].user.id,
        now=later,
    )
    membership = session.get(Membership, session.get(Subscription, subscription_id).membership_id)
    membership.status = since  # invited back: a new invitation's pending acceptance
    session.commit()
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    session.expire_all()
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.current_period_end is None
    membership = session.get(Membership, subscription.membership_id)
    assert membership.status == since
    paid = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()
    assert [t.status for t in paid] == [TransactionStatus.completed]
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert task.subject_id == str(paid[0].id)
    assert task.data["reason"] == "late_completion_of_an_ended_membership"
