"""Merging duplicates and removing aliases (spec B 4.5 /merge, /alias-change).

A wrong merge corrupts every workout that used the loser, so each write has a dry run that
counts and writes nothing, runs under the library lock with its rows locked in id order, and
leaves an audit row with what it changed.

The embedder may be a remote service: no write lock is held while it answers (decision s42; on
the embedded default that lock holds every writer of every process). A write's vectors are
computed first from the rows read with no lock (`_Vectors`), the transaction that only read
ends, and the rows are read again until each text the write will store is embedded; then the
lock is taken and the write runs as before, each winner taking the vector of its text as read
under the lock. A vector is a function of its text alone, so one computed ahead stays right; a
text that changed in every round is embedded under the lock (slower for others, never wrong).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import exists, inspect, select, update
from sqlalchemy.orm import Session, aliased

from gymctl.config import VIDEO_SCORE_THRESHOLD
from gymctl.db import advisory_lock, release_for_outside_call
from gymctl.errors import conflict, invalid, not_found
from gymctl.events import EventKind, emit
from gymctl.models import Movement, MovementVideoReport
from gymctl.movements import codes
from gymctl.movements.aliases import fold, merge_aliases
from gymctl.movements.audit import ALIAS_CHANGED, alias_removals
from gymctl.movements.embeddings import Embedder, embed_movements, embedding_parts
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.ranking import choose, is_rejected, reported_out
from gymctl.movements.references import repoint

LIBRARY_LOCK = "movements:library"
# Filled on the winner from the loser when the winner has none: media moves with the merge
# (the video too, unless the winner rejected it; rejected ids and members' reports are united).
_CARRIED = ("thumbnail_url", "cues", "common_faults", "scaling_options")
AHEAD_ROUNDS = 3


def lock_canonical(session: Session, ids: Sequence[uuid.UUID]) -> dict[uuid.UUID, Movement]:
    """The library lock, then the rows FOR UPDATE in id order; any id not canonical is 404."""
    session.connection()  # the write transaction first (db.advisory_lock on SQLite)
    advisory_lock(session, LIBRARY_LOCK)
    wanted = sorted(set(ids))
    rows = session.scalars(
        select(Movement)
        .where(Movement.id.in_(wanted), Movement.organization_id.is_(None))
        .order_by(Movement.id)
        .with_for_update()
        .execution_options(populate_existing=True)  # rows read ahead (_Vectors): as stored now
    ).all()
    found = {row.id: row for row in rows}
    missing = [str(i) for i in wanted if i not in found]
    if missing:
        raise not_found(codes.MOVEMENT_NOT_FOUND, "no canonical movement with this id", ids=missing)
    return found


class _Vectors:
    """Vectors by the text they read (embedding_parts), computed before the library lock."""

    def __init__(self, embedder: Embedder | None) -> None:
        self.embedder = embedder
        self.known: dict[tuple[str, str, str], tuple[bytes, str]] = {}

    def ahead(self, session: Session, ids: Iterable[uuid.UUID], after: Any) -> None:
        """Read the rows (no lock), `after(views)` gives the rows the write will embed; each text
        not known yet is embedded with the transaction that only read ended, then read again."""
        for _ in range(AHEAD_ROUNDS):
            views = _views(session, ids)
            wanted = {embedding_parts(v): v for v in after(views)}
            missing = [v for parts, v in wanted.items() if parts not in self.known]
            if not missing:
                return
            release_for_outside_call(session)
            self._embed(missing)

    def apply(self, movement: Movement) -> None:
        """The row as it stands under the lock takes the vector of its text."""
        parts = embedding_parts(movement)
        if parts not in self.known:  # changed in every round: embedded under the lock
            self._embed([_view(movement)])
        movement.embedding, movement.embedding_model = self.known[parts]

    def _embed(self, views: list[SimpleNamespace]) -> None:
        embed_movements(self.embedder, views)
        for view in views:
            self.known[embedding_parts(view)] = (view.embedding, view.embedding_model)


def _view(movement: Movement) -> SimpleNamespace:
    """A copy of the row's columns: read before its transaction ends, changed by no one."""
    return SimpleNamespace(
        **{column.key: getattr(movement, column.key) for column in inspect(Movement).column_attrs}
    )


def _views(session: Session, ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, SimpleNamespace]:
    rows = session.scalars(
        select(Movement).where(
            Movement.id.in_(sorted(set(ids))), Movement.organization_id.is_(None)
        )
    ).all()
    return {row.id: _view(row) for row in rows}


def _winners_after(
    views: dict[uuid.UUID, SimpleNamespace], pairs: Sequence[tuple[uuid.UUID, uuid.UUID]]
) -> list[SimpleNamespace]:
    """Each pair's winner as its merge will leave it: of what a vector reads, only the aliases
    change. A pair the locked run will refuse or skip is left out."""
    winners = []
    for winner_id, loser_id in pairs:
        winner, loser = views.get(winner_id), views.get(loser_id)
        if winner is None or loser is None or winner.deleted_at or loser.deleted_at:
            continue
        winner.aliases = _aliases_after(winner, loser)
        loser.deleted_at = True
        winners.append(SimpleNamespace(**vars(winner)))
    return winners


