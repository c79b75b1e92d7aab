"""users.folded_into_id for the rows folded before 0023_s58_folded_into: read from the audit
trail. Both ways a person's rows fold (access.folding.fold_person) wrote, in the fold's own
transaction, a `user.linked` audit row naming the row that goes on (target_id) and the rows
retired into it (a sign-in link: data.loginRowId and data.mergedProfiles; a link request
accepted: data.profileRowId). Nothing deletes audit rows and erasure strips only their address
and IP, so the ids are all there. Without the mark an erasure of the person left the retired
rows (the gym's ended membership with its national id, the desk's profile) untouched.

Replayed in the folds' order, each retired row is marked with the row its person goes on as
today, one step away as fold_person keeps it (a row retired into one retired later names the
last). Rows marked already, and rows not retired, are left as they are.

Revision ID: 0026_s59_folded_into_backfill
Revises: 0025_s58_attempt_asked_at
Create Date: 2026-12-01
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0026_s59_folded_into_backfill"
down_revision = "0025_s58_attempt_asked_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    backfill(op.get_bind())


def backfill(bind: sa.Connection) -> int:
    """Mark the retired rows the audit trail names; returns how many were marked."""
    audit = sa.table(
        "audit_log",
        sa.column("id", sa.Uuid()),
        sa.column("at", sa.DateTime()),
        sa.column("action", sa.String()),
        sa.column("target_type", sa.String()),
        sa.column("target_id", sa.String()),
        sa.column("data", sa.JSON()),
    )
    users = sa.table(
        "users",
        sa.column("id", sa.Uuid()),
        sa.column("deleted_at", sa.DateTime()),
        sa.column("folded_into_id", sa.Uuid()),
    )
    into: dict[uuid.UUID, uuid.UUID] = {}
    for target, data in bind.execute(
        sa.select(audit.c.target_id, audit.c.data)
        .where(audit.c.action == "user.linked", audit.c.target_type == "user")
        .order_by(audit.c.at, audit.c.id)
    ):
        goes_on = _uuid(target)
        for retired in _retired(data):
            if goes_on is not None and retired != goes_on:
                into[retired] = goes_on
    if not into:
        return 0
    rows = bind.execute(sa.select(users.c.id, users.c.deleted_at, users.c.folded_into_id)).all()
    marked = {row.id: row.folded_into_id for row in rows if row.folded_into_id is not None}
    retired_unmarked = {row.id for row in rows if row.deleted_at is not None} - set(marked)
    steps = {**into, **marked}  # a mark the code wrote is the later word
    count = 0
    for row_id in sorted(set(into) & retired_unmarked):
        bind.execute(
            sa.update(users).where(users.c.id == row_id).values(folded_into_id=_last(row_id, steps))
        )
        count += 1
    return count


def _retired(data: Any) -> list[uuid.UUID]:
    if isinstance(data, str):
        data = json.loads(data)
    if not isinstance(data, dict):
        return []
    named = [data.get("loginRowId"), data.get("profileRowId"), *(data.get("mergedProfiles") or [])]
    return [found for found in map(_uuid, named) if found is not None]


def _uuid(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def _last(row_id: uuid.UUID, steps: dict[uuid.UUID, uuid.UUID]) -> uuid.UUID:
    """The row the person goes on as today: the folds followed to their end (a cycle, which
    no fold makes, stops where it would repeat)."""
    seen = {row_id}
    at = steps[row_id]
    while at in steps and steps[at] not in seen:
        seen.add(at)
        at = steps[at]
    return at


def downgrade() -> None:
    """The marks stay: 0023's column holds them, and they are what the trail says."""
