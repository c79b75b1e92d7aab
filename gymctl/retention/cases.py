"""Retention cases: what staff record about them (spec B 2.1, 3, 7).

A logged contact acknowledges the case and later decides the period-end outcome
(lost_contacted vs lost_no_contact). A saved_* outcome on a notice keeps the member: it
withdraws the notice as staff's act, so it is refused on externally billed organizations too.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.db import organization_row
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import RetentionCase, RetentionContact
from gymctl.models.retention import SAVED, CaseKind, RetentionOutcome
from gymctl.retention import codes
from gymctl.retention.notices import (
    refuse_if_externally_billed,
    subscription_for_update,
    withdraw_notice,
)
from gymctl.retention.overtaken import close_case

CHANNELS = ("phone", "email", "message", "in_person")

# How far ahead of ours a staff device's clock may be: a contact logged "now" on it is ours.
CLOCK_SKEW = timedelta(minutes=2)


def case_of(
    session: Session, organization_id: uuid.UUID, case_id: uuid.UUID, *, lock: bool = False
) -> RetentionCase:
    case = organization_row(session, RetentionCase, organization_id, case_id, lock=lock)
    if case is None:
        raise not_found(codes.RETENTION_CASE_NOT_FOUND, "no such retention case")
    return case


def open_cases(session: Session, organization_id: uuid.UUID) -> list[RetentionCase]:
    return list(
        session.scalars(
            select(RetentionCase)
            .where(RetentionCase.organization_id == organization_id, RetentionCase.status == "open")
            .order_by(RetentionCase.opened_at, RetentionCase.id)
        )
    )


def contacts_of(session: Session, case_id: uuid.UUID) -> list[RetentionContact]:
    return list(
        session.scalars(
            select(RetentionContact)
            .where(RetentionContact.case_id == case_id)
            .order_by(RetentionContact.contacted_at, RetentionContact.id)
        )
    )


def _open(case: RetentionCase) -> None:
    if case.status != "open":
        raise conflict(codes.RETENTION_CASE_CLOSED, "this case is closed")


def acknowledge(
    session: Session, organization_id: uuid.UUID, case_id: uuid.UUID, *, actor_user_id, now
) -> RetentionCase:
    """Staff take the case: it is theirs (the case owner) and no longer unacknowledged."""
    case = case_of(session, organization_id, case_id, lock=True)
    _open(case)
    if case.acknowledged_at is None:
        case.acknowledged_at = now
    case.owner_user_id = case.owner_user_id or actor_user_id
    session.flush()
    return case


def log_contact(
    session: Session,
    organization_id: uuid.UUID,
    case_id: uuid.UUID,
    *,
    channel: str,
    note: str | None,
    contacted_at: datetime | None,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> RetentionContact:
    if channel not in CHANNELS:
        raise unprocessable(codes.CONTACT_CHANNEL_INVALID, "unknown channel")
    contacted_at = contacted_at or now
    if contacted_at > now + CLOCK_SKEW:
        raise unprocessable(codes.CONTACT_IN_FUTURE, "a contact is logged after it happened")
    contacted_at = min(contacted_at, now)  # a device's clock a little ahead: it is now
    case = case_of(session, organization_id, case_id, lock=True)
    _open(case)
    if contacted_at < case.opened_at:
        # A contact from before the case is not about it: taken, it acknowledged the case,
        # stopped the ending-soon escalation and made the outcome lost_contacted.
        raise unprocessable(
            codes.CONTACT_BEFORE_CASE_OPENED,
            "a contact is logged about a case that was already open",
            openedAt=case.opened_at.isoformat(),
        )
    contact = RetentionContact(
        id=ids.new_id(),
        case_id=case.id,
        organization_id=organization_id,
        subscription_id=case.subscription_id,
        staff_user_id=actor_user_id,
        channel=channel,
        note=note,
        contacted_at=contacted_at,
        created_at=now,
    )
    session.add(contact)
    case.acknowledged_at = case.acknowledged_at or now
    case.last_contact_at = max(filter(None, (case.last_contact_at, contacted_at)))
    case.owner_user_id = case.owner_user_id or actor_user_id
    emit(
        session,
        EventKind.audit,
        "retention.contact_logged",
        at=now,
        aggregate_type="retention_case",
        aggregate_id=case.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"channel": channel, "contactedAt": contacted_at.isoformat()},
    )
    session.flush()
    return contact


def record_outcome(
    session: Session,
    organization_id: uuid.UUID,
    case_id: uuid.UUID,
    *,
    outcome: RetentionOutcome,
    actor_user_id: uuid.UUID,
    locale: str | None,
    now: datetime,
) -> RetentionCase:
    """Staff record a saved_* outcome; on a presale case also lost_contacted or
    lost_no_contact (a notice's lost_* is set by the sweep that ends the plan).

    The case is read again under its row lock, taken after its subscription's (the fixed
    order: the members waiting in its lines, membership, subscription, then the case, as the
    notice's writers take them; the member's own first, then a waiting one's, deadlocked with a
    removal taking them by id): read
    unlocked, two outcomes at once both closed it, the second overwriting the first, and one
    read before the member withdrew and gave notice again withdrew the new notice."""
    case = case_of(session, organization_id, case_id)
    notice = case.kind == CaseKind.cancellation_notice.value
    if notice:  # as the withdrawal locks it: the members waiting beside it first
        subscription_for_update(session, organization_id, case.subscription_id, may_end_at=now)
    case = case_of(session, organization_id, case_id, lock=True)
    allowed = set(SAVED) - {RetentionOutcome.saved_member_withdrew}
    if not notice:
        allowed |= {RetentionOutcome.lost_contacted, RetentionOutcome.lost_no_contact}
    if outcome not in allowed:
        raise unprocessable(
            codes.RETENTION_OUTCOME_INVALID,
            "staff record a saved_* outcome; a notice's lost_* is set when the plan ends",
            allowed=sorted(o.value for o in allowed),
        )
    _open(case)
    if outcome in SAVED:
        refuse_if_externally_billed(session, organization_id, locale)
    if notice:
        withdraw_notice(
            session,
            organization_id,
            case.subscription_id,
            actor_user_id=actor_user_id,
            by_member=False,
            locale=locale,
            now=now,
            outcome=outcome,
        )
        session.refresh(case)
    else:
        close_case(session, case, outcome, now=now)
    emit(
        session,
        EventKind.audit,
        "retention.outcome_recorded",
        at=now,
        aggregate_type="retention_case",
        aggregate_id=case.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"outcome": outcome.value, "kind": case.kind},
    )
    session.flush()
    return case
