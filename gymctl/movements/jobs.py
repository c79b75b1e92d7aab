"""The persisted queue of library jobs (spec B 4.5 /jobs): the HTTP door enqueues, the daemon's
`movement_jobs` sweep works them off, `GET /jobs/{queue}/{id}` returns a job's return value.

Each step is a short transaction of its own, so that on the embedded default no transaction
holds the database's write lock while a job calls an outside service (a seed at its rpm limit
held every writer of every process for minutes, and they failed "database is locked"):
- the claim: the job becomes running, its attempt counted, and leased: a running job's
  `run_after` is when its lease ends;
- the work, which commits before each outside call (`units.Checkpoint`) and renews the lease
  there: each unit's writes are kept, and a retried job resumes (each kind is idempotent);
- the outcome, with the last unit's writes: succeeded, or a failed attempt retried after 1,
  then 5 minutes; the third failure is final.
A worker that dies leaves its job running until the lease ends; the next sweep takes it again
(its attempt counted), and fails it once it has had MAX_ATTEMPTS. `attempts` fences every
write of a worker: one whose job was taken over writes nothing more and stops at its next
checkpoint.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from gymctl.errors import DomainError, not_found
from gymctl.models import MovementJob
from gymctl.movements import codes, cues, discovery, ranking, seed, thumbnails
from gymctl.movements.services import Library
from gymctl.movements.units import Checkpoint, keep

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
# Longer than any one unit of work between two checkpoints (an image generation's 120 s
# timeout, an embedding request paced at 1 rpm); the sweep is single-flight besides, so a
# lease ends before its job is done only when its worker is gone.
LEASE = timedelta(minutes=10)


@dataclass(frozen=True)
class Claim:
    """What a worker took: the job's work, and the attempt that fences its writes."""

    id: uuid.UUID
    attempts: int
    kind: str
    payload: dict[str, Any]
    actor_user_id: uuid.UUID | None


class TakenOver(Exception):
    """The job's lease ended and another worker took it: this one writes nothing more."""


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


def run_job(
    session: Session,
    library: Library,
    job: Claim,
    now: datetime,
    checkpoint: Checkpoint = keep,
) -> dict[str, Any]:
    """The job's work, through the same domain functions as the CLI and the HTTP door."""
    p = job.payload
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
            checkpoint=checkpoint,
        ),
        "thumbnail": lambda: _thumbnail(session, library, p, now, actor, checkpoint),
        "video_discover": lambda: _discover(session, library, p, now, actor, checkpoint),
        "video_rank": lambda: _rank(session, library, p, now, actor, checkpoint),
        "video_refresh": lambda: {
            "discover": _discover(session, library, p, now, actor, checkpoint),
            "rank": _rank(session, library, p, now, actor, checkpoint),
        },
        "cues": lambda: cues.write_cues(
            session,
            library.llm,
            now=now,
            dry_run=p.get("dryRun", False),
            rebuild=p.get("rebuild", False),
            actor_user_id=actor,
            checkpoint=checkpoint,
        ),
    }
    return runners[job.kind]()


def _thumbnail(
    session: Session,
    library: Library,
    p: dict,
    now: datetime,
    actor: uuid.UUID | None,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
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
        actor_user_id=actor,
        checkpoint=checkpoint,
    )


