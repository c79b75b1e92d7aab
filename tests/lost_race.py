"""Tools for the tests of the call sites that read an integrity error by constraint name
(gymctl.models.integrity): lose a race on purpose, or break an unrelated constraint in the
flush the site expects to fail only on its own unique key."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from gymctl.models import UserSession
from tests.conftest import NOW


def checks_miss(monkeypatch: pytest.MonkeyPatch, session: Session, method: str, reads: int) -> None:
    """The first `reads` calls of `session.<method>` (scalar, get) answer None: the site's own
    checks ran just before a rival's row was committed."""
    real = getattr(session, method)
    left = [reads]

    def read(*args: Any, **kwargs: Any) -> Any:
        if left[0] > 0:
            left[0] -= 1
            return None
        return real(*args, **kwargs)

    monkeypatch.setattr(session, method, read)


def miss_once(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> None:
    """The first call of `module.<name>` (a lookup) answers None, the later ones really look."""
    real = getattr(module, name)
    left = [1]

    def lookup(*args: Any, **kwargs: Any) -> Any:
        if left[0]:
            left[0] = 0
            return None
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, lookup)


def orphan() -> UserSession:
    """A row whose foreign key names no user: a foreign-key failure wherever it is flushed."""
    return UserSession(
        user_id=uuid.uuid4(), session_id="orphan", first_seen_at=NOW, last_seen_at=NOW
    )


@contextmanager
def orphan_with(session: Session | sessionmaker[Session], model: type) -> Iterator[None]:
    """Every flush (of this session, or of every session the factory makes) that inserts a
    `model` row also inserts an orphan: the site's flush fails on a foreign key, not on the
    unique key it expects."""

    def add_orphan(flushing: Session, *_: Any) -> None:
        if any(isinstance(row, model) for row in flushing.new):
            flushing.add(orphan())

    event.listen(session, "before_flush", add_orphan)
    try:
        yield
    finally:
        event.remove(session, "before_flush", add_orphan)
