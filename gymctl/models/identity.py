"""Users (spec A 2.1) and the identity provider's webhook deliveries (spec A 6.1)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, String, func
from sqlalchemy.orm import Mapped, mapped_column

from gymctl import clock
from gymctl.models.base import Base, IdMixin


class User(IdMixin, Base):
    """A person. identity_id links the row to the provider's login; a gym-created row has none
    until the person signs in (shown as Unproven in the admin view)."""

    __tablename__ = "users"

    identity_id: Mapped[str | None] = mapped_column(String(128), unique=True)
    email: Mapped[str | None] = mapped_column(String(320))
    image_url: Mapped[str | None] = mapped_column(String(2048))
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)
    deleted_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_users_email_lower", func.lower(email)),)


class IdentityWebhookDelivery(Base):
    """One row per provider delivery id, so a replayed delivery is acknowledged, not re-applied."""

    __tablename__ = "identity_webhook_deliveries"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    event_type: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime]
    outcome: Mapped[str] = mapped_column(String(32))
