"""Refunds (spec B 2.2, 3): completed -> refund_pending -> refunded, through the card provider
for card payments and by hand (cash returned) for the others, with a refund document.

Money safety without committing inside the caller's unit of work: the provider's unique id of a
refund is derived from the refunded transaction and how much of it was refunded before, so a
refund rolled back after the provider acted (a crash, a lost answer) is retried under the same
id and the provider answers the original outcome instead of refunding twice (notes/billing.md:
ExternalUniqTranIdResponse).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing.accounts import CARD_PROVIDER, active_config, terminal_of
from gymctl.billing.resolution import original_account
from gymctl.crypto import FieldCipher
from gymctl.errors import DomainError
from gymctl.events import EventKind, emit
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.providers.card import CardProvider, Outcome, ProviderUnavailable
from gymctl.providers.documents import (
    RECEIPT_REFUND,
    TAX_INVOICE_AND_RECEIPT,
    TAX_INVOICE_AND_RECEIPT_REFUND,
    DocumentProvider,
    DocumentRequest,
    DocumentUnavailable,
)

REFUNDABLE = (TransactionStatus.completed,)
_UNIQUE_NAMESPACE = uuid.UUID("6f0d3c1e-8a55-4a55-9a0e-2f6f4c1b7a10")


def refunded_so_far(transaction: PaymentTransaction) -> int:
    return int((transaction.metadata_ or {}).get("refundedInCents", 0))


def credited_so_far(transaction: PaymentTransaction) -> int:
    return int((transaction.metadata_ or {}).get("creditedInCents", 0))


def refundable_amount(transaction: PaymentTransaction) -> int:
    """What is left to give back on a sale: its amount less refunds and credit notes."""
    return transaction.amount_in_cents - refunded_so_far(transaction) - credited_so_far(transaction)


def refund_transaction(
    session: Session,
    *,
    provider: CardProvider,
    cipher: FieldCipher,
    transaction: PaymentTransaction,
    amount_cents: int,
    reason: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
    source: str = "refund",
    metadata: dict[str, Any] | None = None,
) -> PaymentTransaction:
    """Give back `amount_cents` of a completed payment and return the refund row (type refund,
    status refunded, metadata.refundedTransactionId, its ReceiptRefund or
    TaxInvoiceAndReceiptRefund document).

    Card-provider payments are refunded through `provider` on the terminal that took them;
    manual, cash and external ones are recorded as money returned by hand (no provider call).
    The refunded row is locked, set refund_pending while the provider is asked, then refunded
    when nothing is left or completed again after a partial refund. A document that cannot be
    issued leaves `document_error` on the refund row; the money stands.

    Raises DomainError, with every write of this call undone (a savepoint), when the refund is
    not possible: 404 transaction_not_found, 409 refund_not_refundable (not completed),
    422 refund_amount_invalid, 409 refund_exceeds_remaining, 409
    refund_provider_reference_missing (a card payment without its provider transaction), 409
    refund_original_account_unavailable (no credentials are kept for the terminal that took the
    payment; a replaced terminal's kept ones still refund), 503 refund_provider_unavailable
    (nothing known: retrying is safe, the same unique id is used), 409 refund_declined (the
    provider refused). The caller commits.
    `source` and `metadata` are recorded on the refund row (e.g. cash_notice_settlement).
    """
    savepoint = session.begin_nested()
    try:
        refund = _refund(
            session,
            provider=provider,
            cipher=cipher,
            transaction_id=transaction.id,
            amount_cents=amount_cents,
            reason=reason,
            actor_user_id=actor_user_id,
            now=now,
            documents=documents,
            source=source,
            metadata=metadata or {},
        )
    except BaseException:
        savepoint.rollback()  # expires what it touched: the caller's rows read fresh
        raise
    savepoint.commit()
    return refund


def _refund(
    session: Session,
    *,
    provider: CardProvider,
    cipher: FieldCipher,
    transaction_id: uuid.UUID,
    amount_cents: int,
    reason: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
    source: str,
    metadata: dict[str, Any],
) -> PaymentTransaction:
    original = session.scalar(
        select(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if original is None:
        raise DomainError("transaction_not_found", "no such transaction", status=404)
    if original.status not in REFUNDABLE or original.type == TransactionType.refund:
        raise DomainError(
            "refund_not_refundable",
            "only a completed payment can be refunded",
            status=409,
            transactionStatus=original.status.value,
        )
    if amount_cents <= 0:
        raise DomainError("refund_amount_invalid", "the refund must be positive", status=422)
    left = refundable_amount(original)
    if amount_cents > left:
        raise DomainError(
            "refund_exceeds_remaining",
            "the refund exceeds what is left of the payment",
            status=409,
            remainingInCents=left,
        )
    if original.provider == CARD_PROVIDER and not original.provider_transaction_id:
        # Card money goes back only through the provider: a card payment recorded as refunded
        # by hand would leave the member unpaid.
        raise DomainError(
            "refund_provider_reference_missing",
            "this card payment has no provider transaction to refund; resolve it first",
            status=409,
        )
    before = refunded_so_far(original)
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
        metadata_={
            **metadata,
            "source": source,
            "refundedTransactionId": str(original.id),
            "cashReturned": original.provider != CARD_PROVIDER,
        },
        created_at=now,
        updated_at=now,
    )
    session.add(refund)
    original.status = TransactionStatus.refund_pending
    original.updated_at = now
    session.flush()
    if original.provider == CARD_PROVIDER:
        refund.refund_external_reference = _through_provider(
            session,
            provider,
            cipher,
            original,
            amount_cents=amount_cents,
            unique_id=str(uuid.uuid5(_UNIQUE_NAMESPACE, f"{original.id}:{before}:{amount_cents}")),
        )
        refund.provider_transaction_id = refund.refund_external_reference
    refund.status = TransactionStatus.refunded
    refund.updated_at = now
    original.metadata_ = {**original.metadata_, "refundedInCents": before + amount_cents}
    original.status = (
        TransactionStatus.refunded
        if refundable_amount(original) == 0
        else TransactionStatus.completed
    )
    _document(session, documents, refund, original, now=now)
    emit(
        session,
        EventKind.audit,
        "payment.refunded",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=original.id,
        organization_id=original.organization_id,
        actor_user_id=actor_user_id,
        payload={
            "refundTransactionId": str(refund.id),
            "amountInCents": amount_cents,
            "currency": refund.currency,
            "source": source,
            "reason": reason[:200],
            "fully": original.status == TransactionStatus.refunded,
        },
    )
    session.flush()
    return refund


def _through_provider(
    session: Session,
    provider: CardProvider,
    cipher: FieldCipher,
    original: PaymentTransaction,
    *,
    amount_cents: int,
    unique_id: str,
) -> str | None:
    took_it = (original.billing_attempt or {}).get("terminal")
    if took_it is not None:  # the terminal that took it, even if since replaced
        config = original_account(session, original.organization_id, took_it)
    else:  # a hosted-page payment: the organization's terminal
        config = active_config(session, original.organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise DomainError(
            "refund_original_account_unavailable",
            "the merchant account that took this payment is no longer connected",
            status=409,
        )
    try:
        result = provider.refund(
            terminal_of(config, cipher),
            transaction_id=original.provider_transaction_id,
            amount_in_cents=amount_cents,
            unique_id=unique_id,
        )
    except ProviderUnavailable:
        raise DomainError(
            "refund_provider_unavailable",
            "the card provider could not be reached; nothing was refunded here, try again",
            status=503,
        ) from None
    if result.outcome != Outcome.approved:
        raise DomainError(
            "refund_declined",
            "the card provider refused the refund",
            status=409,
            responseCode=result.response_code,
        )
    return result.transaction_id


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


def issue_document(
    session: Session,
    documents: DocumentProvider,
    transaction: PaymentTransaction,
    document_type: str,
    *,
    now: datetime,
    references: str | None = None,
) -> None:
    """Attach a document to a payment row; a provider failure is recorded, not raised."""
    try:
        issued = documents.issue(
            session,
            DocumentRequest(
                organization_id=transaction.organization_id,
                document_type=document_type,
                transaction_id=transaction.id,
                amount_in_cents=transaction.amount_in_cents,
                currency=transaction.currency,
                at=now,
                references=references,
            ),
        )
    except DocumentUnavailable as error:
        transaction.document_error = str(error)[:500]
        return
    transaction.document_type = issued.document_type
    transaction.document_number = issued.number
    transaction.document_error = None
