"""Plans and plan purchase (spec B 2.1, 4.3).

A purchase of a card plan on a card-provider organization opens a hosted payment page: a
presale (before the organization's opening day) saves the card only and waits for the opening
day's charge; otherwise the page charges the first period and saves the card. Other plans are
sold at the desk by staff (`grant_plan`) and recorded with a manual transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, case, select, update
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing import codes
from gymctl.billing.accounts import billing_settings
from gymctl.bridge import mirror
from gymctl.clock import add_months
from gymctl.errors import DomainError, conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import BillingSettings, Membership, PaymentTransaction, Plan, Subscription
from gymctl.models.billing import (
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.documents import TAX_INVOICE_AND_RECEIPT, DocumentProvider, issue_document

CURRENCY_LENGTH = 3


@dataclass(frozen=True)
class PlanSpec:
    name: str
    type: PlanType
    price_in_cents: int
    currency: str
    interval_months: int | None = None
    open_ended: bool = True
    validity_days: int | None = None
    sessions_quota: int | None = None
    max_purchases: int | None = None
    plan_group: str | None = None


def create_plan(
    session: Session, organization_id: uuid.UUID, spec: PlanSpec, *, now: datetime
) -> Plan:
    if spec.price_in_cents < 0:
        raise unprocessable(codes.PLAN_PRICE_INVALID, "price_in_cents must be 0 or more")
    if len(spec.currency) != CURRENCY_LENGTH or not spec.currency.isalpha():
        raise unprocessable(codes.PLAN_CURRENCY_INVALID, "currency is a 3-letter ISO code")
    if spec.type == PlanType.card and spec.interval_months is not None and spec.interval_months < 1:
        raise unprocessable(codes.PLAN_INTERVAL_INVALID, "interval_months must be 1 or more")
    if spec.type in (PlanType.pack, PlanType.drop_in) and not spec.validity_days:
        raise unprocessable(codes.PLAN_VALIDITY_REQUIRED, "packs and drop-ins need validity_days")
    if spec.max_purchases is not None and spec.max_purchases < 1:
        raise unprocessable(codes.PLAN_CAP_INVALID, "max_purchases must be 1 or more")
    plan = Plan(
        id=ids.new_id(),
        organization_id=organization_id,
        name=spec.name,
        type=spec.type,
        plan_group=spec.plan_group,
        price_in_cents=spec.price_in_cents,
        currency=spec.currency.upper(),
        interval_months=spec.interval_months,
        open_ended=spec.open_ended,
        validity_days=spec.validity_days,
        sessions_quota=spec.sessions_quota,
        max_purchases=spec.max_purchases,
        purchases_count=0,
        created_at=now,
    )
    session.add(plan)
    session.flush()
    return plan


def live_plan(session: Session, organization_id: uuid.UUID, plan_id: uuid.UUID) -> Plan:
    plan = session.get(Plan, plan_id)
    if plan is None or plan.organization_id != organization_id or plan.deleted_at is not None:
        raise not_found(codes.PLAN_NOT_FOUND, "no such plan")
    return plan


def plans_of(session: Session, organization_id: uuid.UUID) -> list[Plan]:
    return list(
        session.scalars(
            select(Plan)
            .where(Plan.organization_id == organization_id, Plan.deleted_at.is_(None))
            .order_by(Plan.created_at, Plan.id)
        )
    )


def subscriptions_of(
    session: Session, organization_id: uuid.UUID, user_id: uuid.UUID
) -> list[Subscription]:
    return list(
        session.scalars(
            select(Subscription)
            .where(
                Subscription.organization_id == organization_id,
                Subscription.user_id == user_id,
                Subscription.deleted_at.is_(None),
            )
            .order_by(Subscription.created_at.desc(), Subscription.id)
        )
    )


def live_holder(
    session: Session, plan: Plan, user_id: uuid.UUID, *, other_than: uuid.UUID | None = None
) -> Subscription | None:
    """The member's active or scheduled subscription of a recurring plan, if any."""
    if not plan.recurring:
        return None
    query = select(Subscription).where(
        Subscription.plan_id == plan.id,
        Subscription.user_id == user_id,
        Subscription.deleted_at.is_(None),
        Subscription.status.in_((SubscriptionStatus.active, SubscriptionStatus.scheduled)),
    )
    if other_than is not None:
        query = query.where(Subscription.id != other_than)
    return session.scalar(query.limit(1))


def refuse_if_held(
    session: Session, plan: Plan, user_id: uuid.UUID, *, other_than: uuid.UUID | None = None
) -> None:
    """409 plan_already_held {status, subscriptionId} for an active or scheduled holder of a
    recurring plan (spec B 4.3); the join flow treats that answer as done. `other_than`: the
    subscription being moved onto the plan (a presale's switch)."""
    held = live_holder(session, plan, user_id, other_than=other_than)
    if held is not None:
        raise _already_held(held)


