"""Thumbnails (spec B 4.5 /thumbnails, PUT .../thumbnail).

Canonical rows get a generated image stored at movements/thumbnails/<slug>.png in the public
images bucket, and thumbnailUrl = <public base>/movements/thumbnails/<slug>.png. Without the
image-generation key or the public base it is a no-op that says so. A gym uploads its own
movement's thumbnail (PNG, JPEG or WebP, at most 5 MB). Both paths use the asset pipeline's
sniffing, pixel ceiling and PNG encoder (its slot rules are for app icons and logos, not here).

A gym's uploaded objects are deleted by the upload path itself, never by a guess: the new object
when its movement is gone before its URL is written (no row ever named it), the replaced one
after the commit that stops naming it (delete_after_commit); neither while a transaction is open.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
import warnings
from datetime import datetime
from typing import Any

import numpy as np
from PIL import Image, ImageOps
from sqlalchemy import event, select
from sqlalchemy.orm import Session, SessionTransaction

from gymctl.assets.pipeline import MAX_SOURCE_PIXELS, has_alpha, sniff, working
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
from gymctl.providers.storage import ObjectStore, StorageError, validate_key

log = logging.getLogger("gymctl.movements")

MAX_UPLOAD_BYTES = 5 * 1024 * 1024
THUMBNAIL_SIDE = 1024
UPLOAD_SUFFIX = re.compile(r"[0-9a-f]{12}\.png")  # after "<slug>-" in an upload's key
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
    # 8-bit first, as the pipeline does: a plain convert clipped 16-bit grey to white.
    image = working(image, "RGBA" if has_alpha(image) else "RGB")
    image.thumbnail((THUMBNAIL_SIDE, THUMBNAIL_SIDE), Image.Resampling.LANCZOS)
    return encode_png(np.asarray(image))


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
    try:
        movement = owned_movement(session, organization_id, movement_id)
    except DomainError:
        # Deleted meanwhile (the embedded default holds no lock across the store): the new key
        # is this upload's own and no row, committed or not, ever named it. The read ends first.
        release_for_outside_call(session)
        _delete_quietly(store, key)
        raise
    replaced = uploaded_key(settings, organization_id, movement.slug, movement.thumbnail_url)
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
    if replaced is not None and replaced != key:
        delete_after_commit(session, store, replaced)
    return movement


def uploaded_key(
    settings: Settings, organization_id: uuid.UUID, slug: str, url: str | None
) -> str | None:
    """The object key behind `url` when it is one of this gym's uploads for this movement
    (upload_thumbnail's keys: a new one per upload, named by this movement's row alone); None
    for anything else (a canonical or outside URL, another base), which is never deleted."""
    base = public_url(settings, "")
    if not url or not settings.public_images_base_url or not url.startswith(base):
        return None
    key = url.removeprefix(base)
    own = f"movements/thumbnails/{organization_id}/{slug}-"
    if not key.startswith(own) or not UPLOAD_SUFFIX.fullmatch(key.removeprefix(own)):
        return None
    try:
        return validate_key(key)
    except ValueError:
        return None


# -- deleting an object once no committed row names it -----------------------------------------

_AFTER_COMMIT = "gymctl_delete_after_commit"  # session.info: [(store, key)] of the transaction


def delete_after_commit(session: Session, store: ObjectStore, key: str) -> None:
    """Delete `key` from `store` once the session's transaction commits: that commit is the one
    that stops naming it. A rollback (or a close without commit) forgets it, so an object a
    committed row still names is never deleted; a failed delete leaves an unnamed object (logged),
    never a row naming a missing one. The delete runs after the commit, with no transaction open."""
    session.info.setdefault(_AFTER_COMMIT, []).append((store, key))


@event.listens_for(Session, "after_commit")
def _delete_committed(session: Session) -> None:
    if session.in_nested_transaction():
        return  # a savepoint released: the transaction that stops naming the key is still open
    for store, key in session.info.pop(_AFTER_COMMIT, ()):
        _delete_quietly(store, key)


@event.listens_for(Session, "after_soft_rollback")
def _forget_rolled_back(session: Session, _previous: SessionTransaction) -> None:
    session.info.pop(_AFTER_COMMIT, None)  # any rollback, a savepoint's too: keep the objects


@event.listens_for(Session, "after_transaction_end")
def _forget_uncommitted(session: Session, transaction: SessionTransaction) -> None:
    if transaction.parent is None:  # closed without a commit (after_commit popped the list)
        session.info.pop(_AFTER_COMMIT, None)


def _delete_quietly(store: ObjectStore, key: str) -> None:
    """A delete the caller's answer does not hang on: a store that fails leaves the object
    unnamed (a cost, not an error), logged with its key."""
    try:
        store.delete(key)
    except StorageError as error:
        log.warning("thumbnail object not deleted", extra={"key": key, "error": str(error)})
