"""The audit row of a write to one movement, or of a pass over the whole canonical library
(every library write has one)."""

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