@contextmanager
def held_once(session: Session, plan: Plan, user_id: uuid.UUID) -> Iterator[None]:
    """Write a holder of `plan` inside the block, flushed in a savepoint: a concurrent holder
    that committed first (the unique index waited for it) answers as if refuse_if_held had
    seen it."""
    try:
        with unique_violation("uq_subscriptions_plan_held"), session.begin_nested():
            yield
            session.flush()
    except UniqueViolation:
        raise _already_held(live_holder(session, plan, user_id)) from None


def _already_held(held: Subscription | None) -> DomainError:
    error = conflict(
        codes.PLAN_ALREADY_HELD,
        "you already hold this plan",
        subscriptionId=str(held.id) if held else None,
    )
    error.details["status"] = held.status.value if held else None  # named like the HTTP status
    return error


def lock_plans(session: Session, plan_ids: Iterable[uuid.UUID]) -> None:
    """The plans' rows, in id order, before a caller counts purchases on several of them (a
    removal giving back its unpaid plans' places, a presale's switch): in the order each met
    them, two such callers could each hold one and wait for the other's (PostgreSQL)."""
    ids = sorted(set(plan_ids))
    if ids:
        session.execute(select(Plan.id).where(Plan.id.in_(ids)).order_by(Plan.id).with_for_update())


def take_purchase_slot(session: Session, plan: Plan) -> None:
    """Count the purchase against max_purchases in one guarded UPDATE: two buyers of the last
    slot cannot both get it. A full cap refuses with 409 plan_sold_out."""
    taken = session.execute(
        update(Plan)
        .where(
            Plan.id == plan.id,
            (Plan.max_purchases.is_(None)) | (Plan.purchases_count < Plan.max_purchases),
        )
        .values(purchases_count=Plan.purchases_count + 1)
        .execution_options(synchronize_session=False)
    )
    if taken.rowcount == 0:
        raise _sold_out()


def refuse_if_sold_out(plan: Plan) -> None:
    """409 plan_sold_out for a full cap, as last read (take_purchase_slot decides)."""
    if plan.max_purchases is not None and plan.purchases_count >= plan.max_purchases:
        raise _sold_out()


def _sold_out() -> DomainError:
    return conflict(codes.PLAN_SOLD_OUT, "this plan is sold out")


def release_purchase_slot(session: Session, plan_id: uuid.UUID) -> None:
    """Give back the purchase an unpaid subscription counted (its page failed or was
    abandoned): max_purchases caps sales, not pages opened."""
    session.execute(
        update(Plan)
        .where(Plan.id == plan_id, Plan.purchases_count > 0)
        .values(purchases_count=Plan.purchases_count - 1)
        .execution_options(synchronize_session=False)
    )


def new_subscription(
    session: Session,
    plan: Plan,
    membership: Membership,
    *,
    status: SubscriptionStatus,
    method: CollectionMethod,
    now: datetime,
    opening_day: datetime | None = None,
) -> Subscription:
    """A subscription row for `plan`; a presale holds no period, quota or credits."""
    subscription = Subscription(
        id=ids.new_id(),
        organization_id=plan.organization_id,
        membership_id=membership.id,
        user_id=membership.user_id,
        plan_id=plan.id,
        plan_type=plan.type,
        status=status,
        payment_collection_method=method,
        price_in_cents=plan.price_in_cents,
        currency=plan.currency,
        interval_months=plan.interval_months,
        open_ended=plan.open_ended,
        opening_day=opening_day,
        next_charge_date=opening_day,
        created_at=now,
        updated_at=now,
        cash_pauses=[],
    )
    with held_once(session, plan, membership.user_id):
        session.add(subscription)  # inside the savepoint: it flushes there
    return subscription


def presale_opening_day(
    session: Session, organization_id: uuid.UUID, now: datetime, *, for_share: bool = False
):
    """The organization's opening day while it is still ahead, else None (no presale).

    `for_share`: a purchase's write phase reads the settings row FOR SHARE (PostgreSQL), so it
    waits for the owner's change of the day (FOR UPDATE, moving the presales sold for the old
    day) and reads the new day, rather than writing a presale on the old day the move never
    saw; purchases share the lock and do not wait for each other."""
    read = select(BillingSettings.opening_day).where(
        BillingSettings.organization_id == organization_id
    )
    opening = session.scalar(read.with_for_update(read=True) if for_share else read)
    return opening if opening is not None and opening > now else None


def refill_sessions(session: Session, subscription: Subscription) -> None:
    """A renewed period of a plan with a session quota holds the quota again (spec B 2.1: a plan
    holds "a period, quota or credits"; a monthly plan of 8 classes sells 8 a month). What the
    last period left lapses with it: the booking rules bound a quota plan's classes by its
    period (bookings.quota), so nothing of the new period was spent before. A plan's quota is
    set when it is created and never changes."""
    if subscription.sessions_remaining is not None:
        subscription.sessions_remaining = session.get(Plan, subscription.plan_id).sessions_quota


