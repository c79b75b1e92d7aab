"""Stored brand assets and the member app's draft slots (spec A 2.11). The branding issue adds
palettes, publishing and the other channels beside these."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base, IdMixin


class BrandAsset(IdMixin, Base):
    """One normalized image, stored once under an immutable key in the organization's prefix."""

    __tablename__ = "brand_assets"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), index=True
    )
    slot: Mapped[str] = mapped_column(String(32))
    key: Mapped[str] = mapped_column(String(1024), unique=True)
    content_type: Mapped[str] = mapped_column(String(64))
    width: Mapped[int] = mapped_column(Integer)
    height: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    source: Mapped[str] = mapped_column(String(16))
    report: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    created_at: Mapped[datetime]


class MemberAppDraftAsset(Base):
    """The draft's choice for one slot: a reference to a stored asset, replaced on each upload."""

    __tablename__ = "member_app_draft_assets"

    organization_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True
    )
    slot: Mapped[str] = mapped_column(String(32), primary_key=True)
    asset_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("brand_assets.id"))
    updated_at: Mapped[datetime]


class RateWindow(Base):
    """A fixed-window counter (rate limits shared by every API process through PostgreSQL)."""

    __tablename__ = "rate_windows"

    key: Mapped[str] = mapped_column(String(256), primary_key=True)
    window_start: Mapped[datetime] = mapped_column(primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)

    __table_args__ = (Index("ix_rate_windows_window_start", "window_start"),)
