"""Which canonical rows a video or cue pass works on, in the spec's order: rows referenced by
workout movements first (most used first), then by slug."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.errors import not_found
from gymctl.models import Movement
from gymctl.movements import codes
from gymctl.movements.references import referenced_ids


def canonical_rows(
    session: Session,
    *,
    ids: Sequence[uuid.UUID] | None = None,
    slugs: Sequence[str] | None = None,
    exclude_manual_video: bool = False,
) -> list[Movement]:
    query = select(Movement).where(
        Movement.organization_id.is_(None), Movement.deleted_at.is_(None)
    )
    if ids:
        query = query.where(Movement.id.in_(list(ids)))
    if slugs:
        query = query.where(Movement.slug.in_(list(slugs)))
    if exclude_manual_video:
        # Spec B 4.5: rows with video_status manual are never touched.
        query = query.where(Movement.video_status != "manual")
    rows = list(session.scalars(query.order_by(Movement.slug)))
    uses = referenced_ids(session)
    return sorted(rows, key=lambda m: -uses.get(m.id, 0))


def require_targets(
    session: Session, *, ids: Sequence[uuid.UUID] | None, slugs: Sequence[str] | None
) -> None:
    """Refuse ids and slugs a pass was asked for that name no live canonical movement (a typo,
    a merged loser, a gym's own movement): a pass filtered by them works on nothing, which
    must not read as "nothing left to do"."""
    live = (Movement.organization_id.is_(None), Movement.deleted_at.is_(None))
    missing: dict[str, list[str]] = {}
    if ids:
        found = set(session.scalars(select(Movement.id).where(Movement.id.in_(list(ids)), *live)))
        if gone := [str(i) for i in dict.fromkeys(ids) if i not in found]:
            missing["ids"] = gone
    if slugs:
        found_slugs = set(
            session.scalars(select(Movement.slug).where(Movement.slug.in_(list(slugs)), *live))
        )
        if gone := [s for s in dict.fromkeys(slugs) if s not in found_slugs]:
            missing["slugs"] = gone
    if missing:
        names = ", ".join(name for group in missing.values() for name in group)
        raise not_found(codes.MOVEMENT_NOT_FOUND, f"no canonical movement {names}", **missing)
