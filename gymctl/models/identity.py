"""Users (spec A 2.1) and the identity provider's webhook deliveries (spec A 6.1)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    ForeignKey,
    Index,
    String,
    UniqueConstraint,
    Uuid,
    func,
)
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
    name: Mapped[str | None] = mapped_column(String(200))
    # Spec A 5.3: None while the address is unproven (a login made from a join link handed to
    # the browser); set by the provider's verified flag or by an operator's Mark email verified.
    email_verified_at: Mapped[datetime | None]
    email_verified_by: Mapped[str | None] = mapped_column(String(128))
    # Where the row came from: self (provider sign-up), join_link, invitation, desk, lead, import.
    signup_origin: Mapped[str] = mapped_column(String(32), default="self", server_default="self")
    signup_organization_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    signup_join_link_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime] = mapped_column(default=clock.now)
    updated_at: Mapped[datetime] = mapped_column(default=clock.now)
    deleted_at: Mapped[datetime | None]
    # The identity provider's webhooks (spec A 6.1) arrive unordered and may come again under a
    # new delivery id: when user.created was applied (its sign-up effects happen once), and the
    # provider's updated_at (ms) of the newest user object applied (an older one writes nothing).
    signed_up_at: Mapped[datetime | None]
    identity_synced_at: Mapped[int | None] = mapped_column(BigInteger)
    # A row retired by a link (access.folding): the row its person goes on as. Not a foreign
    # key: no row is moved by it, and a copy of some users (the forecast's) names no other.
    folded_into_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, index=True)

    __table_args__ = (Index("ix_users_email_lower", func.lower(email)),)


def same_address(column: Any, address: str) -> ColumnElement[bool]:
    """`column` holds `address`, letter case aside, with the database folding both sides the
    same way (ix_users_email_lower). Python's str.lower() folds 'É' where SQLite's lower() does
    not: a roster row 'Élodie@x.test' found no one and added a second user each import."""
    return func.lower(column) == func.lower(address)


class UserSession(IdMixin, Base):
    """A provider session seen on an authenticated request, for the ownership trail."""

    __tablename__ = "user_sessions"

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    session_id: Mapped[str] = mapped_column(String(128))
    ip: Mapped[str | None] = mapped_column(String(64))
    city: Mapped[str | None] = mapped_column(String(128))
    country: Mapped[str | None] = mapped_column(String(64))
    user_agent: Mapped[str | None] = mapped_column(String(512))
    impersonated_by: Mapped[str | None] = mapped_column(String(128))
    first_seen_at: Mapped[datetime]
    last_seen_at: Mapped[datetime]

    __table_args__ = (
        UniqueConstraint("user_id", "session_id"),
        Index("ix_user_sessions_user_id_last_seen_at", "user_id", "last_seen_at"),
    )


class IdentityWebhookDelivery(Base):
    """One row per provider delivery id, so a replayed delivery is acknowledged, not re-applied."""

    __tablename__ = "identity_webhook_deliveries"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    event_type: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[datetime]
    outcome: Mapped[str] = mapped_column(String(32))
