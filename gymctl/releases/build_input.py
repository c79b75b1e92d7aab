"""The administrator-only build input (spec A 2.13): `{app, brand, submission, assets,
assetDownloads}`.

`brand.assets` holds the durable object keys; `assets[name]` is `{key, sha256}` with the digest
computed from the stored object now (a stored object that no longer matches what was published
is refused); `assetDownloads[name]` is a short-lived signed URL, signed afresh on every call and
never stored (it is kept out of every snapshot). The stored objects are read with no write lock
held (`read_live_assets`, decision s42).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from gymctl.assets.intake import owned, recheck
from gymctl.assets.read_ahead import ReadAhead
from gymctl.branding.published import live_app_version, live_brand
from gymctl.config import Settings
from gymctl.db import release_for_outside_call
from gymctl.errors import conflict
from gymctl.models import Organization
from gymctl.models.releases import BrandedApp
from gymctl.providers.storage import ObjectStore
from gymctl.releases import codes, identifiers
from gymctl.releases.associations import link_claims
from gymctl.releases.branded_apps import require_app, require_building
from gymctl.releases.requests import find_request

NATIVE_VERSION = "1.0.6"  # spec A 9: earlier over-the-air updates cannot roll back into it
ASSET_DOWNLOAD_LIFETIME = timedelta(minutes=15)


def asset_digests(
    store: ObjectStore, organization_id: uuid.UUID, published: dict[str, Any]
) -> dict[str, dict[str, str]]:
    """{name: {key, sha256}} from the stored objects themselves. A published object that is
    gone is release_asset_missing before the publish recheck (which calls a missing object
    invalid): the operator restores the file rather than look for what is wrong with it."""
    digests = {}
    for name, entry in sorted(published.items()):
        key = entry["key"]
        if owned(organization_id, key):  # the store is asked about the gym's own keys only
            data = store.get(key)
            if data is None:
                raise conflict(
                    codes.RELEASE_ASSET_MISSING, f"the stored {name} is gone", asset=name
                )
        recheck(store, organization_id, key, slot=name)  # another gym's key, or not a PNG
        digest = hashlib.sha256(data).hexdigest()
        if entry.get("sha256") and entry["sha256"] != digest:
            raise conflict(
                codes.RELEASE_ASSET_DIGEST_MISMATCH,
                f"the stored {name} differs from what was published",
                asset=name,
            )
        digests[name] = {"key": key, "sha256": digest}
    return digests


def app_part(app: BrandedApp, settings: Settings) -> dict[str, Any]:
    return {
        "linkSlug": app.link_slug,
        "urlScheme": identifiers.url_scheme(settings.branded_app_scheme_brand, app.link_slug),
        "appleBundleId": app.apple_bundle_id,
        "androidPackage": app.android_package,
        "nativeVersion": NATIVE_VERSION,
        "configRevision": app.config_revision,
        "links": link_claims(app, settings),
    }


def branding_part(
    session: Session, store: ObjectStore, organization_id: uuid.UUID
) -> tuple[dict[str, Any], dict[str, dict[str, str]]]:
    """(brand, asset digests) of the live brand and member app, each stored asset re-checked."""
    brand = live_brand(session, organization_id)
    if brand is None:
        raise conflict(codes.BRAND_NOT_PUBLISHED, "publish the brand before building the app")
    version = live_app_version(session, organization_id)
    if version is None:
        raise conflict(codes.MEMBER_APP_NOT_PUBLISHED, "publish the member app before building")
    assets = asset_digests(store, organization_id, version.assets)
    return {
        **brand.brand,
        "name": brand.name,
        "displayName": version.display_name,
        "revision": brand.revision,
        "appVersion": version.version,
        "assets": {name: entry["key"] for name, entry in assets.items()},
    }, assets


def read_live_assets(session: Session, store: ObjectStore, organization_id: uuid.UUID) -> ReadAhead:
    """The live member app's stored assets, read before the caller's work (decision s42): the
    transaction that only read ends first, so on the embedded default no write lock is held
    while the store answers; the admin route and the operator's commands held it, every writer
    of every process waiting on the store. The caller then reads its rows afresh and the store
    answers from what was read (a key published meanwhile is read through)."""
    version = live_app_version(session, organization_id)
    keys = sorted(entry["key"] for entry in (version.assets if version else {}).values())
    release_for_outside_call(session)
    ahead = ReadAhead(store)
    for key in keys:
        if owned(organization_id, key):  # another gym's key is refused unread (asset_digests)
            ahead.read(key, body=True)
    return ahead


def build_input(
    session: Session,
    store: ObjectStore,
    settings: Settings,
    organization_id: uuid.UUID,
) -> dict[str, Any]:
    """What a build of the gym's app reads, for a gym that may have the app now
    (`require_building`: a deleted or inactive gym's is 404, below the top tier 409)."""
    require_building(session.get(Organization, organization_id))
    return inputs_from(
        session, read_live_assets(session, store, organization_id), settings, organization_id
    )


def inputs_from(
    session: Session,
    store: ObjectStore,
    settings: Settings,
    organization_id: uuid.UUID,
) -> dict[str, Any]:
    """The build input with `store` answering from what `read_live_assets` read."""
    app = require_app(session, organization_id)
    brand, assets = branding_part(session, store, organization_id)
    request = find_request(session, organization_id)
    submission = (
        {"intake": request.submission, "revision": request.submission_revision}
        if request is not None
        else None
    )
    return {
        "app": app_part(app, settings),
        "brand": brand,
        "submission": submission,
        "assets": assets,
        "assetDownloads": {
            name: store.presign_get(entry["key"], expires=ASSET_DOWNLOAD_LIFETIME)
            for name, entry in assets.items()
        },
    }
