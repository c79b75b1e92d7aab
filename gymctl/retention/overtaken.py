"""A notice overtaken: its plan ended another way before the notice matured (cancelled for
non-payment after the debt's grace, ended with the membership, superseded by the plan the
member holds again). The notice ends with the plan, in the ending's transaction:

- the subscription no longer carries it (cancel_at_period_end and the effective date cleared),
  so no read shows a notice still running and the period-end sweep never settles it: a notice
  that never matured owes no refund;
- its retention case closes, its review task done, with an outcome that says why;
- the audit subscription.notice_overtaken names the notice, the case and the ending's reason.
The notice row stays as given: it was not withdrawn.

Every ending closes the plan's open presale charge-failure case too (`close_with_plan`), in its
own transaction and with the same outcome: the lifecycle's non-payment lost_payment, a matured
notice its own (the period-end sweep's `settle_one` closes both cases through it), a superseded
plan saved_member_withdrew, any other ending the member lost (audit retention.case_closed).
A presale's debt paid closes that case too, saved_member_withdrew, and clears the plan's mark
(`close_paid_presale`, from `attempts.grant_period`): the plan lives on as an ordinary one.

Every ending but the notice's own calls `end_overtaken_notice`: `attempts.end_plan` (removal,
erasure, a deleted gym or login, a superseded plan), the lifecycle pass for the plans it cancels
for non-payment, and the hourly escalation for a case an older release left open. A renewal
paid onto a notice already in effect moves it to the end of the period paid
(`notice_follows_paid_period`, from `attempts.settle`). Nothing of billing is imported here:
billing's enders import this.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import CancellationNotice, RetentionCase, RetentionContact, Subscription, Task
from gymctl.models.billing import LIVE_STATUSES, SubscriptionStatus
from gymctl.models.retention import CaseKind, RetentionOutcome

# Endings whose outcome is not the member lost as at period end: a debt paid on a plan the
# member bought again (attempts.SUPERSEDED) ends it, the member staying by their own act; the
# lifecycle cancels a debt past its grace for non-payment (transitions.NON_PAYMENT).
ENDING_OUTCOMES = {
    "superseded": RetentionOutcome.saved_member_withdrew,
    "non_payment": RetentionOutcome.lost_payment,
}
PRESALE_CHARGE_FAILED = CaseKind.presale_charge_failed.value
# A presale's declined opening charge paid (`close_paid_presale`): the member stays by their own
# payment, the outcome of a debt paid on a plan held again (ENDING_OUTCOMES' superseded).
DEBT_PAID = "debt_paid"
PAID_OUTCOME = ENDING_OUTCOMES["superseded"]
OUTCOMES = frozenset(outcome.value for outcome in RetentionOutcome)


def close_case(
    session: Session, case: RetentionCase | None, outcome: RetentionOutcome, *, now: datetime
) -> None:
    """Close the case with its outcome and its review task with it."""
    if case is None or case.status != "open":
        return
    case.status = "closed"
    case.outcome = outcome.value
    case.closed_at = now
    if case.task_id is not None:
        task = session.get(Task, case.task_id)
        if task is not None and task.status == "open":
            task.status = "done"


def lost_outcome(
    session: Session, subscription: Subscription, case: RetentionCase | None
) -> RetentionOutcome:
    """A member lost: lost_contacted when staff logged a contact on the case, else
    lost_no_contact (spec B 3)."""
    query = select(RetentionContact.id).where(RetentionContact.subscription_id == subscription.id)
    if case is not None:
        query = select(RetentionContact.id).where(RetentionContact.case_id == case.id)
    contacted = session.scalar(query.limit(1)) is not None
    return RetentionOutcome.lost_contacted if contacted else RetentionOutcome.lost_no_contact


def open_notice_case(session: Session, subscription_id: uuid.UUID) -> RetentionCase | None:
    return session.scalar(
        select(RetentionCase)
        .where(
            RetentionCase.subscription_id == subscription_id,
            RetentionCase.kind == CaseKind.cancellation_notice.value,
            RetentionCase.status == "open",
        )
        .order_by(RetentionCase.opened_at.desc())
        .limit(1)
        .with_for_update()
    )


def _outcome(
    session: Session, subscription: Subscription, case: RetentionCase | None
) -> RetentionOutcome:
    """The outcome the ending recorded (the lifecycle's non-payment: lost_payment; a notice
    given clears it), else the ending's own, else the member lost as at period end."""
    if subscription.retention_outcome in OUTCOMES:
        return RetentionOutcome(subscription.retention_outcome)
    return _ending_outcome(session, subscription, case)


