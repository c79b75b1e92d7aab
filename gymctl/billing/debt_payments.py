"""Paying a debt (spec B 3): staff clearing it at the desk, or the member paying it with the
saved card. Either way the debt columns are restored, and what would open the same debt again
moves on with them.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing import attempts, codes, collector, debt, plans
from gymctl.billing.accounts import billing_settings
from gymctl.billing.desk import transaction_json
from gymctl.billing.resolution import locked_subscription
from gymctl.bookings import book
from gymctl.bridge import mirror
from gymctl.crypto import FieldCipher
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import PaymentTransaction, Plan, Subscription
from gymctl.models.billing import (
    AttemptKind,
    CollectionMethod,
    SubscriptionStatus,
    TransactionStatus,
    TransactionType,
)
from gymctl.providers.card import CardProvider
from gymctl.providers.documents import TAX_INVOICE_AND_RECEIPT, DocumentProvider, issue_document

DEBT_CLEARANCE = "debt_clearance"


def clear_debt_at_desk(
    session: Session,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
    method: str = "cash",
) -> dict[str, Any]:
    """Staff take the whole debt in cash (or another manual method): a completed manual payment
    with its document, and the debt columns restored (spec B 3). The period the debt stood for
    is granted as the collector would, so nothing charges it again. A plan the member holds
    again ends instead (superseded), giving up its seats: billing's lock order for a path
    that may end a plan (`may_end_at`). A pay-later balance is taken the same way before it
    is due, too (spec B 3: only a term past payment_due_at is a debt): paid, it never opens
    one."""
    subscription = locked_subscription(session, organization_id, subscription_id, may_end_at=now)
    balance = _pay_later_balance(subscription)
    if not debt.owes(subscription) and not balance:
        raise conflict(codes.SUBSCRIPTION_NOT_IN_DEBT, "this subscription owes nothing")
    if attempts.unresolved_attempt(session, subscription.id) is not None:
        raise conflict(
            codes.BILLING_RECONCILIATION_REQUIRED,
            "a card attempt for this subscription is unresolved; reconcile it first",
        )
    amount = subscription.debt_amount_in_cents or balance or subscription.price_in_cents
    transaction = PaymentTransaction(
        id=ids.new_id(),
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        type=TransactionType.charge,
        status=TransactionStatus.completed,
        provider="manual",
        method=method,
        amount_in_cents=amount,
        currency=subscription.currency,
        metadata_={"source": DEBT_CLEARANCE, "debtSince": _iso(subscription.debt_since)},
        created_at=now,
        updated_at=now,
    )
    session.add(transaction)
    session.flush()
    _restore(session, subscription, now=now)
    book.promote_where_waiting(session, organization_id, subscription.membership_id, now=now)
    # The document counter is the last lock taken, as a card charge's settle takes it.
    issue_document(session, documents, transaction, TAX_INVOICE_AND_RECEIPT, now=now)
    emit(
        session,
        EventKind.audit,
        "subscription.debt_cleared",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"transactionId": str(transaction.id), "amountInCents": amount, "method": method},
    )
    session.flush()
    return {"transaction": transaction_json(transaction), "subscriptionId": str(subscription.id)}


def _pay_later_balance(subscription: Subscription) -> int:
    """What a pay-later plan still owes of its price, due or not (0 for other plans)."""
    if subscription.payment_collection_method != CollectionMethod.pay_later:
        return 0
    return subscription.unpaid_amount_in_cents or 0


def pay_own_debt(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    user_id: uuid.UUID | None,
    now: datetime,
    cipher: FieldCipher,
    actor_user_id: uuid.UUID | None = None,
) -> str:
    """A member pays their card subscription's debt now: one protected debt attempt through
    the collector's own path (stored first, charged once, settled with the debt restored).
    Answers charged, declined or pending; refusals change nothing. Staff at the desk open the
    same door for the member (`user_id` None, `actor_user_id` theirs, audited): a card payment
    of a debt taken as a desk charge is tied to no plan, and the retry charged it again."""
    with factory() as session:
        subscription = locked_subscription(session, organization_id, subscription_id)
        if user_id is not None and subscription.user_id != user_id:
            raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription of yours")
        if (
            not debt.owes(subscription)
            or subscription.status == SubscriptionStatus.past_due
            or subscription.payment_collection_method != CollectionMethod.card_provider
        ):
            raise conflict(codes.PAY_DEBT_NOT_AVAILABLE, "there is no card debt to pay here")
        held = (
            subscription.collection_paused
            or attempts.unresolved_attempt(session, subscription.id) is not None
            or (
                subscription.status == SubscriptionStatus.debt
                and (subscription.next_charge_date is None or subscription.next_charge_date > now)
            )
        )
        if held:
            raise conflict(
                codes.PAY_DEBT_NOT_AVAILABLE,
                "the debt cannot be charged now (an attempt is unresolved or collection is held)",
            )
        asked_at = subscription.retry_at
        amount = subscription.debt_amount_in_cents or 0
        subscription.retry_at = now  # the member asks for the debt retry now
        session.commit()
    summary = collector.Summary()
    outcome = collector.collect_subscription(
        factory,
        subscription_id,
        provider,
        now=now,
        cipher=cipher,
        summary=summary,
        kind=AttemptKind.debt,
    )
    if outcome in (
        attempts.BeganOutcome.busy,
        attempts.BeganOutcome.blocked,
        attempts.BeganOutcome.skipped,
    ):
        if outcome == attempts.BeganOutcome.blocked:
            # Blocked (no card, retries exhausted): this request's own refusal. Busy or
            # skipped means another request is charging the debt, and the date is its own.
            _put_back_retry(factory, organization_id, subscription_id, asked_at, now=now)
        raise conflict(
            codes.PAY_DEBT_NOT_AVAILABLE,
            "the debt cannot be charged now (an attempt is unresolved or collection is held)",
            reason=(summary.alerts[0]["reason"] if summary.alerts else outcome),
        )
    if user_id is None:  # staff charged it: audited once the charge was made, with its outcome
        with factory() as session:
            emit(
                session,
                EventKind.audit,
                "subscription.debt_charged_at_desk",
                at=now,
                aggregate_type="subscription",
                aggregate_id=subscription_id,
                organization_id=organization_id,
                actor_user_id=actor_user_id,
                payload={"amountInCents": amount, "outcome": str(outcome)},
            )
            session.commit()
    return outcome


def _put_back_retry(
    factory: sessionmaker[Session],
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    retry_at: datetime | None,
    *,
    now: datetime,
) -> None:
    """A refused payment changes nothing: the retry date it moved to now goes back, unless
    something else has moved it since."""
    with factory() as session:
        subscription = locked_subscription(session, organization_id, subscription_id)
        if subscription.retry_at == now:
            subscription.retry_at = retry_at
        session.commit()


def _restore(session: Session, subscription: Subscription, *, now: datetime) -> None:
    """Any payment restores the debt columns; each collection method also moves on what
    would otherwise open the same debt again. A plan that has ended (cancelled for
    non-payment) only has its debt paid: it is not revived; nor is one the member holds again
    (it ends, superseded)."""
    if subscription.status not in (SubscriptionStatus.debt, SubscriptionStatus.past_due):
        if subscription.payment_collection_method == CollectionMethod.pay_later:
            subscription.unpaid_amount_in_cents = 0  # the balance was the debt: paid
        debt.restore_from_debt(subscription, now=now)
        return
    holder = attempts.held_again_by(session, subscription)
    if holder is not None:  # the member holds the plan again: paid, not revived
        attempts.end_superseded(session, subscription, holder, now=now)
        return
    if subscription.payment_collection_method == CollectionMethod.card_provider:
        attempts.grant_period(session, subscription, now=now)
        return
    if subscription.payment_collection_method == CollectionMethod.pay_later:
        subscription.unpaid_amount_in_cents = 0
    elif subscription.payment_collection_method == CollectionMethod.cash:
        # The lapsed period is the one paid: it is the current period, which a notice ends
        # and a settlement prorates (they read current_period_end; left at the first period's
        # end, a notice was "in the past" and the unused paid days refunded nothing). A term
        # as the plan was sold (`plans.term_from`): a plan of 90 days' validity took 30.
        start = subscription.cash_prepaid_through or now
        subscription.cash_prepaid_through = plans.term_from(
            session.get(Plan, subscription.plan_id),
            start,
            billing_settings(session, subscription.organization_id).timezone,
        )
        subscription.current_period_start = start
        subscription.current_period_end = subscription.cash_prepaid_through
        plans.refill_sessions(session, subscription)
    debt.restore_from_debt(subscription, now=now)
    # Active again, a cash plan with a new period end: its bridge membership follows, as a
    # card payment's does (grant_period); the external one ended on the old date.
    mirror.subscription_changed(session, subscription, now=now)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None