def _discover(
    session: Session,
    library: Library,
    p: dict,
    now: datetime,
    actor: uuid.UUID | None,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    return discovery.discover(
        session,
        library.search,
        library.settings,
        now=now,
        limit=p.get("limit"),
        ids=[_uuid(i) for i in p.get("ids") or []],
        slugs=p.get("slugs"),
        force=p.get("force", False),
        actor_user_id=actor,
        checkpoint=checkpoint,
    )


def _rank(
    session: Session,
    library: Library,
    p: dict,
    now: datetime,
    actor: uuid.UUID | None,
    checkpoint: Checkpoint,
) -> dict[str, Any]:
    return ranking.rank(
        session,
        library.llm,
        library.settings,
        now=now,
        dry_run=p.get("dryRun", False),
        limit=p.get("limit"),
        slugs=p.get("slugs"),
        include_uncovered=p.get("includeUncovered", False),
        actor_user_id=actor,
        checkpoint=checkpoint,
    )


def _claim(
    factory: sessionmaker[Session], now: datetime, at: datetime, done: dict[str, int]
) -> Claim | None:
    """Take the oldest ready job, or one whose worker's lease ended, and commit at once; a lost
    job that has had its attempts is failed instead."""
    lost = (MovementJob.status == "running") & (MovementJob.run_after <= now)
    with factory() as session:
        done["failed"] += session.execute(
            update(MovementJob)
            .where(lost, MovementJob.attempts >= MAX_ATTEMPTS)
            .values(
                status="failed",
                finished_at=at,
                error=f"job_worker_lost: its worker stopped {MAX_ATTEMPTS} times before it ended",
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        job = session.scalars(
            select(MovementJob)
            .where(MovementJob.status.in_(("queued", "running")), MovementJob.run_after <= now)
            .order_by(MovementJob.run_after, MovementJob.created_at, MovementJob.id)
            .limit(1)
            .with_for_update(skip_locked=True)
        ).first()
        if job is None:
            session.commit()
            return None
        job.status, job.attempts = "running", job.attempts + 1
        job.started_at, job.run_after = at, at + LEASE
        claim = Claim(job.id, job.attempts, job.kind, dict(job.payload), job.actor_user_id)
        session.commit()
        return claim


def work_jobs(
    factory: sessionmaker[Session],
    library: Library,
    *,
    now: datetime,
    budget_seconds: float = BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, int]:
    """Run ready jobs, each claimed, worked and recorded in short transactions of its own,
    until none is left or the budget is spent. A job's start, lease and finish are the sweep's
    `now` plus the time the sweep had worked by then."""
    started = monotonic()

    def elapsed() -> datetime:
        return now + timedelta(seconds=monotonic() - started)

    done = {"succeeded": 0, "retried": 0, "failed": 0}
    while monotonic() - started < budget_seconds:
        claim = _claim(factory, now, elapsed(), done)
        if claim is None:
            break
        outcome = _work(factory, library, claim, now=now, elapsed=elapsed)
        if outcome is not None:
            done[outcome] += 1
    return done


def _still_ours(claim: Claim) -> tuple:
    return (
        MovementJob.id == claim.id,
        MovementJob.status == "running",
        MovementJob.attempts == claim.attempts,
    )


def _record(session: Session, claim: Claim, **values: Any) -> bool:
    """Write the job's row in the session's transaction, if the job is still this worker's."""
    return bool(
        session.execute(
            update(MovementJob)
            .where(*_still_ours(claim))
            .values(**values)
            .execution_options(synchronize_session=False)
        ).rowcount
    )


def _work(
    factory: sessionmaker[Session],
    library: Library,
    claim: Claim,
    *,
    now: datetime,
    elapsed: Callable[[], datetime],
) -> str | None:
    """Run one claimed job and record how it went: succeeded, retried or failed (None: it was
    taken over, and its new worker records it)."""
    with factory() as session:

        def checkpoint() -> None:
            if not _record(session, claim, run_after=elapsed() + LEASE):
                raise TakenOver(claim.id)
            session.commit()

        try:
            result = run_job(session, library, claim, now, checkpoint)
        except TakenOver:
            session.rollback()
            return None
        except Exception as error:  # a job's failure is recorded on the job, never raised
            session.rollback()  # the unit it failed in; the units before it stay
            return _failed(session, claim, error, now=now, elapsed=elapsed)
        ours = _record(
            session,
            claim,
            status="succeeded",
            result=result,
            error=None,
            finished_at=elapsed(),
        )
        if not ours:
            session.rollback()
            return None
        session.commit()
        return "succeeded"


def _failed(
    session: Session,
    claim: Claim,
    error: Exception,
    *,
    now: datetime,
    elapsed: Callable[[], datetime],
) -> str | None:
    message = error.message if isinstance(error, DomainError) else type(error).__name__
    text = f"{getattr(error, 'code', 'error')}: {message}"[:2000]
    if claim.attempts < MAX_ATTEMPTS:
        after = now + RETRY_AFTER[claim.attempts - 1]
        outcome, values = "retried", {"status": "queued", "run_after": after, "error": text}
    else:
        outcome, values = "failed", {"status": "failed", "finished_at": elapsed(), "error": text}
    ours = _record(session, claim, **values)
    session.commit()
    return outcome if ours else None
