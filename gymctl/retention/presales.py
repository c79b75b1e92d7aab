"""Presale withdrawal and presale charge-failure cases (spec B 3, 6).

A presale (scheduled, before its opening-day charge) is withdrawn by the owner or the member:
it is cancelled, gives its plan place back, and opens a presale_withdrawal case. A presale whose
opening-day charge was declined (the collector marks it presale_charge_failed) gets a case
too, opened by the presale cases pass (every 5 minutes). Both cases email the case owner,
falling back to the organization's active owner; the email is retried until it is handed over
(notified_at), unless it can never be sent (no address, refused for good): that is given up.
"""

from __future__ import annotations

import logging
import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gymctl import ids
from gymctl.billing.attempts import emit_cancelled
from gymctl.billing.plans import release_purchase_slot
from gymctl.db import each_committed, locked_row, release_for_outside_call
from gymctl.errors import conflict
from gymctl.events import EventKind, emit
from gymctl.models import AuditLog, Organization, Plan, RetentionCase, Subscription, User
from gymctl.models.billing import SubscriptionStatus
from gymctl.models.retention import CaseKind
from gymctl.providers.mail import Mailer, MailError
from gymctl.retention import codes, emails
from gymctl.retention.copy import message
from gymctl.retention.notices import subscription_for_update
from gymctl.retention.plan_change import charge_in_flight

log = logging.getLogger("gymctl.retention")
WITHDRAWAL = "presale_withdrawal"
WITHDRAWN = "subscription.presale_withdrawn"  # the audit of a withdrawal: who, which case
BATCH = 500


def withdraw_presale(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    by_member: bool,
    locale: str,
    now: datetime,
) -> tuple[Subscription, RetentionCase]:
    subscription = subscription_for_update(session, organization_id, subscription_id)
    if subscription.status != SubscriptionStatus.scheduled:
        raise conflict(
            codes.PRESALE_NOT_WITHDRAWABLE,
            "only a presale not yet charged can be withdrawn",
            subscriptionStatus=subscription.status.value,
        )
    if charge_in_flight(session, subscription, now):
        # Cancelling under a pending opening-day charge would let it settle on a cancelled plan.
        code = codes.PRESALE_CHARGE_IN_FLIGHT
        raise conflict(code, message(code, locale))
    subscription.status = SubscriptionStatus.cancelled
    subscription.cancellation_reason = WITHDRAWAL
    subscription.retention_case_kind = CaseKind.presale_withdrawal.value
    subscription.cancelled_at = now
    subscription.ended_at = now
    subscription.next_charge_date = None
    subscription.retry_at = None
    subscription.updated_at = now
    release_purchase_slot(session, subscription.plan_id)
    case = RetentionCase(
        id=ids.new_id(),
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        kind=CaseKind.presale_withdrawal.value,
        episode=WITHDRAWAL,
        status="open",
        owner_user_id=None if by_member else actor_user_id,
        locale=locale,
        opened_at=now,
    )
    session.add(case)
    emit(
        session,
        EventKind.audit,
        WITHDRAWN,
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"byMember": by_member, "caseId": str(case.id)},
    )
    emit_cancelled(session, subscription, reason=WITHDRAWAL, now=now)
    session.flush()
    return subscription, case


def _without_case() -> list[Any]:
    """Declined presales in debt whose episode has no case yet."""
    already = (
        select(RetentionCase.id)
        .where(
            RetentionCase.subscription_id == Subscription.id,
            RetentionCase.kind == CaseKind.presale_charge_failed.value,
            RetentionCase.opened_at >= Subscription.debt_since,
        )
        .exists()
    )
    return [
        Subscription.retention_case_kind == CaseKind.presale_charge_failed.value,
        Subscription.status == SubscriptionStatus.debt,
        Subscription.debt_since.is_not(None),
        Subscription.deleted_at.is_(None),
        ~already,
    ]


def _not_notified() -> list[Any]:
    return [RetentionCase.kind.in_(PRESALE_KINDS), RetentionCase.notified_at.is_(None)]


