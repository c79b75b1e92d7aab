"""A card plan withdrawn while its hosted page was past our TTL (the abandoned sweep not run
yet), then paid on that page after all: the late completion must not bring the withdrawn plan
back to life (spec B 3: only an abandoned page's late verified completion revives it)."""

# ruff: noqa: F811 (the fixtures imported are redefined as test arguments)
from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select

from gymctl.billing import checkout
from gymctl.errors import DomainError
from gymctl.models import PaymentTransaction, Plan, Role, Subscription, Task
from gymctl.models.billing import SubscriptionStatus, TransactionStatus
from gymctl.retention import plan_change, presales
from tests.access.conftest import gym  # noqa: F401 (fixtures)
from tests.billing.cards import APPROVE
from tests.billing.test_checkout_webhooks import (  # noqa: F401 (fixtures)
    app,
    create_plan,
    org,
    purchase,
    webhook,
)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


def test_a_late_completion_does_not_revive_a_withdrawn_plan(client, org, card_server, session):
    plan = create_plan(client, org, maxPurchases=5)
    answer = purchase(client, org, plan)
    assert answer.status_code == 201, answer.json
    page_id = answer.json["data"]["checkout"]["pageId"]
    subscription_id = uuid.UUID(answer.json["data"]["subscription"]["id"])
    # Past our page's time, before the abandoned sweep: the member withdraws it.
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    presales.withdraw_presale(
        session,
        org.id,
        subscription_id,
        actor_user_id=org[Role.member].user.id,
        by_member=True,
        locale="en",
        now=later,
    )
    session.commit()
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    session.expire_all()
    subscription = session.get(Subscription, subscription_id)
    # Withdrawn stays withdrawn: no period granted, no slot used without being taken again.
    assert subscription.status == SubscriptionStatus.cancelled
    assert subscription.cancellation_reason == "presale_withdrawal"
    assert subscription.current_period_end is None
    assert session.get(Plan, uuid.UUID(plan["id"])).purchases_count == 0
    # The money taken is on the ledger, for staff to give back.
    paid = session.scalars(
        select(PaymentTransaction).where(PaymentTransaction.subscription_id == subscription_id)
    ).all()
    assert [t.status for t in paid] == [TransactionStatus.completed]
    assert paid[0].metadata_.get("notRevived")
    (task,) = session.scalars(select(Task).where(Task.kind == "payment_follow_up")).all()
    assert (task.subject_id, task.priority) == (str(paid[0].id), "urgent")
    assert task.data["reason"] == "late_completion_of_a_cancelled_plan"


def test_a_pending_checkout_past_its_time_cannot_switch_to_a_dearer_plan(
    client, org, card_server, session
):
    """Not a presale (no opening day): its page charges the plan's price. Switched after our
    page's time to a dearer plan of the group, the old page paid the cheap price for it. Only a
    presale switches (spec B 4.3: change_plan for a grouped scheduled presale)."""
    cheap = create_plan(client, org, name="Launch monthly", planGroup="launch")
    dear = create_plan(client, org, name="Launch gold", planGroup="launch", priceInCents=90000)
    answer = purchase(client, org, cheap)
    assert answer.status_code == 201, answer.json
    page_id = answer.json["data"]["checkout"]["pageId"]
    subscription_id = uuid.UUID(answer.json["data"]["subscription"]["id"])
    assert answer.json["data"]["subscription"]["openingDay"] is None  # not a presale
    later = NOW + checkout.CHECKOUT_TTL + timedelta(minutes=1)
    subscription = session.get(Subscription, subscription_id)
    assert "change_plan" not in plan_change.member_actions(session, subscription)
    with pytest.raises(DomainError) as refused:
        plan_change.change_plan(
            session,
            org.id,
            subscription_id,
            uuid.UUID(dear["id"]),
            actor_user_id=org[Role.member].user.id,
            locale="en",
            now=later,
        )
    assert refused.value.code == "plan_change_unavailable"
    session.rollback()
    card_server.complete_page(page_id, APPROVE)
    assert webhook(client, org, page_id).status_code == 200
    session.expire_all()
    subscription = session.get(Subscription, subscription_id)
    assert subscription.status == SubscriptionStatus.active
    assert subscription.plan_id == uuid.UUID(cheap["id"])
    assert subscription.price_in_cents == cheap["priceInCents"]
