"""Member-app asset intake (spec A 4): upload into a slot, reuse a brand-library image, read and
save the draft's slots, and the signed route that serves the embedded default's stored files."""

from __future__ import annotations

import uuid
from datetime import timedelta

from flask import Blueprint, Response, jsonify, request
from pydantic import Field
from werkzeug.exceptions import RequestEntityTooLarge

from gymctl.access.permissions import Action, Module
from gymctl.assets import intake
from gymctl.assets.types import AssetRefused, Slot, Transform
from gymctl.errors import forbidden, not_found
from gymctl.providers.storage import FolderObjectStore
from webhooks import codes
from webhooks.access import membership, org_route
from webhooks.blueprints.branding import recorded
from webhooks.bodies import reads_its_own_body
from webhooks.context import db, now, services
from webhooks.guard import public
from webhooks.throttle import throttle
from webhooks.validation import Body, parse

bp = Blueprint("branding_assets", __name__)
ORG = "/organizations/<uuid:org_id>"
UPLOADS_PER_WINDOW = 20  # spec A 8: per 60 000 ms window per route
WINDOW = timedelta(milliseconds=60_000)
MULTIPART_OVERHEAD = 64 * 1024  # headers and the transform part around the file


def _slot(name: str) -> Slot:
    try:
        return Slot(name)
    except ValueError:
        raise not_found(
            codes.BRAND_ASSET_SLOT_UNKNOWN, "slots: icon, logo, wordmark, splashLogo"
        ) from None


def _throttle(route: str, org_id: uuid.UUID) -> None:
    throttle(f"{route}:{org_id}", limit=UPLOADS_PER_WINDOW, window=WINDOW)


def _file_and_transform(slot: Slot) -> tuple[bytes, Transform]:
    """One file part and an optional `transform` text part. The body is refused while it
    streams in once it passes the limit, not after buffering it all."""
    limit = services().settings.max_brand_asset_bytes
    request.max_content_length = limit + MULTIPART_OVERHEAD
    if request.mimetype != "multipart/form-data":
        raise AssetRefused("brand_asset_multipart", "send multipart/form-data with one file")
    try:
        files = request.files
        form = request.form
    except RequestEntityTooLarge:
        raise AssetRefused("brand_asset_size", "the upload is over the size limit") from None
    parts = list(files.values())
    if len(parts) != 1 or len(files.getlist(next(iter(files)))) != 1:
        raise AssetRefused("brand_asset_multipart", "exactly one file part is expected")
    data = parts[0].read(limit + 1)
    if len(data) > limit:
        raise AssetRefused("brand_asset_size", "the upload is over the size limit")
    return data, Transform.parse(form.get("transform"), slot)


@bp.post(f"{ORG}/branding/assets/<name>")
@reads_its_own_body
@org_route(Module.branding, Action.manage)
@recorded("branding.assets.upload")
def upload(org_id, name):
    slot = _slot(name)
    _throttle("branding.assets.upload", org_id)
    try:
        data, transform = _file_and_transform(slot)
    except AssetRefused as refusal:
        raise intake.reject(
            db(),
            refusal,
            organization_id=org_id,
            slot=slot,
            source="upload",
            actor_user_id=membership().user_id,
            now=now(),
        ) from None
    asset = intake.store_upload(
        db(),
        services().store,
        organization_id=org_id,
        slot=slot,
        data=data,
        transform=transform,
        source="upload",
        actor_user_id=membership().user_id,
        now=now(),
        max_bytes=services().settings.max_brand_asset_bytes,
    )
    return jsonify(intake.describe(services().store, asset)), 201


@bp.post(f"{ORG}/brand-assets/<uuid:asset_id>/native/<slot_name>")
@org_route(Module.branding, Action.manage)
@recorded("branding.assets.native")
def reuse(org_id, asset_id, slot_name):
    slot = _slot(slot_name)
    _throttle("branding.assets.native", org_id)
    asset = intake.reuse_library_asset(
        db(),
        services().store,
        organization_id=org_id,
        asset_id=asset_id,
        slot=slot,
        actor_user_id=membership().user_id,
        now=now(),
        max_bytes=services().settings.max_brand_asset_bytes,
    )
    return jsonify(intake.describe(services().store, asset)), 201


@bp.get(f"{ORG}/branding/assets")
@org_route(Module.branding, Action.view)
def draft(org_id):
    return jsonify(intake.draft_view(db(), services().store, org_id))


class SaveDraft(Body):
    assets: dict[Slot, str] = Field(min_length=1)


@bp.put(f"{ORG}/branding/assets")
@org_route(Module.branding, Action.manage)
@recorded("branding.assets.save")
def save(org_id):
    body = parse(SaveDraft)
    return jsonify(
        intake.save_draft(
            db(), services().store, organization_id=org_id, keys=body.assets, now=now()
        )
    )


@bp.get("/storage/<path:key>")
@public
def stored_file(key):
    """The embedded default's presigned URLs land here; S3 serves its own."""
    store = services().store
    if not isinstance(store, FolderObjectStore) or not store.verify_signature(
        key, request.args.get("expires", ""), request.args.get("signature", ""), now()
    ):
        raise forbidden(codes.STORAGE_SIGNATURE_INVALID, "the link is invalid or expired")
    info, data = store.head(key), store.get(key)
    if info is None or data is None:
        raise not_found(codes.STORAGE_OBJECT_NOT_FOUND, "no such object")
    return Response(
        data, mimetype=info.content_type, headers={"Cache-Control": "private, max-age=300"}
    )
