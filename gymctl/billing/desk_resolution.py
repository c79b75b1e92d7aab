"""The operator's path for a desk charge left pending (billing_reconciliation_required): inspect
it and reconcile it by its stored ids, without the client's idempotency key; the recovery sweep
does the same for every such charge past the executing grace.

Reconcile is a lookup of the stored external attempt id on the merchant account that sent it,
never a charge (notes/billing.md: "UNKNOWN is never retried blind"): approved completes it
(at the stored amount, currency and terminal; else it is held as a contradiction for the
settle-contradiction door), declined fails it, not_found (the provider never received it)
closes it as not charged. One closed as not charged is asked again on reconcile: the provider's
approval of it then is late positive evidence (`desk.apply_result`). The recovery sweep does
not ask about those: the collector's recovery asks about no closed attempt either.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.billing import attempts, codes
from gymctl.billing.accounts import CARD_PROVIDER, original_account, terminal_of
from gymctl.billing.alerts import collected, raise_alert
from gymctl.billing.desk import DESK_CHARGE, answer_of, apply_result, transaction_json
from gymctl.billing.resolution import (
    organization_transaction,
    original_account_available,
    settles_contradiction,
)
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import DomainError, conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus
from gymctl.providers.card import CardProvider, ProviderUnavailable
from gymctl.providers.documents import DocumentProvider

RECOVERY_BATCH = 200

logger = logging.getLogger(__name__)


def desk_charge_of(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID
) -> PaymentTransaction:
    transaction = organization_transaction(session, organization_id, transaction_id)
    if (transaction.metadata_ or {}).get("source") != DESK_CHARGE:
        raise not_found(codes.DESK_CHARGE_NOT_FOUND, "no such desk charge in this organization")
    return transaction


def inspect_desk_charge(
    session: Session, organization_id: uuid.UUID, transaction_id: uuid.UUID, *, now: datetime
) -> dict[str, Any]:
    """The charge, its stored attempt and a typed state; no provider call."""
    return describe(session, desk_charge_of(session, organization_id, transaction_id), now=now)


def describe(session: Session, transaction: PaymentTransaction, *, now: datetime) -> dict[str, Any]:
    attempt = transaction.billing_attempt or {}
    account = original_account_available(session, transaction)
    state = answer_of(transaction, replayed=False)["outcome"]
    if state == "pending":
        if _executing(transaction, now):
            state = "executing"
        elif attempt.get("contradiction"):
            state = "contradiction"
        else:
            state = "unresolved" if account else "original_account_unavailable"
    return {
        "transaction": transaction_json(transaction),
        "attempt": {
            key: attempt.get(key)
            for key in (
                "externalAttemptId",
                "terminal",
                "amountInCents",
                "currency",
                "startedAt",
                "uncertainSince",
                "contradiction",
            )
        },
        "state": state,
        "actions": {
            "reconcile": state in ("unresolved", "contradiction")
            or (state == "not_charged" and account),
            "settleContradiction": settles_contradiction(transaction, state, account=account),
        },
    }


def reconcile_desk_charge(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """Ask the original merchant account about the stored attempt id and apply its answer.
    Outcomes: charged, declined, not_charged, contradiction (approved at another amount,
    currency or terminal: the collector's rule), already_resolved. A charge closed as not
    charged is asked again (spec B 2.2: not charged locally is no proof the card was not):
    approved is late positive evidence (`desk.apply_result`), anything else leaves it as it
    was. Refusals change nothing: 409 billing_attempt_executing (inside the 90 s grace),
    billing_original_account_unavailable, billing_provider_unavailable."""
    transaction = desk_charge_of(session, organization_id, transaction_id)
    if transaction.status != TransactionStatus.pending and not attempts.reopenable(transaction):
        return {"outcome": "already_resolved", **describe(session, transaction, now=now)}
    if _executing(transaction, now):
        raise conflict(
            codes.BILLING_ATTEMPT_EXECUTING,
            "this charge may still be running; ask again after 90 seconds",
        )
    attempt = transaction.billing_attempt
    config = original_account(session, organization_id, attempt["terminal"])
    if config is None:
        raise conflict(
            codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the merchant account that sent this charge is no longer connected",
        )
    on_terminal, attempt_id = terminal_of(config, cipher), attempt["externalAttemptId"]
    release_for_outside_call(session)  # only read: the answer is applied under the lock
    try:
        result = provider.lookup_charge(on_terminal, attempt_id)
    except ProviderUnavailable:
        raise conflict(
            codes.BILLING_PROVIDER_UNAVAILABLE,
            "the card provider could not be asked; nothing changed",
        ) from None
    transaction = apply_result(session, transaction.id, result, now, documents)
    outcome = answer_of(transaction, replayed=False)["outcome"]
    if outcome == "pending":
        outcome = "contradiction" if transaction.billing_attempt.get("contradiction") else outcome
    emit(
        session,
        EventKind.audit,
        "payment.desk_charge_reconciled",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=transaction.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"outcome": outcome, "providerAnswer": result.outcome.value},
    )
    session.flush()
    return {"outcome": outcome, **describe(session, transaction, now=now)}


# A card charge taken at the desk whose answer is not applied yet (no collector attempt: those
# are the collector's to resolve).
PENDING_DESK_CHARGE = and_(
    PaymentTransaction.status == TransactionStatus.pending,
    PaymentTransaction.provider == CARD_PROVIDER,
    PaymentTransaction.attempt_kind.is_(None),
    PaymentTransaction.idempotency_key.is_not(None),
)


def unresolved_desk_charges(
    session: Session, *, now: datetime, limit: int = RECOVERY_BATCH
) -> list[PaymentTransaction]:
    """Pending desk charges past the executing grace, in attempts.ASKING_ORDER: what recovery
    asks about."""
    return list(
        session.scalars(
            select(PaymentTransaction)
            .where(
                PENDING_DESK_CHARGE, PaymentTransaction.created_at <= now - attempts.EXECUTING_GRACE
            )
            .order_by(*attempts.ASKING_ORDER)
            .limit(limit)
        )
    )


def recover_desk_charges(
    factory: sessionmaker[Session],
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    now: datetime,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """The recovery pass over pending desk charges, each in its own transaction; one it cannot
    resolve is told to an operator once (`_first_alert`). Its counts, and every alert raised
    on its way (`alerts`: the recovery pass reports them with the collector's)."""
    with collected() as told:
        counts = {"selected": 0, "resolved": 0, "pending": 0, "errors": 0}
        with factory() as session:
            selected = [
                (t.organization_id, t.id)
                for t in unresolved_desk_charges(session, now=now)
                if (t.metadata_ or {}).get("source") == DESK_CHARGE
            ]
        for organization_id, transaction_id in selected:
            counts["selected"] += 1
            with factory() as session:
                try:
                    answer = reconcile_desk_charge(
                        session,
                        provider,
                        cipher,
                        organization_id=organization_id,
                        transaction_id=transaction_id,
                        actor_user_id=None,
                        now=now,
                        documents=documents,
                    )
                except Exception as error:  # one charge's fault holds back no later one
                    if not isinstance(error, DomainError):
                        logger.exception("recovering desk charge %s failed", transaction_id)
                    counts["errors"] += 1
                    session.rollback()
                    attempts.mark_asked(session, transaction_id, now)
                    alert = _first_alert(session, transaction_id, error, now)
                    session.commit()
                    if alert:
                        raise_alert(
                            alert, transactionId=transaction_id, organizationId=organization_id
                        )
                    continue
                unresolved = answer["state"] in ("unresolved", "contradiction")
                if unresolved:
                    attempts.mark_asked(session, transaction_id, now)
                session.commit()
            counts["pending" if unresolved else "resolved"] += 1
    return {**counts, "alerts": told}


def _first_alert(
    session: Session, transaction_id: uuid.UUID, error: Exception, now: datetime
) -> str | None:
    """The alert a charge recovery could not resolve raises, as the collector's recovery tells
    its attempts (attempts.resolve_attempt): its merchant account gone, or its lookups
    unanswered for attempts.UNANSWERED_ALERT_AFTER past its grace; None when told already. A
    desk charge has no plan row to keep the mark on: its stored attempt keeps the reason last
    raised (the caller commits), so a charge stuck for days pages once, not every pass."""
    if not isinstance(error, DomainError):
        return None  # logged with its trace already
    transaction = session.scalar(
        select(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if transaction is None or transaction.status != TransactionStatus.pending:
        return None
    attempt = dict(transaction.billing_attempt or {})
    if error.code == codes.BILLING_ORIGINAL_ACCOUNT_UNAVAILABLE:
        reason = attempts.ACCOUNT_GONE
    elif error.code == codes.BILLING_PROVIDER_UNAVAILABLE and attempts.unanswered_too_long(
        attempt, now
    ):
        reason = attempts.UNANSWERED
    else:
        return None
    if attempt.get("alert") == reason:
        return None
    transaction.billing_attempt = {**attempt, "alert": reason}
    return reason


def _executing(transaction: PaymentTransaction, now: datetime) -> bool:
    started = datetime.fromisoformat(transaction.billing_attempt["startedAt"])
    return now - started < attempts.EXECUTING_GRACE
