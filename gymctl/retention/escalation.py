"""Hourly escalation of open notice cases (spec B 8): two stages, each reached once.

- unacknowledged: nobody acknowledged the case within the 48-hour SLA;
- ending_soon: the notice takes effect within 7 days and nobody has contacted the member.

Escalating raises the review task (urgent, due now) and writes retention.case_escalated; the
stage's timestamp on the case makes a second run escalate nothing new. A case whose plan ended
another way is closed as its ending closes it (`overtaken.end_overtaken_notice`). A run takes
only cases with something due (at most BATCH): the open cases before a due one, escalated or
quiet, never hold it back.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import RetentionCase, Subscription, Task
from gymctl.models.retention import CaseKind
from gymctl.retention.overtaken import end_overtaken_notice
from gymctl.retention.plan_change import NOTICE_STATUSES

ENDING_SOON = timedelta(days=7)
BATCH = 1000


def _escalate(session: Session, case: RetentionCase, stage: str, *, now: datetime) -> None:
    if stage == "unacknowledged":
        case.escalated_unacknowledged_at = now
    else:
        case.escalated_ending_soon_at = now
    task = session.get(Task, case.task_id) if case.task_id else None
    if task is not None:
        task.status = "open"
        task.priority = "urgent"
        task.due_at = now
        task.data = {**task.data, "escalated": [*task.data.get("escalated", []), stage]}
    emit(
        session,
        EventKind.domain,
        "retention.case_escalated",
        at=now,
        aggregate_type="retention_case",
        aggregate_id=case.id,
        organization_id=case.organization_id,
        payload={"stage": stage, "subscriptionId": str(case.subscription_id)},
    )


def _open_notice_cases() -> list[Any]:
    return [
        RetentionCase.status == "open",
        RetentionCase.kind == CaseKind.cancellation_notice.value,
    ]


def _due(now: datetime) -> Any:
    """A case with something left to do at `now` (the checks below, in SQL): the batch takes
    only these, so cases escalated already or quiet for months never fill it."""
    return or_(
        Subscription.status.not_in(NOTICE_STATUSES),
        Subscription.cancel_at_period_end.is_not(True),
        and_(
            RetentionCase.escalated_unacknowledged_at.is_(None),
            RetentionCase.acknowledged_at.is_(None),
            RetentionCase.sla_due_at <= now,
        ),
        and_(
            RetentionCase.escalated_ending_soon_at.is_(None),
            RetentionCase.last_contact_at.is_(None),
            Subscription.cancellation_effective_at <= now + ENDING_SOON,
        ),
    )


def escalate(session: Session, *, now: datetime, limit: int = BATCH) -> dict[str, int]:
    """{checked, escalated}: open notice cases looked at, escalations written this run."""
    checked = session.scalar(
        select(func.count()).select_from(RetentionCase).where(*_open_notice_cases())
    )
    rows = session.execute(
        select(RetentionCase, Subscription.cancellation_effective_at, Subscription)
        .join(Subscription, Subscription.id == RetentionCase.subscription_id)
        .where(*_open_notice_cases(), _due(now))
        .order_by(RetentionCase.opened_at, RetentionCase.id)
        .limit(limit)
        .with_for_update(of=RetentionCase, skip_locked=True)
    ).all()
    escalated = 0
    for case, effective_at, subscription in rows:
        if subscription.status not in NOTICE_STATUSES or not subscription.cancel_at_period_end:
            # Over: each ending closes its notice's case (gymctl.retention.overtaken); one an
            # older release left open on an ended plan closes here the same way.
            end_overtaken_notice(session, subscription, case=case, now=now)
            continue
        if (
            case.escalated_unacknowledged_at is None
            and case.acknowledged_at is None
            and case.sla_due_at is not None
            and case.sla_due_at <= now
        ):
            _escalate(session, case, "unacknowledged", now=now)
            escalated += 1
        if (
            case.escalated_ending_soon_at is None
            and case.last_contact_at is None
            and effective_at is not None
            and effective_at <= now + ENDING_SOON
        ):
            _escalate(session, case, "ending_soon", now=now)
            escalated += 1
    session.flush()
    return {"checked": checked, "escalated": escalated}
