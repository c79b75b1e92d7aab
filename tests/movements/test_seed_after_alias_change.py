"""A seed respects an operator's alias change (spec B 4.5 /seed, /alias-change): aliases only
grow from the file, except a term an alias change took off the row."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from gymctl.models import Movement
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.library import FORMAT
from gymctl.movements.merge import alias_change
from gymctl.movements.seed import seed_library
from tests.conftest import NOW

pytestmark = pytest.mark.embedded

EMBEDDER = LocalEmbedder()


def publish(store, *entries) -> None:
    body = json.dumps({"format": FORMAT, "movements": list(entries)}).encode()
    store.put("lib.json", body, content_type="application/json")


def test_a_seed_does_not_put_back_an_alias_an_alias_change_removed(session, store):
    """ "Press Up" was taken off the push-up (it collided with another row); the next seed of
    the same file added it back, collision and all, with nothing said."""
    publish(store, {"name": "Push-Up", "aliases": ["Press Up", "Chest Push"]})
    seed_library(session, store, EMBEDDER, key="lib.json", now=NOW)
    row = session.scalar(select(Movement).where(Movement.slug == "push-up"))
    alias_change(session, EMBEDDER, source_id=row.id, alias="press-ups", dry_run=False, now=NOW)
    session.commit()

    for rebuild in (False, True):
        again = seed_library(session, store, EMBEDDER, key="lib.json", now=NOW, rebuild=rebuild)
        assert row.aliases == ["Chest Push"]
        assert again["created"] == 0
    publish(store, {"name": "Push-Up", "aliases": ["Press Up", "Chest Push", "Floor Press Up"]})
    seed_library(session, store, EMBEDDER, key="lib.json", now=NOW)
    assert row.aliases == ["Chest Push", "Floor Press Up"]  # a new term still grows the row
