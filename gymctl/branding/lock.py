"""The gym's branding lock: one writer of its drafts and publications at a time. Its own module,
so the asset intake (which pointing a slot at an upload takes it) and the workspace share it
without importing each other."""

from __future__ import annotations

import uuid

from sqlalchemy.orm import Session

from gymctl.db import advisory_lock


def lock_branding(session: Session, organization_id: uuid.UUID) -> None:
    """The gym's branding, one writer at a time until the transaction ends: a publish, a
    restore and each draft save (two saves at once computed one website revision, or both
    inserted the first draft row: the second failed on PostgreSQL), and an upload pointing a
    slot. The write transaction first (db.advisory_lock on the embedded default)."""
    session.connection()
    advisory_lock(session, f"branding:{organization_id}")
