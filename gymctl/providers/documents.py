"""The document provider (spec B 1, 2.2): the tax invoices, receipts and refund documents a
payment needs. One small interface; the local implementation numbers documents per organization
in the database (one gapless sequence each), which is what the embedded default and the tests
use. A real provider would be an HTTP client with the same `issue`.

Document types are the spec's values: a sale gets TaxInvoiceAndReceipt; money given back gets
ReceiptRefund, or TaxInvoiceAndReceiptRefund when the sale it reverses had a tax invoice (a
credit note).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy.orm import Session

from gymctl.db import upsert_for
from gymctl.models import DocumentCounter, PaymentTransaction

TAX_INVOICE_AND_RECEIPT = "TaxInvoiceAndReceipt"
RECEIPT_REFUND = "ReceiptRefund"
TAX_INVOICE_AND_RECEIPT_REFUND = "TaxInvoiceAndReceiptRefund"
DOCUMENT_TYPES = (TAX_INVOICE_AND_RECEIPT, RECEIPT_REFUND, TAX_INVOICE_AND_RECEIPT_REFUND)


class DocumentUnavailable(Exception):
    """The provider could not issue the document; the payment stands, `document_error` says
    why, and staff reissue it later."""


@dataclass(frozen=True)
class DocumentRequest:
    organization_id: uuid.UUID
    document_type: str
    transaction_id: uuid.UUID
    amount_in_cents: int
    currency: str
    at: datetime
    references: str | None = None  # the document number a refund document reverses


@dataclass(frozen=True)
class IssuedDocument:
    document_type: str
    number: str


class DocumentProvider(Protocol):
    name: str

    def issue(self, session: Session, request: DocumentRequest) -> IssuedDocument:
        """Issue one document. Raises DocumentUnavailable."""


class LocalDocumentProvider:
    """Numbers documents 1, 2, 3, ... per organization, in the caller's transaction: a rolled
    back payment gives its number back, so the sequence has no gaps."""

    name = "local"

    def issue(self, session: Session, request: DocumentRequest) -> IssuedDocument:
        if request.document_type not in DOCUMENT_TYPES:
            raise DocumentUnavailable(f"unknown document type {request.document_type!r}")
        insert = upsert_for(session)
        statement = insert(DocumentCounter).values(
            organization_id=request.organization_id, last_number=1
        )
        number = session.scalar(
            statement.on_conflict_do_update(
                index_elements=["organization_id"],
                set_={"last_number": DocumentCounter.last_number + 1},
            ).returning(DocumentCounter.last_number)
        )
        return IssuedDocument(request.document_type, str(number))


def default_document_provider() -> DocumentProvider:
    """The local provider: the only implementation so far (a real document provider would be
    chosen here by a setting, as the card provider is). The collector's settle takes this one
    (attempts.document_sale), inside the payment's locks and in the forecast too: a provider
    that calls out must first be threaded through the collector's doors and called outside
    them."""
    return LocalDocumentProvider()


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
