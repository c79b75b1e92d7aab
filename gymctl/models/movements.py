"""The movement library (spec B 2.7): canonical movements beside organization-owned ones, the
workouts that reference them, members' video reports, the daily video-search quota and the
persisted queue of library jobs."""

from __future__ import annotations

import uuid
from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Date,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    UniqueConstraint,
    Uuid,
    text,
)
from sqlalchemy.orm import Mapped, mapped_column

from gymctl import clock
from gymctl.models.base import Base, IdMixin

# Lists of strings or objects; JSON on both engines (no JSONB operators are needed on them).
ListType = JSON()


class Movement(IdMixin, Base):
    """One movement. organization_id None is a canonical row every gym's workouts may reference;
    a merged loser keeps its row (soft-deleted, merged_into_id set) so old references resolve."""

    __tablename__ = "movements"

    organization_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    slug: Mapped[str] = mapped_column(String(160))
    name: Mapped[str] = mapped_column(String(200))
    aliases: Mapped[list[str]] = mapped_column(ListType, default=list)
    category: Mapped[str | None] = mapped_column(String(64))
    kind: Mapped[str | None] = mapped_column(String(32))
    movement_pattern: Mapped[str | None] = mapped_column(String(64))
    equipment: Mapped[str | None] = mapped_column(String(64))
    primary_muscles: Mapped[list[str]] = mapped_column(ListType, default=list)
    secondary_muscles: Mapped[list[str]] = mapped_column(ListType, default=list)
    mechanic: Mapped[str | None] = mapped_column(String(32))  # compound, isolation
    instructions: Mapped[list[str]] = mapped_column(ListType, default=list)
    thumbnail_url: Mapped[str | None] = mapped_column(String(1024))
    video_url: Mapped[str | None] = mapped_column(String(1024))
    video_status: Mapped[str] = mapped_column(String(16), default="none")
    video_candidates: Mapped[list[dict[str, Any]]] = mapped_column(ListType, default=list)
    video_rejected_ids: Mapped[list[str]] = mapped_column(ListType, default=list)
    cues: Mapped[list[str]] = mapped_column(ListType, default=list)
    common_faults: Mapped[list[str]] = mapped_column(ListType, default=list)
    scaling_options: Mapped[list[str]] = mapped_column(ListType, default=list)
    # float32 little-endian, unit length; the model that made it decides the duplicate threshold.
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)
    embedding_model: Mapped[str | None] = mapped_column(String(128))
    merged_into_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("movements.id", ondelete="SET NULL")
    )
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        Index(
            "uq_movements_canonical_slug",
            "slug",
            unique=True,
            postgresql_where=text("organization_id IS NULL"),
            sqlite_where=text("organization_id IS NULL"),
        ),
        Index(
            "uq_movements_organization_slug",
            "organization_id",
            "slug",
            unique=True,
            postgresql_where=text("organization_id IS NOT NULL"),
            sqlite_where=text("organization_id IS NOT NULL"),
        ),
    )


class Workout(IdMixin, Base):
    """A gym's workout; its movements reference the library."""

    __tablename__ = "workouts"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    title: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)


class WorkoutMovement(IdMixin, Base):
    """One line of a workout: which movement, in which position. A merge repoints these."""

    __tablename__ = "workout_movements"

    workout_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("workouts.id", ondelete="CASCADE"), index=True
    )
    movement_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("movements.id"), index=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    prescription: Mapped[str | None] = mapped_column(String(200))


class MovementVideoReport(IdMixin, Base):
    """A member's report on the video a movement shows; one per person and video."""

    __tablename__ = "movement_video_reports"

    movement_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("movements.id", ondelete="CASCADE"), index=True
    )
    video_url: Mapped[str] = mapped_column(String(1024))
    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    negative: Mapped[bool] = mapped_column(default=True)
    reason: Mapped[str | None] = mapped_column(String(500))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)

    __table_args__ = (UniqueConstraint("movement_id", "video_url", "user_id"),)


class VideoSearchQuota(Base):
    """Search API units spent per UTC day (the provider's quota resets daily)."""

    __tablename__ = "video_search_quota"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    units_used: Mapped[int] = mapped_column(Integer, default=0)


class MovementJob(IdMixin, Base):
    """A unit of long library work (seed, thumbnail, video, cues) the daemons work off. A running
    job is leased: its run_after is when the lease ends, and a dead worker's job is taken again
    then (gymctl.movements.jobs)."""

    __tablename__ = "movement_jobs"

    queue: Mapped[str] = mapped_column(String(32))
    kind: Mapped[str] = mapped_column(String(32))
    status: Mapped[str] = mapped_column(String(16), default="queued")
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    result: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    run_after: Mapped[datetime]
    actor_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        Index(
            "ix_movement_jobs_ready",
            "run_after",
            postgresql_where=text("status = 'queued'"),
            sqlite_where=text("status = 'queued'"),
        ),
        Index("ix_movement_jobs_queue_created", "queue", "created_at"),
    )