def _ending_outcome(
    session: Session, subscription: Subscription, case: RetentionCase | None
) -> RetentionOutcome:
    """The ending's own outcome, else the member lost as at period end. Without a notice the
    subscription's retention_outcome may be an older notice's (withdrawn: saved_*): not read."""
    if subscription.cancellation_reason in ENDING_OUTCOMES:
        return ENDING_OUTCOMES[subscription.cancellation_reason]
    return lost_outcome(session, subscription, case)


def _open_presale_cases(session: Session, subscription: Subscription) -> list[RetentionCase]:
    """The open presale charge-failure cases (one per declined episode) of a plan that has
    ended, locked after the plan's row, which the caller holds (the fixed order: subscription,
    then its case). Only a plan the collector marked so (`attempts.leave_unpaid`) has one: the
    others look no further. A live plan keeps its case (the escalation ends a notice left on
    one by an older release: its debt, and so the case, still runs)."""
    if subscription.retention_case_kind != PRESALE_CHARGE_FAILED or subscription.status in (
        *LIVE_STATUSES,
        SubscriptionStatus.paused,
    ):
        return []
    return _locked_presale_cases(session, subscription)


def _locked_presale_cases(session: Session, subscription: Subscription) -> list[RetentionCase]:
    """The plan's open presale charge-failure cases, oldest first, locked after its row."""
    return list(
        session.scalars(
            select(RetentionCase)
            .where(
                RetentionCase.subscription_id == subscription.id,
                RetentionCase.kind == PRESALE_CHARGE_FAILED,
                RetentionCase.status == "open",
            )
            .order_by(RetentionCase.opened_at, RetentionCase.id)
            .with_for_update()
        )
    )


def close_with_plan(
    session: Session,
    subscription: Subscription,
    case: RetentionCase | None,
    outcome: RetentionOutcome,
    *,
    now: datetime,
) -> int:
    """A plan has just ended (the caller holds its row): its notice's case (`case`) and its
    open presale charge-failure case close with the ending's outcome, in its transaction. Left
    open, the presale case of a cancelled plan stayed in the open cases and the owner's digest
    for good. The presale cases closed (an audit retention.case_closed each)."""
    close_case(session, case, outcome, now=now)
    return _close_presales(
        session, subscription, _open_presale_cases(session, subscription), outcome, now
    )


def close_paid_presale(session: Session, subscription: Subscription, *, now: datetime) -> int:
    """A presale's declined opening charge is paid: its debt restored, the plan granted its
    period (the caller holds its row; `attempts.grant_period`, which every payer reaches: the
    collector's retry, the member's pay-debt, the desk). The presale_charge_failed mark goes,
    so a later ordinary renewal decline is an ordinary debt (no second presale case, the
    member's own debt email), and the open case closes saved_member_withdrew, as a debt paid
    on a plan held again does: the member stays by their own payment (RetentionOutcome has no
    paid_*). The presale cases closed (an audit retention.case_closed each, reason debt_paid)."""
    if subscription.retention_case_kind != PRESALE_CHARGE_FAILED:
        return 0
    subscription.retention_case_kind = None
    presales = _locked_presale_cases(session, subscription)
    return _close_presales(session, subscription, presales, PAID_OUTCOME, now, reason=DEBT_PAID)


