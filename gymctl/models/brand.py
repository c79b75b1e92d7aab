"""The three branding channels (spec A 3): a draft row and published rows for each.

brand: one draft (palette, name, logos) and one row per published revision (the live one is the
latest not unpublished); website: one row holding the draft and published revision pointers, and
its content revisions; member app: one draft row and one row per published version, carrying its
screenshot and internal-smoke attestations (a new version starts with none).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from gymctl.models.base import Base


def _org() -> ForeignKey:
    return ForeignKey("organizations.id", ondelete="CASCADE")


class BrandDraft(Base):
    __tablename__ = "brand_drafts"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    # The colours the owner set, schema 4 names, as typed (identity ignores case).
    palette: Mapped[dict[str, Any]] = mapped_column(default=dict)
    name: Mapped[str | None] = mapped_column(String(200))
    # slot -> durable object key of a stored brand asset
    logos: Mapped[dict[str, Any]] = mapped_column(default=dict)
    updated_at: Mapped[datetime]
    updated_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)


class BrandRevision(Base):
    """A published brand, immutable but for `unpublished_at`."""

    __tablename__ = "brand_revisions"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    palette: Mapped[dict[str, Any]]
    name: Mapped[str | None] = mapped_column(String(200))
    logos: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The derived published brand, schemaVersion 2, frozen at publish.
    brand: Mapped[dict[str, Any]]
    published_at: Mapped[datetime]
    published_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    unpublished_at: Mapped[datetime | None]


class Website(Base):
    """The minisite channel: the draft revision, the published one, and the brand revision
    the last publish sent."""

    __tablename__ = "websites"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    adopted_schema: Mapped[int | None] = mapped_column(Integer)
    draft_revision: Mapped[int] = mapped_column(Integer)
    published_content_revision: Mapped[int | None] = mapped_column(Integer)
    published_brand_revision: Mapped[int | None] = mapped_column(Integer)
    published_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class WebsiteRevision(Base):
    __tablename__ = "website_revisions"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    revision: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    content: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)


class MemberAppDraft(Base):
    """The member app's draft settings; its images are member_app_draft_assets."""

    __tablename__ = "member_app_drafts"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    display_name: Mapped[str | None] = mapped_column(String(60))
    updated_at: Mapped[datetime]


class MemberAppVersion(Base):
    __tablename__ = "member_app_versions"

    organization_id: Mapped[uuid.UUID] = mapped_column(_org(), primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    display_name: Mapped[str | None] = mapped_column(String(60))
    # slot -> {"key", "sha256"}
    assets: Mapped[dict[str, Any]] = mapped_column(default=dict)
    brand_revision: Mapped[int | None] = mapped_column(Integer)
    published_at: Mapped[datetime]
    published_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    unpublished_at: Mapped[datetime | None]
    screenshot_attested_at: Mapped[datetime | None]
    screenshot_attested_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    internal_smoke_attested_at: Mapped[datetime | None]
    internal_smoke_attested_by_user_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
