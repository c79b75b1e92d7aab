"""The outbox gains a row for every change, analytics and audit event, and nothing deleted one
once the relay had delivered it: the table grew for good. The daemons' `outbox_prune` job
deletes events delivered more than 30 days ago, a bounded batch a run; an event not yet
delivered stays whatever its age, and so does the newest event (on the embedded default the ids
are SQLite rowids: with the highest gone, the next event would take a used id again)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from daemons.jobs import JOBS, Job
from gymctl.clock import FixedClock
from gymctl.events import EventKind, emit
from gymctl.models import OutboxEvent

pytestmark = pytest.mark.embedded


def _prune_job() -> Job:
    [job] = [job for job in JOBS if job.name == "outbox_prune"]
    assert isinstance(job, Job)  # a delete in the runner's one transaction
    return job


def _event(session: Session, clock: FixedClock, delivered_days_ago: int | None) -> int:
    event = emit(session, EventKind.analytics, "member.joined", at=clock.now(),
                 aggregate_type="member", aggregate_id=uuid.uuid4())  # fmt: skip
    session.flush()
    if delivered_days_ago is not None:
        event.delivered_at = clock.now() - timedelta(days=delivered_days_ago)
    session.flush()
    return event.id


def _left(session: Session, ids: list[int]) -> list[int]:
    session.expire_all()
    return list(session.scalars(select(OutboxEvent.id).where(OutboxEvent.id.in_(ids))))


def test_events_delivered_over_30_days_ago_are_pruned_and_no_other(
    session: Session, clock: FixedClock
) -> None:
    old = _event(session, clock, delivered_days_ago=31)
    undelivered = _event(session, clock, delivered_days_ago=None)
    recent = _event(session, clock, delivered_days_ago=29)
    newest = _event(session, clock, delivered_days_ago=40)

    result = _prune_job().run(session, clock.now(), None)

    assert result["deleted"] >= 1
    assert sorted(_left(session, [old, undelivered, recent, newest])) == sorted(
        [undelivered, recent, newest]
    )


def test_the_newest_event_is_kept_so_no_id_is_given_twice(
    session: Session, clock: FixedClock
) -> None:
    ids = [_event(session, clock, delivered_days_ago=60) for _ in range(3)]

    _prune_job().run(session, clock.now(), None)

    assert _left(session, ids) == ids[-1:]
    assert _event(session, clock, delivered_days_ago=None) > ids[-1]
