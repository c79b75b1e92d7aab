"""The brand workspace (spec A 3, 4): the three channels' drafts, and the read model with the
server-computed pending flags.

| channel    | pending when                                                                   |
|------------|--------------------------------------------------------------------------------|
| brand      | a draft exists and its identity (colours case-insensitively, name, logos)      |
|            | differs from the published one, or nothing is published                        |
| website    | adopted (schema 2) and never published, or publishedContentRevision differs    |
|            | from draftRevision                                                             |
| member app | a draft row exists and nothing is published, or the draft was written more     |
|            | than 1 s after publishedAt                                                     |
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.assets.intake import require_same_rules
from gymctl.assets.read_ahead import ReadAhead
from gymctl.assets.types import Slot
from gymctl.branding import codes
from gymctl.branding.lock import lock_branding
from gymctl.branding.palette import Palette, brand_identity
from gymctl.branding.published import latest_app_version, latest_revision, live_app_version
from gymctl.branding.rechecks import rechecked_then_locked
from gymctl.branding.website import CONTENT_SCHEMA, parse_content
from gymctl.errors import invalid, not_found
from gymctl.models import (
    BrandAsset,
    BrandDraft,
    BrandRevision,
    MemberAppDraft,
    MemberAppDraftAsset,
    Website,
    WebsiteRevision,
)
from gymctl.providers.storage import ObjectStore
from gymctl.text import one_line

APP_WRITE_TOLERANCE = timedelta(seconds=1)
MAX_BRAND_NAME = 200
MAX_APP_NAME = 60  # the member app's display name


class Keep(Enum):
    """An absent field of a save: the draft keeps its value (an explicit None clears it)."""

    KEEP = "keep"


KEEP = Keep.KEEP
CHANNELS = ("brand", "website", "app")  # also the publishing order


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


# --- drafts --------------------------------------------------------------------------------


def logo_keys(
    session: Session, organization_id: uuid.UUID, logos: dict[str, Any]
) -> dict[str, str]:
    """slot -> asset id from the caller, as slot -> durable key (a stored asset's key never
    changes). Each asset keeps the rules of the slot it was normalized for (spec A 2.11)."""
    keys = {}
    for slot, asset_id in logos.items():
        try:
            kind = Slot(slot)
            asset = session.get(BrandAsset, uuid.UUID(str(asset_id)))
        except ValueError:
            raise invalid(codes.BRAND_LOGO_INVALID, f"{slot}: a slot and an asset id") from None
        if asset is None or asset.organization_id != organization_id:
            raise not_found(codes.BRAND_ASSET_NOT_FOUND, f"{slot}: no such brand asset")
        require_same_rules(kind, asset)
        keys[slot] = asset.key
    return keys


def save_brand_draft(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    *,
    palette: Any,
    name: str | Keep | None = KEEP,
    logos: dict[str, Any] | Keep | None = KEEP,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> BrandDraft:
    """Save the brand draft (a draft never goes live until published). An absent (KEEP) name
    or logos keeps the draft's value; None clears it. Each logo is re-checked (spec A asset
    rule 10) with no write lock held while the store answers (gymctl.branding.rechecks): kept
    logos are the draft's as read afresh after the check, a save in between being the one
    they keep."""
    checked = Palette.parse(palette)

    def stored(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
        if logos is KEEP:
            draft = session.get(BrandDraft, organization_id)
            return dict(draft.logos or {}) if draft is not None else {}
        return logo_keys(session, organization_id, logos or {})

    rechecked_then_locked(
        session,
        ReadAhead(store),
        organization_id,
        stored,
        lock=lambda: lock_branding(session, organization_id),
    )
    keys = stored(session, organization_id)
    draft = session.get(BrandDraft, organization_id) or BrandDraft(organization_id=organization_id)
    draft.palette = checked.as_json()
    if name is not KEEP:
        draft.name = _brand_name(name)
    draft.logos = keys
    draft.updated_at = now
    draft.updated_by_user_id = actor_user_id
    session.add(draft)
    session.flush()
    return draft


def _brand_name(name: str | None, limit: int = MAX_BRAND_NAME) -> str | None:
    """A name the brand shows (1 to `limit` characters on one line); None clears it. The body
    of the route refuses others; the command line passed '' and a newline through."""
    if name is None:
        return None
    name = name.strip()
    if not 1 <= len(name) <= limit or not one_line(name):
        raise invalid(
            codes.BRAND_NAME_INVALID, f"a brand name is 1 to {limit} characters, one line"
        )
    return name


def save_website_draft(
    session: Session,
    organization_id: uuid.UUID,
    *,
    content: Any,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Website:
    """A new content revision, adopted into schema 2; the draft points at it."""
    checked = parse_content(content)
    lock_branding(session, organization_id)
    revision = (
        session.scalar(
            select(func.max(WebsiteRevision.revision)).where(
                WebsiteRevision.organization_id == organization_id
            )
        )
        or 0
    ) + 1
    session.add(
        WebsiteRevision(
            organization_id=organization_id,
            revision=revision,
            content=checked,
            created_at=now,
            created_by_user_id=actor_user_id,
        )
    )
    website = session.get(Website, organization_id) or Website(organization_id=organization_id)
    website.adopted_schema = CONTENT_SCHEMA
    website.draft_revision = revision
    website.updated_at = now
    session.add(website)
    session.flush()
    return website


def save_app_draft(
    session: Session,
    organization_id: uuid.UUID,
    *,
    display_name: str | Keep | None,
    now: datetime,
) -> MemberAppDraft:
    """Save the member app's draft settings. An absent (KEEP) display name keeps the draft's
    value, as the brand save does; None clears it."""
    lock_branding(session, organization_id)
    draft = session.get(MemberAppDraft, organization_id) or MemberAppDraft(
        organization_id=organization_id
    )
    if display_name is not KEEP:
        # The app's name on the device and in the native build's input: one line, as the
        # brand's (a line break was saved and shipped).
        draft.display_name = _brand_name(display_name, MAX_APP_NAME)
    draft.updated_at = now
    session.add(draft)
    session.flush()
    return draft


def app_draft_written_at(session: Session, organization_id: uuid.UUID) -> datetime | None:
    """The last write to the member app's draft: its settings row or any of its slots."""
    draft = session.get(MemberAppDraft, organization_id)
    slots = session.scalar(
        select(func.max(MemberAppDraftAsset.updated_at)).where(
            MemberAppDraftAsset.organization_id == organization_id
        )
    )
    times = [t for t in (draft.updated_at if draft else None, slots) if t is not None]
    return max(times) if times else None