def refilled_sessions() -> ColumnElement[int | None]:
    """refill_sessions for a statement that renews many rows at once (the free plans' roll)."""
    return case(
        (Subscription.sessions_remaining.is_(None), None),
        else_=select(Plan.sessions_quota).where(Plan.id == Subscription.plan_id).scalar_subquery(),
    )


def term_from(plan: Plan, start: datetime, timezone: str) -> datetime | None:
    """The end of a term of `plan` sold at the desk from `start`: its validity, else its
    interval (months on the gym's calendar, `timezone`); None for a plan with neither (sold for
    good: nothing lapses or ends)."""
    if plan.validity_days:
        return start + timedelta(days=plan.validity_days)
    if plan.interval_months:
        return add_months(start, plan.interval_months, timezone)
    return None


def grant_plan(
    session: Session,
    plan: Plan,
    membership: Membership,
    *,
    method: CollectionMethod,
    now: datetime,
    actor_user_id: uuid.UUID | None,
    documents: DocumentProvider,
    paid: bool = True,
    payment_due_at: datetime | None = None,
    opening_day: datetime | None = None,
) -> Subscription:
    """A desk sale by staff: active at once, its period from now, or from the gym's opening
    day while that is ahead (`opening_day`, presale_opening_day's, read FOR SHARE by the
    caller before the membership's lock, the order in which the owner's move of the day takes
    them; as a card buyer's presale, and a month sold three weeks before the gym opened was
    three weeks spent on a closed gym). Paid in cash (a manual completed transaction with its
    TaxInvoiceAndReceipt, as every sale) or on pay-later terms (unpaid balance due at
    `payment_due_at`, after now when there is one: spec B 3 puts a term past its due instant
    in debt from that instant, so a sale due a month ago, a month mistyped, was cancelled for
    non-payment by the next lifecycle pass; a free plan's due instant names no debt)."""
    if (
        method == CollectionMethod.pay_later
        and plan.price_in_cents > 0
        and payment_due_at is not None
        and payment_due_at <= now
    ):
        raise unprocessable(
            codes.PAYMENT_DUE_PAST,
            "a pay-later sale's due date is after now",
            paymentDueAt=payment_due_at.isoformat(),
        )
    refuse_if_held(session, plan, membership.user_id)
    take_purchase_slot(session, plan)
    subscription = new_subscription(
        session, plan, membership, status=SubscriptionStatus.active, method=method, now=now
    )
    set_term(session, subscription, plan, opening_day or now)
    subscription.sessions_remaining = plan.sessions_quota
    if method == CollectionMethod.pay_later:
        if payment_due_at is None:
            raise unprocessable(codes.PAYMENT_DUE_REQUIRED, "pay-later needs a due date")
        subscription.payment_due_at = payment_due_at
        subscription.payment_last_day = payment_due_at
        subscription.unpaid_amount_in_cents = plan.price_in_cents
        paid = False
    if paid and plan.price_in_cents:
        payment = PaymentTransaction(
            id=ids.new_id(),
            organization_id=plan.organization_id,
            subscription_id=subscription.id,
            user_id=membership.user_id,
            type=TransactionType.charge,
            status=TransactionStatus.completed,
            provider="manual",
            method="cash",
            amount_in_cents=plan.price_in_cents,
            currency=plan.currency,
            created_at=now,
            updated_at=now,
        )
        session.add(payment)
        session.flush()
        issue_document(session, documents, payment, TAX_INVOICE_AND_RECEIPT, now=now)
    emit(
        session,
        EventKind.audit,
        "subscription.granted",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=plan.organization_id,
        actor_user_id=actor_user_id,
        payload={"planId": str(plan.id), "method": method.value, "userId": str(membership.user_id)},
    )
    mirror.subscription_changed(session, subscription, now=now)
    return subscription


def set_term(session: Session, subscription: Subscription, plan: Plan, start: datetime) -> None:
    """A desk-sold term from `start`: its end, and a cash plan's paid-through day."""
    subscription.started_at = start
    subscription.current_period_start = start
    subscription.current_period_end = term_from(
        plan, start, billing_settings(session, plan.organization_id).timezone
    )
    if subscription.payment_collection_method == CollectionMethod.cash:
        subscription.cash_prepaid_through = subscription.current_period_end


def is_presale(subscription: Subscription) -> bool:
    """Spec B 2.1: "a presale is a subscription in status scheduled with an opening day". A
    scheduled one without an opening day is a purchase whose hosted page is still open: its
    first charge is that page, not the collector's."""
    return (
        subscription.status == SubscriptionStatus.scheduled and subscription.opening_day is not None
    )
