"""Staff tasks (spec B 2.3): one upsert for every area that files one, the staff's list of
the open ones, and marking one done by hand.

A task is keyed by (organization, kind, subject): filing it again refreshes the open task
instead of adding a second, so a repeated failure never floods the staff's list.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import case, select
from sqlalchemy.orm import Session

from gymctl import codes, ids
from gymctl.db import organization_row, upsert_for
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Task

# Done only when the ledger records what they ask (retention.refund_owed): marked done by hand,
# the refund a member is owed would drop off the list unpaid.
CLOSED_BY_THE_LEDGER = ("manual_refund",)
BY_HAND = "staff"  # task.done's `because` when staff mark a task done


def file_task(
    session: Session,
    *,
    organization_id: uuid.UUID,
    kind: str,
    subject_type: str,
    subject_id: str,
    title: str,
    priority: str,
    due_at: datetime | None,
    now: datetime,
    detail: str | None = None,
    data: dict[str, Any] | None = None,
    linked_user_id: uuid.UUID | None = None,
) -> Task:
    """Open (or reopen and refresh) the task of this subject; returns the row."""
    values = dict(
        id=ids.new_id(),
        organization_id=organization_id,
        kind=kind,
        priority=priority,
        status="open",
        source="auto",
        title=title[:300],
        detail=detail,
        subject_type=subject_type,
        subject_id=subject_id,
        due_at=due_at,
        data=data or {},
        linked_user_id=linked_user_id,
        created_at=now,
    )
    insert = upsert_for(session)
    statement = insert(Task).values(**values)
    session.execute(
        statement.on_conflict_do_update(
            index_elements=["organization_id", "kind", "subject_type", "subject_id"],
            # The latest filing says what is asked now (a payment's follow-up turns from
            # "reconcile it" to "refund one of two" once it settles).
            set_={
                "status": "open",
                "priority": priority,
                "due_at": due_at,
                "detail": detail,
                "title": title[:300],
                "data": data or {},
            },
        )
    )
    session.flush()
    return session.scalar(
        select(Task)
        .where(
            Task.organization_id == organization_id,
            Task.kind == kind,
            Task.subject_type == subject_type,
            Task.subject_id == subject_id,
        )
        .execution_options(populate_existing=True)
    )


def close_task(
    session: Session,
    *,
    organization_id: uuid.UUID,
    kind: str,
    subject_type: str,
    subject_id: str,
    now: datetime,
    because: str,
    reason: str | None = None,
    actor_user_id: uuid.UUID | None = None,
) -> Task | None:
    """Mark the subject's open task done: what it asked is resolved. With `reason`, only the
    task filed for that reason: a later filing on the same subject asks something else (a
    payment's "reconcile it" turned "refund one of two") and stays open. Audited (task.done,
    on the task, saying `because`); the task closed, or None when none was open."""
    task = session.scalar(
        select(Task)
        .where(
            Task.organization_id == organization_id,
            Task.kind == kind,
            Task.subject_type == subject_type,
            Task.subject_id == subject_id,
            Task.status == "open",
            Task.deleted_at.is_(None),
        )
        .with_for_update()
    )
    if task is None or (reason is not None and (task.data or {}).get("reason") != reason):
        return None
    _done(session, task, now=now, because=because, actor_user_id=actor_user_id)
    return task


def _done(
    session: Session, task: Task, *, now: datetime, because: str, actor_user_id: uuid.UUID | None
) -> None:
    task.status = "done"
    task.data = {**(task.data or {}), "doneAt": now.isoformat(), "doneBecause": because}
    emit(
        session,
        EventKind.audit,
        "task.done",
        at=now,
        aggregate_type="task",
        aggregate_id=task.id,
        organization_id=task.organization_id,
        actor_user_id=actor_user_id,
        payload={
            "kind": task.kind,
            "subjectType": task.subject_type,
            "subjectId": task.subject_id,
            "because": because,
        },
    )


def open_tasks(session: Session, organization_id: uuid.UUID) -> list[Task]:
    """The organization's open tasks, the most pressing first: urgent, then high, then the
    rest; within each, the earliest due (none last), then the oldest filed."""
    rank = case((Task.priority == "urgent", 0), (Task.priority == "high", 1), else_=2)
    return list(
        session.scalars(
            select(Task)
            .where(
                Task.organization_id == organization_id,
                Task.status == "open",
                Task.deleted_at.is_(None),
            )
            .order_by(rank, Task.due_at.is_(None), Task.due_at, Task.created_at, Task.id)
        )
    )


def mark_done(
    session: Session,
    organization_id: uuid.UUID,
    task_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> tuple[Task, bool]:
    """Staff mark an open task done (audited task.done, because "staff"): the task and
    whether it was done already (then nothing is written again). Refusals: 404 task_not_found
    (not this organization's, or deleted); 409 task_closes_itself (a manual_refund task is
    done once the ledger records the refund: the refund route or a cash credit note)."""
    task = organization_row(session, Task, organization_id, task_id, lock=True)
    if task is None or task.deleted_at is not None:
        raise not_found(codes.TASK_NOT_FOUND, "no such task in this organization")
    if task.status == "done":
        return task, True
    if task.kind in CLOSED_BY_THE_LEDGER:
        raise conflict(
            codes.TASK_CLOSES_ITSELF,
            "this task is done once the ledger records the refund (refund it, or file a "
            "credit note with cash returned)",
        )
    _done(session, task, now=now, because=BY_HAND, actor_user_id=actor_user_id)
    session.flush()
    return task, False


def task_json(task: Task) -> dict[str, Any]:
    return {
        "id": str(task.id),
        "kind": task.kind,
        "priority": task.priority,
        "status": task.status,
        "title": task.title,
        "detail": task.detail,
        "subjectType": task.subject_type,
        "subjectId": task.subject_id,
        "dueAt": task.due_at.isoformat() if task.due_at else None,
        "assigneeId": str(task.assignee_id) if task.assignee_id else None,
        "linkedUserId": str(task.linked_user_id) if task.linked_user_id else None,
        "createdAt": task.created_at.isoformat(),
        "data": task.data or {},
    }
