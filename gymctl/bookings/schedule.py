"""Class types and their sessions: the minimum a schedule needs (what, when, how many seats)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from gymctl import ids
from gymctl.bookings import codes
from gymctl.db import organization_row
from gymctl.errors import invalid, not_found, unprocessable
from gymctl.events import EventKind, emit
from gymctl.models import ClassSession, ClassType, Membership, MembershipStatus, Role
from gymctl.text import one_line

MAX_CAPACITY = 1000
# The sessions a page of the schedule holds: its seat counts are read with a bind parameter a
# session, and PostgreSQL takes at most 65,535 in a statement.
SESSIONS_PAGE = 500
# A schedule looks at most two years ahead and one back (backfilling a missed class).
SCHEDULE_AHEAD = timedelta(days=731)
SCHEDULE_BACK = timedelta(days=366)


def create_class_type(
    session: Session,
    organization_id: uuid.UUID,
    *,
    name: str,
    default_capacity: int,
    duration_minutes: int,
    description: str | None = None,
    now: datetime,
) -> ClassType:
    if not 0 <= default_capacity <= MAX_CAPACITY:
        raise unprocessable(codes.CAPACITY_INVALID, f"capacity is 0 to {MAX_CAPACITY}")
    if duration_minutes < 1:
        raise unprocessable(codes.DURATION_INVALID, "a class lasts at least a minute")
    if not one_line(name):  # the schedule, rosters and emails show it on one
        raise invalid(codes.CLASS_TYPE_NAME_INVALID, "a class type's name is one line")
    row = ClassType(
        id=ids.new_id(),
        organization_id=organization_id,
        name=name,
        description=description,
        default_capacity=default_capacity,
        duration_minutes=duration_minutes,
        created_at=now,
    )
    session.add(row)
    session.flush()
    return row


def class_types_of(session: Session, organization_id: uuid.UUID) -> list[ClassType]:
    return list(
        session.scalars(
            select(ClassType)
            .where(ClassType.organization_id == organization_id, ClassType.deleted_at.is_(None))
            .order_by(ClassType.name, ClassType.id)
        )
    )


def live_class_type(session: Session, organization_id: uuid.UUID, class_type_id) -> ClassType:
    row = session.get(ClassType, class_type_id)
    if row is None or row.organization_id != organization_id or row.deleted_at is not None:
        raise not_found(codes.CLASS_TYPE_NOT_FOUND, "no such class type")
    return row


# Who may coach a class (spec A 2.7: the coach role holds sessions and bookings; owner and admin
# do all a coach does). A plain member coaches nothing, nor does a membership not active.
COACH_ROLES = (Role.owner, Role.admin, Role.coach)


def may_coach(session: Session, organization_id: uuid.UUID, user_id: uuid.UUID) -> bool:
    """`user_id` holds an active staff membership of the gym."""
    row = session.scalar(
        select(Membership).where(
            Membership.organization_id == organization_id, Membership.user_id == user_id
        )
    )
    return row is not None and row.status == MembershipStatus.active and row.role in COACH_ROLES


def check_coach(session: Session, organization_id: uuid.UUID, user_id: uuid.UUID) -> None:
    """422 coach_ineligible unless `user_id` may coach in the gym."""
    if not may_coach(session, organization_id, user_id):
        raise unprocessable(
            codes.COACH_INELIGIBLE, "a class is coached by an active coach, admin or owner"
        )


def release_coach(
    session: Session, organization_id: uuid.UUID, user_id: uuid.UUID, *, now: datetime
) -> int:
    """A person no longer on the gym's staff coaches none of its classes to come: those
    sessions show no coach, for staff to assign another. Classes that started keep who
    coached them, and cancelled ones who was to. The count of sessions left without a coach."""
    if may_coach(session, organization_id, user_id):
        return 0
    return session.execute(
        update(ClassSession)
        .where(
            ClassSession.organization_id == organization_id,
            ClassSession.coach_user_id == user_id,
            ClassSession.cancelled_at.is_(None),
            ClassSession.starts_at > now,
        )
        .values(coach_user_id=None)
        .execution_options(synchronize_session="fetch")
    ).rowcount


def schedule_session(
    session: Session,
    class_type: ClassType,
    *,
    starts_at: datetime,
    capacity: int | None = None,
    ends_at: datetime | None = None,
    coach_user_id: uuid.UUID | None = None,
    actor_user_id: uuid.UUID | None = None,
    now: datetime,
) -> ClassSession:
    """A session of `class_type`; capacity and length default to the class type's."""
    if not now - SCHEDULE_BACK <= starts_at <= now + SCHEDULE_AHEAD:
        raise unprocessable(
            codes.SESSION_TIMES_INVALID, "a session starts within two years from now"
        )
    if ends_at is not None and ends_at - starts_at > timedelta(days=1):
        raise unprocessable(codes.SESSION_TIMES_INVALID, "a session lasts at most a day")
    capacity = class_type.default_capacity if capacity is None else capacity
    if not 0 <= capacity <= MAX_CAPACITY:
        raise unprocessable(codes.CAPACITY_INVALID, f"capacity is 0 to {MAX_CAPACITY}")
    ends_at = ends_at or starts_at + timedelta(minutes=class_type.duration_minutes)
    if ends_at <= starts_at:
        raise unprocessable(codes.SESSION_TIMES_INVALID, "a session ends after it starts")
    if coach_user_id is not None:
        check_coach(session, class_type.organization_id, coach_user_id)
    row = ClassSession(
        id=ids.new_id(),
        organization_id=class_type.organization_id,
        class_type_id=class_type.id,
        starts_at=starts_at,
        ends_at=ends_at,
        capacity=capacity,
        coach_user_id=coach_user_id,
        created_at=now,
    )
    session.add(row)
    session.flush()
    emit(
        session,
        EventKind.domain,
        "class_session.scheduled",
        at=now,
        aggregate_type="class_session",
        aggregate_id=row.id,
        organization_id=row.organization_id,
        actor_user_id=actor_user_id,
        payload={"classTypeId": str(class_type.id), "startsAt": starts_at.isoformat()},
    )
    return row


def sessions_between(
    session: Session,
    organization_id: uuid.UUID,
    start: datetime,
    end: datetime,
    *,
    after: ClassSession | None = None,
    limit: int | None = None,
) -> list[ClassSession]:
    """The sessions starting in [start, end), by start then id; after `after` (a page's last,
    the next page's cursor) and at most `limit` when given."""
    query = select(ClassSession).where(
        ClassSession.organization_id == organization_id,
        ClassSession.starts_at >= start,
        ClassSession.starts_at < end,
    )
    if after is not None:
        query = query.where(
            or_(
                ClassSession.starts_at > after.starts_at,
                and_(ClassSession.starts_at == after.starts_at, ClassSession.id > after.id),
            )
        )
    query = query.order_by(ClassSession.starts_at, ClassSession.id).limit(limit)
    return list(session.scalars(query))


def class_session_of(
    session: Session, organization_id: uuid.UUID, session_id, *, lock: bool = False
) -> ClassSession:
    """The session, 404 when it is not this organization's. `lock` takes its row lock: every
    seat decision of a session is made under it, so 50 members booking the last 5 seats at
    once get exactly 5."""
    row = organization_row(session, ClassSession, organization_id, session_id, lock=lock)
    if row is None:
        raise not_found(codes.SESSION_NOT_FOUND, "no such session")
    return row
