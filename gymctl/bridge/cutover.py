"""Series cutover (spec B 4.6 names it; docs/decisions.md, issue 18, gives its shape).

A gym migrates class by class: per recurring series (a class type's weekly slot in the gym's
timezone: weekday and start time) the owner names the day from which the platform, not the
external system, is the source of truth. Bookings are mirrored both ways throughout (members
may use either app); what the cutover decides is whose word stands for the classes themselves:

- before the day (the default: no cutover named), the external system's: a class removed there
  cancels the platform session (and its bookings), a coach changed there is taken here;
- from the day on, the platform's: a class removed there is an issue for the owner, and a coach
  changed there is changed back to the platform's coach.
"""

from __future__ import annotations

import re
import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bridge import codes
from gymctl.bridge.polling import timezone_of
from gymctl.errors import conflict, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import ClassSession, ClassType
from gymctl.models.bridge import SeriesCutover

TIME = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


def series_of(session: Session, row: ClassSession) -> tuple[int, str, date]:
    """The session's series key (weekday, HH:MM) and its local day."""
    local = row.starts_at.astimezone(timezone_of(session, row.organization_id))
    return local.weekday(), local.strftime("%H:%M"), local.date()


def platform_owns(session: Session, row: ClassSession) -> bool:
    weekday, start, day = series_of(session, row)
    cutover_on = session.scalar(
        select(SeriesCutover.cutover_on).where(
            SeriesCutover.organization_id == row.organization_id,
            SeriesCutover.class_type_id == row.class_type_id,
            SeriesCutover.weekday == weekday,
            SeriesCutover.start_time == start,
        )
    )
    return cutover_on is not None and day >= cutover_on


def set_cutover(
    session: Session,
    organization_id: uuid.UUID,
    class_type_id: uuid.UUID,
    weekday: int,
    start_time: str,
    cutover_on: date,
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    operator: str | None = None,
) -> SeriesCutover:
    """Name (or move) a series' cutover day; never a past day (what already happened keeps
    the source of truth it had)."""
    kind = session.get(ClassType, class_type_id)
    if kind is None or kind.organization_id != organization_id:
        raise not_found(codes.CLASS_TYPE_NOT_FOUND, "no such class type")
    if not 0 <= weekday <= 6 or not TIME.fullmatch(start_time or ""):
        raise unprocessable(codes.CUTOVER_SERIES_INVALID, "weekday 0-6 (Monday 0) and time HH:MM")
    today = now.astimezone(timezone_of(session, organization_id)).date()
    if cutover_on < today:
        raise unprocessable(codes.CUTOVER_IN_PAST, "the cutover day is today or later")
    row = session.scalar(
        select(SeriesCutover).where(
            SeriesCutover.organization_id == organization_id,
            SeriesCutover.class_type_id == class_type_id,
            SeriesCutover.weekday == weekday,
            SeriesCutover.start_time == start_time,
        )
    )
    if row is None:
        row = SeriesCutover(organization_id=organization_id, class_type_id=class_type_id,
                            weekday=weekday, start_time=start_time, created_at=now)  # fmt: skip
        session.add(row)
    elif row.cutover_on <= today:
        raise conflict(codes.CUTOVER_ALREADY_PASSED, "this series already moved to the platform")
    row.cutover_on = cutover_on
    row.updated_at = now
    session.flush()
    emit(session, EventKind.audit, "bridge.series_cutover_set", at=now,
         aggregate_type="class_type", aggregate_id=str(class_type_id),
         organization_id=organization_id, actor_user_id=actor_user_id,
         payload={**describe(row), **({"operator": operator} if operator else {})})  # fmt: skip
    return row


def list_cutovers(session: Session, organization_id: uuid.UUID) -> list[SeriesCutover]:
    return list(
        session.scalars(
            select(SeriesCutover)
            .where(SeriesCutover.organization_id == organization_id)
            .order_by(SeriesCutover.cutover_on, SeriesCutover.id)
        )
    )


def describe(row: SeriesCutover) -> dict[str, Any]:
    return {"classTypeId": str(row.class_type_id), "weekday": row.weekday,
            "startTime": row.start_time, "cutoverOn": row.cutover_on.isoformat()}  # fmt: skip
