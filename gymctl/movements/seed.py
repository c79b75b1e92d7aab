"""Seeding the canonical library from a published file in object storage (spec B 4.5 /seed).

Rows are upserted by slug. Base fields (name, category, pattern, ...) follow the file; aliases
only grow (merged names stay), less the terms an alias change took off the row (an operator's
decision the published file does not know of). Enriched fields (thumbnail, video, cues, faults,
scaling) are filled where empty, and overwritten only with rebuild. A merged or deleted slug is
left alone, so re-seeding never resurrects a loser.

The upsert is one unit and each embedding batch another (units.py): a seed stopped midway
keeps the file's text, and a row whose text changed has no current model until its vector is
stored, so seeding again embeds exactly what is missing.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.db import advisory_lock
from gymctl.errors import not_found
from gymctl.models import Movement
from gymctl.movements import codes
from gymctl.movements.aliases import fold, merge_aliases
from gymctl.movements.audit import alias_removals, audit_library
from gymctl.movements.embeddings import (
    Embedder,
    Pacer,
    embed_movements,
    embedding_text,
    stored_model,
)
from gymctl.movements.library import LibraryEntry, parse_library
from gymctl.movements.merge import LIBRARY_LOCK
from gymctl.movements.progress import SILENT, Progress
from gymctl.movements.ranking import is_rejected
from gymctl.movements.units import Checkpoint, keep
from gymctl.providers.storage import ObjectStore, validate_key

BASE_FIELDS = (
    "name",
    "category",
    "kind",
    "movement_pattern",
    "equipment",
    "primary_muscles",
    "secondary_muscles",
    "mechanic",
    "instructions",
)
ENRICHED_FIELDS = ("thumbnail_url", "cues", "common_faults", "scaling_options")


def read_library(store: ObjectStore, key: str) -> list[LibraryEntry]:
    try:
        data = store.get(validate_key(key))
    except ValueError as malformed:  # "", "../x", "a//b": no object is stored at such a key
        raise not_found(
            codes.LIBRARY_FILE_NOT_FOUND, f"no library file at {key!r}: {malformed}"
        ) from None
    if data is None:
        raise not_found(codes.LIBRARY_FILE_NOT_FOUND, f"no library file at {key}")
    return parse_library(data)


def seed_library(
    session: Session,
    store: ObjectStore,
    embedder: Embedder,
    *,
    key: str,
    rebuild: bool = False,
    rpm: int | None = None,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
    progress: Progress = SILENT,
    pacer: Pacer | None = None,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """`rpm` paces a remote embedder's requests (`pacer` overrides it, for tests)."""
    checkpoint()  # the object store is an outside service too
    entries = read_library(store, key)
    # The library lock, as a merge and an alias change take it, then the rows as stored now,
    # locked in id order: a merge or alias change committed meanwhile is read, not written
    # over, and a second seed waits for the first and updates the rows it created.
    session.connection()  # the write transaction first (db.advisory_lock on SQLite)
    advisory_lock(session, LIBRARY_LOCK)
    existing = {
        row.slug: row
        for row in session.scalars(
            select(Movement)
            .where(Movement.organization_id.is_(None))
            .order_by(Movement.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    }
    removed = alias_removals(session)
    counts = {"created": 0, "updated": 0, "unchanged": 0, "skippedDeleted": 0}
    to_embed: list[Movement] = []
    progress.start("upsert", len(entries))
    for entry in entries:
        row = existing.get(entry.slug)
        if row is not None and row.deleted_at is not None:
            counts["skippedDeleted"] += 1
        elif row is None:
            row = Movement(slug=entry.slug, created_at=now, updated_at=now)
            _apply(row, entry, enriched=True)
            session.add(row)
            to_embed.append(row)
            counts["created"] += 1
        else:
            before = (embedding_text(row), _snapshot(row))
            _apply(row, entry, enriched=rebuild, removed=removed.get(str(row.id), set()))
            changed = _snapshot(row) != before[1]
            if changed:
                row.updated_at = now
            counts["updated" if changed else "unchanged"] += 1
            stale = row.embedding_model != stored_model(embedder.model)
            if embedding_text(row) != before[0]:
                row.embedding_model = None  # its vector no longer reads its text
                to_embed.append(row)
            elif rebuild or stale:
                to_embed.append(row)
        progress.advance()
    progress.start("embed", len(to_embed))
    embed_movements(
        embedder,
        to_embed,
        pacer=pacer or Pacer(rpm),
        progress=progress.advance,
        checkpoint=checkpoint,
        current=lambda batch: _current(session, batch),
    )
    session.flush()
    result = {
        "key": key,
        "rebuild": rebuild,
        "entries": len(entries),
        **counts,
        "embedded": len(to_embed),
        "model": embedder.model,
    }
    audit_library(session, "movements.library_seeded", now, actor_user_id, result)
    return result


def _current(session: Session, batch: Sequence[Movement]) -> list[Movement | None]:
    """The batch's rows as stored now, in its order (locked on PostgreSQL until committed)."""
    session.flush()  # new rows get their ids
    ids = [row.id for row in batch]
    rows = session.scalars(
        select(Movement)
        .where(Movement.id.in_(ids))
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    by_id = {row.id: row for row in rows}
    return [by_id.get(i) for i in ids]


def _snapshot(row: Movement) -> tuple:
    fields = (*BASE_FIELDS, "aliases", *ENRICHED_FIELDS, "video_url", "video_status")
    return tuple(repr(getattr(row, name)) for name in fields)


def _apply(
    row: Movement, entry: LibraryEntry, *, enriched: bool, removed: Collection[str] = ()
) -> None:
    for name in BASE_FIELDS:
        setattr(row, name, getattr(entry, name))
    added = [alias for alias in entry.aliases if fold(alias) not in removed]
    row.aliases = merge_aliases(row.aliases or [], added, name=entry.name)
    for name in ENRICHED_FIELDS:
        value = getattr(entry, name)
        if enriched or not getattr(row, name):
            setattr(row, name, value)
    row.video_candidates = row.video_candidates or []
    row.video_rejected_ids = row.video_rejected_ids or []
    if entry.video_url and is_rejected(entry.video_url, row.video_rejected_ids):
        # Demoted since the file was published: a seed, plain or rebuild, never puts it back
        # (as a removed alias), and put back as `manual` no rank or report could demote it.
        return
    if enriched or (not row.video_url and entry.video_url):
        # A video named by the published file was chosen by a person: rank never touches it.
        row.video_url = entry.video_url
        row.video_status = "manual" if entry.video_url else "none"
