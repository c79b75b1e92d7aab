"""Refunds (spec B 2.2, 3): completed -> refund_pending -> refunded, through the card provider
for card payments and by hand (cash returned) for the others, with a refund document.

A card refund runs in three steps, exactly like a charge (notes/billing.md, attempts.py):

1. `begin_refund` locks the payment, stores the refund row in refund_pending with its attempt
   (a fresh unique id, terminal, amount, currency) and sets the payment refund_pending; the
   caller COMMITS before step 2.
2. `execute_refund` sends the stored attempt, outside any transaction, under its unique id;
3. and applies the answer under the refund row's lock if it is still pending.

A crash or a lost answer leaves the refund pending: it is resumed only by sending the same
stored attempt again (the provider answers a reused unique id with its original outcome, never
a second refund). While a refund is pending no other refund of the payment starts, whatever
its amount (409 refund_in_progress): the money cannot go back twice.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing import attempts, codes
from gymctl.billing.accounts import CARD_PROVIDER, active_config, terminal_of
from gymctl.billing.idempotency import UNIQUE_KEY, by_key, require_uuid4
from gymctl.billing.resolution import original_account
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import conflict, not_found, unavailable, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import Checkout, PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.card import CardProvider, Outcome, ProviderUnavailable
from gymctl.providers.documents import (
    RECEIPT_REFUND,
    TAX_INVOICE_AND_RECEIPT,
    TAX_INVOICE_AND_RECEIPT_REFUND,
    DocumentProvider,
    issue_document,
)
from gymctl.retention import refund_owed

REFUNDABLE = (TransactionStatus.completed,)

log = logging.getLogger("gymctl.billing")


def refunded_so_far(transaction: PaymentTransaction) -> int:
    return int((transaction.metadata_ or {}).get("refundedInCents", 0))


def credited_so_far(transaction: PaymentTransaction) -> int:
    return int((transaction.metadata_ or {}).get("creditedInCents", 0))


def refundable_amount(transaction: PaymentTransaction) -> int:
    """What is left to give back on a sale: its amount less refunds and credit notes."""
    return transaction.amount_in_cents - refunded_so_far(transaction) - credited_so_far(transaction)


def begin_refund(
    session: Session,
    *,
    transaction: PaymentTransaction,
    amount_cents: int,
    reason: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
    source: str = "refund",
    metadata: dict[str, Any] | None = None,
    idempotency_key: uuid.UUID | None = None,
) -> PaymentTransaction:
    """Step 1: store the refund of `amount_cents` of a completed payment and return its row
    (type refund, metadata.refundedTransactionId). A card refund is returned refund_pending
    with its stored attempt: the caller commits, then calls `execute_refund`. A manual, cash or
    external payment is returned refunded at once (money returned by hand, no provider call).

    Raises DomainError, with every write of this call undone (a savepoint): 404
    transaction_not_found, 409 refund_in_progress (an earlier refund of it is unresolved),
    409 refund_not_refundable (not completed), 422 refund_amount_invalid, 409
    refund_exceeds_remaining, 409 refund_provider_reference_missing (a card payment without
    its provider transaction), 409 refund_original_account_unavailable (no credentials are
    kept for the terminal that took the payment; a replaced terminal's kept ones still refund).
    `source` and `metadata` are recorded on the refund row (e.g. cash_notice_settlement), and
    the client's `idempotency_key` (see `begin_refund_once`).
    """
    savepoint = session.begin_nested()
    try:
        refund = _begin(
            session,
            transaction_id=transaction.id,
            amount_cents=amount_cents,
            reason=reason,
            actor_user_id=actor_user_id,
            now=now,
            documents=documents,
            source=source,
            metadata=metadata or {},
            idempotency_key=idempotency_key,
        )
    except BaseException:
        savepoint.rollback()  # expires what it touched: the caller's rows read fresh
        raise
    savepoint.commit()
    return refund


def begin_refund_once(
    session: Session,
    *,
    transaction: PaymentTransaction,
    idempotency_key: uuid.UUID,
    amount_cents: int,
    reason: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
) -> tuple[PaymentTransaction, bool]:
    """`begin_refund` under the client's UUIDv4 key (the refund route's; not shown in the spec,
    which keys desk charges and credit notes): a retried request cannot give money back twice.
    Returns the refund and whether it is a replay. The same key and request answer the refund
    it stored (a refund still pending is then sent again under its stored id, never a second
    refund); the same key for another request is refused, 409 idempotency_key_reused, and so
    is a key another request is storing at the same moment. Requests of one payment are
    ordered by its row lock, so a replay racing its first request finds it."""
    require_uuid4(idempotency_key)
    request = {"transactionId": str(transaction.id), "amountInCents": amount_cents,
               "reason": reason}  # fmt: skip
    _locked(session, transaction.id)
    earlier = by_key(session, transaction.organization_id, idempotency_key)
    if earlier is not None:
        if (earlier.metadata_ or {}).get("request") != request:
            raise conflict(
                codes.IDEMPOTENCY_KEY_REUSED,
                "this idempotency key was used for a different request; a new refund needs a "
                "new key",
            )
        return earlier, True
    try:
        with unique_violation(UNIQUE_KEY):
            refund = begin_refund(
                session,
                transaction=transaction,
                amount_cents=amount_cents,
                reason=reason,
                actor_user_id=actor_user_id,
                now=now,
                documents=documents,
                metadata={"request": request},
                idempotency_key=idempotency_key,
            )
    except UniqueViolation:
        # Stored meanwhile under this key for another payment (that payment's lock, not this
        # one's, ordered it): another request.
        raise conflict(
            codes.IDEMPOTENCY_KEY_REUSED, "this idempotency key is used by another request"
        ) from None
    return refund, False


def _begin(
    session: Session,
    *,
    transaction_id: uuid.UUID,
    amount_cents: int,
    reason: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
    source: str,
    metadata: dict[str, Any],
    idempotency_key: uuid.UUID | None,
) -> PaymentTransaction:
    original = _locked(session, transaction_id)
    if original is None:
        raise not_found(codes.TRANSACTION_NOT_FOUND, "no such transaction")
    if original.status == TransactionStatus.refund_pending:
        pending = pending_refund_of(session, original.id)
        raise conflict(
            codes.REFUND_IN_PROGRESS,
            "an earlier refund of this payment is not resolved yet; it completes by itself "
            "(recovery sends the same refund again, never a second one)",
            refundTransactionId=str(pending.id) if pending else None,
        )
    if original.status not in REFUNDABLE or original.type == TransactionType.refund:
        raise conflict(
            codes.REFUND_NOT_REFUNDABLE,
            "only a completed payment can be refunded",
            transactionStatus=original.status.value,
        )
    if amount_cents <= 0:
        raise unprocessable(codes.REFUND_AMOUNT_INVALID, "the refund must be positive")
    left = refundable_amount(original)
    if amount_cents > left:
        raise conflict(
            codes.REFUND_EXCEEDS_REMAINING,
            "the refund exceeds what is left of the payment",
            remainingInCents=left,
        )
    by_card = original.provider == CARD_PROVIDER
    if by_card and not original.provider_transaction_id:
        # Card money goes back only through the provider: a card payment recorded as refunded
        # by hand would leave the member unpaid.
        raise conflict(
            codes.REFUND_PROVIDER_REFERENCE_MISSING,
            "this card payment has no provider transaction to refund; resolve it first",
        )
    refund = PaymentTransaction(
        id=ids.new_id(),
        organization_id=original.organization_id,
        subscription_id=original.subscription_id,
        user_id=original.user_id,
        type=TransactionType.refund,
        status=TransactionStatus.refund_pending,
        provider=original.provider,
        method=original.method,
        amount_in_cents=amount_cents,
        currency=original.currency,
        note=reason[:2000],
        idempotency_key=str(idempotency_key) if idempotency_key else None,
        metadata_={
            **metadata,
            "source": source,
            "refundedTransactionId": str(original.id),
            "cashReturned": not by_card,
            "actorUserId": str(actor_user_id) if actor_user_id else None,
        },
        created_at=now,
        updated_at=now,
    )
    if by_card:
        refund.billing_attempt = {
            "protocol": attempts.PROTOCOL,
            "externalAttemptId": str(uuid.uuid4()),
            "terminal": _refunding_terminal(session, original),
            "amountInCents": amount_cents,
            "currency": original.currency,
            "providerTransactionId": original.provider_transaction_id,
            "startedAt": now.isoformat(),
        }
    session.add(refund)
    original.status = TransactionStatus.refund_pending
    original.updated_at = now
    session.flush()
    if not by_card:
        _refunded(session, refund, original, None, now=now, documents=documents)
    return refund


def _locked(session: Session, transaction_id: uuid.UUID) -> PaymentTransaction | None:
    return session.scalar(
        select(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def _refunding_terminal(session: Session, original: PaymentTransaction) -> str:
    took_it = _terminal_that_took(session, original)
    if took_it is not None:  # the terminal that took it, even if since replaced
        config = original_account(session, original.organization_id, took_it)
    else:  # no terminal on record (an older row): the organization's terminal
        config = active_config(session, original.organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise conflict(
            codes.REFUND_ORIGINAL_ACCOUNT_UNAVAILABLE,
            "the merchant account that took this payment is no longer connected",
        )
    return config.terminal


def _terminal_that_took(session: Session, original: PaymentTransaction) -> str | None:
    """The terminal a settled contradiction found it on (billing.contradictions: the provider
    reported it on another than asked), else its attempt's, else its hosted page's (a page
    payment has no attempt): the provider knows a deal only on the terminal that made it, not
    on one the gym moved to."""
    took_it = (original.billing_resolution or {}).get("takenOnTerminal") or (
        original.billing_attempt or {}
    ).get("terminal")
    checkout_id = (original.metadata_ or {}).get("checkoutId")
    if took_it is None and checkout_id:
        took_it = session.scalar(
            select(Checkout.terminal).where(
                Checkout.id == uuid.UUID(checkout_id),
                Checkout.organization_id == original.organization_id,
            )
        )
    return took_it


def pending_refund_of(session: Session, original_id: uuid.UUID) -> PaymentTransaction | None:
    return session.scalar(
        select(PaymentTransaction).where(
            PaymentTransaction.type == TransactionType.refund,
            PaymentTransaction.status == TransactionStatus.refund_pending,
            PaymentTransaction.metadata_["refundedTransactionId"].as_string() == str(original_id),
        )
    )


def execute_refund(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    refund_id: uuid.UUID,
    *,
    now: datetime,
    documents: DocumentProvider,
) -> PaymentTransaction:
    """Steps 2 and 3 of a stored card refund (the caller committed step 1): send its stored
    attempt and apply the answer once. Returns the refund row: refunded, failed (the provider
    refused: the payment is completed again) or still refund_pending (nothing is known; send
    again later, under the same unique id). The caller commits."""
    refund = session.get(PaymentTransaction, refund_id, populate_existing=True)
    if refund is None or refund.status != TransactionStatus.refund_pending:
        return refund
    attempt = dict(refund.billing_attempt)
    config = original_account(session, refund.organization_id, attempt["terminal"])
    if config is None:
        return refund  # kept pending: readiness lists it, the account may come back
    on_terminal = terminal_of(config, cipher)
    release_for_outside_call(session)  # step 1 is committed: this transaction only read
    try:
        result = provider.refund(
            on_terminal,
            transaction_id=attempt["providerTransactionId"],
            amount_in_cents=attempt["amountInCents"],
            unique_id=attempt["externalAttemptId"],
        )
    except ProviderUnavailable:
        result = None
    if result is not None and result.outcome == Outcome.unknown:
        result = None  # nothing known of it (a 608, say): sent again later, same unique id
    refund = _locked(session, refund_id)
    if refund.status != TransactionStatus.refund_pending:
        return refund  # another worker applied it first
    original = _locked(session, uuid.UUID(refund.metadata_["refundedTransactionId"]))
    if result is None:
        since = attempt.get("uncertainSince") or now.isoformat()
        refund.billing_attempt = {**attempt, "uncertainSince": since}
    elif result.outcome == Outcome.approved:
        _refunded(session, refund, original, result.transaction_id, now=now, documents=documents)
    else:
        refund.status = TransactionStatus.failed
        refund.metadata_ = {**refund.metadata_, "responseCode": result.response_code}
        original.status = TransactionStatus.completed
        original.updated_at = now
    refund.updated_at = now
    session.flush()
    return refund


def raise_unless_refunded(refund: PaymentTransaction) -> None:
    """The refusal a door answers for a refund that did not complete (after committing it)."""
    if refund.status == TransactionStatus.failed:
        raise conflict(
            codes.REFUND_DECLINED,
            "the card provider refused the refund",
            responseCode=(refund.metadata_ or {}).get("responseCode"),
            refundTransactionId=str(refund.id),
        )
    if refund.status == TransactionStatus.refund_pending:
        raise unavailable(
            codes.REFUND_PROVIDER_UNAVAILABLE,
            "the card provider did not confirm the refund; it is stored and recovery completes "
            "it under the same id (never a second refund): do not refund again",
            refundTransactionId=str(refund.id),
        )


def _refunded(
    session: Session,
    refund: PaymentTransaction,
    original: PaymentTransaction,
    reference: str | None,
    *,
    now: datetime,
    documents: DocumentProvider,
) -> None:
    refund.status = TransactionStatus.refunded
    refund.refund_external_reference = reference
    refund.provider_transaction_id = reference
    refund.updated_at = now
    original.metadata_ = {
        **original.metadata_,
        "refundedInCents": refunded_so_far(original) + refund.amount_in_cents,
    }
    original.status = (
        TransactionStatus.refunded
        if refundable_amount(original) == 0
        else TransactionStatus.completed
    )
    original.updated_at = now
    _document(session, documents, refund, original, now=now)
    actor = (refund.metadata_ or {}).get("actorUserId")
    emit(
        session,
        EventKind.audit,
        "payment.refunded",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=original.id,
        organization_id=original.organization_id,
        actor_user_id=uuid.UUID(actor) if actor else None,
        payload={
            "refundTransactionId": str(refund.id),
            "amountInCents": refund.amount_in_cents,
            "currency": refund.currency,
            "source": (refund.metadata_ or {}).get("source"),
            "reason": (refund.note or "")[:200],
            "fully": original.status == TransactionStatus.refunded,
        },
    )
    session.flush()
    refund_owed.refund_recorded(session, original, now=now)  # a settlement's owner task


def _document(
    session: Session,
    documents: DocumentProvider,
    refund: PaymentTransaction,
    original: PaymentTransaction,
    *,
    now: datetime,
) -> None:
    kind = (
        TAX_INVOICE_AND_RECEIPT_REFUND
        if original.document_type == TAX_INVOICE_AND_RECEIPT
        else RECEIPT_REFUND
    )
    issue_document(session, documents, refund, kind, now=now, references=original.document_number)


# A stored card refund not answered yet (a crash, a lost answer).
STORED_REFUND = and_(
    PaymentTransaction.type == TransactionType.refund,
    PaymentTransaction.status == TransactionStatus.refund_pending,
    PaymentTransaction.provider == CARD_PROVIDER,
)


def pending_refunds(session: Session, *, now: datetime, limit: int) -> list[uuid.UUID]:
    """Stored card refunds left unresolved past the executing grace, in
    attempts.ASKING_ORDER: what recovery sends again under their stored ids."""
    return list(
        session.scalars(
            select(PaymentTransaction.id)
            .where(STORED_REFUND, PaymentTransaction.created_at <= now - attempts.EXECUTING_GRACE)
            .order_by(*attempts.ASKING_ORDER)
            .limit(limit)
        )
    )


def resume_refunds(
    factory: sessionmaker[Session],
    provider: CardProvider,
    cipher: FieldCipher,
    *,
    now: datetime,
    documents: DocumentProvider,
    limit: int = 200,
) -> dict[str, int]:
    """The recovery pass over stored refunds: each is sent again under its own unique id (the
    provider replays a refund it already made) and applied in its own transaction. One that
    raises (its account's credentials unreadable, say) is logged and counted (`errors`), left
    pending for the next pass: it stopped the pass there, every gym's refunds behind it and
    the desk charges' recovery after them with it."""
    counts = {"selected": 0, "refunded": 0, "failed": 0, "pending": 0, "errors": 0}
    with factory() as session:
        selected = pending_refunds(session, now=now, limit=limit)
    for refund_id in selected:
        counts["selected"] += 1
        try:
            with factory() as session:
                refund = execute_refund(
                    session, provider, cipher, refund_id, now=now, documents=documents
                )
                if refund.status == TransactionStatus.refund_pending:
                    attempts.mark_asked(session, refund_id, now)
                session.commit()
        except Exception:
            log.exception("resending refund %s failed, tried again next pass", refund_id)
            counts["errors"] += 1
            with factory() as session:
                attempts.mark_asked(session, refund_id, now)
                session.commit()
            continue
        key = {TransactionStatus.refunded: "refunded", TransactionStatus.failed: "failed"}
        counts[key.get(refund.status, "pending")] += 1
    return counts
