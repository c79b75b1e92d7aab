"""Protected transaction resolution (spec B 3, 4.2): what an operator does with a billing
attempt whose outcome the collector could not settle on its own.

- inspect: the attempt, its resolution and a typed state with availability hints; reads only.
- reconcile: ask the original merchant account about the stored external attempt id (a lookup,
  never a debit) and apply a verified answer; on a dismissed attempt, positive evidence moves it
  back to pending (audit, alert, collection held again).

The owner's confirm-no-debit and authorize-retry live in `no_debit`. Only persisted protocol v1
recurring, manual and debt attempts are accepted; inspect also shows a hosted page's or a desk
charge's billing contradiction, which the settle-contradiction door (`contradictions`) settles.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.billing import attempts, codes
from gymctl.billing.accounts import original_account, terminal_of
from gymctl.billing.alerts import raise_alert
from gymctl.billing.attempts import audit
from gymctl.crypto import FieldCipher
from gymctl.db import organization_row, release_for_outside_call
from gymctl.errors import conflict, not_found
from gymctl.models import Organization, PaymentTransaction, Subscription
from gymctl.models.billing import AttemptKind, TransactionStatus
from gymctl.providers.card import (
    CardProvider,
    ChargeResult,
    Outcome,
    ProviderUnavailable,
)

PROTECTED_KINDS = (AttemptKind.recurring, AttemptKind.manual, AttemptKind.debt)
NOT_CHARGED = attempts.NOT_CHARGED
SETTLED = attempts.SETTLED
DESK_CHARGE = "desk_charge"  # metadata.source of a desk charge (billing.desk's, named here)


def organization_transaction(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID, *, lock: bool = False
) -> PaymentTransaction:
    """A payment of the organization (404 otherwise), row-locked and read fresh with `lock`."""
    transaction = organization_row(
        session, PaymentTransaction, organization_id, transaction_id, lock=lock
    )
    if transaction is None:
        raise not_found(codes.TRANSACTION_NOT_FOUND, "no such transaction in this organization")
    return transaction


def locked_payment(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID
) -> PaymentTransaction:
    """A payment of the organization (404 otherwise) under billing's lock order: its
    organization and subscription first, then the payment. A settlement holds the subscription
    and then locks its charge; a refund or a credit note that locked the charge first
    deadlocked with it on PostgreSQL (each insert's foreign key waits on the other's lock)."""
    transaction = organization_transaction(session, organization_id, transaction_id)
    if transaction.subscription_id is not None:
        lock_billing(session, organization_id, transaction.subscription_id)
    return organization_transaction(session, organization_id, transaction_id, lock=True)


def is_protected(transaction: PaymentTransaction) -> bool:
    """A persisted protocol v1 recurring, manual or debt attempt of a subscription."""
    return (
        transaction.attempt_kind in PROTECTED_KINDS
        and (transaction.billing_attempt or {}).get("protocol") == attempts.PROTOCOL
        and transaction.subscription_id is not None
    )


def contradiction_door_takes(transaction: PaymentTransaction) -> bool:
    """A payment the settle-contradiction door (billing.contradictions) settles when it holds
    a contradiction: a protected attempt, a desk charge, or a hosted page's charge."""
    metadata = transaction.metadata_ or {}
    return (
        is_protected(transaction)
        or metadata.get("source") == DESK_CHARGE
        or bool(metadata.get("checkoutId") and transaction.attempt_kind is None)
    )


def settles_contradiction(transaction: PaymentTransaction, state: str, *, account: bool) -> bool:
    """The settleContradiction hint, inspect's and the desk charge route's: a contradiction the
    door takes, on a merchant account still connected (the door asks the provider there)."""
    return state == "contradiction" and account and contradiction_door_takes(transaction)


def holds_contradiction(transaction: PaymentTransaction) -> bool:
    """Holds (or held, settled by the door) a contradiction the door takes."""
    return bool((transaction.billing_attempt or {}).get("contradiction")) and (
        contradiction_door_takes(transaction)
    )


def protected_transaction(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID, *, lock: bool = False
) -> PaymentTransaction:
    transaction = organization_transaction(session, organization_id, transaction_id, lock=lock)
    if not is_protected(transaction):
        raise conflict(
            codes.BILLING_ATTEMPT_NOT_PROTECTED,
            "only persisted v1 recurring, manual and debt attempts are resolved here",
        )
    return transaction


def inspect(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID, *, now: datetime
) -> dict[str, Any]:
    """The attempt, its resolution, a typed state and the action hints; no provider call. A
    page's or a desk charge's contradiction is shown too: the settle-contradiction door
    settles it here (a desk charge's other states are its own route's)."""
    transaction = organization_transaction(session, organization_id, transaction_id)
    if not (is_protected(transaction) or holds_contradiction(transaction)):
        raise conflict(
            codes.BILLING_ATTEMPT_NOT_PROTECTED,
            "only persisted v1 recurring, manual and debt attempts, and billing "
            "contradictions, are resolved here",
        )
    return describe(session, transaction, now=now)


