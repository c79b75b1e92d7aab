"""Check-in and no-shows (spec B 3, 6): booking.attended and booking.no_show.

Staff mark either; after each session ends a daemon pass marks every confirmed booking without
a check-in as a no-show and closes the session's attendance, so a second pass marks nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.bookings import codes, quota
from gymctl.bookings.book import booking_event, booking_of
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


def no_show_pass(session: Session, *, now: datetime, limit: int = PASS_LIMIT) -> dict[str, int]:
    """Every ended session whose attendance is open: mark the missing, then close it. Sessions
    another daemon holds are skipped (SKIP LOCKED), never waited for. A booking still waitlisted
    when its class ends never had a seat: the plan's session it spent is given back (quota),
    its plan locked before the sessions (billing's order)."""
    open_ended = (
        select(ClassSession.id)
        .where(ClassSession.attendance_closed_at.is_(None), ClassSession.ends_at <= now)
        .order_by(ClassSession.ends_at, ClassSession.id)
        .limit(limit)
    )
    quota.lock_plans_waiting(session, open_ended.scalar_subquery())
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
        for booking in session.scalars(
            quota.waiting_in_ended(row.id).order_by(Booking.id).with_for_update()
        ).all():
            quota.give_back(session, booking, now=now)
            booking.updated_at = now
        row.attendance_closed_at = now
    session.flush()
    return {"sessions": len(ended), "noShows": marked}
