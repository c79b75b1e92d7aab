"""Ids and randomness come from one place, so tests can reason about them."""

from __future__ import annotations

import secrets
import uuid

# The largest key a BIGINT (and SQLite's INTEGER) holds: a larger number asked for is no row,
# and the database driver raises rather than answer so.
MAX_ROW_ID = 2**63 - 1


def new_id() -> uuid.UUID:
    return uuid.uuid4()


def token(nbytes: int = 32) -> str:
    """An unguessable URL-safe token."""
    return secrets.token_urlsafe(nbytes)
