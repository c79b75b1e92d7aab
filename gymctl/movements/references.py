"""The tables that reference movements: counted for the duplicates report, repointed by a merge.
A new referencing table is one more row here."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from gymctl.models import Movement, WorkoutMovement

REFERENCES = {"workout_movements": WorkoutMovement.movement_id}


def reference_counts(session: Session, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, dict[str, int]]:
    ids = list(dict.fromkeys(ids))
    counts = {movement_id: dict.fromkeys(REFERENCES, 0) for movement_id in ids}
    for table, column in REFERENCES.items():
        for chunk in range(0, len(ids), 1000):
            rows = session.execute(
                select(column, func.count())
                .where(column.in_(ids[chunk : chunk + 1000]))
                .group_by(column)
            )
            for movement_id, count in rows:
                counts[movement_id][table] = count
    return counts


def repoint(session: Session, loser: Movement, winner: Movement) -> dict[str, int]:
    moved = {}
    for table, column in REFERENCES.items():
        result = session.execute(
            update(column.class_).where(column == loser.id).values({column.key: winner.id})
        )
        moved[table] = result.rowcount
    return moved


def referenced_ids(session: Session) -> dict[uuid.UUID, int]:
    """Movements referenced by workout movements, with how often (ranking order)."""
    column = REFERENCES["workout_movements"]
    return dict(session.execute(select(column, func.count()).group_by(column)).all())
