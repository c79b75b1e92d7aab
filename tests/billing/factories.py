"""Billing rows for tests: plans and subscriptions with sane defaults per plan type, saved cards,
payments and billing settings, for a gym of tests.factories.make_gym (re-exported here).
Each factory flushes and returns its row; every default can be overridden by keyword."""

from __future__ import annotations

import base64
import hashlib
from datetime import date, datetime, timedelta
from typing import Any

from dateutil.relativedelta import relativedelta
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing.accounts import save_card
from gymctl.billing.debt import CHARGE_FAILED, NOTICE_OPENED
from gymctl.crypto import BILLING_SETTING, FieldCipher, Keyring
from gymctl.models import (
    BillingSettings,
    Checkout,
    Membership,
    Organization,
    PaymentMethod,
    PaymentTransaction,
    Plan,
    Subscription,
    User,
)
from gymctl.models.billing import (
    CheckoutStatus,
    CollectionMethod,
    PlanType,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.providers.card import CardToken
from tests.conftest import NOW
from tests.factories import Gym, make_gym  # noqa: F401 (the one gym, re-exported)

# A fixed key so saved cards made here decrypt in any test (never a real key).
TEST_KEY = "test:" + base64.b64encode(hashlib.sha256(b"gymctl billing tests").digest()).decode()
TEST_CIPHER = FieldCipher(Keyring.parse(TEST_KEY, setting=BILLING_SETTING))  # = the setting's

# Per plan type: price, and how long a purchase lasts (validity days or renewal months).
PLAN_DEFAULTS: dict[PlanType, dict[str, Any]] = {
    PlanType.card: {"price_in_cents": 9900, "interval_months": 1},
    PlanType.cash: {"price_in_cents": 8000, "interval_months": 1},
    PlanType.course: {"price_in_cents": 30000, "validity_days": 56, "open_ended": False},
    PlanType.pack: {"price_in_cents": 12000, "validity_days": 90, "sessions_quota": 10},
    PlanType.drop_in: {"price_in_cents": 2500, "validity_days": 1, "sessions_quota": 1},
    PlanType.gift: {"price_in_cents": 0, "validity_days": 30, "open_ended": False},
}


def make_plan(
    session: Session,
    organization: Organization,
    type: PlanType = PlanType.card,
    *,
    now: datetime = NOW,
    **fields: Any,
) -> Plan:
    values = {
        "name": f"{type.value} plan",
        "currency": "ILS",
        "created_at": now,
        **PLAN_DEFAULTS[type],
        **fields,
    }
    plan = Plan(id=ids.new_id(), organization_id=organization.id, type=type, **values)
    session.add(plan)
    session.flush()
    return plan


def make_billing_settings(session: Session, organization: Organization, **fields: Any):
    row = BillingSettings(organization_id=organization.id, **fields)
    session.add(row)
    session.flush()
    return row


def make_card(
    session: Session,
    gym: Gym,
    *,
    user: User | None = None,
    terminal: str = "1000",
    token: str = "tok_4580000000000000",
    expiry: date = date(2030, 12, 31),
    now: datetime = NOW,
    cipher: FieldCipher = TEST_CIPHER,
) -> PaymentMethod:
    """A saved card (encrypted with `cipher`, default TEST_CIPHER) of `user` (the member)."""
    return save_card(
        session,
        organization_id=gym.organization.id,
        user_id=(user or gym.member).id,
        card=CardToken(token=token, expiry=expiry, last4=token[-4:]),
        terminal=terminal,
        now=now,
        cipher=cipher,
    )


def make_transaction(
    session: Session, gym: Gym, *, now: datetime = NOW, **fields: Any
) -> PaymentTransaction:
    """A payment row of the gym's member: a completed 9900 ILS charge entered by hand unless
    overridden (`provider`, `status`, `amount_in_cents`, `subscription_id`, ...)."""
    values: dict[str, Any] = {
        "organization_id": gym.organization.id,
        "user_id": gym.member.id,
        "type": TransactionType.charge,
        "status": TransactionStatus.completed,
        "provider": "manual",
        "amount_in_cents": 9900,
        "currency": "ILS",
        "metadata_": {},
        "created_at": now,
        "updated_at": now,
        **fields,
    }
    transaction = PaymentTransaction(id=ids.new_id(), **values)
    session.add(transaction)
    session.flush()
    return transaction


def make_subscription(
    session: Session,
    gym: Gym,
    type: PlanType = PlanType.card,
    *,
    plan: Plan | None = None,
    membership: Membership | None = None,
    status: SubscriptionStatus = SubscriptionStatus.active,
    now: datetime = NOW,
    pay_later_due: datetime | None = None,
    in_debt_since: datetime | None = None,
    presale_opening: datetime | None = None,
    **fields: Any,
) -> Subscription:
    """A subscription of the gym's member (or `membership`) bought at `now`, its first period
    running from `now`. Card plans are collected by the card provider (next charge at the
    period end; pass `payment_method_id` for a saved card), other plans in cash as a desk sale
    records them (cash_prepaid_through = period end). Traits: `pay_later_due` (pay-later terms,
    the whole price unpaid), `in_debt_since` (status debt, day 0 then, the price owed, notice
    stage opened), `presale_opening` (a scheduled presale: no period before it is paid)."""
    plan = plan or make_plan(session, gym.organization, type)
    membership = membership or gym.membership
    if plan.validity_days:
        end = now + timedelta(days=plan.validity_days)
    else:
        end = now + relativedelta(months=plan.interval_months or 1)
    card = plan.type == PlanType.card
    values: dict[str, Any] = {
        "organization_id": plan.organization_id,
        "membership_id": membership.id,
        "user_id": membership.user_id,
        "plan_id": plan.id,
        "plan_type": plan.type,
        "price_in_cents": plan.price_in_cents,
        "currency": plan.currency,
        "interval_months": plan.interval_months,
        "open_ended": plan.open_ended,
        "created_at": now,
        "updated_at": now,
        "cash_pauses": [],
        "payment_collection_method": (
            CollectionMethod.card_provider if card else CollectionMethod.cash
        ),
        "started_at": now,
        "current_period_start": now,
        "current_period_end": end,
        "next_charge_date": end if card and plan.interval_months else None,
        "cash_prepaid_through": None if card else end,
        "sessions_remaining": plan.sessions_quota,
    }
    if pay_later_due is not None:
        values.update(
            payment_collection_method=CollectionMethod.pay_later,
            cash_prepaid_through=None,
            payment_due_at=pay_later_due,
            payment_last_day=pay_later_due,
            unpaid_amount_in_cents=plan.price_in_cents,
        )
    if in_debt_since is not None:
        status = SubscriptionStatus.debt
        values.update(
            debt_since=in_debt_since,
            debt_amount_in_cents=plan.price_in_cents,
            debt_reason=CHARGE_FAILED,
            debt_notice_stage=NOTICE_OPENED,
        )
    if presale_opening is not None:
        status = SubscriptionStatus.scheduled
        values.update(
            opening_day=presale_opening,
            next_charge_date=presale_opening,
            started_at=None,
            current_period_start=None,
            current_period_end=None,
            cash_prepaid_through=None,
            sessions_remaining=None,
        )
    values.update(status=status, **fields)
    subscription = Subscription(id=ids.new_id(), **values)
    session.add(subscription)
    session.flush()
    return subscription


def make_checkout(
    session: Session, subscription: Subscription, *, now: datetime = NOW, **fields: Any
) -> Checkout:
    """The hosted page of `subscription`: token-only (CreateTokenOnly, nothing charged), open
    for an hour from `now`; `fields` override any column."""
    values: dict[str, Any] = {
        "id": ids.new_id(),
        "organization_id": subscription.organization_id,
        "subscription_id": subscription.id,
        "user_id": subscription.user_id,
        "operation": "CreateTokenOnly",
        "terminal": "1000",
        "amount_in_cents": 0,
        "currency": subscription.currency,
        "status": CheckoutStatus.open,
        "expires_at": now + timedelta(hours=1),
        "created_at": now,
        **fields,
    }
    checkout = Checkout(**values)
    session.add(checkout)
    session.flush()
    return checkout