def merge_pairs(
    session: Session,
    embedder: Embedder,
    pairs: Sequence[tuple[uuid.UUID, uuid.UUID]],
    *,
    dry_run: bool,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    progress: Progress = SILENT,
    video_threshold: float = VIDEO_SCORE_THRESHOLD,
) -> dict[str, Any]:
    """Each pair is (winnerId, loserId), applied in order. A refusal anywhere changes nothing at
    all. `video_threshold`: the configured GYMCTL_VIDEO_SCORE_THRESHOLD, for a winner whose
    shown video the loser had rejected (it is chosen again, as a demotion does).

    A dry run is the real run in a savepoint that is rolled back, so it cannot drift from it:
    each pair sees what the pairs before it did (`A:B B:A` refuses the second pair with
    merge_winner_deleted, `A:B A:B` reports the second already_merged), and the references are
    the rows the merge repointed. Only the winner's new embedding is left out: a dry run calls
    no embedding endpoint, and no later pair reads a vector."""
    for winner_id, loser_id in pairs:
        if winner_id == loser_id:
            raise invalid(codes.MERGE_PAIR_INVALID, "a movement cannot merge into itself")
    ids = [i for pair in pairs for i in pair]
    vectors = _Vectors(embedder)
    if not dry_run:
        vectors.ahead(session, ids, lambda views: _winners_after(views, pairs))
    rows = lock_canonical(session, ids)
    progress.start("merge", len(pairs))
    if not dry_run:
        results = _merge_in_order(
            session, vectors, rows, pairs, now, actor_user_id, progress, video_threshold
        )
        return {"dryRun": False, "pairs": results}
    scratch = session.begin_nested()
    try:
        results = _merge_in_order(
            session, None, rows, pairs, now, actor_user_id, progress, video_threshold
        )
    finally:
        scratch.rollback()
    for result in results:
        if result["outcome"] == "merged":
            result["outcome"] = "would_merge"
    return {"dryRun": True, "pairs": results}


def _merge_in_order(
    session: Session,
    vectors: _Vectors | None,
    rows: dict[uuid.UUID, Movement],
    pairs: Sequence[tuple[uuid.UUID, uuid.UUID]],
    now: datetime,
    actor: uuid.UUID | None,
    progress: Progress,
    video_threshold: float,
) -> list[dict[str, Any]]:
    results = []
    for winner_id, loser_id in pairs:
        winner, loser = rows[winner_id], rows[loser_id]
        if loser.deleted_at is not None:
            # The very pair merged before is already merged, wherever its winner went since.
            survivor = winner.id if loser.merged_into_id == winner.id else _survivor(session, loser)
            if survivor is not None and survivor != winner.id:
                raise conflict(
                    codes.MERGE_LOSER_MERGED_ELSEWHERE,
                    f"{loser.slug} was merged into another movement; its references are there",
                    loserId=str(loser.id),
                    mergedIntoId=str(loser.merged_into_id),
                    survivorId=str(survivor),
                )
            results.append(_outcome(winner, loser, "already_merged"))
        elif winner.deleted_at is not None:
            raise conflict(
                codes.MERGE_WINNER_DELETED,
                f"{winner.slug} was merged or deleted; merge into its survivor",
                winnerId=str(winner.id),
                mergedIntoId=str(winner.merged_into_id) if winner.merged_into_id else None,
            )
        else:
            with session.begin_nested():
                results.append(
                    _merge(
                        session,
                        vectors,
                        winner,
                        loser,
                        now=now,
                        actor=actor,
                        video_threshold=video_threshold,
                    )
                )
        progress.advance()
    return results


def _survivor(session: Session, loser: Movement) -> uuid.UUID | None:
    """Where a merged loser's references went: the end of its merged_into chain (None for a
    row deleted without a merge)."""
    seen, current = set(), loser
    while current.merged_into_id is not None and current.id not in seen:
        seen.add(current.id)
        following = session.get(Movement, current.merged_into_id)
        if following is None:
            return current.merged_into_id
        current = following
    return None if current is loser else current.id


def _outcome(winner: Movement, loser: Movement, outcome: str) -> dict[str, Any]:
    return {"winnerId": str(winner.id), "loserId": str(loser.id), "outcome": outcome}


def _aliases_after(winner: Movement, loser: Movement) -> list[str]:
    return merge_aliases(
        winner.aliases or [], [loser.name, *(loser.aliases or [])], name=winner.name
    )


