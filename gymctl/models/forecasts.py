"""Billing forecasts asked for over HTTP: queued, worked off by the daemons, read back."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class ForecastRunStatus(StrEnum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"  # by an admin, queued or running (its worker stops at its next beat)


class ForecastRun(IdMixin, Base):
    """One forecast a platform admin asked for. A forecast of a large gym takes longer than an
    HTTP request may (gunicorn restarts a worker silent for 30 s), so the request queues it and
    a daemon runs it. `attempts` fences a run: a worker whose lease was taken over (its
    heartbeat stopped) writes nothing when it finishes."""

    __tablename__ = "forecast_runs"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE")
    )
    requested_by: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL")
    )
    parameters: Mapped[dict[str, Any]]
    status: Mapped[str] = mapped_column(String(16), default=ForecastRunStatus.queued)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # The forecast clock's instant reached so far (between `from` and `until`).
    reached: Mapped[datetime | None]
    report: Mapped[dict[str, Any] | None]
    error_code: Mapped[str | None] = mapped_column(String(64))
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_forecast_runs_organization_created", "organization_id", "created_at"),
        Index("ix_forecast_runs_status_created", "status", "created_at"),
    )
