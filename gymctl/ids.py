"""Ids and randomness come from one place, so tests can reason about them."""

from __future__ import annotations

import secrets
import uuid


def new_id() -> uuid.UUID:
    return uuid.uuid4()


def token(nbytes: int = 32) -> str:
    """An unguessable URL-safe token."""
    return secrets.token_urlsafe(nbytes)
