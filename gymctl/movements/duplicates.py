"""The duplicates report (spec B 4.5 /duplicates): a dry run that writes nothing.

A candidate pair needs embedding cosine similarity at or above the model's threshold (the vector
reads name, instructions and attributes: gymctl.movements.embeddings) AND the same
movement_pattern AND the same variant qualifiers in both names (pronated vs supinated, one arm
vs two, with bands...) AND implements that agree AND a shared primary muscle
(gymctl.movements.evidence). A shared alias or name alone is never evidence: terms held by two
rows are reported apart, as aliasCollisions. Each pair shows its evidence: the parts of its
cosine, what agrees and what differs. The similarity search is blocked matrix products over the
unit vectors (numpy), never a Python double loop.
"""

from __future__ import annotations

import itertools
import uuid
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from gymctl.models import Movement
from gymctl.movements.aliases import fold, qualifiers
from gymctl.movements.embeddings import decode_all, stored_model
from gymctl.movements.evidence import implements_agree, muscles_agree, pair_evidence
from gymctl.movements.references import reference_counts
from gymctl.movements.views import describe

BLOCK_ROWS = 512  # a 512 x 20 000 float32 block is 41 MB at most
DEFAULT_LIMIT = 100


@dataclass(frozen=True)
class Candidate:
    i: int
    j: int
    similarity: float


def similar_pairs(
    vectors: np.ndarray, threshold: float, groups: np.ndarray, *, block: int = BLOCK_ROWS
) -> Iterator[Candidate]:
    """Pairs (i < j) of unit rows with cosine >= threshold and equal `groups` codes.

    Rows of different groups can never pair, so each group is compared only with itself:
    blocked products over the upper triangle of each group's own similarity matrix.
    """
    order = np.argsort(groups, kind="stable")
    starts = np.flatnonzero(np.diff(groups[order], prepend=-1, append=-1))
    for first, last in itertools.pairwise(starts):
        members = order[first:last]
        if len(members) > 1:
            yield from _within(vectors[members], members, threshold, block)


def _within(
    vectors: np.ndarray, members: np.ndarray, threshold: float, block: int
) -> Iterator[Candidate]:
    n = len(vectors)
    for start in range(0, n, block):
        stop = min(start + block, n)
        scores = vectors[start:stop] @ vectors[start:].T  # this block against itself and later
        rows, cols = np.nonzero(scores >= threshold)
        keep = cols > rows
        for r, c in zip(rows[keep], cols[keep], strict=True):
            a, b = int(members[r + start]), int(members[c + start])
            yield Candidate(min(a, b), max(a, b), float(scores[r, c]))


def _group_codes(rows: Sequence[Any]) -> np.ndarray:
    """One integer per movement_pattern: equal codes are the only comparable rows."""
    codes: dict[str | None, int] = {}
    return np.fromiter(
        (codes.setdefault(row.movement_pattern, len(codes)) for row in rows),
        dtype=np.int64,
        count=len(rows),
    )


def _exclusion(a: Any, b: Any) -> str | None:
    """Why a pair above the threshold is not a candidate (the report's counter), or None."""
    if qualifiers(a.name) != qualifiers(b.name):
        return "excludedVariantQualifier"
    if not implements_agree(a.name, a.equipment, b.name, b.equipment):
        return "excludedEquipment"
    if not muscles_agree(a.primary_muscles, b.primary_muscles):
        return "excludedMuscles"
    return None


def duplicates_report(
    session: Session, *, model: str, threshold: float, limit: int = DEFAULT_LIMIT
) -> dict[str, Any]:
    """`model` is the embedder's model; rows embedded by it with the current recipe compare."""
    live = Movement.organization_id.is_(None) & Movement.deleted_at.is_(None)
    rows = session.execute(
        select(
            Movement.id,
            Movement.name,
            Movement.movement_pattern,
            Movement.equipment,
            Movement.primary_muscles,
            Movement.embedding,
        )
        .where(
            live,
            Movement.embedding_model == stored_model(model),
            Movement.embedding.is_not(None),
        )
        .order_by(Movement.slug)
    ).all()
    total = session.scalar(select(func.count()).select_from(Movement).where(live))
    vectors = decode_all([row.embedding for row in rows])
    excluded = dict.fromkeys(
        ("excludedVariantQualifier", "excludedEquipment", "excludedMuscles"), 0
    )
    found: list[Candidate] = []
    if len(rows) > 1:
        groups = _group_codes(rows)
        for candidate in similar_pairs(vectors, threshold, groups):
            reason = _exclusion(rows[candidate.i], rows[candidate.j])
            if reason:
                excluded[reason] += 1
            else:
                found.append(candidate)
    found.sort(key=lambda c: (-c.similarity, rows[c.i].name, rows[c.j].name))
    shown = found[:limit]
    ids = [rows[c.i].id for c in shown] + [rows[c.j].id for c in shown]
    movements = {m.id: m for m in session.scalars(select(Movement).where(Movement.id.in_(ids)))}
    counts = reference_counts(session, ids)
    pairs = []
    for candidate in shown:
        a, b = movements[rows[candidate.i].id], movements[rows[candidate.j].id]
        pairs.append(
            {
                "similarity": round(candidate.similarity, 4),
                "evidence": pair_evidence(a, b, vectors[candidate.i], vectors[candidate.j]),
                "a": describe(a),
                "b": describe(b),
                "references": {str(a.id): counts[a.id], str(b.id): counts[b.id]},
                "suggestedWinnerId": str(suggested_winner(a, b, counts).id),
            }
        )
    return {
        "dryRun": True,
        "model": model,
        "threshold": threshold,
        "considered": len(rows),
        "notEmbedded": (total or 0) - len(rows),
        "candidates": len(found),
        **excluded,
        "pairs": pairs,
        "aliasCollisions": alias_collisions(session),
    }


def suggested_winner(a: Movement, b: Movement, counts: dict[uuid.UUID, dict[str, int]]) -> Movement:
    """The row more workouts use; then the richer one (video, thumbnail, cues); then the older."""

    def weight(m: Movement) -> tuple:
        enriched = sum(bool(x) for x in (m.video_url, m.thumbnail_url, m.cues, m.aliases))
        return (-sum(counts[m.id].values()), -enriched, m.created_at, m.slug)

    return min((a, b), key=weight)


def alias_collisions(session: Session) -> list[dict[str, Any]]:
    """Folded terms (names and aliases) that more than one live canonical row holds."""
    holders: dict[str, dict[uuid.UUID, dict[str, Any]]] = defaultdict(dict)
    rows = session.execute(
        select(Movement.id, Movement.slug, Movement.name, Movement.aliases)
        .where(Movement.organization_id.is_(None), Movement.deleted_at.is_(None))
        .order_by(Movement.slug)
    )
    for row in rows:
        held = {"id": str(row.id), "slug": row.slug, "name": row.name}
        holders[fold(row.name)][row.id] = {**held, "via": "name"}
        for alias in row.aliases or []:
            holders[fold(alias)].setdefault(row.id, {**held, "via": "alias"})
    return [
        {"term": term, "movements": list(held.values())}
        for term, held in sorted(holders.items())
        if term and len(held) > 1
    ]
