"""Plan change of a grouped scheduled presale (spec B 4.3, 7), and the member-facing
subscription list's memberActions.

A presale holds no period, quota or credits before its opening-day charge, so switching it is a
swap of plan and price: the target must be in the same plan group, the target's cap is taken
and the old plan's place given back, and nothing is switched while its charge is in flight.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing.attempts import due_ledger_checks, lock_subscription
from gymctl.billing.checkout import refuse_unless_sold_online, sold_online
from gymctl.billing.plans import (
    held_once,
    live_holder,
    live_plan,
    lock_plans,
    refuse_if_held,
    release_purchase_slot,
    take_purchase_slot,
)
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Checkout, PaymentTransaction, Plan, Subscription
from gymctl.models.billing import CheckoutStatus, SubscriptionStatus, TransactionStatus
from gymctl.retention import codes
from gymctl.retention.copy import message

NOTICE_STATUSES = (
    SubscriptionStatus.active,
    SubscriptionStatus.past_due,
    SubscriptionStatus.debt,
    SubscriptionStatus.paused,
)


def charge_in_flight(session: Session, subscription: Subscription, now: datetime) -> bool:
    """A pending payment (its outcome unknown) or a hosted page still open for this row."""
    pending = session.scalar(
        select(PaymentTransaction.id).where(
            PaymentTransaction.subscription_id == subscription.id,
            PaymentTransaction.status == TransactionStatus.pending,
        )
    )
    if pending is not None:
        return True
    page = session.scalar(
        select(Checkout.id).where(
            Checkout.subscription_id == subscription.id,
            Checkout.status == CheckoutStatus.open,
            Checkout.expires_at > now,
        )
    )
    return page is not None


def _retry_owed(session: Session, subscription: Subscription) -> bool:
    """The charge now due has a confirmed non-charge (a technical failure): its retry repeats
    those terms, so a swap's new price would block it as retry_terms_changed until an owner
    allowed it. Withdrawing is still allowed: it ends the obligation, nothing is retried."""
    return bool(due_ledger_checks(session, subscription)[1])


def change_targets(session: Session, subscription: Subscription) -> list[Plan]:
    """The plans a grouped presale may switch to: live plans of the same group, not its own,
    sold online as a purchase is (its opening day's charge is the card provider's), nor a
    recurring one the member already holds (switching to it answers plan_already_held)."""
    plan = session.get(Plan, subscription.plan_id)
    if plan is None or plan.plan_group is None:
        return []
    group = session.scalars(
        select(Plan)
        .where(
            Plan.organization_id == subscription.organization_id,
            Plan.plan_group == plan.plan_group,
            Plan.id != plan.id,
            Plan.deleted_at.is_(None),
        )
        .order_by(Plan.price_in_cents, Plan.name, Plan.id)
    )
    return [
        target
        for target in group
        if sold_online(target)
        and live_holder(session, target, subscription.user_id, other_than=subscription.id) is None
    ]


def member_actions(session: Session, subscription: Subscription) -> list[str]:
    """What the member may do with this subscription from their own list."""
    actions = []
    if subscription.status in NOTICE_STATUSES and not subscription.cancel_at_period_end:
        actions.append("give_notice")
    if subscription.cancel_at_period_end and subscription.status in NOTICE_STATUSES:
        actions.append("withdraw_notice")
    if subscription.status == SubscriptionStatus.scheduled:
        actions.append("withdraw_presale")
        if subscription.opening_day is not None and change_targets(session, subscription):
            actions.append("change_plan")
    return actions


def change_plan(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    target_plan_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    locale: str | None,
    now: datetime,
) -> Subscription:
    subscription = lock_subscription(session, subscription_id)
    if subscription is None or subscription.organization_id != organization_id:
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription")
    if subscription.status != SubscriptionStatus.scheduled or subscription.opening_day is None:
        # A scheduled row without an opening day is a purchase whose hosted page charges the
        # plan's price: switched, a late completion of that page paid the old price for the new
        # plan. Only a presale (charged on its opening day, at its plan's price) switches.
        raise conflict(codes.PLAN_CHANGE_UNAVAILABLE, "only a presale not yet started can switch")
    current = session.get(Plan, subscription.plan_id)
    target = live_plan(session, organization_id, target_plan_id)
    if target.id == current.id:
        raise conflict(codes.PLAN_CHANGE_SAME_PLAN, "this is already your plan")
    if current.plan_group is None or target.plan_group != current.plan_group:
        code = codes.PRESALE_SWAP_REQUIRES_SAME_GROUP
        raise conflict(code, message(code, locale))
    refuse_unless_sold_online(target)  # as a purchase of it: the switch takes its place
    if charge_in_flight(session, subscription, now) or _retry_owed(session, subscription):
        code = codes.PLAN_CHANGE_CHARGE_IN_FLIGHT
        raise conflict(code, message(code, locale))
    # A recurring plan the member already holds: 409 plan_already_held, as buying it answers.
    refuse_if_held(session, target, subscription.user_id, other_than=subscription.id)
    lock_plans(session, (current.id, target.id))  # in one order, as a removal takes them
    take_purchase_slot(session, target)
    release_purchase_slot(session, current.id)
    with held_once(session, target, subscription.user_id):  # a purchase committed meanwhile
        subscription.plan_id = target.id
        subscription.plan_type = target.type
        subscription.price_in_cents = target.price_in_cents
        subscription.currency = target.currency
        subscription.interval_months = target.interval_months
        subscription.open_ended = target.open_ended
        subscription.updated_at = now
    emit(
        session,
        EventKind.audit,
        "subscription.plan_changed",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"fromPlanId": str(current.id), "toPlanId": str(target.id), "presale": True},
    )
    session.flush()
    return subscription
