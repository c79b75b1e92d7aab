"""A seed upserts under the library lock (spec B 4.5 /seed: "upsert rows by slug"; /merge:
"loser name and aliases folded into winner aliases"; /alias-change: "removes every spelling of
the term from the source row"). A hunt in s63 found the seed reading the canonical rows with no
lock, then writing the aliases it computed from that read: a merge or an alias change committed
in between was written over, and a second seed at once failed on the canonical slug index. Both
engines, committed for real: a rival starts on its own connection at the seed's first upsert
tick and is given two seconds; it must wait for the seed rather than run beside it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

import pytest
from sqlalchemy import select

from gymctl.db import get_engine, session_factory, session_scope
from gymctl.models import Movement
from gymctl.movements import merge
from gymctl.movements.embeddings import LocalEmbedder
from gymctl.movements.seed import seed_library
from gymctl.providers.storage import FolderObjectStore
from tests.conftest import NOW

V1, V2 = "library/v1.json", "library/v2.json"
GIVEN_SECONDS = 2.0  # the rival's head start: enough to commit, were it not made to wait


def _store(tmp_path) -> FolderObjectStore:
    store = FolderObjectStore(tmp_path / "objects", url_base="http://x/storage", secret=b"s")

    def put(key, entries):
        body = {"format": "gymctl.movements/1", "movements": entries}
        store.put(key, json.dumps(body).encode(), content_type="application/json")

    put(
        V1,
        [
            {"slug": "wall-ball", "name": "Wall Ball", "aliases": ["Target Ball"]},
            {"slug": "wall-ball-shot", "name": "Wall Ball Shot", "aliases": ["WBS"]},
        ],
    )
    # The next published file gives the first row one more alias.
    put(
        V2,
        [
            {
                "slug": "wall-ball",
                "name": "Wall Ball",
                "aliases": ["Target Ball", "Med Ball Throw"],
            },
            {"slug": "wall-ball-shot", "name": "Wall Ball Shot", "aliases": ["WBS"]},
        ],
    )
    return store


class RivalAtFirstTick:
    """A Progress that starts `rival` in a thread at the upsert's first tick (after the seed
    has read the rows, before it writes them) and gives it GIVEN_SECONDS before the seed goes
    on; `finish` waits for it and raises what it raised."""

    def __init__(self, rival: Callable[[], None]) -> None:
        self.rival, self.label, self.failed = rival, None, []
        self.thread: threading.Thread | None = None

    def start(self, label, total):
        self.label = label

    def advance(self, count=1):
        if self.label == "upsert" and self.thread is None:
            self.thread = threading.Thread(target=self._run)
            self.thread.start()
            self.thread.join(GIVEN_SECONDS)

    def _run(self) -> None:
        try:
            self.rival()
        except BaseException as failure:  # raised again in the test's thread
            self.failed.append(failure)

    def finish(self) -> None:
        self.thread.join(60)
        assert not self.thread.is_alive()
        if self.failed:
            raise self.failed[0]


@pytest.fixture
def factory(committed_database):
    return session_factory(get_engine(committed_database))


def _seed(factory, store, key, progress=None) -> dict:
    with session_scope(factory) as session:
        extra = {"progress": progress, "checkpoint": session.commit} if progress else {}
        return seed_library(session, store, LocalEmbedder(), key=key, now=NOW, **extra)


def _ids(factory) -> dict[str, object]:
    with factory() as session:
        return {m.slug: m.id for m in session.scalars(select(Movement))}


def test_a_merge_committed_while_a_seed_upserts_keeps_the_losers_names_on_the_winner(
    factory, tmp_path
):
    store = _store(tmp_path)
    _seed(factory, store, V1)
    ids = _ids(factory)
    winner, loser = ids["wall-ball"], ids["wall-ball-shot"]

    def merge_now():
        with session_scope(factory) as other:
            done = merge.merge_pairs(
                other, LocalEmbedder(), [(winner, loser)], dry_run=False, now=NOW
            )
            assert done["pairs"][0]["outcome"] == "merged"

    rival = RivalAtFirstTick(merge_now)
    _seed(factory, store, V2, rival)
    rival.finish()

    with factory() as session:
        aliases = session.get(Movement, winner).aliases
    assert {"Wall Ball Shot", "WBS", "Med Ball Throw"} <= set(aliases), aliases


def test_an_alias_removed_while_a_seed_upserts_stays_removed(factory, tmp_path):
    store = _store(tmp_path)
    _seed(factory, store, V1)
    source = _ids(factory)["wall-ball"]

    def remove_now():
        with session_scope(factory) as other:
            done = merge.alias_change(
                other, LocalEmbedder(), source_id=source, alias="target balls", dry_run=False,
                now=NOW,
            )  # fmt: skip
            assert done["outcome"] == "removed"

    rival = RivalAtFirstTick(remove_now)
    _seed(factory, store, V2, rival)
    rival.finish()

    with factory() as session:
        aliases = session.get(Movement, source).aliases
    assert "Target Ball" not in aliases, aliases
    assert "Med Ball Throw" in aliases


def test_two_seeds_of_a_new_library_at_once_both_upsert(factory, tmp_path):
    """The daemon's job and an operator's `gymctl movements seed` at once: the later one
    updates the rows the first created rather than failing on the canonical slug index."""
    store = _store(tmp_path)
    answers = []
    rival = RivalAtFirstTick(lambda: answers.append(_seed(factory, store, V1)))

    first = _seed(factory, store, V1, rival)
    rival.finish()

    assert first["created"] == 2
    [second] = answers
    assert (second["created"], second["unchanged"]) == (0, 2)
    assert sorted(_ids(factory)) == ["wall-ball", "wall-ball-shot"]
