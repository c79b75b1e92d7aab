"""Class types, sessions and bookings (spec B 2.4, 3, 4.3): the schedule staff keep, the
member's book and cancel, and attendance."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Annotated

from flask import Blueprint, jsonify, request
from pydantic import Field

from gymctl.access.memberships import membership_of, resolve_membership
from gymctl.access.permissions import Action, Module, can
from gymctl.bookings import attendance, book, cancel_class, schedule
from gymctl.clock import ensure_utc
from gymctl.errors import forbidden, invalid, not_found
from gymctl.models import Booking, ClassSession, ClassType
from gymctl.models.bookings import CheckinMethod
from webhooks import codes
from webhooks.access import membership, org_route
from webhooks.blueprints.cancellations import aware_utc
from webhooks.context import auth, db, now
from webhooks.validation import Body, one_line, parse, uuid_text

bp = Blueprint("bookings", __name__)
ORG = "/organizations/<uuid:org_id>"
TEXT = r"^[^\x00]*$"
MAX_WINDOW = timedelta(days=62)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at else None


def class_type_json(row: ClassType) -> dict:
    return {
        "id": str(row.id),
        "name": row.name,
        "description": row.description,
        "defaultCapacity": row.default_capacity,
        "durationMinutes": row.duration_minutes,
    }


def session_json(row: ClassSession, counts: dict | None = None) -> dict:
    data = {
        "id": str(row.id),
        "classTypeId": str(row.class_type_id),
        "startsAt": row.starts_at.isoformat(),
        "endsAt": row.ends_at.isoformat(),
        "capacity": row.capacity,
        "coachUserId": str(row.coach_user_id) if row.coach_user_id else None,
        "cancelledAt": _iso(row.cancelled_at),
    }
    if counts is not None:
        data.update(counts)
    return data


def booking_json(row: Booking) -> dict:
    return {
        "id": str(row.id),
        "classSessionId": str(row.class_session_id),
        "userId": str(row.user_id),
        "status": row.status.value,
        # The pack or drop-in whose session the seat spends (bookings.quota); null where the
        # gym books without a plan.
        "subscriptionId": str(row.subscription_id) if row.subscription_id else None,
        "waitlistedAt": _iso(row.waitlisted_at),
        "cancelledAt": _iso(row.cancelled_at),
        "checkedInAt": _iso(row.checked_in_at),
        "checkinMethod": row.checkin_method,
        "noShowAt": _iso(row.no_show_at),
        "deletedAt": _iso(row.deleted_at),
        "createdAt": row.created_at.isoformat(),
        "updatedAt": row.updated_at.isoformat(),
    }


class ClassTypeBody(Body):
    # one line, or 400 class_type_name_invalid (schedule.create_class_type): the document says so
    name: Annotated[str, one_line(200)] = Field(min_length=1, max_length=200, pattern=TEXT)
    description: str | None = Field(None, max_length=2000, pattern=TEXT)
    default_capacity: int = Field(alias="defaultCapacity", ge=0, le=schedule.MAX_CAPACITY)
    duration_minutes: int = Field(alias="durationMinutes", ge=1, le=24 * 60)


@bp.post(f"{ORG}/class-types")
@org_route(Module.programming, Action.manage)
def create_class_type(org_id: uuid.UUID):
    body = parse(ClassTypeBody)
    row = schedule.create_class_type(db(), org_id, **body.model_dump(), now=now())
    return jsonify(data=class_type_json(row)), 201


@bp.get(f"{ORG}/class-types")
def list_class_types(org_id: uuid.UUID):
    resolve_membership(db(), org_id, auth().user)
    return jsonify(data=[class_type_json(row) for row in schedule.class_types_of(db(), org_id)])


list_class_types.gymctl_access = ("own",)  # type: ignore[attr-defined]


class SessionBody(Body):
    class_type_id: uuid.UUID = Field(alias="classTypeId")
    starts_at: datetime = Field(alias="startsAt")
    ends_at: datetime | None = Field(None, alias="endsAt")
    capacity: int | None = Field(None, ge=0, le=schedule.MAX_CAPACITY)
    coach_user_id: uuid.UUID | None = Field(None, alias="coachUserId")


@bp.post(f"{ORG}/sessions")
@org_route(Module.programming, Action.manage)
def schedule_session(org_id: uuid.UUID):
    body = parse(SessionBody)
    class_type = schedule.live_class_type(db(), org_id, body.class_type_id)
    if body.coach_user_id is not None:
        membership_of(db(), org_id, body.coach_user_id)
    row = schedule.schedule_session(
        db(),
        class_type,
        starts_at=aware_utc(body.starts_at),
        ends_at=aware_utc(body.ends_at),
        capacity=body.capacity,
        coach_user_id=body.coach_user_id,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(data=session_json(row)), 201


@bp.post(f"{ORG}/sessions/<uuid:session_id>/cancel")
@org_route(Module.programming, Action.manage)
def cancel_session(org_id: uuid.UUID, session_id: uuid.UUID):
    """Staff cancel a class before it starts: its bookings are cancelled (the members told by
    booking.cancelled, reason session_cancelled), pack sessions given back."""
    row, cancelled = cancel_class.cancel_session(
        db(), org_id, session_id, actor_user_id=membership().user_id, now=now()
    )
    counts = book.seat_counts(db(), [row.id]).get(row.id, {"confirmed": 0, "waitlisted": 0})
    return jsonify(data=session_json(row, counts), cancelledBookings=cancelled)


def _window() -> tuple[datetime, datetime]:
    """Query from/to (ISO with an offset); default: the next 14 days; at most 62 days."""

    def read(name: str) -> datetime | None:
        raw = request.args.get(name)
        if not raw:
            return None
        try:
            at = datetime.fromisoformat(raw)
            if at.tzinfo is None:
                raise ValueError
            return ensure_utc(at)
        except (ValueError, OverflowError):
            raise invalid(
                codes.QUERY_INVALID, f"{name} is an ISO timestamp with an offset", parameter=name
            ) from None

    start = read("from") or now()
    try:
        end = read("to") or start + timedelta(days=14)
        ok = start < end <= start + MAX_WINDOW
    except OverflowError:
        ok = False
    if not ok:
        raise invalid(codes.QUERY_INVALID, "to is after from, at most 62 days later")
    return start, end


def _cursor(org_id: uuid.UUID) -> ClassSession | None:
    """The query's cursor: the last session of the previous page, this gym's."""
    raw = request.args.get("cursor")
    if raw is None:
        return None
    session_id = uuid_text(raw)
    row = db().get(ClassSession, session_id) if session_id else None
    if row is None or row.organization_id != org_id:
        raise invalid(codes.CURSOR_INVALID, "cursor is the last session id of the previous page")
    return row


@bp.get(f"{ORG}/sessions")
def list_sessions(org_id: uuid.UUID):
    """The schedule between from and to (default: the next 14 days) with seat counts, a page
    (schedule.SESSIONS_PAGE) at a time: nextCursor, when more follow, asks for the next."""
    resolve_membership(db(), org_id, auth().user)
    start, end = _window()
    page = schedule.SESSIONS_PAGE
    rows = schedule.sessions_between(
        db(), org_id, start, end, after=_cursor(org_id), limit=page + 1
    )
    more, rows = len(rows) > page, rows[:page]
    counts = book.seat_counts(db(), [row.id for row in rows])
    empty = {"confirmed": 0, "waitlisted": 0}
    return jsonify(
        data=[session_json(row, counts.get(row.id, empty)) for row in rows],
        nextCursor=str(rows[-1].id) if more else None,
    )


list_sessions.gymctl_access = ("own",)  # type: ignore[attr-defined]


class BookBody(Body):
    user_id: uuid.UUID | None = Field(None, alias="userId")


def _staff(mine) -> bool:
    return can(mine.role, Module.programming, Action.manage)


@bp.post(f"{ORG}/sessions/<uuid:session_id>/book")
def book_session(org_id: uuid.UUID, session_id: uuid.UUID):
    """A member books themself; staff with programming rights may book a member (userId)."""
    mine = resolve_membership(db(), org_id, auth().user)
    body = parse(BookBody)
    member = mine
    if body.user_id is not None and body.user_id != mine.user_id:
        if not _staff(mine):
            raise forbidden(codes.PERMISSION_DENIED, "only staff book for another member")
        member = membership_of(db(), org_id, body.user_id)
    row = book.book(db(), org_id, session_id, member, actor_user_id=mine.user_id, now=now())
    return jsonify(data=booking_json(row)), 201


book_session.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.get(f"{ORG}/sessions/<uuid:session_id>/bookings")
@org_route(Module.programming, Action.view)
def session_roster(org_id: uuid.UUID, session_id: uuid.UUID):
    row = schedule.class_session_of(db(), org_id, session_id)
    return jsonify(data=[booking_json(b) for b in book.roster(db(), row.id)])


@bp.post(f"{ORG}/bookings/<uuid:booking_id>/cancel")
def cancel_booking(org_id: uuid.UUID, booking_id: uuid.UUID):
    """The member cancels their own booking; staff cancel anyone's (404 for others' rows)."""
    mine = resolve_membership(db(), org_id, auth().user)
    staff = _staff(mine)
    found = book.booking_of(db(), org_id, booking_id)
    if not staff and found.membership_id != mine.id:
        raise not_found(codes.BOOKING_NOT_FOUND, "no such booking")
    row = book.cancel(
        db(), org_id, booking_id, actor_user_id=mine.user_id, by_staff=staff, now=now()
    )
    return jsonify(data=booking_json(row))


cancel_booking.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.delete(f"{ORG}/bookings/<uuid:booking_id>")
@org_route(Module.programming, Action.manage)
def remove_booking(org_id: uuid.UUID, booking_id: uuid.UUID):
    row = book.remove(db(), org_id, booking_id, actor_user_id=membership().user_id, now=now())
    return jsonify(data=booking_json(row))


class CheckInBody(Body):
    method: CheckinMethod = CheckinMethod.staff


@bp.post(f"{ORG}/bookings/<uuid:booking_id>/check-in")
@org_route(Module.checkins, Action.manage)
def check_in(org_id: uuid.UUID, booking_id: uuid.UUID):
    body = parse(CheckInBody)
    row = attendance.check_in(
        db(), org_id, booking_id, method=body.method, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(data=booking_json(row))


@bp.post(f"{ORG}/bookings/<uuid:booking_id>/no-show")
@org_route(Module.checkins, Action.manage)
def no_show(org_id: uuid.UUID, booking_id: uuid.UUID):
    row = attendance.mark_no_show(
        db(), org_id, booking_id, actor_user_id=membership().user_id, now=now()
    )
    return jsonify(data=booking_json(row))