def _close_presales(
    session: Session,
    subscription: Subscription,
    presales: list[RetentionCase],
    outcome: RetentionOutcome,
    now: datetime,
    *,
    reason: str | None = None,
) -> int:
    for presale in presales:
        close_case(session, presale, outcome, now=now)
        emit(
            session,
            EventKind.audit,
            "retention.case_closed",
            at=now,
            aggregate_type="retention_case",
            aggregate_id=presale.id,
            organization_id=presale.organization_id,
            payload={
                "kind": presale.kind,
                "outcome": outcome.value,
                "reason": reason or subscription.cancellation_reason or subscription.status.value,
                "subscriptionId": str(subscription.id),
            },
        )
    return len(presales)


def end_overtaken_notice(
    session: Session,
    subscription: Subscription,
    *,
    now: datetime,
    case: RetentionCase | None = None,
) -> int:
    """End the notice of a plan that has just ended another way (the caller holds its row and
    has set its status and cancellation_reason). Its presale charge-failure case closes too,
    notice or none (`close_with_plan`). The audit events written: one for a notice, one for
    each presale case; 0 for the common ending."""
    if case is None:
        if not subscription.cancel_at_period_end:
            # No notice: the common ending (no presale case either) looks no further.
            presales = _open_presale_cases(session, subscription)
            if not presales:
                return 0
            outcome = _ending_outcome(session, subscription, presales[-1])
            return _close_presales(session, subscription, presales, outcome, now)
        case = open_notice_case(session, subscription.id)
    effective = subscription.cancellation_effective_at
    outcome = _outcome(session, subscription, case)
    subscription.cancel_at_period_end = False
    subscription.cancellation_effective_at = None
    subscription.retention_outcome = outcome.value
    subscription.updated_at = now
    closed = close_with_plan(session, subscription, case, outcome, now=now)
    emit(
        session,
        EventKind.audit,
        "subscription.notice_overtaken",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={
            "reason": subscription.cancellation_reason,
            "outcome": outcome.value,
            "noticeId": str(case.notice_id) if case is not None and case.notice_id else None,
            "caseId": str(case.id) if case is not None else None,
            "effectiveAt": effective.isoformat() if effective is not None else None,
            "userId": str(subscription.user_id),
        },
    )
    return 1 + closed


def notice_follows_paid_period(
    session: Session,
    subscription: Subscription,
    *,
    transaction_id: uuid.UUID,
    attempt_started: datetime,
    now: datetime,
) -> bool:
    """A renewal has just paid the period now current (the caller holds the plan's row): a
    notice already in effect, given while its charge was in flight (at or after the attempt
    `attempt_started`), read the period before it, over, and took effect at once. It takes
    effect at the end of the period paid instead, as a notice given a moment after the charge
    would have (ended at once, the member lost the month just paid, ceil(days) / 365 of it
    refunded). A notice given before the attempt keeps its date, passed or to come (staff chose
    it, the charge went out under it: the period-end sweep, which waited for the charge,
    settles it and prorates the refund from it). True when the notice moved."""
    effective = subscription.cancellation_effective_at
    end = subscription.current_period_end
    if (
        not subscription.cancel_at_period_end
        or effective is None
        or end is None
        or effective > now
        or effective >= end
    ):
        return False
    notice = session.scalar(
        select(CancellationNotice)
        .where(
            CancellationNotice.subscription_id == subscription.id,
            CancellationNotice.withdrawn_at.is_(None),
        )
        .order_by(CancellationNotice.given_at.desc())
        .limit(1)
    )
    if notice is None or notice.given_at < attempt_started:
        return False
    subscription.cancellation_effective_at = end
    subscription.updated_at = now
    notice.effective_at = end
    emit(
        session,
        EventKind.audit,
        "subscription.notice_moved",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=subscription.organization_id,
        payload={
            "reason": "renewal_paid",
            "from": effective.isoformat(),
            "to": end.isoformat(),
            "transactionId": str(transaction_id),
            "noticeId": str(notice.id),
        },
    )
    return True
