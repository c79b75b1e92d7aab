"""Publish, unpublish and restore for the three channels (spec A 3).

- Drafts never go live until published. Restore brings a published revision back into the
  draft (default: the live one, i.e. discard the draft's changes); it publishes nothing.
- A publishing run takes the channels in the order brand, website, app and stops at the first
  failure. Each channel commits on its own, then counts as live only when a fresh read shows it:
  the brand's published revision advanced with nothing pending; the site's
  publishedContentRevision equals the draft revision it published; the app version advanced and
  the public branding read (schema 4) reports status published at that version.
- The website publish sends the brand revision read (fresh) after the brand step.
- Publishing writes publishedAt and updatedAt from one instant, and publishing the member app
  starts a version without attestations.
- Analytics are written with the change (the outbox, sent after commit), never for a refused
  write; a refused one records api.request_failed instead.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.assets.intake import point_stored
from gymctl.assets.read_ahead import ReadAhead
from gymctl.assets.types import Slot
from gymctl.branding import codes, minisites
from gymctl.branding.derive import brand as derive_brand
from gymctl.branding.lock import lock_branding
from gymctl.branding.palette import Palette
from gymctl.branding.published import (
    latest_app_version,
    latest_revision,
    live_app_version,
    live_brand,
    public_branding,
)
from gymctl.branding.rechecks import Keys, rechecked_then_locked
from gymctl.branding.refusals import record_refusal
from gymctl.branding.workspace import (
    CHANNELS,
    app_draft_written_at,
    brand_pending,
    save_app_draft,
)
from gymctl.db import session_scope
from gymctl.errors import DomainError, conflict, invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models import (
    BrandAsset,
    BrandDraft,
    BrandRevision,
    MemberAppDraft,
    MemberAppDraftAsset,
    MemberAppVersion,
    Organization,
    Website,
    WebsiteRevision,
)
from gymctl.providers.storage import ObjectStore
from gymctl.releases.candidates import replaces_on_publish, supersede_on_publish

ATTESTATIONS = {"screenshot": "screenshot", "internalSmoke": "internal_smoke"}


def _analytics(
    session: Session,
    name: str,
    organization_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    **payload: Any,
) -> None:
    emit(
        session,
        EventKind.analytics,
        f"branding.{name}",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload=payload,
    )


# --- rule 10's re-check, ahead of the lock (gymctl.branding.rechecks) ----------------------


def _rechecked_then_locked(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    stored_keys: Keys,
    read_bodies: Keys | None = None,
) -> ReadAhead:
    """The channel's lock taken, every stored asset the write takes re-checked and each body
    it reads (`read_bodies`) read with no write lock held; the store answering from those."""
    ahead = ReadAhead(store)
    rechecked_then_locked(
        session,
        ahead,
        organization_id,
        stored_keys,
        lock=lambda: lock_branding(session, organization_id),
        read_bodies=read_bodies,
    )
    return ahead


def _brand_logos(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
    draft = session.get(BrandDraft, organization_id)
    if draft is None:
        raise conflict(codes.BRAND_DRAFT_MISSING, "save a brand draft before publishing it")
    return dict(draft.logos)


def _app_slots(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
    if app_draft_written_at(session, organization_id) is None:
        raise conflict(codes.MEMBER_APP_DRAFT_MISSING, "the member app has no draft to publish")
    if live_brand(session, organization_id) is None:
        raise conflict(codes.BRAND_NOT_PUBLISHED, "publish the brand before the member app")
    rows = session.execute(
        select(MemberAppDraftAsset.slot, BrandAsset.key)
        .join(BrandAsset, BrandAsset.id == MemberAppDraftAsset.asset_id)
        .where(MemberAppDraftAsset.organization_id == organization_id)
    ).all()
    return dict(rows)


def _live_app_assets(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
    """What a replacement candidate digests after a brand publish: the live app's assets."""
    if not replaces_on_publish(session, organization_id):
        return {}
    live = live_app_version(session, organization_id)
    return {name: entry["key"] for name, entry in (live.assets if live else {}).items()}


