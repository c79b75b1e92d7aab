"""Minisites (spec A 2.9, 4, 8): host resolution, the public visual snapshot cache, the draft
preview's tickets, and what a page shows.

A gym's minisite answers at `<slug>.<GYMCTL_MINISITE_DOMAIN>` (resolve) and is rendered by the
API at `{GYMCTL_PUBLIC_URL}/sites/<slug>`. It shows the published website content in the brand
revision the website publish sent. The visual part (appearance and content) is cached per
process for 30 minutes, keyed by those two revisions; the authoritative state (organization
deleted or disabled, website or brand unpublished) is read on every request and clears the
organization's entries, so a negative never waits for the cache. The join URL is never cached.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import jwt
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.access.invitations import frontend
from gymctl.access.join import minisite_join_link
from gymctl.branding import codes
from gymctl.branding.derive import brand as derive_brand
from gymctl.branding.palette import Palette
from gymctl.branding.published import live_brand
from gymctl.config import ConfigError, Settings
from gymctl.errors import DomainError, conflict, forbidden, not_found, unavailable
from gymctl.models import (
    BrandDraft,
    BrandRevision,
    Organization,
    OrganizationStatus,
    Website,
    WebsiteRevision,
)
from gymctl.providers.storage import ObjectStore

SNAPSHOT_LIFETIME = timedelta(minutes=30)
SNAPSHOTS_KEPT = 2048
LOGO_URL_LIFETIME = timedelta(hours=1)  # outlives the snapshot that carries it
PREVIEW_AUDIENCE = "gymctl:minisite-preview"
PREVIEW_TICKET_LIFETIME = timedelta(minutes=15)
LOGO_SLOTS = ("logo", "wordmark")


class SnapshotCache:
    """Visual snapshots by (organization, brand revision, content revision)."""

    def __init__(self, lifetime: timedelta = SNAPSHOT_LIFETIME) -> None:
        self.lifetime = lifetime
        self._entries: dict[tuple, tuple[datetime, dict[str, Any]]] = {}
        self._guard = threading.Lock()

    def get(self, key: tuple, now: datetime) -> dict[str, Any] | None:
        with self._guard:
            entry = self._entries.get(key)
            if entry is None or now - entry[0] >= self.lifetime:
                self._entries.pop(key, None)
                return None
            return entry[1]

    def put(self, key: tuple, snapshot: dict[str, Any], now: datetime) -> None:
        with self._guard:
            if len(self._entries) >= SNAPSHOTS_KEPT:
                oldest = min(self._entries, key=lambda k: self._entries[k][0])
                del self._entries[oldest]
            self._entries[key] = (now, snapshot)

    def evict(self, organization_id: uuid.UUID) -> None:
        with self._guard:
            for key in [k for k in self._entries if k[0] == organization_id]:
                del self._entries[key]


snapshots = SnapshotCache()


def minisite_url(settings: Settings, slug: str) -> str:
    return f"{settings.public_url.rstrip('/')}/sites/{slug}"


def slug_of_host(settings: Settings, host: str) -> str:
    """`<slug>.<GYMCTL_MINISITE_DOMAIN>` (a port is ignored) -> slug; 404 otherwise."""
    name = host.strip().lower().rstrip(".").rsplit(":", 1)[0] if host else ""
    suffix = "." + settings.minisite_domain.lower().strip(".")
    slug = name.removesuffix(suffix)
    if not name.endswith(suffix) or not slug or "." in slug:
        raise not_found(codes.MINISITE_NOT_FOUND, "no minisite answers at that host")
    return slug


@dataclass(frozen=True)
class SiteState:
    organization: Organization
    website: Website


def _negative(organization_id: uuid.UUID | None, code: str, message: str) -> DomainError:
    if organization_id is not None:
        snapshots.evict(organization_id)
    return not_found(code, message)


def site_state(session: Session, slug: str) -> SiteState:
    """The authoritative read behind every public request: 404 for an unknown or deleted gym,
    a disabled one, or a website or brand that is not published."""
    row = session.execute(
        select(Organization, Website)
        .outerjoin(Website, Website.organization_id == Organization.id)
        .where(Organization.slug == slug)
    ).first()
    if row is None:
        raise _negative(None, codes.MINISITE_NOT_FOUND, "no minisite answers at that host")
    organization, website = row
    if organization.deleted_at is not None:
        raise _negative(
            organization.id, codes.MINISITE_NOT_FOUND, "no minisite answers at that host"
        )
    if organization.status is not OrganizationStatus.active:
        raise _negative(organization.id, codes.MINISITE_DISABLED, "this gym's minisite is disabled")
    if (
        website is None
        or website.published_content_revision is None
        or live_brand(session, organization.id) is None
    ):
        raise _negative(
            organization.id, codes.MINISITE_UNPUBLISHED, "this minisite is not published"
        )
    return SiteState(organization, website)


def _logo_url(store: ObjectStore, logos: dict[str, str]) -> str | None:
    key = next((logos[slot] for slot in LOGO_SLOTS if slot in logos), None)
    return store.presign_get(key, expires=LOGO_URL_LIFETIME) if key else None


def _visual(
    organization: Organization,
    *,
    brand: dict[str, Any],
    name: str | None,
    logos: dict[str, str],
    content: dict[str, Any],
    store: ObjectStore,
) -> dict[str, Any]:
    return {
        "name": name or organization.name,
        "logoUrl": _logo_url(store, logos),
        "appearance": {"palette": brand["palette"], "brand": brand},
        "content": content,
    }


def _frame(session: Session, settings: Settings, organization: Organization) -> dict[str, Any]:
    """Who the site is and its platform data; the join URL is read fresh, never cached."""
    platform: dict[str, Any] = {"minisiteUrl": minisite_url(settings, organization.slug)}
    link = minisite_join_link(session, organization)
    if link is not None:
        platform["joinUrl"] = f"{frontend(settings)}/join/{link.token}"
    return {
        "organization": {
            "id": str(organization.id),
            "name": organization.name,
            "slug": organization.slug,
        },
        "platformData": platform,
    }


def published_site(
    session: Session, settings: Settings, store: ObjectStore, slug: str, *, now: datetime
) -> dict[str, Any]:
    """What GET /minisites/resolve answers and the public page shows."""
    state = site_state(session, slug)
    organization, website = state.organization, state.website
    key = (organization.id, website.published_brand_revision, website.published_content_revision)
    visual = snapshots.get(key, now)
    if visual is None:
        revision = session.get(BrandRevision, (organization.id, website.published_brand_revision))
        content = session.get(
            WebsiteRevision, (organization.id, website.published_content_revision)
        )
        visual = _visual(
            organization,
            brand=revision.brand,
            name=revision.name,
            logos=revision.logos,
            content=content.content,
            store=store,
        )
        snapshots.put(key, visual, now)
    return {
        **_frame(session, settings, organization),
        "brandRevision": website.published_brand_revision,
        "contentRevision": website.published_content_revision,
        **visual,
    }


def draft_site(
    session: Session, settings: Settings, store: ObjectStore, organization: Organization
) -> dict[str, Any]:
    """The preview: the brand draft (or the live brand) with the website's draft content."""
    draft = session.get(BrandDraft, organization.id)
    live = live_brand(session, organization.id)
    if draft is not None:
        brand, name, logos = derive_brand(Palette.parse(draft.palette)), draft.name, draft.logos
    elif live is not None:
        brand, name, logos = live.brand, live.name, live.logos
    else:
        raise conflict(codes.BRAND_DRAFT_MISSING, "save a brand draft to preview it")
    website = session.get(Website, organization.id)
    if website is None:
        raise conflict(codes.WEBSITE_DRAFT_MISSING, "save the website's content first")
    content = session.get(WebsiteRevision, (organization.id, website.draft_revision))
    return {
        **_frame(session, settings, organization),
        **_visual(
            organization, brand=brand, name=name, logos=logos, content=content.content, store=store
        ),
    }


