"""Giving and withdrawing a cancellation notice (spec B 2.1, 2.3, 3, 7).

A notice sets cancel_at_period_end and the effective date (the period end unless staff choose
another, never after the own end of a plan that ends by itself: `own_end`) on any live status,
paused included, and opens a retention case with an urgent cancellation_review task due within
the 48-hour SLA. Withdrawing clears the notice; an externally billed organization cannot
withdraw here (its standing order lives elsewhere).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.billing.accounts import active_config
from gymctl.billing.attempts import lock_subscription
from gymctl.bookings import book
from gymctl.bridge import mirror
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import CancellationNotice, RetentionCase, Subscription
from gymctl.models.billing import PlanType
from gymctl.models.retention import CaseKind, RetentionOutcome
from gymctl.retention import codes
from gymctl.retention.copy import message
from gymctl.retention.overtaken import close_case
from gymctl.retention.plan_change import NOTICE_STATUSES
from gymctl.tasks import file_task

RETENTION_SLA = timedelta(hours=48)  # spec B 8
MAX_NOTICE_AHEAD = timedelta(days=5 * 366)
EXTERNAL = "external"
INITIATORS = ("member", "staff")
FIXED_VALIDITY = (PlanType.pack, PlanType.drop_in, PlanType.gift, PlanType.course)
# The common reasons (spec B 2.3 leaves the values to us); free text covers the rest.
REASON_CODES = (
    "price",
    "moving_away",
    "schedule",
    "injury_or_health",
    "not_using",
    "switching_gym",
    "service_quality",
    "financial",
    "other",
)


def externally_billed(session: Session, organization_id: uuid.UUID) -> bool:
    """The organization collects its members' money outside the platform (its active payment
    provider is `external`)."""
    config = active_config(session, organization_id)
    return config is not None and config.provider == EXTERNAL


def refuse_if_externally_billed(
    session: Session, organization_id: uuid.UUID, locale: str | None
) -> None:
    if externally_billed(session, organization_id):
        raise conflict(codes.EXTERNALLY_BILLED, message("externally_billed", locale))


def subscription_for_update(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    may_end_at: datetime | None = None,
) -> Subscription:
    """The subscription locked in billing's order (`lock_subscription`; `may_end_at` for a path
    that gives up or takes seats), 404 when it is not this gym's."""
    subscription = lock_subscription(session, subscription_id, may_end_at=may_end_at)
    if (
        subscription is None
        or subscription.organization_id != organization_id
        or subscription.deleted_at is not None
    ):
        raise not_found(codes.SUBSCRIPTION_NOT_FOUND, "no such subscription")
    return subscription


def open_notice(session: Session, subscription_id: uuid.UUID) -> CancellationNotice | None:
    return session.scalar(
        select(CancellationNotice)
        .where(
            CancellationNotice.subscription_id == subscription_id,
            CancellationNotice.withdrawn_at.is_(None),
        )
        .order_by(CancellationNotice.given_at.desc())
    )


def case_of_notice(session: Session, notice: CancellationNotice | None) -> RetentionCase | None:
    if notice is None:
        return None
    return session.scalar(select(RetentionCase).where(RetentionCase.notice_id == notice.id))


def own_end(subscription: Subscription) -> datetime | None:
    """When a plan of fixed validity (a pack, a drop-in, a gift, a course) ends by itself: the
    lifecycle ends it then (expired, gift_ended), so a notice cannot end it later. Other plans
    renew or wait for a card or a payment: their own end is not known when notice is given."""
    if subscription.plan_type in FIXED_VALIDITY:
        return subscription.current_period_end
    return None


