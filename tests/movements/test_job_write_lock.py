"""The library's jobs call outside services (embedder, object store, image service, video
search, chat model) with no transaction open. On the embedded default an open transaction holds
the database's one write lock (BEGIN IMMEDIATE): a job ran whole in one, so a seed at its rpm
limit held every request, command and daemon job of every process for minutes, and they failed
"database is locked" after the 30 s busy timeout. Run here on a real file (and on PostgreSQL,
where the same structure leaves no transaction idle across a call), not the harness's one
shared connection, which hides the lock."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta

import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from gymctl.db import get_engine, session_factory
from gymctl.models import Movement, MovementJob
from gymctl.movements import jobs
from gymctl.movements.library import FORMAT
from gymctl.movements.services import library_from_settings
from tests.conftest import NOW
from tests.movements.conftest import keyed

pytestmark = pytest.mark.embedded  # the quick start's library jobs: both engines

KEY = "libraries/small.json"
LIBRARY = {
    "format": FORMAT,
    "movements": [
        {"name": "Air Squat", "equipment": "body only", "instructions": ["Sit back", "Stand"]},
        {"name": "Push Up", "equipment": "body only", "instructions": ["Lower", "Press"]},
        {"name": "Plank", "equipment": "body only"},
    ],
}


class Watched:
    """An outside client noting, at each call, whether another writer could commit then."""

    def __init__(self, inner, free, calls: list) -> None:
        self.inner, self.free, self.calls = inner, free, calls

    def __getattr__(self, name: str):
        value = getattr(self.inner, name)
        if not callable(value):
            return value

        def called(*args, **kwargs):
            self.calls.append((name, self.free()))
            return value(*args, **kwargs)

        return called


def could_write(url: str):
    """SQLite: another connection takes the write lock and commits at once. PostgreSQL: no
    other session of this database sits in an open transaction."""
    engine = get_engine(url)
    if engine.dialect.name == "sqlite":
        path = make_url(url).database

        def free() -> bool:
            probe = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                probe.execute("BEGIN IMMEDIATE")
                probe.execute("COMMIT")
                return True
            except sqlite3.OperationalError:  # "database is locked": a writer would wait
                return False
            finally:
                probe.close()

        return free

    def free() -> bool:
        with engine.connect() as probe:
            open_elsewhere = probe.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%'"
                )
            ).scalar()
        return open_elsewhere == 0

    return free


def test_no_job_holds_a_transaction_while_an_outside_service_answers(
    committed_database, library_settings, store, fake
):
    factory = session_factory(get_engine(committed_database))
    store.put(KEY, json.dumps(LIBRARY).encode(), content_type="application/json")
    settings = keyed(library_settings, fake, embeddings_url=f"{fake.url}/v1")
    library = library_from_settings(settings, store=store)
    calls: list = []
    free = could_write(committed_database)
    for name in ("store", "public_store", "embedder", "search", "llm", "images"):
        setattr(library, name, Watched(getattr(library, name), free, calls))
    fake.videos["Air Squat demo"] = [("v1", "c", 30, 5)]
    fake.scores["v1"] = 0.9

    with factory() as session:
        jobs.enqueue(session, "seed", {"r2Key": KEY}, now=NOW)
        session.commit()
    assert jobs.work_jobs(factory, library, now=NOW)["succeeded"] == 1
    with factory() as session:
        squat = session.scalar(select(Movement).where(Movement.slug == "air-squat"))
        kinds = [
            ("thumbnail", {"movementId": str(squat.id)}),
            ("video_discover", {"slugs": ["air-squat"]}),
            ("video_rank", {"slugs": ["air-squat"]}),
            ("video_refresh", {"slugs": ["push-up"]}),
            ("cues", {}),
        ]
        for n, (kind, payload) in enumerate(kinds, start=1):
            jobs.enqueue(session, kind, payload, now=NOW + timedelta(seconds=n))
        session.commit()
    done = jobs.work_jobs(factory, library, now=NOW + timedelta(minutes=1))

    assert done == {"succeeded": len(kinds), "retried": 0, "failed": 0}
    with factory() as session:
        statuses = {job.kind: job.status for job in session.scalars(select(MovementJob))}
        squat = session.scalar(select(Movement).where(Movement.slug == "air-squat"))
        assert statuses == dict.fromkeys(statuses, "succeeded")
        assert squat.video_url == "https://www.youtube.com/watch?v=v1"
        assert squat.thumbnail_url.endswith("/movements/thumbnails/air-squat.png")
        assert len(squat.cues) == 3
    called = {name for name, _ in calls}
    assert {"get", "embed", "generate", "put", "search", "details", "complete_json"} <= called
    assert [name for name, free in calls if not free] == []