def _merge(
    session: Session,
    vectors: _Vectors | None,
    winner: Movement,
    loser: Movement,
    *,
    now: datetime,
    actor: uuid.UUID | None,
    video_threshold: float,
) -> dict[str, Any]:
    before = list(winner.aliases or [])
    moved = repoint(session, loser, winner)
    winner.aliases = _aliases_after(winner, loser)
    for name in _CARRIED:
        if not getattr(winner, name) and getattr(loser, name):
            setattr(winner, name, getattr(loser, name))
    rejected = [*(winner.video_rejected_ids or []), *(loser.video_rejected_ids or [])]
    winner.video_rejected_ids = list(dict.fromkeys(rejected))
    # The loser's members or operator demoted the video the winner shows automatically: it
    # goes (a person's choice stays), and the loser's own video, else the best candidate left
    # (as a demotion chooses), takes its place.
    dropped = (
        winner.video_status == "auto"
        and winner.video_url
        and is_rejected(winner.video_url, rejected)
    )
    if dropped:
        winner.video_url, winner.video_status = None, "none"
    carried = loser.video_url and not is_rejected(loser.video_url, winner.video_rejected_ids)
    if not winner.video_url and carried:
        winner.video_url, winner.video_status = loser.video_url, loser.video_status
    known = {c.get("url") for c in winner.video_candidates or []}
    winner.video_candidates = [
        *(winner.video_candidates or []),
        *(c for c in loser.video_candidates or [] if c.get("url") not in known),
    ]
    if dropped and not winner.video_url:
        chosen = choose(winner.video_candidates, video_threshold, set(rejected))
        if chosen:
            winner.video_url, winner.video_status = chosen["url"], "auto"
    reports = _move_reports(session, loser, winner)
    reported_out(session, winner, video_threshold, now=now)
    winner.updated_at = now
    loser.deleted_at = now
    loser.merged_into_id = winner.id
    loser.updated_at = now
    if vectors is not None:  # None: a dry run (merge_pairs)
        vectors.apply(winner)
    session.flush()
    emit(
        session,
        EventKind.audit,
        "movements.merged",
        at=now,
        aggregate_type="movement",
        aggregate_id=winner.id,
        actor_user_id=actor,
        payload={
            "winnerId": str(winner.id),
            "loserId": str(loser.id),
            "loserSlug": loser.slug,
            "references": moved,
            "videoReports": reports,
            "before": before,
            "after": list(winner.aliases),
        },
    )
    return {
        **_outcome(winner, loser, "merged"),
        "references": moved,
        "videoReports": reports,
        "aliasesAfter": list(winner.aliases),
    }


def _move_reports(session: Session, loser: Movement, winner: Movement) -> int:
    """Members' reports on the loser's videos follow its candidates to the winner, so the
    votes already cast still count toward a demotion (the loser's route is 404 from now on).
    A person's report the winner already holds for the same video stays on the loser."""
    held = aliased(MovementVideoReport)
    on_winner = exists().where(
        held.movement_id == winner.id,
        held.video_url == MovementVideoReport.video_url,
        held.user_id == MovementVideoReport.user_id,
    )
    return session.execute(
        update(MovementVideoReport)
        .where(MovementVideoReport.movement_id == loser.id, ~on_winner)
        .values(movement_id=winner.id)
        .execution_options(synchronize_session=False)
    ).rowcount


def alias_change(
    session: Session,
    embedder: Embedder,
    *,
    source_id: uuid.UUID,
    alias: str,
    dry_run: bool,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """Remove every spelling of the term from the source row's aliases, then re-embed it. Run
    again (an operator re-runs a command after a lost terminal) it answers already_removed and
    changes nothing; a term the row never held stays alias_not_found."""
    term = fold(alias)
    if not term:
        raise invalid(codes.ALIAS_INVALID, "the alias folds to nothing")
    vectors = _Vectors(embedder)
    if not dry_run:
        vectors.ahead(session, [source_id], lambda views: _without(views, source_id, term))
    source = lock_canonical(session, [source_id])[source_id]
    if source.deleted_at is not None:
        raise not_found(codes.MOVEMENT_NOT_FOUND, "this movement was merged or deleted")
    if fold(source.name) == term:
        raise conflict(codes.ALIAS_IS_NAME, "the term is the movement's own name, not an alias")
    before = list(source.aliases or [])
    after = [a for a in before if fold(a) != term]
    removed = [a for a in before if fold(a) == term]
    if not removed and term not in alias_removals(session, source.id).get(str(source.id), ()):
        raise not_found(codes.ALIAS_NOT_FOUND, f"{source.slug} holds no spelling of {alias!r}")
    result = {
        "sourceId": str(source.id),
        "term": term,
        "removed": removed,
        "before": before,
        "after": after,
        "dryRun": dry_run,
        "outcome": "already_removed" if not removed else "would_remove" if dry_run else "removed",
    }
    if dry_run or not removed:
        return result
    source.aliases = after
    source.updated_at = now
    vectors.apply(source)
    session.flush()
    emit(
        session,
        EventKind.audit,
        ALIAS_CHANGED,
        at=now,
        aggregate_type="movement",
        aggregate_id=source.id,
        actor_user_id=actor_user_id,
        payload={"term": term, "before": before, "after": after},
    )
    return result


def _without(
    views: dict[uuid.UUID, SimpleNamespace], source_id: uuid.UUID, term: str
) -> list[SimpleNamespace]:
    """The source row as the alias change will leave it (none when the locked run refuses or
    has nothing to remove)."""
    source = views.get(source_id)
    if source is None or source.deleted_at:
        return []
    aliases = [a for a in source.aliases or [] if fold(a) != term]
    if len(aliases) == len(source.aliases or []):
        return []
    source.aliases = aliases
    return [source]
