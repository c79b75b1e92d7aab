"""A merge and an alias change embed with no write lock held (decision s42: the embedder may be
a remote service, and on the embedded default the lock holds every writer of every process).
Vectors are computed from the rows read ahead; a row whose text changed while the embedder
answered is read again and its new text embedded in another round, so the stored vector is
always that of the text stored. Committed for real on both engines."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.db import get_engine, session_factory, session_scope
from gymctl.models import Movement
from gymctl.movements import merge
from gymctl.movements.embeddings import LocalEmbedder, embed_movements
from tests.conftest import NOW
from tests.movements.test_job_write_lock import could_write

pytestmark = pytest.mark.embedded


class Racing(LocalEmbedder):
    """The embedder; `during` runs (once) while its first request is answered."""

    def __init__(self, during, free) -> None:
        self.during, self.free, self.calls = during, free, []

    def embed(self, texts):
        self.calls.append((list(texts), self.free()))
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return super().embed(texts)


def _sqlite(url: str) -> bool:
    """Free to write during each call: the embedded default's lock was given back (PostgreSQL's
    transaction goes on, holding no row: s41)."""
    return url.startswith("sqlite")


def _rows(factory):
    with session_scope(factory) as session:
        for name in ("Ahead Squat", "Ahead Press"):
            session.add(
                Movement(slug=name.lower().replace(" ", "-"), name=name, instructions=["Go"])
            )
    with factory() as session:
        return {m.name: m.id for m in session.scalars(select(Movement))}


def _edit(factory, movement_id):
    def edit():
        with session_scope(factory) as session:
            session.get(Movement, movement_id).instructions = ["Edited meanwhile"]

    return edit


def _expected(factory, movement_id) -> bytes:
    with factory() as session:
        row = session.get(Movement, movement_id)
        embed_movements(LocalEmbedder(), [row])
        return row.embedding


def test_a_winner_edited_while_the_embedder_answered_gets_its_new_texts_vector(
    committed_database,
):
    factory = session_factory(get_engine(committed_database))
    ids = _rows(factory)
    winner, loser = ids["Ahead Press"], ids["Ahead Squat"]
    racing = Racing(_edit(factory, winner), could_write(committed_database))

    with session_scope(factory) as session:
        done = merge.merge_pairs(session, racing, [(winner, loser)], dry_run=False, now=NOW)

    assert done["pairs"][0]["outcome"] == "merged"
    assert len(racing.calls) == 2  # the edited text embedded in a second round
    assert [free for _, free in racing.calls] == [_sqlite(committed_database)] * 2
    with factory() as session:
        row = session.get(Movement, winner)
        assert row.instructions == ["Edited meanwhile"]
        assert row.aliases == ["Ahead Squat"]
    assert row.embedding == _expected(factory, winner)


def test_an_alias_change_embeds_with_no_write_lock(committed_database):
    factory = session_factory(get_engine(committed_database))
    ids = _rows(factory)
    source = ids["Ahead Press"]
    with session_scope(factory) as session:
        session.get(Movement, source).aliases = ["Overhead Press"]
    racing = Racing(_edit(factory, source), could_write(committed_database))

    with session_scope(factory) as session:
        merge.alias_change(
            session, racing, source_id=source, alias="overhead press", dry_run=False, now=NOW
        )

    assert [free for _, free in racing.calls] == [_sqlite(committed_database)] * 2
    with factory() as session:
        row = session.get(Movement, source)
        assert (row.aliases, row.instructions) == ([], ["Edited meanwhile"])
    assert row.embedding == _expected(factory, source)
