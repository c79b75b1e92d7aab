"""Staff tasks (spec B 2.3): one upsert for every area that files one.

A task is keyed by (organization, kind, subject): filing it again refreshes the open task
instead of adding a second, so a repeated failure never floods the staff's list.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.db import upsert_for
from gymctl.events import EventKind, emit
from gymctl.models import Task


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
    task.status = "done"
    task.data = {**(task.data or {}), "doneAt": now.isoformat(), "doneBecause": because}
    emit(
        session,
        EventKind.audit,
        "task.done",
        at=now,
        aggregate_type="task",
        aggregate_id=task.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={
            "kind": kind,
            "subjectType": subject_type,
            "subjectId": subject_id,
            "because": because,
        },
    )
    return task
