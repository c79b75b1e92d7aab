"""Desk charges (spec B 4.3): card charges by staff on card-provider organizations, and the
ordinary dismiss of a pending payment entered by hand.

A desk charge is idempotent on its UUIDv4 key: the request is stored (pending, with its billing
attempt and external id) and committed before the provider is called, so the same key and
request answer the same outcome, a different amount, member or description under the key is
refused, and two identical requests racing each other charge once (the second one finds the
first one's row through the unique key). An outcome the provider left unknown answers
billing_reconciliation_required, never a decline; replaying the key later resolves it by
looking the external id up, never by charging again. A charge closed as not charged is not
final: the provider's later approval of its id completes it as late positive evidence
(`_late_positive_evidence`). A membership that ended takes no desk
charge (409 member_not_active, naming the debts it still owes for clear-debt): see
`refuse_if_ended`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.access.codes import MEMBER_NOT_ACTIVE
from gymctl.access.memberships import membership_of
from gymctl.billing import attempts, codes, debt
from gymctl.billing.accounts import (
    CARD_PROVIDER,
    active_config,
    original_account,
    saved_card,
    terminal_of,
)
from gymctl.billing.alerts import raise_alert
from gymctl.billing.idempotency import UNIQUE_KEY, by_key, require_uuid4
from gymctl.billing.resolution import (
    DESK_CHARGE,
    organization_transaction,
    refuse_if_protected,
)
from gymctl.crypto import FieldCipher
from gymctl.db import release_for_outside_call
from gymctl.errors import DomainError, conflict, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import (
    Membership,
    MembershipStatus,
    PaymentMethod,
    PaymentTransaction,
    Plan,
    Subscription,
)
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.providers.card import (
    CURRENCIES,
    CardProvider,
    ChargeResult,
    Outcome,
    ProviderUnavailable,
)
from gymctl.providers.documents import TAX_INVOICE_AND_RECEIPT, DocumentProvider, issue_document
from gymctl.tasks import file_task


@dataclass(frozen=True)
class DeskChargeRequest:
    idempotency_key: uuid.UUID
    user_id: uuid.UUID
    amount_in_cents: int
    currency: str
    description: str

    def fingerprint(self) -> dict[str, Any]:
        return {
            "userId": str(self.user_id),
            "amountInCents": self.amount_in_cents,
            "currency": self.currency.upper(),
            "description": self.description,
        }


def desk_charge(
    factory: sessionmaker[Session],
    provider: CardProvider,
    *,
    organization_id: uuid.UUID,
    request: DeskChargeRequest,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    cipher: FieldCipher,
    documents: DocumentProvider,
) -> dict[str, Any]:
    """Charge a member's saved card at the desk, once per idempotency key. Answers
    {outcome: charged | declined | not_charged, replayed, transaction}; raises 409
    billing_reconciliation_required while the outcome is unknown."""
    require_uuid4(request.idempotency_key)
    with factory() as session:
        existing = by_key(session, organization_id, request.idempotency_key)
        if existing is None:
            started = _store(session, organization_id, request, actor_user_id, now, cipher)
            if started is None:  # an identical request stored it first
                session.rollback()
                existing = by_key(session, organization_id, request.idempotency_key)
            else:
                transaction_id, terminal, card = started
                attempt = dict(session.get(PaymentTransaction, transaction_id).billing_attempt)
                session.commit()
                # Nothing is read until the answer: a read would begin a transaction, which on
                # the embedded default holds every writer for the call.
                result = _send(provider, attempt, terminal, card)
                answer = _finish(session, transaction_id, result, now, documents, replayed=False)
                if answer["outcome"] == "pending":
                    raise _reconciliation_required(session.get(PaymentTransaction, transaction_id))
                return answer
        _refuse_if_different(existing, request)
        return _replay(session, provider, existing.id, now=now, cipher=cipher, documents=documents)


def _refuse_if_different(existing: PaymentTransaction, request: DeskChargeRequest) -> None:
    stored = (existing.metadata_ or {}).get("request")
    if (existing.metadata_ or {}).get("source") != DESK_CHARGE or stored != request.fingerprint():
        raise conflict(
            codes.IDEMPOTENCY_KEY_REUSED,
            "this idempotency key was used for a different request; a new charge needs a new key",
        )


def _store(
    session: Session,
    organization_id: uuid.UUID,
    request: DeskChargeRequest,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    cipher: FieldCipher,
):
    config = active_config(session, organization_id)
    if config is None or config.provider != CARD_PROVIDER or not config.terminal:
        raise conflict(codes.CARD_PROVIDER_NOT_CONFIGURED, "this gym does not take card payments")
    if request.amount_in_cents <= 0:
        raise unprocessable(codes.AMOUNT_INVALID, "the amount must be positive")
    refuse_foreign_currency(session, organization_id, request.currency)
    refuse_if_ended(session, membership_of(session, organization_id, request.user_id))
    method = session.scalar(
        select(PaymentMethod)
        .where(
            PaymentMethod.organization_id == organization_id,
            PaymentMethod.user_id == request.user_id,
            PaymentMethod.deleted_at.is_(None),
        )
        .order_by(PaymentMethod.saved_at.desc())
        .limit(1)
    )
    if method is None:
        raise conflict(codes.NO_SAVED_CARD, "the member has no saved card")
    external_id = str(ids.new_id())
    transaction = PaymentTransaction(
        id=ids.new_id(),
        organization_id=organization_id,
        user_id=request.user_id,
        type=TransactionType.charge,
        status=TransactionStatus.pending,
        provider=CARD_PROVIDER,
        method="card",
        amount_in_cents=request.amount_in_cents,
        currency=request.currency.upper(),
        idempotency_key=str(request.idempotency_key),
        note=request.description,
        metadata_={
            "source": DESK_CHARGE,
            "request": request.fingerprint(),
            "actorUserId": str(actor_user_id) if actor_user_id else None,
        },
        billing_attempt={
            "protocol": attempts.PROTOCOL,
            "externalAttemptId": external_id,
            "terminal": config.terminal,
            "amountInCents": request.amount_in_cents,
            "currency": request.currency.upper(),
            "idempotencyKey": str(request.idempotency_key),
            "startedAt": now.isoformat(),
        },
        created_at=now,
        updated_at=now,
    )
    session.add(transaction)
    try:
        with unique_violation(UNIQUE_KEY):
            session.flush()
    except UniqueViolation:
        return None
    return transaction.id, terminal_of(config, cipher), saved_card(method, cipher)


def refuse_if_ended(session: Session, membership: Membership) -> None:
    """Before anything is stored: a membership that ended (removed, erased, the gym deleted,
    the login deleted) takes no desk charge, 409 member_not_active, whatever the amount. The
    gym no longer serves the person, so nothing new is sold to them; and a desk charge is not
    tied to any subscription (no subscription id, no debt restored when it is approved), so a
    charge meant for a debt the plan kept would leave that debt owed on the record: it would
    block the member's bookings if they came back and let it be collected a second time. The
    debt stays collectable where paying it restores it: the desk's clear-debt of that
    subscription, or the member's own pay-debt once a member again. The refusal names what
    is owed (`debts`: subscription, amount, currency) so staff go there. Live memberships
    (active, suspended, invited) are charged as before."""
    if membership.status != MembershipStatus.cancelled:
        return
    owed = [
        {
            "subscriptionId": str(row.id),
            "amountInCents": row.debt_amount_in_cents or row.price_in_cents,
            "currency": row.currency,
        }
        for row in session.scalars(
            select(Subscription)
            .where(
                Subscription.organization_id == membership.organization_id,
                Subscription.user_id == membership.user_id,
                Subscription.deleted_at.is_(None),
            )
            .order_by(Subscription.created_at, Subscription.id)
        )
        if debt.owes(row)
    ]
    raise conflict(
        MEMBER_NOT_ACTIVE,
        "this membership has ended: its card is not charged at the desk. A debt it owes is "
        "paid with the subscription's clear-debt",
        debts=owed,
    )


def refuse_foreign_currency(session: Session, organization_id: uuid.UUID, currency: str) -> None:
    """Before anything is stored: 422 currency_not_supported for a currency the card provider
    does not take, 409 currency_mismatch for one the gym does not sell in (the currencies of
    its plans; a gym without plans takes any the provider does)."""
    currency = currency.upper()
    if currency not in CURRENCIES:
        raise unprocessable(
            codes.CURRENCY_NOT_SUPPORTED,
            f"the card provider does not take {currency}",
            supported=sorted(CURRENCIES),
        )
    sold_in = set(
        session.scalars(
            select(Plan.currency)
            .where(Plan.organization_id == organization_id, Plan.deleted_at.is_(None))
            .distinct()
        )
    )
    if sold_in and currency not in sold_in:
        raise conflict(
            codes.CURRENCY_MISMATCH,
            f"this gym does not charge in {currency}",
            currencies=sorted(sold_in),
        )


def _send(provider: CardProvider, attempt: dict[str, Any], terminal, card) -> ChargeResult:
    return provider.charge_token(
        terminal,
        token=card.token,
        expiry=card.expiry,
        amount_in_cents=attempt["amountInCents"],
        currency=attempt["currency"],
        unique_id=attempt["externalAttemptId"],
    )


def _finish(
    session: Session,
    transaction_id: uuid.UUID,
    result: ChargeResult,
    now: datetime,
    documents: DocumentProvider,
    *,
    replayed: bool,
) -> dict[str, Any]:
    """Apply the provider's answer once and commit (the desk charge's own session)."""
    transaction = apply_result(session, transaction_id, result, now, documents)
    session.commit()
    return answer_of(transaction, replayed=replayed)


def apply_result(
    session: Session,
    transaction_id: uuid.UUID,
    result: ChargeResult,
    now: datetime,
    documents: DocumentProvider,
) -> PaymentTransaction:
    """Apply the provider's answer once, under the row lock; the caller commits. An approval
    of a charge closed as not charged is late positive evidence (`_late_positive_evidence`):
    it is pending again and this answer is applied to it as to any pending charge."""
    transaction = session.scalar(
        select(PaymentTransaction)
        .where(PaymentTransaction.id == transaction_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if result.outcome == Outcome.approved and attempts.reopenable(transaction):
        _late_positive_evidence(session, transaction, result, now)
    if transaction.status == TransactionStatus.pending:
        attempt = dict(transaction.billing_attempt)
        # The collector's rule: approved elsewhere (another amount, currency or terminal) is
        # held as a contradiction, never completed where a refund would not find the deal.
        mismatch = result.outcome == Outcome.approved and attempts.evidence_mismatch(
            attempt, result
        )
        if result.outcome == Outcome.approved and not mismatch:
            transaction.status = TransactionStatus.completed
            transaction.provider_transaction_id = result.transaction_id
            issue_document(session, documents, transaction, TAX_INVOICE_AND_RECEIPT, now=now)
        elif result.outcome in (Outcome.declined, Outcome.not_found) and attempts.approved_late(
            transaction
        ):
            # Reopened on the provider's approval of this very id (held at other terms): a
            # lookup that now declines it or cannot find it contradicts that. Applied, it would
            # close as never charged a charge the provider said it took, as the collector's
            # rule holds too.
            field = f"{result.outcome.value}_after_approval"
            alert = attempts.record_contradiction(transaction, attempt, field, now)
            if alert:
                raise_alert(alert, transactionId=transaction.id)
        elif result.outcome == Outcome.declined:
            transaction.status = TransactionStatus.failed
            transaction.provider_transaction_id = result.transaction_id
            transaction.metadata_ = {**transaction.metadata_, "responseCode": result.response_code}
        elif result.outcome == Outcome.not_found:
            transaction.status = TransactionStatus.failed
            transaction.billing_resolution = {"decision": "not_charged", "at": now.isoformat()}
        elif mismatch:
            # Money taken, nothing completed: staff are paged once, as for an attempt or a page.
            alert = attempts.record_contradiction(transaction, attempt, mismatch, now)
            if alert:
                raise_alert(alert, transactionId=transaction.id)
        else:
            attempt["uncertainSince"] = attempt.get("uncertainSince") or now.isoformat()
            transaction.billing_attempt = attempt
        transaction.updated_at = now
        if transaction.status != TransactionStatus.pending:
            emit(
                session,
                EventKind.audit,
                "payment.desk_charge",
                at=now,
                aggregate_type="payment_transaction",
                aggregate_id=transaction.id,
                organization_id=transaction.organization_id,
                actor_user_id=_uuid((transaction.metadata_ or {}).get("actorUserId")),
                payload={
                    "status": transaction.status.value,
                    "amountInCents": transaction.amount_in_cents,
                    "currency": transaction.currency,
                    "userId": str(transaction.user_id),
                },
            )
    session.flush()
    return transaction


def _late_positive_evidence(
    session: Session, transaction: PaymentTransaction, result: ChargeResult, now: datetime
) -> None:
    """A desk charge closed as not charged that the provider reports approved under its own id
    (a reconcile asking again, or the charge's own answer arriving after a lookup said "not
    found"): spec B 3, "cancelled (not_charged) -> late positive evidence -> pending; audit
    and alert". Its outcome is the provider's again, so it is pending, and the caller applies
    the approval to it: completed at the exact terms (its document issued), else held as a
    contradiction. The resolution records the evidence as the collector's does
    (`attempts.late_positive_evidence`, whose subscription hold a desk charge has no use for),
    so a later lookup that denies it is a contradiction, not a closing (`attempts.approved_late`).
    Staff were told to charge again under a new key: the urgent follow-up asks them to check
    that the member was not charged twice."""
    transaction.billing_resolution = {
        **attempts.with_late_evidence(transaction.billing_resolution or {}, result, now),
        "decision": attempts.REOPENED,
    }
    transaction.status = TransactionStatus.pending
    transaction.updated_at = now
    session.flush()
    file_task(
        session,
        organization_id=transaction.organization_id,
        kind=attempts.FOLLOW_UP,
        subject_type="payment_transaction",
        subject_id=str(transaction.id),
        title=(
            "A desk charge closed as not charged was charged after all: check the member was "
            "not charged again for it"
        ),
        priority="urgent",
        due_at=now + attempts.FOLLOW_UP_DUE,
        now=now,
        data={"reason": attempts.LATE_POSITIVE_EVIDENCE, "userId": str(transaction.user_id)},
        linked_user_id=transaction.user_id,
    )
    emit(
        session,
        EventKind.audit,
        "billing.late_positive_evidence",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=transaction.id,
        organization_id=transaction.organization_id,
        actor_user_id=None,
        payload={
            "source": DESK_CHARGE,
            "movedToPending": True,
            "amountInCents": transaction.amount_in_cents,
            "currency": transaction.currency,
            "userId": str(transaction.user_id),
            "providerTransactionId": result.transaction_id,
        },
    )
    raise_alert(
        attempts.LATE_POSITIVE_EVIDENCE, transactionId=transaction.id, userId=transaction.user_id
    )


def _replay(
    session: Session,
    provider: CardProvider,
    transaction_id: uuid.UUID,
    *,
    now: datetime,
    cipher: FieldCipher,
    documents: DocumentProvider,
) -> dict[str, Any]:
    transaction = session.get(PaymentTransaction, transaction_id)
    if transaction.status != TransactionStatus.pending:
        return answer_of(transaction, replayed=True)
    started = datetime.fromisoformat(transaction.billing_attempt["startedAt"])
    # Asked on the merchant account that sent it, even when the gym has moved terminal since.
    config = original_account(
        session, transaction.organization_id, transaction.billing_attempt["terminal"]
    )
    if now - started < attempts.EXECUTING_GRACE or config is None:
        raise _reconciliation_required(transaction)
    transaction_id, on_terminal = transaction.id, terminal_of(config, cipher)
    attempt_id = transaction.billing_attempt["externalAttemptId"]
    release_for_outside_call(session)  # only read: the answer is applied under the lock
    try:
        result = provider.lookup_charge(on_terminal, attempt_id)
    except ProviderUnavailable:
        raise _reconciliation_required(transaction) from None
    answer = _finish(session, transaction_id, result, now, documents, replayed=True)
    if answer["outcome"] == "pending":
        raise _reconciliation_required(transaction)
    return answer


def _reconciliation_required(transaction: PaymentTransaction) -> DomainError:
    return conflict(
        codes.BILLING_RECONCILIATION_REQUIRED,
        "the card provider has not confirmed this charge yet; it is not a decline. Replay the "
        "same key later, or reconcile the charge by its id",
        transactionId=str(transaction.id),
    )


def answer_of(transaction: PaymentTransaction, *, replayed: bool) -> dict[str, Any]:
    if transaction.status == TransactionStatus.pending:
        outcome = "pending"
    elif transaction.status == TransactionStatus.failed:
        not_charged = (transaction.billing_resolution or {}).get("decision") == "not_charged"
        outcome = "not_charged" if not_charged else "declined"
    else:
        outcome = "charged"
    return {"outcome": outcome, "replayed": replayed, "transaction": transaction_json(transaction)}


def transaction_json(transaction: PaymentTransaction) -> dict[str, Any]:
    """A payment row as staff see it: never the billing attempt's internals or evidence."""
    metadata = transaction.metadata_ or {}
    return {
        "id": str(transaction.id),
        "type": transaction.type.value,
        "status": transaction.status.value,
        "provider": transaction.provider,
        "method": transaction.method,
        "amountInCents": transaction.amount_in_cents,
        "currency": transaction.currency,
        "userId": str(transaction.user_id) if transaction.user_id else None,
        "subscriptionId": str(transaction.subscription_id) if transaction.subscription_id else None,
        "description": transaction.note,
        "documentType": transaction.document_type,
        "documentNumber": transaction.document_number,
        "documentError": transaction.document_error,
        "refundedTransactionId": metadata.get("refundedTransactionId"),
        "cashReturned": metadata.get("cashReturned"),
        "createdAt": transaction.created_at.isoformat(),
    }


def _uuid(value: str | None) -> uuid.UUID | None:
    return uuid.UUID(value) if value else None


def dismiss_pending_payment(
    session: Session,
    *,
    organization_id: uuid.UUID,
    transaction_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> PaymentTransaction:
    """The ordinary dismiss of a pending payment record staff entered by hand. Anything sent to
    the card provider under an attempt id may have charged: it is refused (spec B 4.2) and
    resolved with reconcile or confirm-no-debit, or by replaying its desk key."""
    transaction = organization_transaction(session, organization_id, transaction_id, lock=True)
    refuse_if_protected(transaction)
    if transaction.status != TransactionStatus.pending:
        raise conflict(codes.TRANSACTION_NOT_PENDING, "only a pending payment is dismissed")
    transaction.status = TransactionStatus.cancelled
    transaction.updated_at = now
    emit(
        session,
        EventKind.audit,
        "payment.pending_dismissed",
        at=now,
        aggregate_type="payment_transaction",
        aggregate_id=transaction.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"amountInCents": transaction.amount_in_cents, "currency": transaction.currency},
    )
    session.flush()
    return transaction