def open_charge_failed_cases(session: Session, *, now: datetime, limit: int = BATCH) -> int:
    """A case per declined presale episode (keyed by the decline's day 0): running again
    opens nothing new."""
    rows = session.scalars(
        select(Subscription)
        .where(*_without_case())
        .order_by(Subscription.debt_since, Subscription.id)
        .limit(limit)
    ).all()
    for subscription in rows:
        # The episode key (the decline's day 0) keeps two racing passes to one case.
        session.add(
            RetentionCase(
                id=ids.new_id(),
                organization_id=subscription.organization_id,
                subscription_id=subscription.id,
                user_id=subscription.user_id,
                kind=CaseKind.presale_charge_failed.value,
                episode=subscription.debt_since.isoformat(),
                status="open",
                locale="en",
                # Never before its episode began: a pass whose `now` is older than a decline
                # committed while it ran (a collector's charge is stamped when it began, not
                # at its pass's tick) would not see its own case (`_without_case` reads
                # opened_at >= debt_since) and open it again, against the episode key.
                opened_at=max(now, subscription.debt_since),
            )
        )
    opened = len(rows)
    session.flush()
    return opened


PRESALE_KINDS = (CaseKind.presale_withdrawal.value, CaseKind.presale_charge_failed.value)


def notify_case(session: Session, mailer: Mailer, case: RetentionCase, *, now: datetime) -> bool:
    """Email the case owner (else the active owner); True once handed over. One that can
    never be sent (no address, refused for good) is given up; a temporary failure is retried."""
    if case.notified_at is not None:
        return True
    withdrawal = case.kind == CaseKind.presale_withdrawal.value
    name = "presale_withdrawn" if withdrawal else "presale_charge_failed"
    subscription = session.get(Subscription, case.subscription_id)
    if not withdrawal and subscription.debt_since is None:
        # Paid before its email went out (`overtaken.close_paid_presale` closed the case): "the
        # opening charge failed" would ask the owner to chase a debt that is gone. A case closed
        # with the debt still owed (the plan cancelled for non-payment) is still told.
        _give_up(session, case, name, "debt_paid", now=now)
        return False
    address = emails.case_owner_address(session, case.organization_id, case.owner_user_id)
    if address is None:
        _give_up(session, case, name, "no_address", now=now)
        return False
    plan = session.get(Plan, subscription.plan_id)
    member = session.get(User, case.user_id)
    gym = session.get(Organization, case.organization_id)
    # Days in the gym's calendar, of the withdrawal or the decline (not of this send: a
    # refused email is sent again later).
    context = {
        "gym": gym.name,
        "member": emails.shown_name(session, case.organization_id, member),
        "plan": plan.name,
        "on": emails.local_day(session, case.organization_id, case.opened_at),
    }
    if withdrawal:
        context["by"] = "by the member" if _withdrawn_by_member(session, case) else "by staff"
    else:
        amount = subscription.debt_amount_in_cents or subscription.price_in_cents
        context["amount"] = emails.money(amount, subscription.currency)
        declined = subscription.debt_since or case.opened_at
        context["on"] = emails.local_day(session, case.organization_id, declined)
    case_id, locale = case.id, case.locale  # the release expires the rows read
    release_for_outside_call(session)  # only read: no write lock while the mail server answers
    try:
        emails.send(mailer, to=address, name=name, locale=locale, tag=name, **context)
    except MailError as error:
        case = locked_row(session, RetentionCase, case_id)
        if error.permanent and case.notified_at is None:
            _give_up(session, case, name, str(error), now=now)
        elif not error.permanent:
            log.warning("presale case email not sent, retried next pass: %s", error)
        return False
    case = locked_row(session, RetentionCase, case_id)
    if case.notified_at is None:
        case.notified_at = now
    return True


