"""The refund a cancellation settlement asks the owner for, recorded (spec B 3, 7, 8).

A settlement that cannot refund by itself (`manual`: a cash or manual payment; or its card
refund failed) files the owner a manual_refund task on the subscription. The owner pays it back
through the ledger: a refund of the settled charge (the refund route, cash returned or through
the card provider) or a credit note with cash returned. Once those given back since the
settlement reach what it owed, the settlement reads `refunded` and its task is done, in the
refund's transaction: nothing else closes the task, and the refund task sweep bumped it, urgent,
every three days for ever, asking for money the ledger shows was paid.

Billing's refund writers call `refund_recorded` under the charge's row lock; nothing of billing
is imported here (billing imports this).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import CancellationSettlement, PaymentTransaction
from gymctl.models.billing import TransactionStatus, TransactionType
from gymctl.tasks import close_task

OWED = ("owner_task", "refund_failed")  # the executions that left the refund to the owner
CREDIT_NOTE = "credit_note"  # billing.credit_notes' source: a document, money back only in cash


def _given_back(row: PaymentTransaction) -> bool:
    meta = row.metadata_ or {}
    return meta.get("source") != CREDIT_NOTE or bool(meta.get("cashReturned"))


def _owed_settlement(session: Session, charge: PaymentTransaction, *, lock: bool = False):
    query = select(CancellationSettlement).where(
        CancellationSettlement.charge_transaction_id == charge.id,
        CancellationSettlement.execution.in_(OWED),
    )
    return session.scalar(query.with_for_update() if lock else query)


SEEN = "refundsBefore"  # settlement.detail: the charge's refunds its amount already counted


def refunds_of(
    session: Session, charge: PaymentTransaction, *, in_flight: bool = False
) -> list[PaymentTransaction]:
    """Every refund and credit note of `charge` that completed; `in_flight`: those still on
    their way too (what a settlement's amount already took off, `settlement.left_of`)."""
    statuses = [TransactionStatus.refunded]
    if in_flight:
        statuses.append(TransactionStatus.refund_pending)
    return session.scalars(
        select(PaymentTransaction)
        .where(
            PaymentTransaction.type == TransactionType.refund,
            PaymentTransaction.status.in_(statuses),
            PaymentTransaction.metadata_["refundedTransactionId"].as_string() == str(charge.id),
        )
        .order_by(PaymentTransaction.created_at, PaymentTransaction.id)
    ).all()


def _back_since(
    session: Session, charge: PaymentTransaction, settlement: CancellationSettlement
) -> list[PaymentTransaction]:
    """The refunds and cash credit notes of `charge` its settlement did not count: money given
    back towards what it owes. Told by the ids it saw (SEEN), not by time: a credit note dated
    by its request's clock before the sweep's instant and committed after the settlement (it
    waited for the charge's lock) was money back the settlement had not seen. A settlement
    written before s55 kept no ids: by time."""
    detail = settlement.detail or {}
    if SEEN in detail:
        seen = set(detail[SEEN])
        back = [row for row in refunds_of(session, charge) if str(row.id) not in seen]
    else:
        back = [
            row for row in refunds_of(session, charge) if row.created_at >= settlement.created_at
        ]
    return [row for row in back if _given_back(row)]


def still_owed(session: Session, charge: PaymentTransaction) -> int:
    """What a settlement of `charge` still asks the owner to give back (0 for none): room on
    the charge that a credit note kept as credit must leave, or the refund owed could never be
    recorded (it would exceed what remains refundable) and its task never done."""
    settlement = _owed_settlement(session, charge)
    if settlement is None:
        return 0
    given = sum(row.amount_in_cents for row in _back_since(session, charge, settlement))
    return max(0, settlement.amount_in_cents - given)


def refund_recorded(session: Session, charge: PaymentTransaction, *, now: datetime) -> bool:
    """A refund (or a credit note) of `charge` completed: the settlement of that charge whose
    refund the owner owes is done once what went back since it was settled covers its amount.
    True when one was."""
    settlement = _owed_settlement(session, charge, lock=True)
    if settlement is None:
        return False
    rows = _back_since(session, charge, settlement)
    if sum(row.amount_in_cents for row in rows) < settlement.amount_in_cents:
        return False
    settlement.detail = {
        **(settlement.detail or {}),
        "ownerRecorded": [str(row.id) for row in rows],
        "was": settlement.execution,
    }
    settlement.execution = "refunded"
    settlement.refund_transaction_id = rows[-1].id  # the one that completed it
    settlement.updated_at = now
    close_task(
        session,
        organization_id=settlement.organization_id,
        kind="manual_refund",
        subject_type="subscription",
        subject_id=str(settlement.subscription_id),
        because="refund_recorded",
        now=now,
    )
    return True
