"""A library job is claimed, worked and recorded in transactions of its own (so no transaction
is open while it calls an outside service: test_job_write_lock.py). A claimed job is leased: a
worker that dies leaves it running until the lease ends, then the next sweep takes it again;
the attempt counted at the claim fences every later write of the worker that lost it. A job
commits unit by unit, so its retry resumes where the failed attempt stopped."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

from gymctl.models import Movement, MovementJob
from gymctl.movements import jobs as queue
from gymctl.movements.embeddings import (
    LOCAL_MODEL,
    EmbeddingsUnavailable,
    LocalEmbedder,
    stored_model,
)
from gymctl.movements.library import FORMAT
from gymctl.movements.seed import seed_library
from gymctl.movements.services import library_from_settings
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # the quick start's library jobs: both engines


@pytest.fixture
def library(library_settings, store):
    return library_from_settings(library_settings, store=store)


def cues_job(session, *slugs):
    for slug in slugs:
        session.add(Movement(slug=slug, name=slug.title()))
    job = queue.enqueue(session, "cues", {}, now=NOW)
    session.commit()
    return job


def stop_the_worker(monkeypatch):
    """The daemon is killed inside the job's work."""

    def killed(*args):
        raise SystemExit("the daemon was stopped")

    monkeypatch.setattr(queue, "run_job", killed)


def test_a_job_whose_worker_died_is_taken_again_when_its_lease_ends(
    session, session_factory, library, fake, monkeypatch
):
    job = cues_job(session, "plank")
    with monkeypatch.context() as patched:
        stop_the_worker(patched)
        with pytest.raises(SystemExit):
            queue.work_jobs(session_factory, library, now=NOW)
    session.refresh(job)
    assert (job.status, job.attempts, job.run_after) == ("running", 1, job.started_at + queue.LEASE)

    early = queue.work_jobs(session_factory, library, now=NOW + queue.LEASE / 2)
    assert early == {"succeeded": 0, "retried": 0, "failed": 0}  # the lease still holds
    done = queue.work_jobs(session_factory, library, now=job.run_after)
    assert done["succeeded"] == 1
    session.refresh(job)
    assert (job.status, job.attempts, job.result["filled"]) == ("succeeded", 2, 1)


def test_a_job_whose_worker_died_on_its_last_attempt_is_failed(
    session, session_factory, library, fake
):
    job = cues_job(session, "plank")
    job.status, job.attempts, job.run_after = "running", queue.MAX_ATTEMPTS, NOW
    session.commit()
    done = queue.work_jobs(session_factory, library, now=NOW, monotonic=lambda: 0.0)
    assert done == {"succeeded": 0, "retried": 0, "failed": 1}
    session.refresh(job)
    assert (job.status, job.finished_at) == ("failed", NOW)
    assert job.error.startswith("job_worker_lost:")
    assert fake.calls("/v1/chat/completions") == []


def test_a_worker_whose_job_was_taken_over_writes_nothing_more(
    session, session_factory, library, fake, monkeypatch
):
    """Its lease ended while it worked and another worker claimed the job: its next
    checkpoint finds the attempt is no longer its own, rolls its unit back and stops."""
    job = cues_job(session, "plank", "push")
    real = queue.run_job

    def overtaken(work, library, claim, now, checkpoint):
        work.execute(
            update(MovementJob)
            .where(MovementJob.id == claim.id)
            .values(attempts=MovementJob.attempts + 1)  # the other worker's claim
        )
        work.commit()
        return real(work, library, claim, now, checkpoint)

    monkeypatch.setattr(queue, "run_job", overtaken)
    done = queue.work_jobs(session_factory, library, now=NOW)
    assert done == {"succeeded": 0, "retried": 0, "failed": 0}
    session.expire_all()
    assert (job.status, job.attempts, job.result) == ("running", 2, None)
    assert [m.cues for m in session.scalars(select(Movement))] == [[], []]
    assert fake.calls("/v1/chat/completions") == []  # it stopped before calling


def test_a_retried_job_keeps_the_units_its_failed_attempt_finished_and_resumes(
    session, session_factory, library, fake
):
    job = cues_job(session, "plank", "push")
    fake.failing_movements.add("Push")
    done = queue.work_jobs(session_factory, library, now=NOW)
    assert done["retried"] == 1
    session.expire_all()
    cues = {m.slug: m.cues for m in session.scalars(select(Movement))}
    assert (len(cues["plank"]), cues["push"]) == (3, [])  # the finished unit stayed

    fake.failing_movements.clear()
    fake.requests.clear()
    done = queue.work_jobs(session_factory, library, now=job.run_after)
    assert done["succeeded"] == 1
    asked = [
        json.loads(c["messages"][1]["content"])["movement"]
        for c in fake.calls("/v1/chat/completions")
    ]
    assert asked == ["Push"]  # the retry calls the model only for what is missing
    session.refresh(job)
    assert (job.attempts, job.result["filled"]) == (2, 1)


class Flaky:
    """The local model, one movement a request, down from its `fail_at`th request on."""

    model, batch_size, remote = LOCAL_MODEL, 3, False

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at, self.requests = fail_at, 0

    def embed(self, texts):
        self.requests += 1
        if self.fail_at is not None and self.requests >= self.fail_at:
            raise EmbeddingsUnavailable("the embeddings endpoint is down")
        return LocalEmbedder().embed(texts)


def library_file(store, instructions: str) -> str:
    names = ("Air Squat", "Push Up", "Plank")
    entries = [{"name": n, "instructions": [f"{instructions} {n}"]} for n in names]
    store.put(
        "small.json",
        json.dumps({"format": FORMAT, "movements": entries}).encode(),
        content_type="application/json",
    )
    return "small.json"


def test_a_seed_stopped_midway_embeds_on_retry_exactly_the_rows_left_without_a_vector(
    session, store
):
    """The upsert and each embedding batch commit on their own: a row whose text changed has
    no current model until its vector is stored, so the retry finds it (its text, already
    stored, no longer differs from the file)."""

    def seed(embedder):
        key = library_file(store, "Move well:")
        return seed_library(session, store, embedder, key=key, now=NOW, checkpoint=session.commit)

    seed_library(session, store, Flaky(), key=library_file(store, "Old:"), now=NOW)
    session.commit()
    with pytest.raises(EmbeddingsUnavailable):
        seed(Flaky(fail_at=2))
    session.rollback()
    session.expire_all()
    model = stored_model(LOCAL_MODEL)
    rows = session.scalars(select(Movement).order_by(Movement.slug)).all()
    assert all(r.instructions[0].startswith("Move well:") for r in rows)  # the upsert stayed
    assert sorted(r.embedding_model == model for r in rows) == [False, False, True]

    again = seed(Flaky())
    assert (again["unchanged"], again["embedded"]) == (3, 2)
    session.expire_all()
    assert [r.embedding_model for r in session.scalars(select(Movement))] == [model] * 3
