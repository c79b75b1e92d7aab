"""A gym's own movements (organization_id set): create, edit and delete by its coaches and up.

They live beside the canonical library, never in it: the duplicates report, merges and the
library jobs read canonical rows only, so no embedding is made here. A thumbnail comes only
through the upload route (spec B 4.5: png, jpeg or webp, at most 5 MB), never as a URL in these
bodies. A video URL a coach sets is a person's choice (video_status manual: ranking never touches
it). The slug comes from the name at creation (from the row's id for a name with no ASCII
form) and stays (thumbnail keys and links use it); a deleted row is soft-deleted, so workouts
that used it still resolve, and its slug is freed.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import DomainError, conflict, forbidden, invalid, not_found
from gymctl.ids import new_id
from gymctl.models import Movement
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.movements import codes
from gymctl.movements.aliases import merge_aliases
from gymctl.movements.audit import audit
from gymctl.movements.library import slugify

EDITABLE = (
    "name",
    "aliases",
    "category",
    "kind",
    "movement_pattern",
    "equipment",
    "primary_muscles",
    "secondary_muscles",
    "mechanic",
    "instructions",
    "cues",
    "common_faults",
    "scaling_options",
    "video_url",
)
_LISTS = {
    "aliases",
    "primary_muscles",
    "secondary_muscles",
    "instructions",
    "cues",
    "common_faults",
    "scaling_options",
}


def owned_movement(
    session: Session, organization_id: uuid.UUID, movement_id: uuid.UUID
) -> Movement:
    """The gym's live movement, locked; a canonical one is 403 movement_not_owned, anything
    else (another gym's, deleted, unknown) 404."""
    movement = session.get(Movement, movement_id, with_for_update=True)
    if movement is None or movement.deleted_at is not None:
        raise not_found(codes.MOVEMENT_NOT_FOUND, "no such movement")
    if movement.organization_id != organization_id:
        if movement.organization_id is None:
            raise forbidden(
                codes.MOVEMENT_NOT_OWNED,
                "canonical movements are changed through the library, not by a gym",
            )
        raise not_found(codes.MOVEMENT_NOT_FOUND, "no such movement")
    return movement


def create_own(
    session: Session,
    *,
    organization_id: uuid.UUID,
    fields: dict[str, Any],
    slug: str | None = None,
    now: datetime,
    actor_user_id: uuid.UUID | None,
) -> Movement:
    movement_id = new_id()
    slug = _slug(slug or fields["name"], movement_id)
    if not slug:
        raise invalid(codes.MOVEMENT_SLUG_INVALID, "the name or slug has no letters or digits")
    movement = Movement(
        id=movement_id,
        organization_id=organization_id,
        slug=slug,
        video_status="none",
        video_candidates=[],
        video_rejected_ids=[],
        created_at=now,
        updated_at=now,
    )
    for name in EDITABLE:
        setattr(movement, name, [] if name in _LISTS else None)
    _apply(movement, fields)
    taken = session.scalar(
        select(Movement.id).where(
            Movement.organization_id == organization_id, Movement.slug == slug
        )
    )
    if taken is not None:
        raise _slug_taken(slug)
    try:
        with unique_violation("uq_movements_organization_slug"), session.begin_nested():
            session.add(movement)
            session.flush()
    except UniqueViolation:
        raise _slug_taken(slug) from None
    audit(session, movement, "movements.created", now, actor_user_id, {"after": _state(movement)})
    return movement


def edit_own(
    session: Session,
    *,
    organization_id: uuid.UUID,
    movement_id: uuid.UUID,
    changes: dict[str, Any],
    now: datetime,
    actor_user_id: uuid.UUID | None,
) -> Movement:
    """Only the fields given change; an edit that changes nothing writes nothing."""
    movement = owned_movement(session, organization_id, movement_id)
    before = _state(movement)
    _apply(movement, changes)
    after = _state(movement)
    changed = {k: v for k, v in after.items() if before[k] != v}
    if changed:
        movement.updated_at = now
        payload = {"before": {k: before[k] for k in changed}, "after": changed}
        audit(session, movement, "movements.edited", now, actor_user_id, payload)
    return movement


def delete_own(
    session: Session,
    *,
    organization_id: uuid.UUID,
    movement_id: uuid.UUID,
    now: datetime,
    actor_user_id: uuid.UUID | None,
) -> Movement:
    movement = owned_movement(session, organization_id, movement_id)
    slug = movement.slug
    movement.deleted_at = movement.updated_at = now
    movement.slug = f"{slug[:140]}~deleted-{movement.id.hex[:8]}"  # frees the slug for reuse
    audit(session, movement, "movements.deleted", now, actor_user_id, {"slug": slug})
    return movement


def _slug(text: str, movement_id: uuid.UUID) -> str:
    """The text's slug. Slugs are ASCII (thumbnail keys and links use them), so a name written
    in a script with no ASCII form (Hebrew, Arabic, Cyrillic) folds to nothing: it has letters
    all the same, and its slug comes from the row's id. Empty for a text with no letter or
    digit at all."""
    slug = slugify(text)
    if slug or not any(character.isalnum() for character in text):
        return slug
    return f"movement-{movement_id.hex[:8]}"


def _apply(movement: Movement, fields: dict[str, Any]) -> None:
    for name in EDITABLE:
        if name not in fields:
            continue
        value = fields[name]
        if name in _LISTS:
            value = list(value or [])
        if name == "aliases":
            value = merge_aliases([], value, name=fields.get("name", movement.name))
        setattr(movement, name, value)
    if "video_url" in fields:
        movement.video_status = "manual" if movement.video_url else "none"
    if "name" in fields and "aliases" not in fields:
        movement.aliases = merge_aliases([], movement.aliases or [], name=movement.name)


def _state(movement: Movement) -> dict[str, Any]:
    return {name: getattr(movement, name) for name in EDITABLE}


def _slug_taken(slug: str) -> DomainError:
    return conflict(codes.MOVEMENT_SLUG_TAKEN, f"this gym already has a movement {slug}", slug=slug)
