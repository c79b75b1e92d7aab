"""An object store's answers read ahead of a write lock (decision s42: on the embedded default
no write lock is held while the store answers; that lock holds every writer of every process).

A caller reads the objects it will need with no transaction open, then takes its lock and works
against this store, which answers `head` and `get` from what it read. Stored objects are
immutable (each stored asset gets a new key), so an answer read once stays true. A key not read
ahead is read through (the caller's last resort, under its lock)."""

from __future__ import annotations

from typing import Any

from gymctl.providers.storage import ObjectInfo, ObjectStore


class ReadAhead:
    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self._heads: dict[str, ObjectInfo | None] = {}
        self._bodies: dict[str, bytes | None] = {}

    def read(self, key: str, *, body: bool) -> None:
        """Read the object's head, and its bytes if `body` and it exists."""
        if self.head(key) is not None and body:
            self.get(key)

    def holds(self, key: str, *, body: bool) -> bool:
        if key not in self._heads:
            return False
        return not body or self._heads[key] is None or key in self._bodies

    def head(self, key: str) -> ObjectInfo | None:
        if key not in self._heads:
            self._heads[key] = self.store.head(key)
        return self._heads[key]

    def get(self, key: str) -> bytes | None:
        if key not in self._bodies:
            self._bodies[key] = self.store.get(key)
        return self._bodies[key]

    def __getattr__(self, name: str) -> Any:  # put, presign_get: the store's own
        return getattr(self.store, name)
