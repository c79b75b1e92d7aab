"""Thumbnails (spec B 4.5 /thumbnails, PUT .../thumbnail).

Canonical rows get a generated image stored at movements/thumbnails/<slug>.png in the public
images bucket, and thumbnailUrl = <public base>/movements/thumbnails/<slug>.png. Without the
image-generation key or the public base it is a no-op that says so. A gym uploads its own
movement's thumbnail (PNG, JPEG or WebP, at most 5 MB). Both paths use the asset pipeline's
sniffing, pixel ceiling and PNG encoder (its slot rules are for app icons and logos, not here).
"""

from __future__ import annotations

import io
import uuid
import warnings
from datetime import datetime
from typing import Any

import numpy as np
from PIL import Image, ImageOps
from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.assets.pipeline import MAX_SOURCE_PIXELS, sniff
from gymctl.assets.png import encode as encode_png
from gymctl.config import Settings
from gymctl.db import release_for_outside_call
from gymctl.errors import DomainError, conflict, invalid, too_large
from gymctl.events import EventKind, emit
from gymctl.models import Movement, MovementJob
from gymctl.movements import codes
from gymctl.movements.audit import audit
from gymctl.movements.clients import ImageGenerator
from gymctl.movements.own import owned_movement
from gymctl.movements.units import Checkpoint, fresh, keep
from gymctl.providers.storage import ObjectStore

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
THUMBNAIL_SIDE = 1024
PNG = "image/png"
PROMPT = (
    "A clean, friendly flat illustration of a person performing the exercise '{name}' "
    "({equipment}), side view, plain light background, no text."
)


def disabled_reason(settings: Settings, images: ImageGenerator | None) -> str | None:
    if images is None:
        return "thumbnails are disabled: GYMCTL_IMAGE_GEN_KEY is unset"
    if not settings.public_images_base_url:
        return "thumbnails are disabled: GYMCTL_PUBLIC_IMAGES_BASE_URL is unset"
    return None


def thumbnail_key(slug: str) -> str:
    return f"movements/thumbnails/{slug}.png"


def public_url(settings: Settings, key: str) -> str:
    return f"{(settings.public_images_base_url or '').rstrip('/')}/{key}"


def rows_needing_thumbnails(session: Session, *, force: bool) -> list[Movement]:
    """Canonical rows missing a thumbnail (all with force), less those already queued."""
    query = select(Movement).where(
        Movement.organization_id.is_(None), Movement.deleted_at.is_(None)
    )
    if not force:
        query = query.where(Movement.thumbnail_url.is_(None))
    queued = {
        job.payload.get("movementId")
        for job in session.scalars(
            select(MovementJob).where(
                MovementJob.kind == "thumbnail", MovementJob.status.in_(("queued", "running"))
            )
        )
    }
    return [m for m in session.scalars(query.order_by(Movement.slug)) if str(m.id) not in queued]


def _png(data: bytes) -> bytes:
    """A still PNG, JPEG or WebP read under the pipeline's pixel ceiling, upright, fitted to
    1024 px and written by the pipeline's PNG encoder; anything else is refused."""
    kind = sniff(data)
    if kind is None:
        raise _invalid("only PNG, JPEG and WebP are accepted")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data), formats=[kind])
            if image.width * image.height > MAX_SOURCE_PIXELS:
                raise _invalid("over 40 megapixels")
            if getattr(image, "n_frames", 1) > 1:
                raise _invalid("animated images are not accepted")
            image.load()
            image = ImageOps.exif_transpose(image)
    except (OSError, SyntaxError, ValueError, EOFError, Image.DecompressionBombError):
        raise _invalid("the file cannot be read") from None
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.LANCZOS)
    mode = "RGBA" if "A" in image.getbands() or "transparency" in image.info else "RGB"
    return encode_png(np.asarray(image.convert(mode)))


def _invalid(message: str) -> DomainError:
    return invalid(codes.MOVEMENT_THUMBNAIL_INVALID, message)


def generate_thumbnail(
    session: Session,
    images: ImageGenerator,
    store: ObjectStore,
    settings: Settings,
    *,
    movement_id: uuid.UUID,
    force: bool,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """Generate and store the image with no transaction open (units.py), then set the URL on
    the row as it is by then (stored again by a retry: same key, same URL)."""
    movement = session.get(Movement, movement_id)
    if not _live_canonical(movement):
        return {"movementId": str(movement_id), "skipped": "not a live canonical movement"}
    if movement.thumbnail_url and not force:
        return {"movementId": str(movement_id), "skipped": "has a thumbnail"}
    prompt = PROMPT.format(name=movement.name, equipment=movement.equipment or "no equipment")
    key = thumbnail_key(movement.slug)
    checkpoint()
    png = _png(images.generate(prompt))
    store.put(key, png, content_type=PNG)
    movement = fresh(session, movement_id)
    if not _live_canonical(movement):
        return {"movementId": str(movement_id), "skipped": "not a live canonical movement"}
    movement.thumbnail_url = public_url(settings, key)
    movement.updated_at = now
    payload = {"thumbnailUrl": movement.thumbnail_url}
    audit(session, movement, "movements.thumbnail_generated", now, actor_user_id, payload)
    return {
        "movementId": str(movement.id),
        "slug": movement.slug,
        "thumbnailUrl": movement.thumbnail_url,
    }


def _live_canonical(movement: Movement | None) -> bool:
    return movement is not None and movement.deleted_at is None and not movement.organization_id


def upload_thumbnail(
    session: Session,
    store: ObjectStore,
    settings: Settings,
    *,
    organization_id: uuid.UUID,
    movement_id: uuid.UUID,
    data: bytes,
    now: datetime,
    actor_user_id: uuid.UUID | None,
) -> Movement:
    """The image is decoded and stored with no write lock held (release_for_outside_call: on
    the embedded default every writer of every process waited on the decoding and the store),
    then its URL is set on the row locked again (404 if it was deleted meanwhile)."""
    movement = owned_movement(session, organization_id, movement_id)
    if not settings.public_images_base_url:
        raise conflict(codes.THUMBNAILS_DISABLED, "GYMCTL_PUBLIC_IMAGES_BASE_URL is unset")
    if len(data) > MAX_UPLOAD_BYTES:
        raise too_large(codes.MOVEMENT_THUMBNAIL_TOO_LARGE, "at most 5 MB")
    # A new key per upload: cached copies of the old image never stand in for the new one.
    key = f"movements/thumbnails/{organization_id}/{movement.slug}-{uuid.uuid4().hex[:12]}.png"
    release_for_outside_call(session)
    png = _png(data)
    store.put(key, png, content_type=PNG)
    movement = owned_movement(session, organization_id, movement_id)
    movement.thumbnail_url = public_url(settings, key)
    movement.updated_at = now
    emit(
        session,
        EventKind.audit,
        "movements.thumbnail_uploaded",
        at=now,
        aggregate_type="movement",
        aggregate_id=movement.id,
        organization_id=organization_id,
        actor_user_id=actor_user_id,
        payload={"thumbnailUrl": movement.thumbnail_url, "bytes": len(png)},
    )
    return movement
