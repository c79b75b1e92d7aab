"""The audit log and the event outbox, written in the same transaction as the change."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Index, Integer, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class AuditLog(IdMixin, Base):
    __tablename__ = "audit_log"

    at: Mapped[datetime]
    action: Mapped[str] = mapped_column(String(128))
    organization_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)
    actor_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    target_type: Mapped[str | None] = mapped_column(String(64))
    target_id: Mapped[str | None] = mapped_column(String(128))
    data: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (Index("ix_audit_log_target", "target_type", "target_id", "at"),)


class OutboxEvent(Base):
    """An analytics, audit or domain event waiting for the relay; id order is emission order."""

    __tablename__ = "outbox_events"

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True
    )
    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(128))
    aggregate_type: Mapped[str] = mapped_column(String(64))
    aggregate_id: Mapped[str] = mapped_column(String(128))
    organization_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    occurred_at: Mapped[datetime]
    delivered_at: Mapped[datetime | None]
    attempts: Mapped[int] = mapped_column(default=0)
    last_error: Mapped[str | None] = mapped_column(Text)

    __table_args__ = (
        Index(
            "ix_outbox_events_undelivered",
            "id",
            postgresql_where=text("delivered_at IS NULL"),
            sqlite_where=text("delivered_at IS NULL"),
        ),
        # The notices a member is told of (events.unsettled: the billing emails every 5
        # minutes, the pushes every minute) by name, of the last days only.
        Index("ix_outbox_events_name_occurred_at", "name", "occurred_at"),
    )
