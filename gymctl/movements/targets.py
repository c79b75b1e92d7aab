"""Which canonical rows a video or cue pass works on, in the spec's order: rows referenced by
workout movements first (most used first), then by slug."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import Movement
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