def give_notice(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    initiator: str,
    actor_user_id: uuid.UUID,
    reason_code: str | None = None,
    reason_text: str | None = None,
    effective_at: datetime | None = None,
    locale: str,
    now: datetime,
) -> tuple[Subscription, RetentionCase]:
    """Staff must name a reason; for a member every input is optional."""
    if initiator not in INITIATORS:
        raise unprocessable(codes.NOTICE_INITIATOR_INVALID, "initiator is member or staff")
    if reason_code is not None and reason_code not in REASON_CODES:
        raise unprocessable(
            codes.NOTICE_REASON_INVALID, "unknown reason code", reasonCodes=REASON_CODES
        )
    if initiator == "staff" and reason_code is None:
        raise unprocessable(codes.NOTICE_REASON_REQUIRED, "staff record the member's reason")
    subscription = subscription_for_update(session, organization_id, subscription_id)
    if subscription.status not in NOTICE_STATUSES:
        raise conflict(
            codes.NOTICE_NOT_ALLOWED,
            "notice is given on a running plan (a presale is withdrawn instead)",
            subscriptionStatus=subscription.status.value,
        )
    if subscription.cancel_at_period_end:
        raise conflict(codes.NOTICE_ALREADY_GIVEN, "notice was already given")
    if effective_at is None or initiator == "member":
        # The end of the paid period; a period already over (a plan in debt, whose renewal
        # was declined) ends now: the member owes its debt, not another period.
        effective_at = max(subscription.current_period_end or now, now)
    if effective_at < now:
        raise unprocessable(codes.NOTICE_EFFECTIVE_IN_PAST, "the effective date is past")
    if effective_at > now + MAX_NOTICE_AHEAD:
        raise unprocessable(codes.NOTICE_EFFECTIVE_TOO_FAR, "the effective date is within 5 years")
    ends = own_end(subscription)
    if ends is not None and effective_at > max(ends, now):
        raise unprocessable(
            codes.NOTICE_EFFECTIVE_TOO_FAR,
            "a pack, drop-in, gift or course ends by itself at its validity's end: a notice takes "
            "effect by then",
            endsAt=ends.isoformat(),
        )
    subscription.cancel_at_period_end = True
    subscription.cancellation_effective_at = effective_at
    subscription.cancellation_reason = reason_code
    subscription.retention_outcome = None
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    notice = CancellationNotice(
        id=ids.new_id(),
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        initiator=initiator,
        given_by_user_id=actor_user_id,
        reason_code=reason_code,
        reason_text=reason_text,
        locale=locale,
        effective_at=effective_at,
        given_at=now,
    )
    session.add(notice)
    session.flush()
    case = RetentionCase(
        id=ids.new_id(),
        organization_id=organization_id,
        subscription_id=subscription.id,
        user_id=subscription.user_id,
        kind=CaseKind.cancellation_notice.value,
        episode=str(notice.id),
        notice_id=notice.id,
        status="open",
        owner_user_id=actor_user_id if initiator == "staff" else None,
        locale=locale,
        opened_at=now,
        sla_due_at=now + RETENTION_SLA,
    )
    session.add(case)
    session.flush()
    task = file_task(
        session,
        organization_id=organization_id,
        kind="cancellation_review",
        subject_type="retention_case",
        subject_id=str(case.id),
        title="Cancellation notice: contact the member within 48 hours",
        priority="urgent",
        due_at=case.sla_due_at,
        now=now,
        data={"subscriptionId": str(subscription.id), "reasonCode": reason_code},
        linked_user_id=subscription.user_id,
    )
    task.assignee_id = case.owner_user_id
    case.task_id = task.id
    emit(
        session,
        EventKind.audit,
        "subscription.notice_given",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={
            "initiator": initiator,
            "reasonCode": reason_code,
            "effectiveAt": effective_at.isoformat(),
            "caseId": str(case.id),
            "status": subscription.status.value,
        },
    )
    session.flush()
    return subscription, case


def withdraw_notice(
    session: Session,
    organization_id: uuid.UUID,
    subscription_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID,
    by_member: bool,
    locale: str | None,
    now: datetime,
    outcome: RetentionOutcome | None = None,
) -> Subscription:
    """Clear the notice (paused plans too). The member's own withdrawal is recorded as theirs
    (saved_member_withdrew); staff's as saved_staff unless they name another saved_* outcome.
    The plan covers the classes after the notice's date again: the lines the member waits in
    for them run again (a seat left free while the notice passed them over is theirs)."""
    subscription = subscription_for_update(
        session, organization_id, subscription_id, may_end_at=now
    )
    if not subscription.cancel_at_period_end or subscription.status not in NOTICE_STATUSES:
        raise conflict(codes.NOTICE_NOT_GIVEN, "there is no notice to withdraw")
    refuse_if_externally_billed(session, organization_id, locale)
    if by_member:
        outcome = RetentionOutcome.saved_member_withdrew
    outcome = outcome or RetentionOutcome.saved_staff
    subscription.cancel_at_period_end = False
    subscription.cancellation_effective_at = None
    subscription.cancellation_reason = None
    subscription.retention_outcome = outcome.value
    subscription.updated_at = now
    mirror.subscription_changed(session, subscription, now=now)
    notice = open_notice(session, subscription.id)
    if notice is not None:
        notice.withdrawn_at = now
        notice.withdrawn_by_user_id = actor_user_id
        notice.withdrawn_by_member = by_member
    close_case(session, case_of_notice(session, notice), outcome, now=now)
    emit(
        session,
        EventKind.audit,
        "subscription.notice_withdrawn",
        at=now,
        aggregate_type="subscription",
        aggregate_id=subscription.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"byMember": by_member, "outcome": outcome.value},
    )
    session.flush()
    book.promote_where_waiting(session, organization_id, subscription.membership_id, now=now)
    return subscription
