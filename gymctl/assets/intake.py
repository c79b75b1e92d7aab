"""Storing normalized assets and the member app's draft slots (spec A 2.11, asset rules 10, 11).

Each stored slot is a new immutable object under the organization's prefix, written before the
draft row that references it: a failed or repeated upload leaves at most an unreferenced object,
never a changed draft. Draft previews are presigned URLs, signed fresh on every read.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.assets import codes
from gymctl.assets.pipeline import normalize
from gymctl.assets.types import AssetRefused, Slot, Transform
from gymctl.branding.lock import lock_branding
from gymctl.db import release_for_outside_call
from gymctl.errors import DomainError, invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models import BrandAsset, MemberAppDraftAsset
from gymctl.providers.storage import ObjectStore, validate_key

PREVIEW_LIFETIME = timedelta(hours=1)
PNG = "image/png"


def prefix(organization_id: uuid.UUID) -> str:
    return f"organizations/{organization_id}/brand-assets/"


def store_upload(
    session: Session,
    store: ObjectStore,
    *,
    organization_id: uuid.UUID,
    slot: Slot,
    data: bytes,
    transform: Transform,
    source: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    max_bytes: int,
) -> BrandAsset:
    """Normalize, store under a new key, point the draft's slot at it. A refusal records
    branding.asset_rejected (kept: the refusal is audited) and changes nothing else."""
    try:
        result = normalize(data, slot, transform, source=source, max_bytes=max_bytes)
    except AssetRefused as refusal:
        raise reject(
            session,
            refusal,
            organization_id=organization_id,
            slot=slot,
            source=source,
            actor_user_id=actor_user_id,
            now=now,
        ) from None
    key = f"{prefix(organization_id)}{uuid.uuid4()}.png"
    store.put(key, result.png, content_type=PNG)
    asset = BrandAsset(
        organization_id=organization_id,
        slot=slot.value,
        key=key,
        content_type=PNG,
        width=result.width,
        height=result.height,
        bytes=len(result.png),
        sha256=hashlib.sha256(result.png).hexdigest(),
        source=source,
        report=result.report,
        created_by_user_id=actor_user_id,
        created_at=now,
    )
    session.add(asset)
    session.flush()
    _point_draft(session, organization_id, slot, asset.id, now=now)
    emit(
        session,
        EventKind.analytics,
        "branding.asset_normalized",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload=result.report,
    )
    session.flush()
    return asset


def reject(
    session: Session,
    refusal: AssetRefused,
    *,
    organization_id: uuid.UUID,
    slot: Slot,
    source: str,
    actor_user_id: uuid.UUID | None,
    now: datetime,
) -> AssetRefused:
    """Record branding.asset_rejected (no file content or name) and mark the refusal audited
    so the event is kept although the request fails."""
    asset_rejected(
        session,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        now=now,
        asset=slot.value,
        source=source,
        code=refusal.code,
        format=refusal.format.lower() if refusal.format else None,
        width=refusal.width,
        height=refusal.height,
    )
    refusal.audited = True
    return refusal


def asset_rejected(
    session: Session,
    *,
    organization_id: uuid.UUID,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    asset: str,
    source: str,
    code: str,
    format: str | None = None,
    width: int | None = None,
    height: int | None = None,
) -> None:
    """The branding.asset_rejected event: which slot, from where and why, and what the file
    measured (never its content or name)."""
    emit(
        session,
        EventKind.analytics,
        "branding.asset_rejected",
        at=now,
        aggregate_type="organization",
        aggregate_id=organization_id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={
            "asset": asset,
            "source": source,
            "code": code,
            "format": format,
            "width": width,
            "height": height,
        },
    )


def reuse_library_asset(
    session: Session,
    store: ObjectStore,
    *,
    organization_id: uuid.UUID,
    asset_id: uuid.UUID,
    slot: Slot,
    actor_user_id: uuid.UUID | None,
    now: datetime,
    max_bytes: int,
) -> BrandAsset:
    """A brand-library image into a native slot, through the same path as an upload."""
    library = session.get(BrandAsset, asset_id)
    if library is None or library.organization_id != organization_id:
        raise not_found(codes.BRAND_ASSET_NOT_FOUND, "no such brand asset")
    key = library.key
    release_for_outside_call(session)  # only read: no write lock while the store answers
    recheck(store, organization_id, key, slot=slot.value)
    data = store.get(key)
    if data is None:
        raise invalid(codes.BRAND_ASSET_STORED_INVALID, "the stored object is missing")
    return store_upload(
        session,
        store,
        organization_id=organization_id,
        slot=slot,
        data=data,
        transform=Transform(),
        source="library",
        actor_user_id=actor_user_id,
        now=now,
        max_bytes=max_bytes,
    )


class StoredAssetRefused(DomainError):
    """Rule 10's refusal of a stored asset on save or publish. It names the slot, so the
    refusal is also recorded as branding.asset_rejected with source "stored" (spec A 6.2)."""

    def __init__(self, code: str, message: str, *, slot: str) -> None:
        super().__init__(code, message, status=400)
        self.slot = slot


def _under_prefix(organization_id: uuid.UUID, key: str) -> bool:
    return key.startswith(prefix(organization_id)) and ".." not in key


def _storable(key: str) -> bool:
    """A key every object store can hold (the stores' own rule, validate_key): any other names
    no object we stored, and asking a store about it is a fault, not an answer."""
    try:
        validate_key(key)
    except ValueError:
        return False
    return True


def owned(organization_id: uuid.UUID, key: str) -> bool:
    """The key lies under the organization's prefix and a store can hold it: the only keys rule
    10 asks the store about (recheck refuses the others unasked)."""
    return _under_prefix(organization_id, key) and _storable(key)


def recheck(store: ObjectStore, organization_id: uuid.UUID, key: str, *, slot: str) -> None:
    """Rule 10: on save and publish every stored asset is checked again. A key outside the
    organization's prefix is brand_asset_not_owned; one under it that no store can hold (an
    empty or "." segment, a control character, a name over the stores' length) names no object
    we could have stored, so it is refused as a missing one is, brand_asset_stored_invalid,
    without asking the store (which would raise on it)."""
    if not _under_prefix(organization_id, key):
        raise StoredAssetRefused(
            "brand_asset_not_owned", "that asset belongs to another organization", slot=slot
        )
    if not _storable(key):
        raise StoredAssetRefused(
            "brand_asset_stored_invalid", "no stored asset can have that key", slot=slot
        )
    info = store.head(key)
    if info is None or info.content_type != PNG:
        raise StoredAssetRefused(
            "brand_asset_stored_invalid", "the stored asset is missing or not PNG", slot=slot
        )


def save_draft(
    session: Session,
    store: ObjectStore,
    *,
    organization_id: uuid.UUID,
    keys: dict[Slot, str],
    now: datetime,
) -> dict[str, Any]:
    """Point slots at stored assets by key (e.g. restoring an earlier one), re-checking each
    first; any refusal changes nothing. The rows are read, then the transaction that only read
    ends before the store answers (decision s42: no write lock held while it does); a stored
    asset's row and object never change, so what was read stays true."""
    found = _asset_ids(session, organization_id, keys)
    release_for_outside_call(session)
    for slot, key in keys.items():
        recheck(store, organization_id, key, slot=slot.value)
        _require(found[slot], slot)
    for slot, asset_id in found.items():
        _point_draft(session, organization_id, slot, asset_id, now=now)
    session.flush()
    return draft_view(session, store, organization_id)


def point_stored(
    session: Session, *, organization_id: uuid.UUID, keys: dict[Slot, str], now: datetime
) -> None:
    """Point slots at stored assets by key, each object already re-checked by the caller (its
    answers read before its lock: gymctl.branding.rechecks)."""
    found = _asset_ids(session, organization_id, keys)
    for slot, asset_id in found.items():
        _point_draft(session, organization_id, slot, _require(asset_id, slot), now=now)
    session.flush()


def same_rules(slot: Slot) -> tuple[str, ...]:
    """The slots whose normalized images `slot` may take (spec A 2.11): the icon is opaque and
    square, the other three transparent; nothing is derived from a slot with other rules."""
    if slot is Slot.icon:
        return (Slot.icon.value,)
    return tuple(s.value for s in Slot if s is not Slot.icon)


def require_same_rules(slot: Slot, asset: BrandAsset) -> None:
    """A stored asset given by id goes only into a slot with the rules it was normalized for
    (same_rules), refused as a key of another slot is on save."""
    if asset.slot not in same_rules(slot):
        raise StoredAssetRefused(
            "brand_asset_stored_invalid",
            f"that asset was normalized for {asset.slot}, not a slot like {slot.value}",
            slot=slot.value,
        )


def _asset_ids(
    session: Session, organization_id: uuid.UUID, keys: dict[Slot, str]
) -> dict[Slot, uuid.UUID | None]:
    return {
        slot: session.scalar(
            select(BrandAsset.id).where(
                BrandAsset.key == key,
                BrandAsset.organization_id == organization_id,
                BrandAsset.slot.in_(same_rules(slot)),
            )
        )
        for slot, key in keys.items()
    }


def _require(asset_id: uuid.UUID | None, slot: Slot) -> uuid.UUID:
    if asset_id is None:
        raise StoredAssetRefused(
            "brand_asset_stored_invalid",
            f"no stored asset normalized for a slot like {slot.value} has that key",
            slot=slot.value,
        )
    return asset_id


def _point_draft(
    session: Session, organization_id: uuid.UUID, slot: Slot, asset_id: uuid.UUID, *, now: datetime
) -> None:
    """Under the gym's branding lock, as every other draft write: two uploads into one slot at
    once (a double tap, a retry after the client's timeout) both read no row and both inserted
    it, the second a 500 on the key; and a restore or publish reads the slots it locked."""
    lock_branding(session, organization_id)
    row = session.get(MemberAppDraftAsset, (organization_id, slot.value))
    if row is None:
        row = MemberAppDraftAsset(organization_id=organization_id, slot=slot.value)
        session.add(row)
    row.asset_id = asset_id
    row.updated_at = now


def describe(store: ObjectStore, asset: BrandAsset) -> dict[str, Any]:
    return {
        "id": str(asset.id),
        "slot": asset.slot,
        "key": asset.key,
        "width": asset.width,
        "height": asset.height,
        "bytes": asset.bytes,
        "sha256": asset.sha256,
        "previewUrl": store.presign_get(asset.key, expires=PREVIEW_LIFETIME),
    }


def draft_view(session: Session, store: ObjectStore, organization_id: uuid.UUID) -> dict[str, Any]:
    """The draft's slots with previews signed now (never cached)."""
    rows = session.execute(
        select(MemberAppDraftAsset.slot, BrandAsset)
        .join(BrandAsset, BrandAsset.id == MemberAppDraftAsset.asset_id)
        .where(MemberAppDraftAsset.organization_id == organization_id)
    ).all()
    return {"assets": {slot: describe(store, asset) for slot, asset in rows}}
