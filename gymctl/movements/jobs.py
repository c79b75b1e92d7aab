"""The persisted queue of library jobs (spec B 4.5 /jobs): the HTTP door enqueues, the daemon's
`movement_jobs` sweep works them off, `GET /jobs/{queue}/{id}` returns a job's return value.

A worker claims a ready job with FOR UPDATE SKIP LOCKED and keeps that row lock while it runs:
a second daemon skips it, and a worker that dies mid-job rolls back, which puts the job back in
the queue with nothing half-written. Each job is a transaction of its own, committed when it
ends: a job's result is readable as soon as it is done, and a worker that dies loses only the
job it was running (the sweep's jobs used to share one transaction, up to 30 s of them, and a
death forgot the finished ones too, their provider calls made). A failed attempt is retried
after 1, then 5 minutes; the third failure is final.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.errors import DomainError, not_found
from gymctl.models import MovementJob
from gymctl.movements import codes, cues, discovery, ranking, seed, thumbnails
from gymctl.movements.services import Library

QUEUES = {
    "seed": "seed",
    "thumbnail": "thumbnails",
    "video_discover": "videos",
    "video_rank": "videos",
    "video_refresh": "videos",
    "cues": "cues",
}
# A job's states, in the order it goes through them (a failed attempt with attempts left is
# queued again).
STATUSES = ("queued", "running", "succeeded", "failed")
RETRY_AFTER = (timedelta(minutes=1), timedelta(minutes=5))
MAX_ATTEMPTS = len(RETRY_AFTER) + 1
BUDGET_SECONDS = 30  # no new job is started after this much work in one sweep


def enqueue(
    session: Session,
    kind: str,
    payload: dict[str, Any],
    *,
    now: datetime,
    actor_user_id: uuid.UUID | None = None,
) -> MovementJob:
    job = MovementJob(
        queue=QUEUES[kind],
        kind=kind,
        status="queued",
        payload=payload,
        attempts=0,
        run_after=now,
        actor_user_id=actor_user_id,
        created_at=now,
    )
    session.add(job)
    session.flush()
    return job


def describe_job(job: MovementJob) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "queue": job.queue,
        "kind": job.kind,
        "status": job.status,
        "payload": job.payload,
        "returnValue": job.result,
        "error": job.error,
        "attempts": job.attempts,
        "createdAt": job.created_at.isoformat(),
        "startedAt": job.started_at.isoformat() if job.started_at else None,
        "finishedAt": job.finished_at.isoformat() if job.finished_at else None,
    }


def list_jobs(
    session: Session, *, queue: str | None = None, status: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    query = select(MovementJob).order_by(MovementJob.created_at.desc(), MovementJob.id)
    if queue:
        query = query.where(MovementJob.queue == queue)
    if status:
        query = query.where(MovementJob.status == status)
    return [describe_job(job) for job in session.scalars(query.limit(limit))]


def get_job(session: Session, queue: str, job_id: uuid.UUID) -> dict[str, Any]:
    job = session.get(MovementJob, job_id)
    if job is None or job.queue != queue:
        raise not_found(codes.JOB_NOT_FOUND, "no such job in this queue")
    return describe_job(job)


def _uuid(value: Any) -> uuid.UUID:
    return uuid.UUID(str(value))


def run_job(session: Session, library: Library, job: MovementJob, now: datetime) -> dict[str, Any]:
    """The job's work, through the same domain functions as the CLI and the HTTP door."""
    p = job.payload
    settings = library.settings
    actor = job.actor_user_id
    runners: dict[str, Callable[[], dict[str, Any]]] = {
        "seed": lambda: seed.seed_library(
            session,
            library.store,
            library.embedder,
            key=p["r2Key"],
            rebuild=p.get("rebuild", False),
            rpm=p.get("rpm"),
            now=now,
            actor_user_id=actor,
        ),
        "thumbnail": lambda: _thumbnail(session, library, p, now),
        "video_discover": lambda: _discover(session, library, p, now),
        "video_rank": lambda: ranking.rank(
            session, library.llm, settings, now=now, **_rank_args(p), actor_user_id=actor
        ),
        "video_refresh": lambda: {
            "discover": _discover(session, library, p, now),
            "rank": ranking.rank(
                session, library.llm, settings, now=now, **_rank_args(p), actor_user_id=actor
            ),
        },
        "cues": lambda: cues.write_cues(
            session,
            library.llm,
            now=now,
            dry_run=p.get("dryRun", False),
            rebuild=p.get("rebuild", False),
            actor_user_id=actor,
        ),
    }
    return runners[job.kind]()