def _give_up(
    session: Session, case: RetentionCase, name: str, reason: str, *, now: datetime
) -> None:
    """notified_at ends the retries; the audit says it was given up, not sent."""
    case.notified_at = now
    emails.give_up(
        session,
        email=name,
        reason=reason,
        aggregate_type="retention_case",
        aggregate_id=case.id,
        organization_id=case.organization_id,
        now=now,
    )


def _withdrawn_by_member(session: Session, case: RetentionCase) -> bool:
    """Who withdrew, as the withdrawal recorded it (its audit row): the case owner, which
    the member's withdrawal left empty, is set by whoever of staff takes the case later."""
    withdrawals = session.scalars(
        select(AuditLog.data).where(
            AuditLog.action == WITHDRAWN,
            AuditLog.target_type == "subscription",
            AuditLog.target_id == str(case.subscription_id),
        )
    )
    return any(data.get("caseId") == str(case.id) and data["byMember"] for data in withdrawals)


def notify_withdrawal(
    session: Session, mailer: Mailer, case_id: uuid.UUID, *, now: datetime
) -> None:
    """A withdrawal's email, sent once the withdrawal is committed (its subscription and
    plan rows are then not locked through the mail server's round trip). The case row is
    locked and read fresh first; one the presale cases pass holds is the pass's to send (the
    two never both send it). Not handed over, or the database failing now: the withdrawal
    stands and the pass tries again."""
    try:
        case = session.scalar(
            select(RetentionCase)
            .where(RetentionCase.id == case_id)
            .with_for_update(skip_locked=True)
            .execution_options(populate_existing=True)
        )
        if case is not None:
            notify_case(session, mailer, case, now=now)
            session.commit()
    except SQLAlchemyError:
        session.rollback()
        log.warning("presale withdrawal email deferred to the presale cases pass", exc_info=True)


def notify_pending(
    factory: sessionmaker[Session], mailer: Mailer, *, now: datetime, limit: int = BATCH
) -> int:
    """Email each presale case not yet handed over, in a transaction of its own: a case's row
    is locked for its own email only, so staff working the cases (acknowledge, contact) wait
    on none of the others while a pass sends hundreds; a case another pass holds is skipped."""
    with factory() as session:
        waiting = session.scalars(
            select(RetentionCase.id)
            .where(*_not_notified())
            .order_by(RetentionCase.opened_at, RetentionCase.id)
            .limit(limit)
        ).all()

    def notify(session: Session, case_id: uuid.UUID) -> str:
        case = session.scalar(
            select(RetentionCase)
            .where(RetentionCase.id == case_id, *_not_notified())
            .with_for_update(skip_locked=True)
        )
        if case is None:  # sent since, or another pass is sending it
            return "skipped"
        return "sent" if notify_case(session, mailer, case, now=now) else "unsent"

    # A case whose email fails unexpectedly is logged and left for the next pass: it is the
    # oldest, so raising here stopped every pass at it and no case behind it was ever sent.
    counts = {"sent": 0, "unsent": 0, "skipped": 0, "failed": 0}
    return each_committed(factory, waiting, notify, counts, what="presale case email of case")[
        "sent"
    ]


# cases_waiting's statements, built once (the forecast asks after most ticks).
_WITHOUT_CASE = select(select(Subscription.id).where(*_without_case()).exists())
_NOT_NOTIFIED = select(select(RetentionCase.id).where(*_not_notified()).exists())


def cases_waiting(session: Session) -> bool:
    """Whether the presale cases pass has a case to open or to email. The pass reads no clock in
    choosing them: one that found nothing finds nothing again until a row changes."""
    return bool(session.scalar(_WITHOUT_CASE) or session.scalar(_NOT_NOTIFIED))


def presale_cases_pass(
    factory: sessionmaker[Session], mailer: Mailer, *, now: datetime
) -> dict[str, int]:
    """The pass: open charge-failure cases (committed), then email every presale case not yet
    handed over, each in its own transaction."""
    with factory() as session:
        opened = open_charge_failed_cases(session, now=now)
        session.commit()
    return {"opened": opened, "notified": notify_pending(factory, mailer, now=now)}
