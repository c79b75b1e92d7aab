"""The table of periodic jobs. Adding a sweep is one row in JOBS; the runner does the rest
(single flight by advisory lock, one run per tick across daemons, the job_runs ledger)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from gymctl.access.invitations import expire_invitations
from gymctl.config import Settings
from gymctl.errors import DomainError
from gymctl.models import JobRun
from gymctl.providers.event_sink import sink_from_url
from gymctl.relay import relay_events

JobResult = str | dict[str, Any]


@dataclass(frozen=True)
class Job:
    """A sweep run every `interval_seconds`, in one transaction the runner commits."""

    name: str
    interval_seconds: int
    run: Callable[[Session, datetime, Settings], JobResult]
    description: str = ""


def event_relay(session: Session, now: datetime, settings: Settings) -> JobResult:
    result = relay_events(session, sink_from_url(settings.resolved_event_sink), now=now)
    return result.as_dict()


JOB_RUNS_KEPT = timedelta(days=14)


def job_runs_prune(session: Session, now: datetime, settings: Settings) -> JobResult:
    """The ledger gains a row per job and tick (17,280 a day for a 5 s job): keep two weeks."""
    deleted = session.execute(delete(JobRun).where(JobRun.started_at < now - JOB_RUNS_KEPT))
    return {"deleted": deleted.rowcount}


def invitation_expiry(session: Session, now: datetime, settings: Settings) -> JobResult:
    return expire_invitations(session, now=now)


JOBS: tuple[Job, ...] = (
    Job("event_relay", 5, event_relay, "deliver outbox events to the event sink"),
    Job("invitation_expiry", 3600, invitation_expiry, "expire pending invitations past their date"),
    Job("job_runs_prune", 3600, job_runs_prune, "delete job_runs rows older than 14 days"),
)


def select_jobs(names: list[str] | None, jobs: tuple[Job, ...] = JOBS) -> list[Job]:
    """The jobs named (all when none), in the order given; an unknown name lists the valid ones."""
    if not names:
        return list(jobs)
    by_name = {job.name: job for job in jobs}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise DomainError(
            "unknown_job",
            f"unknown job {', '.join(unknown)}; valid jobs: {', '.join(by_name)}",
        )
    return [by_name[name] for name in dict.fromkeys(names)]
