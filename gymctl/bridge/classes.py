"""Class mapping: which external class a platform class session books into.

The external public API cannot create classes (spec B 8), so the gym keeps its timetable on
both sides and the schedule poll records the external classes (unclaimed schedule links). A
platform session matches the one unclaimed external class of the same local day and start time
(the gym's timezone, not UTC), the same class (its type's name) and, when the gym's location
is linked, the same location. The match is kept in the entity map. No match, or several, is a
question only a person can answer: the booking op that needs it parks as class_unmatched in
the owner's issues inbox, naming the candidates, and the owner picks one (`link_class`), which
sends the parked bookings of that session again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import codes, entity_map, mirror, queue
from gymctl.bridge.polling import DAY, timezone_of, window
from gymctl.errors import conflict, not_found
from gymctl.events import EventKind, emit
from gymctl.models import ClassSession, ClassType
from gymctl.models.bridge import (
    EntityLink,
    EntityType,
    IntegrationConnection,
    OpStatus,
    Origin,
    SyncOp,
)

UNMATCHED = "class_unmatched"


@dataclass
class Match:
    """`found`: the external class; else why not: not_polled (ask for a poll and wait),
    beyond_window (wait until the class's day enters the poll window: `wait_until`),
    no_session, none or ambiguous (a person decides: `candidates`)."""

    found: EntityLink | None = None
    reason: str | None = None
    wait_until: datetime | None = None
    candidates: list[str] = field(default_factory=list)


def _same_name(external: Any, platform: str) -> bool:
    return isinstance(external, str) and external.strip().casefold() == platform.strip().casefold()


def candidates(
    session: Session, organization_id: uuid.UUID, row: ClassSession, kind: ClassType, zone
) -> list[EntityLink]:
    local = row.starts_at.astimezone(zone)
    location = entity_map.find(session, organization_id, EntityType.location, organization_id)
    rows = session.scalars(
        select(EntityLink).where(
            EntityLink.organization_id == organization_id,
            EntityLink.entity_type == EntityType.schedule,
            EntityLink.platform_id.is_(None),
            local.date().isoformat() == DAY,
        )
    )
    return [
        link
        for link in rows
        if not link.data.get("removed")
        and str(link.data.get("time") or "")[:5] == local.strftime("%H:%M")
        and _same_name(link.data.get("name"), kind.name)
        and (location is None or link.data.get("locationId") == location.external_id)
    ]


def match(
    session: Session, connection: IntegrationConnection, session_id: Any, *, now: datetime
) -> Match:
    organization_id = connection.organization_id
    row = session.get(ClassSession, uuid.UUID(str(session_id)))
    if row is None or row.organization_id != organization_id:
        return Match(reason="no_session")
    zone = timezone_of(session, organization_id)
    first, last = window(now, zone)
    day = row.starts_at.astimezone(zone).date()
    if day > last:
        # The class's day enters the window at local midnight, WINDOW_DAYS before it.
        enters = datetime.combine(day - (last - first), datetime.min.time(), zone)
        return Match(reason="beyond_window", wait_until=enters + timedelta(minutes=10))
    polled = connection.last_schedule_poll_at
    if polled is None or polled < row.created_at:
        return Match(reason="not_polled")
    kind = session.get(ClassType, row.class_type_id)
    found = candidates(session, organization_id, row, kind, zone)
    if len(found) == 1:
        return Match(found=found[0])
    return Match(reason="ambiguous" if found else "none",
                 candidates=[link.external_id for link in found])  # fmt: skip


def match_window(session: Session, connection: IntegrationConnection, *, now: datetime) -> int:
    """After a schedule poll: link each platform session of the window that has exactly one
    candidate. Returns how many were linked."""
    organization_id = connection.organization_id
    zone = timezone_of(session, organization_id)
    first, last = window(now, zone)
    start = datetime.combine(first, datetime.min.time(), zone)
    end = datetime.combine(last + timedelta(days=1), datetime.min.time(), zone)
    rows = session.scalars(
        select(ClassSession).where(
            ClassSession.organization_id == organization_id,
            ClassSession.starts_at >= start,
            ClassSession.starts_at < end,
            ClassSession.cancelled_at.is_(None),
        )
    ).all()
    if not rows:
        return 0
    linked = {
        link.platform_id
        for link in session.scalars(
            select(EntityLink).where(
                EntityLink.organization_id == organization_id,
                EntityLink.entity_type == EntityType.schedule,
                EntityLink.platform_id.in_([str(row.id) for row in rows]),
            )
        )
    }
    count = 0
    for row in rows:
        if str(row.id) in linked:
            continue
        kind = session.get(ClassType, row.class_type_id)
        found = candidates(session, organization_id, row, kind, zone)
        if len(found) == 1:
            entity_map.link(
                session,
                organization_id,
                EntityType.schedule,
                platform_id=row.id,
                external_id=found[0].external_id,
                origin=Origin.poll,
                now=now,
            )
            count += 1
    return count


def link_class(
    session: Session,
    organization_id: uuid.UUID,
    session_id: uuid.UUID,
    external_class_id: str,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    operator: str | None = None,
) -> dict[str, Any]:
    """The owner (or an operator) picks the external class of a platform session; the parked
    bookings of that session are sent again, and a pick that replaces another moves the seats
    already registered at the old class to the new one (mirror.class_relinked)."""
    row = session.get(ClassSession, session_id)
    if row is None or row.organization_id != organization_id:
        raise not_found(codes.SESSION_NOT_FOUND, "no such session")
    external = entity_map.find_external(
        session, organization_id, EntityType.schedule, str(external_class_id)
    )
    if external is None:
        raise not_found(codes.BRIDGE_CLASS_NOT_FOUND, "the schedule poll has seen no such class")
    if external.platform_id not in (None, str(session_id)):
        raise conflict(codes.BRIDGE_LINK_CONFLICT, "that external class is another session's")
    current = entity_map.find(session, organization_id, EntityType.schedule, session_id)
    replaced = current is not None and current is not external
    if replaced:
        current.platform_id = None  # the old pick goes back to the unclaimed classes
        session.flush()
    entity_map.link(session, organization_id, EntityType.schedule, platform_id=session_id,
                    external_id=external.external_id, origin=Origin.manual, now=now)  # fmt: skip
    # Under their locks, as they stand: one an operator dismisses meanwhile is no longer
    # parked once its dismiss commits, and is left dismissed.
    parked = session.scalars(
        select(SyncOp)
        .where(
            SyncOp.organization_id == organization_id,
            SyncOp.status == OpStatus.parked,
            SyncOp.issue_code == UNMATCHED,
            SyncOp.payload["sessionId"].as_string() == str(session_id),
        )
        .with_for_update()
        .execution_options(populate_existing=True)
    ).all()
    for op in parked:
        queue.retry(session, op.id, now=now, organization_id=organization_id,
                    actor_user_id=actor_user_id)  # fmt: skip
    moved = mirror.class_relinked(session, row, now=now) if replaced else 0
    emit(
        session,
        EventKind.audit,
        "bridge.class_linked",
        at=now,
        aggregate_type="class_session",
        aggregate_id=str(session_id),
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={
            "externalClassId": external.external_id,
            "retried": len(parked),
            "seatsMoved": moved,
            **({"operator": operator} if operator else {}),
        },
    )
    return {"sessionId": str(session_id), "externalClassId": external.external_id,
            "retried": [op.id for op in parked], "seatsMoved": moved}  # fmt: skip
