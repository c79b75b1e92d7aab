"""The audit row of a write to one movement, or of a pass over the whole canonical library
(every library write has one)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.events import EventKind, emit
from gymctl.models import AuditLog

ALIAS_CHANGED = "movements.alias_changed"


def audit(session, movement, name, now, actor, payload) -> None:
    emit(
        session,
        EventKind.audit,
        name,
        at=now,
        aggregate_type="movement",
        aggregate_id=movement.id,
        organization_id=movement.organization_id,
        actor_user_id=actor,
        payload=payload,
    )


def audit_library(session, name, now, actor, payload) -> None:
    """A pass over the canonical library (seed, discovery, ranking, cues): one row for it."""
    emit(
        session,
        EventKind.audit,
        name,
        at=now,
        aggregate_type="movement_library",
        aggregate_id="canonical",
        actor_user_id=actor,
        payload=payload,
    )


def alias_removals(session: Session, movement_id: uuid.UUID | None = None) -> dict[str, set[str]]:
    """The folded terms alias changes took off each row (of one, given its id), by row id: an
    operator's decisions, which a rerun of the change and a seed of the published file read."""
    query = select(AuditLog.target_id, AuditLog.data).where(
        AuditLog.target_type == "movement", AuditLog.action == ALIAS_CHANGED
    )
    if movement_id is not None:
        query = query.where(AuditLog.target_id == str(movement_id))
    removed: dict[str, set[str]] = {}
    for target, data in session.execute(query):
        removed.setdefault(target, set()).add(data.get("term"))
    return removed
