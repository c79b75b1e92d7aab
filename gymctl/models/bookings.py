"""Class types, their scheduled sessions and bookings (spec B 2.4, 3).

A booking is unique on (class_session_id, membership_id) across every status: cancelling keeps
the row, and booking the same session again revives it under the same id.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import (
    CheckConstraint,
    Enum,
    ForeignKey,
    Index,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class BookingStatus(StrEnum):
    confirmed = "confirmed"
    waitlisted = "waitlisted"
    cancelled = "cancelled"


class CheckinMethod(StrEnum):
    staff = "staff"  # marked by a coach or the desk
    self = "self"  # the member checked in from the app
    kiosk = "kiosk"  # a device at the door


class ClassType(IdMixin, Base):
    """What is taught (e.g. "Strength 101"): the defaults its sessions start from."""

    __tablename__ = "class_types"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    description: Mapped[str | None] = mapped_column(Text)
    default_capacity: Mapped[int]
    duration_minutes: Mapped[int]
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        CheckConstraint("default_capacity >= 0", name="capacity_not_negative"),
        CheckConstraint("duration_minutes > 0", name="duration_positive"),
    )


class ClassSession(IdMixin, Base):
    """One scheduled occurrence of a class type, with its own capacity. `attendance_closed_at`
    is set by the no-show pass once the session has ended (a second pass skips it)."""

    __tablename__ = "class_sessions"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    class_type_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("class_types.id", ondelete="CASCADE"), index=True
    )
    starts_at: Mapped[datetime]
    ends_at: Mapped[datetime]
    capacity: Mapped[int]
    coach_user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    cancelled_at: Mapped[datetime | None]
    attendance_closed_at: Mapped[datetime | None]
    created_at: Mapped[datetime]

    __table_args__ = (
        CheckConstraint("capacity >= 0", name="capacity_not_negative"),
        CheckConstraint("ends_at > starts_at", name="ends_after_start"),
        Index("ix_class_sessions_organization_id_starts_at", "organization_id", "starts_at"),
        # The no-show pass: ended sessions whose attendance is still open.
        Index(
            "ix_class_sessions_attendance_open",
            "ends_at",
            postgresql_where=text("attendance_closed_at IS NULL"),
            sqlite_where=text("attendance_closed_at IS NULL"),
        ),
    )


class Booking(IdMixin, Base):
    __tablename__ = "bookings"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    class_session_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("class_sessions.id", ondelete="CASCADE")
    )
    membership_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("memberships.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    # The pack or drop-in whose session pays the seat (gymctl.bookings.quota); None on an
    # unlimited plan, in a gym that books without plans, and once the session is given back.
    subscription_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("subscriptions.id", ondelete="SET NULL"), index=True
    )
    status: Mapped[BookingStatus] = mapped_column(
        Enum(
            BookingStatus,
            name="booking_status",
            native_enum=False,
            create_constraint=True,
            length=16,
        )
    )
    # Waitlist order: the first waitlisted is promoted when a seat frees up.
    waitlisted_at: Mapped[datetime | None]
    cancelled_at: Mapped[datetime | None]
    checked_in_at: Mapped[datetime | None]
    checkin_method: Mapped[str | None] = mapped_column(String(16))
    no_show_at: Mapped[datetime | None]
    deleted_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    __table_args__ = (
        UniqueConstraint("class_session_id", "membership_id"),
        Index("ix_bookings_class_session_id_status", "class_session_id", "status"),
    )