# --- preview tickets -----------------------------------------------------------------------


def _secret(settings: Settings) -> bytes:
    try:
        return settings.home_secret(
            "MINISITE_PREVIEW_SERVER_SECRET", settings.minisite_preview_server_secret
        )
    except ConfigError:
        raise unavailable(
            codes.PREVIEW_NOT_CONFIGURED, "MINISITE_PREVIEW_SERVER_SECRET is not set"
        ) from None


def dashboard_origin(settings: Settings) -> str | None:
    """FRONTEND_URL as an origin (scheme and host, no path); None when unset."""
    if not settings.frontend_url:
        return None
    parts = urlsplit(settings.frontend_url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def mint_preview_ticket(
    settings: Settings, organization: Organization, *, now: datetime
) -> dict[str, Any]:
    """A ticket the dashboard posts to {minisite}/preview, minted for FRONTEND_URL (without
    one, the ticket carries no origin and the preview answers 503)."""
    expires_at = now + PREVIEW_TICKET_LIFETIME
    claims: dict[str, Any] = {
        "aud": PREVIEW_AUDIENCE,
        "sub": str(organization.id),
        "iat": int(now.timestamp()),
        "exp": int(expires_at.timestamp()),
    }
    origin = dashboard_origin(settings)
    if origin is not None:
        claims["origin"] = origin
    return {
        "ticket": jwt.encode(claims, _secret(settings), algorithm="HS256"),
        "previewUrl": minisite_url(settings, organization.slug) + "/preview",
        "origin": origin,
        "expiresAt": expires_at.isoformat(),
    }


def verify_preview_ticket(
    settings: Settings, ticket: str, organization_id: uuid.UUID, *, now: datetime
) -> str:
    """The dashboard origin the ticket was minted for (the only one allowed to frame)."""
    try:
        claims = jwt.decode(
            ticket,
            _secret(settings),
            algorithms=["HS256"],
            audience=PREVIEW_AUDIENCE,
            options={"require": ["aud", "sub", "exp"], "verify_exp": False, "verify_iat": False},
        )
    except jwt.PyJWTError:
        raise forbidden(codes.PREVIEW_TICKET_INVALID, "the preview ticket is invalid") from None
    if claims["sub"] != str(organization_id):
        raise forbidden(codes.PREVIEW_TICKET_INVALID, "the ticket is for another site")
    if int(claims["exp"]) <= now.timestamp():
        raise forbidden(codes.PREVIEW_TICKET_EXPIRED, "the preview ticket expired")
    origin = claims.get("origin")
    if not origin:
        raise unavailable(
            codes.STUDIO_PREVIEW_ORIGIN_MISSING,
            "no dashboard origin was minted into the ticket (FRONTEND_URL unset)",
        )
    current = dashboard_origin(settings)
    if current is not None and origin != current:
        raise forbidden(codes.PREVIEW_TICKET_INVALID, "minted for another dashboard")
    return origin