def _thumbnail(session: Session, library: Library, p: dict, now: datetime) -> dict[str, Any]:
    reason = thumbnails.disabled_reason(library.settings, library.images)
    if reason or library.images is None:
        return {"skipped": reason}
    return thumbnails.generate_thumbnail(
        session,
        library.images,
        library.public_store,
        library.settings,
        movement_id=_uuid(p["movementId"]),
        force=p.get("force", False),
        now=now,
    )


def _discover(session: Session, library: Library, p: dict, now: datetime) -> dict[str, Any]:
    return discovery.discover(
        session,
        library.search,
        library.settings,
        now=now,
        limit=p.get("limit"),
        ids=[_uuid(i) for i in p.get("ids") or []],
        slugs=p.get("slugs"),
        force=p.get("force", False),
    )


def _rank_args(p: dict) -> dict[str, Any]:
    return {
        "dry_run": p.get("dryRun", False),
        "limit": p.get("limit"),
        "slugs": p.get("slugs"),
        "include_uncovered": p.get("includeUncovered", False),
    }


def _claim(session: Session, now: datetime) -> MovementJob | None:
    return session.scalars(
        select(MovementJob)
        .where(MovementJob.status == "queued", MovementJob.run_after <= now)
        .order_by(MovementJob.run_after, MovementJob.created_at, MovementJob.id)
        .limit(1)
        .with_for_update(skip_locked=True)
    ).first()


def work_jobs(
    factory: sessionmaker[Session],
    library: Library,
    *,
    now: datetime,
    budget_seconds: float = BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, int]:
    """Run ready jobs, each in a transaction of its own, until none is left or the budget is
    spent. A job's start and finish are the sweep's `now` plus the time the sweep had worked
    by then."""
    started = monotonic()

    def elapsed() -> datetime:
        return now + timedelta(seconds=monotonic() - started)

    done = {"succeeded": 0, "retried": 0, "failed": 0}
    while monotonic() - started < budget_seconds:
        with factory() as session:
            job = _claim(session, now)
            if job is None:
                break
            done[_work(session, library, job, now=now, elapsed=elapsed)] += 1
            session.commit()
    return done


def _work(
    session: Session,
    library: Library,
    job: MovementJob,
    *,
    now: datetime,
    elapsed: Callable[[], datetime],
) -> str:
    """Run one claimed job (its work in a savepoint) and record how it went: succeeded,
    retried or failed; the caller commits."""
    job.status, job.started_at = "running", elapsed()
    job.attempts += 1
    try:
        with session.begin_nested():
            result = run_job(session, library, job, now)
    except Exception as error:  # a job's failure is recorded on the job, never raised
        message = error.message if isinstance(error, DomainError) else type(error).__name__
        job.error = f"{getattr(error, 'code', 'error')}: {message}"[:2000]
        if job.attempts < MAX_ATTEMPTS:
            job.status, job.run_after = "queued", now + RETRY_AFTER[job.attempts - 1]
            return "retried"
        job.status, job.finished_at = "failed", elapsed()
        return "failed"
    job.status, job.result, job.error = "succeeded", result, None
    job.finished_at = elapsed()
    return "succeeded"