def describe(session: Session, transaction: PaymentTransaction, *, now: datetime) -> dict[str, Any]:
    attempt = transaction.billing_attempt or {}
    resolution = transaction.billing_resolution or {}
    account = original_account_available(session, transaction)
    state = _state(transaction, now=now, account=account)
    protected = is_protected(transaction)
    subscription = (
        session.get(Subscription, transaction.subscription_id)
        if transaction.subscription_id
        else None
    )
    return {
        "transaction": {
            "id": str(transaction.id),
            "subscriptionId": (
                str(transaction.subscription_id) if transaction.subscription_id else None
            ),
            "userId": str(transaction.user_id) if transaction.user_id else None,
            "type": transaction.type.value,
            "status": transaction.status.value,
            "kind": transaction.attempt_kind.value if transaction.attempt_kind else None,
            "amountInCents": transaction.amount_in_cents,
            "currency": transaction.currency,
            "providerTransactionId": transaction.provider_transaction_id,
            "createdAt": transaction.created_at.isoformat(),
            "updatedAt": transaction.updated_at.isoformat(),
        },
        "attempt": {
            "protocol": attempt.get("protocol"),
            "externalAttemptId": attempt.get("externalAttemptId"),
            "terminal": attempt.get("terminal"),
            "amountInCents": attempt.get("amountInCents"),
            "currency": attempt.get("currency"),
            "startedAt": attempt.get("startedAt"),
            "technicalRetry": attempt.get("technicalRetry"),
            "settlementReview": attempt.get("settlementReview"),
            "contradiction": attempt.get("contradiction"),
            "uncertainSince": attempt.get("uncertainSince"),
        },
        # The decision and who took it; the evidence stays internal (spec B 2.2).
        "resolution": (
            {
                key: resolution.get(key)
                for key in (
                    "decision",
                    "at",
                    "requestId",
                    "retryAuthorized",
                    "retryAuthorizedAt",
                    "lateEvidenceAt",
                )
            }
            if resolution
            else None
        ),
        "collectionHeld": bool(subscription and subscription.collection_paused),
        "collectionHeldBecause": (
            attempts.held_reason(subscription)
            if subscription and subscription.collection_paused
            else None
        ),
        "state": state,
        # Availability hints (spec B 4.2), not authorization: the routes decide. A page or a
        # desk charge is only settled by the door here (a desk charge reconciles on its own
        # route; a page is not looked up by an attempt id).
        "actions": {
            "reconcile": protected
            and (
                state in ("unresolved", "contradiction")
                or (state.startswith(("not_charged", "charged_after_closing")) and account)
            ),
            "confirmNoDebit": protected
            and state == "unresolved"
            and not attempts.approved_late(transaction),
            "authorizeRetry": protected
            and (
                state == "not_charged_paused"
                or (
                    state == "technical_non_charge" and attempts.decides_retry(session, transaction)
                )
            ),
            "settleContradiction": settles_contradiction(transaction, state, account=account),
        },
    }


