"""The audit row of a write to one movement (every library write has one)."""

from __future__ import annotations

from gymctl.events import EventKind, emit


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
