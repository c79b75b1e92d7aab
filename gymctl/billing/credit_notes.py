"""Credit notes on a sale (spec B 4.3): a TaxInvoiceAndReceiptRefund document for part or all
of a completed sale, capped at what remains creditable (the sale less its refunds and earlier
credit notes, as Lago and Stripe cap them), idempotent on its key.

A credit note moves no card money: with cashReturned the desk handed the amount back in cash;
without it the amount stays with the gym as the member's credit. A replay of the same key and
request answers replayed true and files nothing; the same key for another request is refused.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing import codes
from gymctl.billing.desk import transaction_json
from gymctl.billing.idempotency import UNIQUE_KEY, by_key, require_uuid4
from gymctl.billing.refunds import refundable_amount
from gymctl.billing.resolution import locked_payment
from gymctl.errors import conflict, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.documents import (
    TAX_INVOICE_AND_RECEIPT_REFUND,
    DocumentProvider,
    issue_document,
)
from gymctl.retention import refund_owed

CREDIT_NOTE = "credit_note"


@dataclass(frozen=True)
class CreditNoteRequest:
    idempotency_key: uuid.UUID
    amount_in_cents: int
    cash_returned: bool
    reason: str = ""

    def fingerprint(self, sale_id: uuid.UUID) -> dict[str, Any]:
        return {
            "saleId": str(sale_id),
            "amountInCents": self.amount_in_cents,
            "cashReturned": self.cash_returned,
            "reason": self.reason,
        }


def file_credit_note(
    session: Session,
    *,
    organization_id: uuid.UUID,
    sale_id: uuid.UUID,
    request: CreditNoteRequest,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """Answers {replayed, remainingInCents, creditNote}. Refusals: 404 transaction_not_found,
    409 credit_note_not_creditable (not a completed sale), 422 amount_invalid, 409
    credit_note_amount_exceeds_cap, 409 idempotency_key_reused."""
    require_uuid4(request.idempotency_key)
    sale = locked_payment(session, organization_id, sale_id)
    existing = by_key(session, organization_id, request.idempotency_key)
    if existing is not None:
        return _replay(existing, sale, request)
    # Any payment is a sale here, a renewal's or a presale's opening-day charge as much as a
    # desk sale: the collector writes those as `recurring`, and refunds take them too.
    if sale.type == TransactionType.refund or sale.status not in (
        TransactionStatus.completed,
        TransactionStatus.refunded,
    ):
        raise conflict(
            codes.CREDIT_NOTE_NOT_CREDITABLE, "only a completed sale takes a credit note"
        )
    if request.amount_in_cents <= 0:
        raise unprocessable(codes.AMOUNT_INVALID, "the amount must be positive")
    remaining = refundable_amount(sale)
    if not request.cash_returned:  # kept as credit: the refund a settlement owes keeps its room
        remaining = max(0, remaining - refund_owed.still_owed(session, sale))
    if request.amount_in_cents > remaining:
        raise conflict(
            codes.CREDIT_NOTE_AMOUNT_EXCEEDS_CAP,
            "the credit note exceeds what remains creditable on the sale",
            remainingInCents=remaining,
        )
    note = PaymentTransaction(
        id=ids.new_id(),
        organization_id=organization_id,
        subscription_id=sale.subscription_id,
        user_id=sale.user_id,
        type=TransactionType.refund,
        status=TransactionStatus.refunded,
        provider="manual",
        method="cash" if request.cash_returned else "credit",
        amount_in_cents=request.amount_in_cents,
        currency=sale.currency,
        idempotency_key=str(request.idempotency_key),
        note=request.reason or None,
        metadata_={
            "source": CREDIT_NOTE,
            "refundedTransactionId": str(sale.id),
            "cashReturned": request.cash_returned,
            "request": request.fingerprint(sale.id),
        },
        created_at=now,
        updated_at=now,
    )
    try:
        with (
            unique_violation(UNIQUE_KEY),
            session.begin_nested(),
        ):
            session.add(note)  # inside the savepoint: begin_nested flushes what is pending first
            session.flush()
    except UniqueViolation:
        # The same key was stored by a request racing this one: its outcome if it was this
        # request, else refused (a race on another sale held another sale's lock).
        existing = by_key(session, organization_id, request.idempotency_key)
        return _replay(existing, sale, request)
    issue_document(
        session,
        documents,
        note,
        TAX_INVOICE_AND_RECEIPT_REFUND,
        now=now,
        references=sale.document_number,
    )
    credited = int((sale.metadata_ or {}).get("creditedInCents", 0)) + request.amount_in_cents
    sale.metadata_ = {**sale.metadata_, "creditedInCents": credited}
    sale.updated_at = now
    emit(
        session,
        EventKind.audit,
        "payment.credit_note_filed",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=sale.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={
            "creditNoteId": str(note.id),
            "amountInCents": request.amount_in_cents,
            "currency": sale.currency,
            "cashReturned": request.cash_returned,
        },
    )
    session.flush()
    if request.cash_returned:  # money back: a settlement's owner task may be done
        refund_owed.refund_recorded(session, sale, now=now)
    return _answer(note, sale, replayed=False)


def _replay(
    existing: PaymentTransaction, sale: PaymentTransaction, request: CreditNoteRequest
) -> dict[str, Any]:
    """The stored answer of this very request under its key; any other request is refused."""
    if (existing.metadata_ or {}).get("request") != request.fingerprint(sale.id):
        raise conflict(
            codes.IDEMPOTENCY_KEY_REUSED,
            "this idempotency key was used for a different request",
        )
    return _answer(existing, sale, replayed=True)


def _answer(note: PaymentTransaction, sale: PaymentTransaction, *, replayed: bool):
    return {
        "replayed": replayed,
        "remainingInCents": refundable_amount(sale),
        "creditNote": transaction_json(note),
    }
