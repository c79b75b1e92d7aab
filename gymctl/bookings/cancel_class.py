"""Staff cancel a class session (spec A 2.7: the coach role holds sessions and bookings, "full
CRUD incl. delete"; spec B 2.4: a cancel keeps the row). The session keeps its row with
cancelled_at; every active booking of it is cancelled as staff cancel one, so each member's
booking.cancelled (reason session_cancelled) tells them, the plan's session it spent comes
back (bookings.quota) and the bridge gives up the mirrored seats."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy.orm import Session

from gymctl.bookings import book, codes, quota
from gymctl.bookings.schedule import class_session_of
from gymctl.errors import conflict
from gymctl.events import EventKind, emit
from gymctl.models import ClassSession

SESSION_CANCELLED = "session_cancelled"  # booking.cancelled's reason


def _open(row: ClassSession, now: datetime) -> None:
    if row.cancelled_at is not None:
        raise conflict(codes.SESSION_CANCELLED, "this session was cancelled already")
    if row.starts_at <= now:
        raise conflict(codes.SESSION_STARTED, "a class that has started is not cancelled")


def cancel_session(
    session: Session,
    organization_id: uuid.UUID,
    class_session_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> tuple[ClassSession, int]:
    """Cancel a class before it starts: 409 session_cancelled when it was, 409 session_started
    once it began (its attendance is the record then). Locks in billing's order: the members
    of its active bookings, seated and waiting (shared, in id order), the plans those bookings
    spent, then the session. Each seat cancelled takes its member's sync-op lock (mirror),
    which a member being removed holds from their first seat given up while they wait for this
    class: the cancel waits for that removal before the class's lock, and the bookings are
    read under it (the removal's seat is cancelled already). cancelled_at is set before the
    bookings are cancelled, so no seat freed here promotes anyone; a seat that ended after its
    check-in gives its session back too (quota.give_back_kept). The session and how many
    bookings were cancelled."""
    _open(class_session_of(session, organization_id, class_session_id), now)  # early, unlocked
    book.lock_waiting_members(session, class_session_id, seated=True)
    quota.lock_plans_of_session(session, class_session_id)
    row = class_session_of(session, organization_id, class_session_id, lock=True)
    _open(row, now)
    row.cancelled_at = now
    session.flush()
    active = [booking for booking in book.roster(session, row.id) if book.is_active(booking)]
    for booking in active:
        book.cancel(
            session,
            organization_id,
            booking.id,
            actor_user_id=actor_user_id,
            by_staff=True,
            now=now,
            reason=SESSION_CANCELLED,
        )
    quota.give_back_kept(session, row, now=now)
    emit(
        session,
        EventKind.domain,
        "class_session.cancelled",
        at=now,
        aggregate_type="class_session",
        aggregate_id=row.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"startsAt": row.starts_at.isoformat(), "cancelledBookings": len(active)},
    )
    return row, len(active)