def reconcile(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    """Look the stored external attempt id up on the original merchant account and apply a
    verified answer. Never sends a debit. Outcomes: charged, declined, contradiction,
    no_verified_success (the provider knows nothing settled: left as it was),
    late_positive_evidence, already_resolved."""
    transaction = protected_transaction(session, organization_id, transaction_id)
    if transaction.status != TransactionStatus.pending and not attempts.reopenable(transaction):
        return {"outcome": "already_resolved", **describe(session, transaction, now=now)}
    if transaction.status == TransactionStatus.pending:
        refuse_if_executing(transaction, now)
    result = lookup(session, provider, cipher, transaction)
    # Its settlement may supersede the plan: the first lock of the membership orders them.
    transaction = lock_transaction(session, transaction, may_end_at=now)
    if transaction.status == TransactionStatus.pending and result.outcome in (
        Outcome.approved,
        Outcome.declined,
    ):
        applied = attempts.apply_outcome(session, transaction.id, result, now=now)
        outcome = applied.outcome
        if applied.alert:  # a contradiction, or a settlement review
            raise_alert(applied.alert, transactionId=transaction.id)
    elif attempts.reopenable(transaction) and result.outcome == Outcome.approved:
        subscription = session.get(Subscription, transaction.subscription_id)
        held = attempts.late_positive_evidence(session, transaction, subscription, result, now=now)
        raise_alert(held, transactionId=transaction.id, subscriptionId=subscription.id)
        outcome = "late_positive_evidence"
    elif transaction.status != TransactionStatus.pending and not attempts.reopenable(transaction):
        outcome = "already_resolved"
    else:
        outcome = "no_verified_success"
    audit(
        session,
        "billing.transaction_reconciled",
        transaction,
        actor_user_id,
        now,
        outcome=outcome,
        providerAnswer=result.outcome.value,
    )
    session.flush()
    return {"outcome": outcome, **describe(session, transaction, now=now)}


def refuse_if_protected(transaction: PaymentTransaction) -> None:
    """The ordinary pending-payment dismiss must never close a protected attempt (spec B 4.2),
    nor any payment sent to the provider under an attempt id (a desk charge): it may have
    charged."""
    if transaction.billing_attempt:
        raise conflict(
            codes.BILLING_ATTEMPT_PROTECTED,
            "a protected billing attempt is resolved with reconcile or confirm-no-debit",
        )


def lock_billing(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    may_end_at: datetime | None = None,
) -> Subscription | None:
    """The shared billing lock, in the fixed order organization, membership, subscription;
    `may_end_at` as attempts.lock_subscription takes it."""
    lock_organization(session, organization_id)
    return attempts.lock_subscription(session, subscription_id, may_end_at=may_end_at)


def lock_organization(session: Session, organization_id: uuid.UUID) -> None:
    """The first lock of billing's fixed order: FOR NO KEY UPDATE on the organization, so
    inserts that reference it are not blocked. Also what queues writers of an organization's
    rows that may not exist yet (its billing settings): a missing row locks nothing."""
    session.scalar(
        select(Organization.id)
        .where(Organization.id == organization_id)
        .with_for_update(key_share=True)
    )


def locked_subscription(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    may_end_at: datetime | None = None,
) -> Subscription:
    """A live subscription of the organization (404 otherwise) under the billing lock;
    `may_end_at` as attempts.lock_subscription takes it."""
    belongs = session.scalar(
        select(Subscription.id).where(
            Subscription.id == subscription_id,
            Subscription.organization_id == organization_id,
            Subscription.deleted_at.is_(None),
        )
    )
    if belongs is None:
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription in this organization")
    return lock_billing(session, organization_id, subscription_id, may_end_at=may_end_at)


def lock_transaction(
    session: Session, transaction: PaymentTransaction, *, may_end_at: datetime | None = None
) -> PaymentTransaction:
    lock_billing(
        session, transaction.organization_id, transaction.subscription_id, may_end_at=may_end_at
    )
    return protected_transaction(session, transaction.organization_id, transaction.id, lock=True)


def _state(transaction: PaymentTransaction, *, now: datetime, account: bool) -> str:
    attempt = transaction.billing_attempt or {}
    resolution = transaction.billing_resolution or {}
    if transaction.status == TransactionStatus.pending:
        if _executing(transaction, now):
            return "executing"
        if attempt.get("contradiction"):
            return "contradiction"
        return "unresolved" if account else "original_account_unavailable"
    if transaction.status in SETTLED:
        return "settled"
    if resolution.get("decision") == attempts.CHARGED_AFTER_CLOSING:
        return "charged_after_closing"
    if is_technical_non_charge(transaction):
        return (
            "technical_non_charge_retry_authorized"
            if resolution.get("retryAuthorized")
            else "technical_non_charge"
        )
    if transaction.status == TransactionStatus.failed:
        return "declined"
    if is_dismissed(transaction):
        return (
            "not_charged_retry_authorized"
            if resolution.get("retryAuthorized")
            else "not_charged_paused"
        )
    return "cancelled"


def is_technical_non_charge(transaction: PaymentTransaction) -> bool:
    """The provider confirmed it never charged (lookup not_found): retried on the technical
    ladder, or blocked once exhausted or when the retry's terms changed."""
    return (
        transaction.status == TransactionStatus.failed
        and (transaction.billing_resolution or {}).get("decision") == NOT_CHARGED
    )


def is_dismissed(transaction: PaymentTransaction) -> bool:
    return (
        transaction.status == TransactionStatus.cancelled
        and (transaction.billing_resolution or {}).get("decision") == NOT_CHARGED
    )


def _executing(transaction: PaymentTransaction, now: datetime) -> bool:
    started = (transaction.billing_attempt or {}).get("startedAt")
    return started is not None and now - datetime.fromisoformat(started) < attempts.EXECUTING_GRACE


def refuse_if_executing(transaction: PaymentTransaction, now: datetime) -> None:
    if _executing(transaction, now):
        raise conflict(
            codes.BILLING_ATTEMPT_EXECUTING,
            "the attempt may still be on its way (90 second grace); try again shortly",
            retryAfterSeconds=int(attempts.EXECUTING_GRACE.total_seconds()),
        )


def original_account_available(session: Session, transaction: PaymentTransaction) -> bool:
    terminal = (transaction.billing_attempt or {}).get("terminal")
    return original_account(session, transaction.organization_id, terminal) is not None


def lookup(
    session: Session, provider: CardProvider, cipher: FieldCipher, transaction: PaymentTransaction
) -> ChargeResult:
    """The provider's word on the stored external attempt id, on the terminal that sent it."""
    terminal = (transaction.billing_attempt or {}).get("terminal")
    config = original_account(session, transaction.organization_id, terminal)
    if config is None:
        raise conflict(
            codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the merchant account that sent this attempt is no longer connected",
        )
    on_terminal = terminal_of(config, cipher)
    attempt_id = transaction.billing_attempt["externalAttemptId"]
    release_for_outside_call(session)  # a look, no write: the answer is applied under the lock
    try:
        return provider.lookup_charge(on_terminal, attempt_id)
    except ProviderUnavailable:  # ProviderRefused included: nothing known
        raise conflict(
            codes.BILLING_PROVIDER_UNAVAILABLE,
            "the card provider could not be asked; nothing changed",
        ) from None