# --- pending flags -------------------------------------------------------------------------


def brand_pending(draft: BrandDraft | None, live: BrandRevision | None) -> bool:
    if draft is None:
        return False
    if live is None or live.unpublished_at is not None:
        return True
    return brand_identity(draft.palette, draft.name, draft.logos) != brand_identity(
        live.palette, live.name, live.logos
    )


def website_pending(website: Website | None) -> bool:
    if website is None or website.adopted_schema != CONTENT_SCHEMA:
        return False
    return website.published_content_revision != website.draft_revision


def app_pending(draft_written_at: datetime | None, published_at: datetime | None) -> bool:
    if draft_written_at is None:
        return False
    if published_at is None:
        return True
    return draft_written_at - published_at > APP_WRITE_TOLERANCE


# --- the read model ------------------------------------------------------------------------


def _brand_channel(session: Session, organization_id: uuid.UUID) -> dict[str, Any]:
    draft = session.get(BrandDraft, organization_id)
    latest = latest_revision(session, organization_id)
    live = latest if latest is not None and latest.unpublished_at is None else None
    return {
        "channel": "brand",
        "pending": brand_pending(draft, live),
        "live": live is not None,
        "draft": None
        if draft is None
        else {
            "palette": draft.palette,
            "name": draft.name,
            "logos": draft.logos,
            "updatedAt": _iso(draft.updated_at),
        },
        "published": None
        if live is None
        else {
            "revision": live.revision,
            "palette": live.palette,
            "name": live.name,
            "logos": live.logos,
            "publishedAt": _iso(live.published_at),
        },
        "latestRevision": latest.revision if latest is not None else None,
    }


def _website_channel(session: Session, organization_id: uuid.UUID) -> dict[str, Any]:
    website = session.get(Website, organization_id)
    draft = (
        session.get(WebsiteRevision, (organization_id, website.draft_revision)) if website else None
    )
    return {
        "channel": "website",
        "pending": website_pending(website),
        "live": website is not None and website.published_content_revision is not None,
        "adoptedSchema": website.adopted_schema if website else None,
        "draftRevision": website.draft_revision if website else None,
        "publishedContentRevision": website.published_content_revision if website else None,
        "publishedBrandRevision": website.published_brand_revision if website else None,
        "publishedAt": _iso(website.published_at) if website else None,
        "updatedAt": _iso(website.updated_at) if website else None,
        "draft": draft.content if draft is not None else None,
    }


def _attestation(at: datetime | None, by: uuid.UUID | None) -> dict[str, Any] | None:
    return None if at is None else {"at": _iso(at), "byUserId": str(by) if by else None}


def _app_channel(session: Session, organization_id: uuid.UUID) -> dict[str, Any]:
    draft = session.get(MemberAppDraft, organization_id)
    written = app_draft_written_at(session, organization_id)
    live = live_app_version(session, organization_id)
    latest = latest_app_version(session, organization_id)
    slots = session.scalars(
        select(MemberAppDraftAsset.slot).where(
            MemberAppDraftAsset.organization_id == organization_id
        )
    ).all()
    return {
        "channel": "app",
        "pending": app_pending(written, live.published_at if live else None),
        "live": live is not None,
        "version": live.version if live else None,
        "latestVersion": latest.version if latest else None,
        "publishedAt": _iso(live.published_at) if live else None,
        "updatedAt": _iso(written),
        "draft": {"displayName": draft.display_name if draft else None, "slots": sorted(slots)},
        "attestations": {
            "screenshot": _attestation(
                live.screenshot_attested_at, live.screenshot_attested_by_user_id
            )
            if live
            else None,
            "internalSmoke": _attestation(
                live.internal_smoke_attested_at, live.internal_smoke_attested_by_user_id
            )
            if live
            else None,
        },
    }


def workspace(session: Session, organization_id: uuid.UUID) -> dict[str, Any]:
    """GET /organizations/:orgId/brand-workspace: the channels in publishing order."""
    return {
        "organizationId": str(organization_id),
        "channels": [
            _brand_channel(session, organization_id),
            _website_channel(session, organization_id),
            _app_channel(session, organization_id),
        ],
    }


def channel(session: Session, organization_id: uuid.UUID, name: str) -> dict[str, Any]:
    return {"brand": _brand_channel, "website": _website_channel, "app": _app_channel}[name](
        session, organization_id
    )
