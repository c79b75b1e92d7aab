"""Check-in and no-shows (spec B 3, 6): booking.attended and booking.no_show.

Staff mark either; after each session ends a daemon pass marks every confirmed booking without
a check-in as a no-show and closes the session's attendance, so a second pass marks nothing.
The same pass closes the waitlists no promotion can reach any more (the class started or was
cancelled): a booking is confirmed, waitlisted or cancelled (spec B 2.4), so those waiting
become cancelled rather than pending for ever.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from gymctl.bookings import codes, quota
from gymctl.bookings.book import booking_event, booking_of
from gymctl.bridge import mirror
from gymctl.errors import conflict
from gymctl.models import Booking, BookingStatus, ClassSession
from gymctl.models.bookings import CheckinMethod

CHECKIN_OPENS = timedelta(hours=1)  # ours: the door opens an hour before the class
PASS_LIMIT = 500  # sessions per pass; the rest waits for the next run


def _confirmed(booking: Booking) -> None:
    if booking.deleted_at is not None or booking.status != BookingStatus.confirmed:
        raise conflict(codes.BOOKING_NOT_CONFIRMED, "only a confirmed booking attends")


def check_in(
    session: Session,
    organization_id: uuid.UUID,
    booking_id: uuid.UUID,
    *,
    method: CheckinMethod,
    actor_user_id: uuid.UUID,
    now: datetime,
) -> Booking:
    """Record attendance (a check-in corrects an earlier no-show); checking in twice keeps the
    first time and writes no second event."""
    booking = booking_of(session, organization_id, booking_id, lock=True)
    _confirmed(booking)
    row = session.get(ClassSession, booking.class_session_id)
    if row.cancelled_at is not None:
        raise conflict(codes.SESSION_CANCELLED, "this session was cancelled")
    if now < row.starts_at - CHECKIN_OPENS:
        raise conflict(codes.CHECKIN_NOT_OPEN, "check-in opens an hour before class")
    if booking.checked_in_at is not None:
        return booking
    booking.checked_in_at = now
    booking.checkin_method = method.value
    booking.no_show_at = None
    booking.updated_at = now
    session.flush()
    booking_event(
        session, "booking.attended", booking, now=now, actor=actor_user_id, method=method.value
    )
    return booking


def mark_no_show(
    session: Session,
    organization_id: uuid.UUID,
    booking_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Booking:
    booking = booking_of(session, organization_id, booking_id, lock=True)
    _confirmed(booking)
    row = session.get(ClassSession, booking.class_session_id)
    if now < row.starts_at:
        raise conflict(codes.SESSION_NOT_STARTED, "no-shows are marked after the start")
    if booking.checked_in_at is not None:
        raise conflict(codes.BOOKING_CHECKED_IN, "this member checked in")
    if booking.no_show_at is None:
        _no_show(session, booking, now=now, actor=actor_user_id)
    return booking


def _no_show(session: Session, booking: Booking, *, now: datetime, actor=None) -> None:
    booking.no_show_at = now
    booking.updated_at = now
    booking_event(session, "booking.no_show", booking, now=now, actor=actor)


WAITLIST_CLOSED = "waitlist_closed"  # booking.cancelled's reason: never promoted


def close_waitlists(session: Session, *, now: datetime, limit: int = PASS_LIMIT) -> int:
    """Cancel the waitlisted bookings of sessions that started or were cancelled: none is ever
    promoted there (book.promote_waitlist), so "waitlisted" would read as pending for ever.
    Each becomes cancelled (cancelled_at = now), gives back the plan's session it held
    (quota: it never had a seat) and writes booking.cancelled with reason waitlist_closed.
    Plans are locked before the sessions (billing's order), sessions another daemon holds are
    skipped (SKIP LOCKED). A second pass finds nothing waiting. The bookings closed."""
    closing = (
        select(ClassSession.id)
        .where(
            or_(ClassSession.starts_at <= now, ClassSession.cancelled_at.is_not(None)),
            select(Booking.id)
            .where(
                Booking.class_session_id == ClassSession.id,
                Booking.status == BookingStatus.waitlisted,
                Booking.deleted_at.is_(None),
            )
            .exists(),
        )
        .order_by(ClassSession.starts_at, ClassSession.id)
        .limit(limit)
    )
    ids = session.scalars(closing).all()
    if not ids:
        return 0
    quota.lock_plans_waiting(session, ids)
    rows = session.scalars(
        select(ClassSession)
        .where(ClassSession.id.in_(ids))
        .order_by(ClassSession.starts_at, ClassSession.id)
        .with_for_update(skip_locked=True)
    ).all()
    closed = 0
    for row in rows:
        waiting = session.scalars(
            select(Booking)
            .where(
                Booking.class_session_id == row.id,
                Booking.status == BookingStatus.waitlisted,
                Booking.deleted_at.is_(None),
            )
            .order_by(Booking.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        ).all()
        for booking in waiting:
            returned = quota.give_back(session, booking, row, now=now)
            booking.status = BookingStatus.cancelled
            booking.cancelled_at = now
            booking.waitlisted_at = None
            booking.updated_at = now
            session.flush()
            extra = {"sessionReturnedTo": str(returned)} if returned else {}
            booking_event(
                session, "booking.cancelled", booking, now=now, reason=WAITLIST_CLOSED, **extra
            )
            mirror.booking_changed(session, booking, now=now)  # never mirrored: queues nothing
        closed += len(waiting)
    session.flush()
    return closed


def no_show_pass(session: Session, *, now: datetime, limit: int = PASS_LIMIT) -> dict[str, int]:
    """Close the waitlists of started or cancelled sessions (close_waitlists), then, for every
    ended session whose attendance is open: mark the missing, then close it. Sessions another
    daemon holds are skipped (SKIP LOCKED), never waited for. Called by the daemons' job
    booking_no_shows (every 5 minutes) in the job's one transaction."""
    closed = close_waitlists(session, now=now, limit=limit)
    ended = session.scalars(
        select(ClassSession)
        .where(ClassSession.attendance_closed_at.is_(None), ClassSession.ends_at <= now)
        .order_by(ClassSession.ends_at, ClassSession.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    marked = 0
    for row in ended:
        if row.cancelled_at is None:
            missing = session.scalars(
                select(Booking)
                .where(
                    Booking.class_session_id == row.id,
                    Booking.status == BookingStatus.confirmed,
                    Booking.deleted_at.is_(None),
                    Booking.checked_in_at.is_(None),
                    Booking.no_show_at.is_(None),
                )
                .order_by(Booking.created_at, Booking.id)
                # Under their locks: a check-in in flight commits first and, read again, the
                # booking no longer matches (a checked-in booking is never a no-show).
                .with_for_update()
                .execution_options(populate_existing=True)
            ).all()
            for booking in missing:
                _no_show(session, booking, now=now)
            marked += len(missing)
        row.attendance_closed_at = now
    session.flush()
    return {"sessions": len(ended), "noShows": marked, "waitlistsClosed": closed}
