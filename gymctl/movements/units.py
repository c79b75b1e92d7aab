"""Library work commits as it goes: between its writes it calls outside services (the embedder,
the image service and object store, video search, the chat model) for seconds or minutes. On
the embedded default an open transaction holds the database's one write lock (BEGIN IMMEDIATE),
so every other writer of every process waited out those calls and failed at the busy timeout.

So work calls `checkpoint()` right before each outside call; its door supplies it: the daemon's
job commits there (and renews its lease), the CLI commits; `keep` leaves the whole run in the
caller's one transaction. The answer is then applied to the row as stored now (`fresh`), not to
what was read before the call."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy import select
from sqlalchemy.orm import Session

from gymctl.models import Movement

Checkpoint = Callable[[], None]


def keep() -> None:
    """Stay in the caller's transaction (a test's savepoint, a caller that must be atomic)."""
    return None


def fresh(session: Session, movement_id: uuid.UUID) -> Movement | None:
    """The row as stored now, locked until the unit commits (PostgreSQL; SQLite's transaction
    holds the write lock anyway). Pending changes are flushed first, so none is lost."""
    session.flush()
    return session.scalar(
        select(Movement)
        .where(Movement.id == movement_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )


def left_alone(movement: Movement | None) -> bool:
    """A row a unit never touches, as stored now: gone, merged away, or its video set by hand."""
    return movement is None or bool(movement.deleted_at) or movement.video_status == "manual"
