"""Rule 10's re-check of stored assets with no write lock held while the object store answers
(decision s42: on the embedded default that lock holds every writer of every process).

The keys a write takes are read, a transaction that only read ends, the store answers (into a
`ReadAhead`), then the caller's lock is taken and everything is read afresh. Keys changed
meanwhile are what the write takes, as if changed just before the click: those not yet read are
read in another round, and keys changed in every round are read under the lock (slower for
other writers, never unchecked). Stored objects are immutable, so a key read once stays read."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from sqlalchemy.orm import Session

from gymctl.assets.intake import owned, recheck
from gymctl.assets.read_ahead import ReadAhead
from gymctl.db import release_for_outside_call

RECHECK_ROUNDS = 3

Keys = Callable[[Session, uuid.UUID], dict[str, str]]  # {slot: key}, making the refusals too


def rechecked_then_locked(
    session: Session,
    ahead: ReadAhead,
    organization_id: uuid.UUID,
    stored_keys: Keys,
    *,
    lock: Callable[[], None],
    read_bodies: Keys | None = None,
) -> None:
    """Every key of `stored_keys` re-checked (rule 10: a refusal raised before the lock when
    it can be), and the bytes of every key of `read_bodies` read, all answered by `ahead`
    under `lock` once this returns (the release candidate's digests on publish)."""
    for _ in range(RECHECK_ROUNDS):
        checks, bodies = _unread(session, ahead, organization_id, stored_keys, read_bodies)
        if checks or bodies:
            release_for_outside_call(session)  # again: a later round's lock is given back
            for slot, key in checks:
                recheck(ahead, organization_id, key, slot=slot)
            for key in bodies:
                ahead.read(key, body=True)
        lock()
        session.flush()
        session.expire_all()  # PostgreSQL's transaction went on through the reads: read afresh
        if _unread(session, ahead, organization_id, stored_keys, read_bodies) == ([], []):
            break
    for slot, key in sorted(stored_keys(session, organization_id).items()):
        recheck(ahead, organization_id, key, slot=slot)  # from what was read (else read now)


def _unread(
    session: Session,
    ahead: ReadAhead,
    organization_id: uuid.UUID,
    stored_keys: Keys,
    read_bodies: Keys | None,
) -> tuple[list[tuple[str, str]], list[str]]:
    checks = sorted(
        (slot, key)
        for slot, key in stored_keys(session, organization_id).items()
        if not ahead.holds(key, body=False)
    )
    wanted = read_bodies(session, organization_id).values() if read_bodies else ()
    bodies = sorted(
        {k for k in wanted if owned(organization_id, k) and not ahead.holds(k, body=True)}
    )
    return checks, bodies