def _app_slots_digested(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
    """What a replacement candidate digests after an app publish: the version it publishes."""
    return (
        _app_slots(session, organization_id)
        if replaces_on_publish(session, organization_id)
        else {}
    )


# --- brand ---------------------------------------------------------------------------------


def publish_brand(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> BrandRevision:
    ahead = _rechecked_then_locked(session, store, organization_id, _brand_logos, _live_app_assets)
    draft = session.get(BrandDraft, organization_id)
    latest = latest_revision(session, organization_id)
    palette = Palette.parse(draft.palette)
    row = BrandRevision(
        organization_id=organization_id,
        revision=(latest.revision if latest else 0) + 1,
        palette=palette.as_json(),
        name=draft.name,
        logos=dict(draft.logos),
        brand=derive_brand(palette),
        published_at=now,
        published_by_user_id=actor_user_id,
    )
    session.add(row)
    draft.updated_at = now  # one instant for publishedAt and updatedAt
    _analytics(
        session,
        "brand_published",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        revision=row.revision,
        # Installed member apps read the published brand: a live app picks it up at once.
        appPropagated=live_app_version(session, organization_id) is not None,
    )
    session.flush()
    supersede_on_publish(session, organization_id, store=ahead, now=now)
    return row


def unpublish_brand(
    session: Session, organization_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, now: datetime
) -> BrandRevision:
    lock_branding(session, organization_id)
    latest = latest_revision(session, organization_id)
    if latest is None or latest.unpublished_at is not None:
        raise conflict(codes.BRAND_NOT_PUBLISHED, "no brand is published")
    latest.unpublished_at = now
    _analytics(
        session,
        "brand_unpublished",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        revision=latest.revision,
    )
    session.flush()
    supersede_on_publish(session, organization_id, store=None, now=now)
    minisites.snapshots.evict(organization_id)
    return latest


def restore_brand(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    *,
    revision: int | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> BrandDraft:
    """The draft becomes published revision `revision` (default: the live one, as it stands
    under the lock), its logos re-checked with no write lock held while the store answers."""

    def logos(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
        return dict(_brand_revision(session, organization_id, revision).logos)

    _rechecked_then_locked(session, store, organization_id, logos)
    row = _brand_revision(session, organization_id, revision)
    draft = session.get(BrandDraft, organization_id) or BrandDraft(organization_id=organization_id)
    draft.palette, draft.name, draft.logos = dict(row.palette), row.name, dict(row.logos)
    draft.updated_at, draft.updated_by_user_id = now, actor_user_id
    session.add(draft)
    _analytics(
        session,
        "brand_restored",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        revision=row.revision,
    )
    session.flush()
    return draft


def _brand_revision(
    session: Session, organization_id: uuid.UUID, revision: int | None
) -> BrandRevision:
    if revision is None:
        live = live_brand(session, organization_id)
        if live is None:
            raise conflict(codes.BRAND_NOT_PUBLISHED, "no brand is published to restore")
        revision = live.revision
    row = session.get(BrandRevision, (organization_id, revision))
    if row is None:
        raise not_found(codes.BRAND_REVISION_NOT_FOUND, f"no published brand revision {revision}")
    return row


# --- website -------------------------------------------------------------------------------


def publish_website(
    session: Session,
    organization_id: uuid.UUID,
    *,
    brand_revision: int | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Website:
    """`brand_revision` is the live brand as read after the brand step."""
    lock_branding(session, organization_id)
    website = session.get(Website, organization_id)
    if website is None or website.adopted_schema is None:
        raise conflict(codes.WEBSITE_DRAFT_MISSING, "save the website's content before publishing")
    if brand_revision is None:
        raise conflict(codes.BRAND_NOT_PUBLISHED, "publish the brand before the website")
    website.published_content_revision = website.draft_revision
    website.published_brand_revision = brand_revision
    website.published_at = website.updated_at = now
    _analytics(
        session,
        "website_published",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        contentRevision=website.draft_revision,
        brandRevision=brand_revision,
    )
    session.flush()
    return website


def unpublish_website(
    session: Session, organization_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, now: datetime
) -> Website:
    lock_branding(session, organization_id)
    website = session.get(Website, organization_id)
    if website is None or website.published_content_revision is None:
        raise conflict(codes.WEBSITE_NOT_PUBLISHED, "the website is not published")
    revision = website.published_content_revision
    website.published_content_revision = website.published_brand_revision = None
    website.updated_at = now
    _analytics(
        session,
        "website_unpublished",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        contentRevision=revision,
    )
    session.flush()
    minisites.snapshots.evict(organization_id)
    return website


def restore_website(
    session: Session,
    organization_id: uuid.UUID,
    *,
    revision: int | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> Website:
    """The draft points at content revision `revision` again (default: the published one)."""
    lock_branding(session, organization_id)
    website = session.get(Website, organization_id)
    if revision is None:
        if website is None or website.published_content_revision is None:
            raise conflict(codes.WEBSITE_NOT_PUBLISHED, "no published website to restore")
        revision = website.published_content_revision
    if website is None or session.get(WebsiteRevision, (organization_id, revision)) is None:
        raise not_found(codes.WEBSITE_REVISION_NOT_FOUND, f"no website content revision {revision}")
    website.draft_revision = revision
    website.updated_at = now
    _analytics(
        session,
        "website_restored",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        contentRevision=revision,
    )
    session.flush()
    return website


# --- member app ----------------------------------------------------------------------------


def publish_app(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> MemberAppVersion:
    ahead = _rechecked_then_locked(session, store, organization_id, _app_slots, _app_slots_digested)
    brand = live_brand(session, organization_id)
    assets = {
        slot: {"key": asset.key, "sha256": asset.sha256}
        for slot, asset in session.execute(
            select(MemberAppDraftAsset.slot, BrandAsset)
            .join(BrandAsset, BrandAsset.id == MemberAppDraftAsset.asset_id)
            .where(MemberAppDraftAsset.organization_id == organization_id)
        ).all()
    }
    latest = latest_app_version(session, organization_id)
    draft = session.get(MemberAppDraft, organization_id)
    version = MemberAppVersion(
        organization_id=organization_id,
        version=(latest.version if latest else 0) + 1,
        display_name=draft.display_name if draft else None,
        assets=assets,
        brand_revision=brand.revision,
        published_at=now,
        published_by_user_id=actor_user_id,
    )
    session.add(version)
    # publishedAt and updatedAt from one instant: a fresh publish never reads as pending.
    save_app_draft(session, organization_id, display_name=version.display_name, now=now)
    _analytics(
        session,
        "app_published",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        version=version.version,
        brandRevision=brand.revision,
    )
    session.flush()
    supersede_on_publish(session, organization_id, store=ahead, now=now)
    return version


def unpublish_app(
    session: Session, organization_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, now: datetime
) -> MemberAppVersion:
    lock_branding(session, organization_id)
    live = live_app_version(session, organization_id)
    if live is None:
        raise conflict(codes.MEMBER_APP_NOT_PUBLISHED, "the member app is not published")
    live.unpublished_at = now
    _analytics(
        session,
        "app_unpublished",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        version=live.version,
    )
    session.flush()
    supersede_on_publish(session, organization_id, store=None, now=now)
    return live


def restore_app(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    *,
    version: int | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> MemberAppVersion:
    """The draft's slots and settings become version `version` (default: the live one). Back to
    the live version, the draft is stamped with its publishedAt (it equals what is live, so it
    does not read as pending); an older version is a change written now. Its assets are
    re-checked with no write lock held while the store answers."""

    def assets(session: Session, organization_id: uuid.UUID) -> dict[str, str]:
        row = _app_version(session, organization_id, version)
        return {slot: asset["key"] for slot, asset in row.assets.items()}

    _rechecked_then_locked(session, store, organization_id, assets)
    row = _app_version(session, organization_id, version)
    live = live_app_version(session, organization_id)
    stamp = live.published_at if live is not None and live.version == row.version else now
    point_stored(
        session,
        organization_id=organization_id,
        keys={Slot(slot): asset["key"] for slot, asset in row.assets.items()},
        now=stamp,
    )
    session.execute(
        delete(MemberAppDraftAsset).where(
            MemberAppDraftAsset.organization_id == organization_id,
            MemberAppDraftAsset.slot.not_in(list(row.assets)),
        )
    )
    save_app_draft(session, organization_id, display_name=row.display_name, now=stamp)
    _analytics(
        session,
        "app_restored",
        organization_id,
        actor_user_id=actor_user_id,
        now=now,
        version=row.version,
    )
    session.flush()
    return row


def _app_version(
    session: Session, organization_id: uuid.UUID, version: int | None
) -> MemberAppVersion:
    if version is None:
        live = live_app_version(session, organization_id)
        if live is None:
            raise conflict(codes.MEMBER_APP_NOT_PUBLISHED, "no published member app to restore")
        version = live.version
    row = session.get(MemberAppVersion, (organization_id, version))
    if row is None:
        raise not_found(codes.MEMBER_APP_VERSION_NOT_FOUND, f"no member app version {version}")
    return row


def attest_app(
    session: Session,
    organization_id: uuid.UUID,
    kind: str,
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> MemberAppVersion:
    """Record that the live version's screenshots or internal smoke test were checked."""
    if kind not in ATTESTATIONS:
        raise invalid(codes.ATTESTATION_UNKNOWN, "attestations: screenshot, internalSmoke")
    lock_branding(session, organization_id)
    live = live_app_version(session, organization_id)
    if live is None:
        raise conflict(codes.MEMBER_APP_NOT_PUBLISHED, "attestations are for the live version")
    setattr(live, f"{ATTESTATIONS[kind]}_attested_at", now)
    setattr(live, f"{ATTESTATIONS[kind]}_attested_by_user_id", actor_user_id)
    emit(
        session,
        EventKind.audit,
        "member_app.attested",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"kind": kind, "version": live.version},
    )
    session.flush()
    return live


# --- a publishing run ----------------------------------------------------------------------


@dataclass
class ChannelResult:
    channel: str
    result: str  # verified, unverified, failed or skipped
    revision: int | None = None  # brand revision, content revision or app version
    error: DomainError | None = None
    duration_ms: float | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"channel": self.channel, "result": self.result}
        if self.revision is not None:
            body["revision"] = self.revision
        if self.error is not None:
            body["code"] = self.error.code
            body["message"] = self.error.message
        if self.duration_ms is not None:
            body["durationMs"] = self.duration_ms
        return body


def _publish_step(
    session: Session,
    store: ObjectStore,
    organization_id: uuid.UUID,
    channel: str,
    *,
    brand_revision: int | None,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> int:
    if channel == "brand":
        return publish_brand(
            session, store, organization_id, actor_user_id=actor_user_id, now=now
        ).revision
    if channel == "website":
        website = publish_website(
            session,
            organization_id,
            brand_revision=brand_revision,
            actor_user_id=actor_user_id,
            now=now,
        )
        return website.draft_revision
    app = publish_app(session, store, organization_id, actor_user_id=actor_user_id, now=now)
    return app.version


def is_live(session: Session, organization_id: uuid.UUID, channel: str, published: int) -> bool:
    """The fresh read of spec A 3 that decides whether a published channel counts as live."""
    if channel == "brand":
        live = live_brand(session, organization_id)
        return (
            live is not None
            and live.revision == published
            and not brand_pending(
                session.get(BrandDraft, organization_id), latest_revision(session, organization_id)
            )
        )
    if channel == "website":
        website = session.get(Website, organization_id)
        return website is not None and website.published_content_revision == published
    app = live_app_version(session, organization_id)
    organization = session.get(Organization, organization_id)
    if app is None or app.version != published or organization is None:
        return False
    read = public_branding(session, organization_id, organization.name, 4)
    return read["status"] == "published" and read["version"] == published


def publish_channels(
    session_factory: sessionmaker[Session],
    store: ObjectStore,
    organization_id: uuid.UUID,
    channels: list[str] | tuple[str, ...],
    *,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> list[ChannelResult]:
    """Publish the chosen channels in the order brand, website, app, each committed and then
    verified by a fresh read; after a failure (or an unverified channel) the rest are skipped."""
    unknown = set(channels) - set(CHANNELS)
    if unknown or not channels:
        raise invalid(codes.CHANNEL_UNKNOWN, "channels: brand, website, app")
    results: list[ChannelResult] = []
    stopped = False
    for channel in CHANNELS:
        if channel not in channels:
            continue
        if stopped:
            results.append(ChannelResult(channel, "skipped"))
            continue
        started = time.perf_counter()
        try:
            brand_revision = None
            if channel == "website":  # the brand as read after the brand step
                with session_scope(session_factory) as fresh:
                    live = live_brand(fresh, organization_id)
                    brand_revision = live.revision if live else None
            with session_scope(session_factory) as session:
                published = _publish_step(
                    session,
                    store,
                    organization_id,
                    channel,
                    brand_revision=brand_revision,
                    actor_user_id=actor_user_id,
                    now=now,
                )
            with session_scope(session_factory) as fresh:
                verified = is_live(fresh, organization_id, channel, published)
        except DomainError as error:
            with session_scope(session_factory) as session:
                record_refusal(
                    session,
                    organization_id,
                    operation=f"branding.{channel}.publish",
                    error=error,
                    actor_user_id=actor_user_id,
                    now=now,
                )
            results.append(ChannelResult(channel, "failed", error=error))
            stopped = True
            continue
        duration = round((time.perf_counter() - started) * 1000, 2)
        result = "verified" if verified else "unverified"
        results.append(ChannelResult(channel, result, revision=published, duration_ms=duration))
        stopped = not verified
    return results
