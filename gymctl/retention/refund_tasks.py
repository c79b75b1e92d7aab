"""The refund task sweep (spec B 8): an owner's manual_refund task is due in 3 days; one left
open past its due date is bumped (due again in 3 days, urgent, the bump counted), so the
owner sees it again and a second run bumps nothing."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import Task
from gymctl.retention.settlement import OWNER_TASK_DUE

BATCH = 1000


def bump_overdue_refund_tasks(
    session: Session, *, now: datetime, limit: int = BATCH
) -> dict[str, list[str]]:
    tasks = session.scalars(
        select(Task)
        .where(
            Task.kind == "manual_refund",
            Task.status == "open",
            Task.deleted_at.is_(None),
            Task.due_at <= now,
        )
        .order_by(Task.due_at, Task.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    for task in tasks:
        task.due_at = now + OWNER_TASK_DUE
        task.priority = "urgent"
        task.data = {**task.data, "bumps": int(task.data.get("bumps", 0)) + 1}
        emit(
            session,
            EventKind.domain,
            "task.refund_overdue",
            at=now,
            aggregate_type="task",
            aggregate_id=task.id,
            organization_id=task.organization_id,
            payload={"bumps": task.data["bumps"], "subjectId": task.subject_id},
        )
    session.flush()
    return {"bumped": [str(task.id) for task in tasks]}
