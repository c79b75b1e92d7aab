"""What the staff's queued work shares (bulk invites, member imports): the request stores the
work and answers at once; a daemon job does it a step at a time, each step a transaction of its
own that also records what it did.

- Turns: the queued jobs due take turns a step each, so one gym's large job holds back no other
  gym's small one, until each is finished or waiting, or the pass's budget is spent.
- Failures: a step whose outside part failed (the identity provider, the mail server), or whose
  transaction was lost, is tried again after 1, 5 and 15 minutes; the fourth failure is final.
  A step that fails every time (a defect) therefore ends instead of stalling the queue.
- The asker: each step runs with the rights its asker has when the step comes, in a gym that is
  still live.
- Finished jobs are forgotten after 30 days (they list members' addresses).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select
from sqlalchemy.orm import Session, sessionmaker

from gymctl.access import codes
from gymctl.access.permissions import Action, Module, enforce
from gymctl.db import READ_ONLY
from gymctl.errors import forbidden, not_found
from gymctl.models import Membership, MembershipStatus, Organization, OrganizationStatus, User

logger = logging.getLogger(__name__)

QUEUED = "queued"
FINISHED = "finished"
DEFERRED = "deferred"  # a step that failed and waits for its retry
PASS_BUDGET_SECONDS = 20.0  # of a daemon pass, ticking every 5 s: no new step starts after it
RETRY_AFTER = (timedelta(minutes=1), timedelta(minutes=5), timedelta(minutes=15))
MAX_TRIES = len(RETRY_AFTER) + 1
KEEP_FINISHED = timedelta(days=30)

# A step: what it did, by outcome (DEFERRED when it failed and waits), or None when the job has
# nothing to do now (finished, or waiting for its retry).
Step = Callable[[uuid.UUID], Counter[str] | None]


@dataclass(frozen=True)
class Pass:
    """What one daemon pass did: the jobs that were due, what their steps did by outcome, and
    how many finished jobs it forgot."""

    due: int
    done: Counter[str]
    forgotten: int

    def summary(self, jobs: str, **counted: int) -> dict[str, Any]:
        """The daemon's JSON: the jobs due under `jobs`, the outcomes, `counted` totals, and
        the forgotten jobs when there were some."""
        summary = {jobs: self.due, **counted, **self.done}
        return {**summary, "forgotten": self.forgotten} if self.forgotten else summary


def run_pass(
    factory: sessionmaker[Session],
    model: Any,
    step: Step,
    lost: Step,
    *,
    now: datetime,
    budget_seconds: float = PASS_BUDGET_SECONDS,
    monotonic: Callable[[], float] = time.monotonic,
) -> Pass:
    """One pass of a job's queue: finished jobs past KEEP_FINISHED are forgotten, then the jobs
    due take turns (take_turns)."""
    with factory() as session:
        forgotten = forget_finished(session, model, now=now)
        session.commit()
    with factory() as session:
        session.connection(execution_options=READ_ONLY)
        ids = list(session.scalars(due(model, now)))
    done = take_turns(ids, step, lost, budget_seconds=budget_seconds, monotonic=monotonic)
    return Pass(len(ids), done, forgotten)


def due(model: Any, now: datetime) -> Any:
    """The ids of the model's queued jobs that may take a step at `now`, oldest first."""
    return (
        select(model.id)
        .where(model.status == QUEUED, or_(model.retry_at.is_(None), model.retry_at <= now))
        .order_by(model.created_at, model.id)
    )


def take_turns(
    ids: list[uuid.UUID],
    step: Step,
    lost: Step,
    *,
    budget_seconds: float,
    monotonic: Callable[[], float] = time.monotonic,
) -> Counter[str]:
    """Step each job in turn until each is finished or waiting, or the budget is spent. A step
    that raises lost its transaction: `lost` counts the failed try in a transaction of its own."""
    started = monotonic()
    done: Counter[str] = Counter()
    turn = list(ids)
    while turn:
        for job_id in list(turn):
            if monotonic() - started >= budget_seconds:
                return done
            try:
                did = step(job_id)
            except Exception:
                logger.exception("queued job %s: a step's transaction failed", job_id)
                did = lost(job_id)
            if did is None or DEFERRED in did:
                turn.remove(job_id)
            if did:
                done.update(did)
    return done


def failed_try(job: Any, *, now: datetime) -> bool:
    """Another failed try of the job's next step; True when it was the last (the caller makes
    the failure the step's outcome), else the step waits for its retry."""
    job.failures += 1
    if job.failures >= MAX_TRIES:
        job.failures, job.retry_at = 0, None
        return True
    job.retry_at = now + RETRY_AFTER[job.failures - 1]
    return False


def stepped(job: Any) -> None:
    """The step is done: the next one starts with no failures behind it."""
    job.failures, job.retry_at = 0, None


def check_asker(
    session: Session,
    organization_id: uuid.UUID,
    membership_id: uuid.UUID | None,
    module: Module,
    action: Action,
) -> tuple[Organization, Membership]:
    """The gym and the asker's membership, if the gym is live and the asker is still staff
    allowed to do this (what the route required of them when they asked); else the refusal."""
    organization = session.get(Organization, organization_id)
    if (
        organization is None
        or organization.deleted_at is not None
        or organization.status is not OrganizationStatus.active
    ):
        raise not_found(codes.ORGANIZATION_NOT_FOUND, "the gym is deleted or inactive")
    actor = session.get(Membership, membership_id) if membership_id else None
    user = session.get(User, actor.user_id) if actor else None
    if (
        actor is None
        or actor.status is not MembershipStatus.active
        or user is None
        or user.deleted_at is not None
    ):
        raise forbidden(codes.PERMISSION_DENIED, "whoever asked for this is no longer staff here")
    enforce(organization_id, actor.role, module, action)
    return organization, actor


def forget_finished(session: Session, model: Any, *, now: datetime) -> int:
    """Finished jobs older than KEEP_FINISHED are deleted; the caller commits."""
    return session.execute(
        delete(model).where(model.status != QUEUED, model.finished_at < now - KEEP_FINISHED)
    ).rowcount
