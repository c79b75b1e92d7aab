"""Forecasts asked for over HTTP (issue 24's admin screen): queued, run by a daemon, read back.

A forecast of a large gym takes longer than a request may: 5,000 subscriptions over a year
take about 100 s here, and gunicorn restarts a worker that is silent for 30 s. So the request
checks what `simulate` would refuse, stores the run and answers at once; the
`billing_forecasts` daemon job claims the oldest queued run, runs the same `simulate` the CLI
calls, and stores its report. Each step is its own short transaction: on the embedded default
the real database's write lock is never held while the forecast runs.

While it runs, the forecast's progress (the forecast clock's instant) is written as the run's
heartbeat. A run whose heartbeat is older than LEASE lost its worker (killed, restarted): the
next pass takes it again, up to MAX_ATTEMPTS, then fails it. `attempts` fences the writes: a
worker whose run was taken over writes nothing more and stops at its next heartbeat.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, or_, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from gymctl import clock, ids
from gymctl.billing import codes
from gymctl.billing.forecast import (
    check_explain,
    check_options,
    check_organization,
    check_request,
    simulate,
)
from gymctl.crypto import FieldCipher
from gymctl.db import advisory_lock, organization_row
from gymctl.errors import DomainError, conflict, not_found, too_many_requests
from gymctl.models import ForecastRun, ForecastRunStatus

logger = logging.getLogger(__name__)

LEASE = timedelta(minutes=2)
HEARTBEAT_SECONDS = 2.0  # of the worker's own time between two heartbeat writes
MAX_ATTEMPTS = 3
UNFINISHED_PER_ORGANIZATION = 3  # queued or running: a fourth request waits for one to end
KEEP_FINISHED = timedelta(days=30)
LISTED = 20
UNFINISHED = (ForecastRunStatus.queued, ForecastRunStatus.running)


@dataclass(frozen=True)
class ForecastRequest:
    """What `gymctl billing simulate` takes, as a queued run stores it."""

    until: datetime
    by: str = "week"
    decline_rate: float = 0.0
    seed: int = 0
    from_history: bool = False
    lifecycle_only: bool = False
    explain: uuid.UUID | None = None

    def parameters(self) -> dict[str, Any]:
        stored = asdict(self)
        stored["until"] = self.until.isoformat()
        stored["explain"] = str(self.explain) if self.explain else None
        return {_CAMEL[name]: value for name, value in stored.items()}

    @classmethod
    def of(cls, parameters: dict[str, Any]) -> ForecastRequest:
        values = {name: parameters[camel] for name, camel in _CAMEL.items()}
        values["until"] = datetime.fromisoformat(values["until"])
        values["explain"] = uuid.UUID(values["explain"]) if values["explain"] else None
        return cls(**values)


_CAMEL = {
    "until": "until",
    "by": "by",
    "decline_rate": "declineRate",
    "seed": "seed",
    "from_history": "fromHistory",
    "lifecycle_only": "lifecycleOnly",
    "explain": "explain",
}


def request_forecast(
    session: Session,
    organization_id: uuid.UUID,
    request: ForecastRequest,
    *,
    now: datetime,
    requested_by: uuid.UUID | None,
) -> tuple[ForecastRun, bool]:
    """Queue a forecast; the caller commits. Refused now for what `simulate` would refuse (a
    request that cannot run is not queued to fail later). The same request as an unfinished
    run of the organization answers that run (False: nothing queued), so a repeated click
    queues one forecast. A subscription to explain is one of the organization's, as on the
    command line: another gym's was queued and explained with an empty timeline."""
    check_options(request.by, request.decline_rate, request.from_history)
    check_request(
        session,
        organization_id,
        now=now,
        until=request.until,
        lifecycle_only=request.lifecycle_only,
    )
    if request.explain is not None:
        check_explain(session, organization_id, request.explain)
    # Serializes the check-then-insert of one organization's requests.
    advisory_lock(session, f"forecast_runs:{organization_id}")
    parameters = request.parameters()
    unfinished = session.scalars(
        select(ForecastRun)
        .where(ForecastRun.organization_id == organization_id, ForecastRun.status.in_(UNFINISHED))
        .order_by(ForecastRun.created_at, ForecastRun.id)
    ).all()
    for run in unfinished:
        if run.parameters == parameters:
            return run, False
    if len(unfinished) >= UNFINISHED_PER_ORGANIZATION:
        raise too_many_requests(
            codes.FORECAST_QUEUE_FULL,
            f"{len(unfinished)} forecasts of this organization are queued or running: "
            "ask again when one has finished",
        )
    run = ForecastRun(
        id=ids.new_id(),
        organization_id=organization_id,
        requested_by=requested_by,
        parameters=parameters,
        status=ForecastRunStatus.queued,
        attempts=0,
        created_at=now,
    )
    session.add(run)
    session.flush()
    return run, True


def find_run(
    session: Session, organization_id: uuid.UUID, run_id: uuid.UUID, *, lock: bool = False
) -> ForecastRun:
    run = organization_row(session, ForecastRun, organization_id, run_id, lock=lock)
    if run is None:
        raise not_found(codes.FORECAST_RUN_NOT_FOUND, "no such forecast run")
    return run


def cancel_run(
    session: Session, organization_id: uuid.UUID, run_id: uuid.UUID, *, now: datetime
) -> ForecastRun:
    """Withdraw a queued or running forecast; the caller commits. A running one's worker finds
    its writes fenced out at its next heartbeat (2 s) and stops; the slot frees at once."""
    run = find_run(session, organization_id, run_id, lock=True)
    if run.status not in UNFINISHED:
        raise conflict(codes.FORECAST_RUN_FINISHED, f"the forecast has already {run.status}")
    run.status, run.finished_at = ForecastRunStatus.cancelled, now
    session.flush()
    return run


def recent_runs(session: Session, organization_id: uuid.UUID) -> list[ForecastRun]:
    """The organization's latest runs, newest first (finished ones are kept KEEP_FINISHED)."""
    check_organization(session, organization_id)
    return list(
        session.scalars(
            select(ForecastRun)
            .where(ForecastRun.organization_id == organization_id)
            .order_by(ForecastRun.created_at.desc(), ForecastRun.id.desc())
            .limit(LISTED)
        )
    )


def run_view(run: ForecastRun, *, with_report: bool = True) -> dict[str, Any]:
    """A run as the API shows it: `progress` is the share of the forecast's span its clock has
    crossed (1 once succeeded)."""
    until = stored_until(run.parameters)
    progress = 0.0
    if run.status == ForecastRunStatus.succeeded:
        progress = 1.0
    elif run.reached is not None and run.started_at is not None and until is not None:
        span = (until - run.started_at).total_seconds()
        done = (run.reached - run.started_at).total_seconds()
        progress = round(min(max(done / span, 0.0), 1.0), 3) if span > 0 else 0.0
    view: dict[str, Any] = {
        "id": str(run.id),
        "organizationId": str(run.organization_id),
        "status": run.status,
        "parameters": run.parameters,
        "progress": progress,
        "reached": run.reached,
        "createdAt": run.created_at,
        "startedAt": run.started_at,
        "finishedAt": run.finished_at,
        "error": {"code": run.error_code, "message": run.error} if run.error_code else None,
    }
    if with_report:
        view["report"] = run.report
    return view


def stored_until(parameters: Any) -> datetime | None:
    """The run's `until` as stored, or None: a run stored by another release whose request no
    longer reads (which the claim fails) is still listed and read back, where reading the
    whole request answered 500 for the organization's every run until it was forgotten (and
    `gymctl billing forecasts` exited with a traceback)."""
    try:
        until = datetime.fromisoformat(parameters["until"])
    except (KeyError, TypeError, ValueError):
        return None
    return until if until.tzinfo is not None else None  # no instant to measure a span to


# --- The daemon's side -------------------------------------------------------------------------


class _TakenOver(Exception):
    """The run's lease passed to another worker: this one stops and writes nothing more."""


@dataclass(frozen=True)
class _Claim:
    run_id: uuid.UUID
    attempt: int
    organization_id: uuid.UUID
    request: ForecastRequest


def work_forecast_runs(
    factory: sessionmaker[Session],
    *,
    now: datetime,
    cipher: FieldCipher,
    wall: Callable[[], datetime] = clock.now,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, int]:
    """Run the oldest queued forecast (or one whose worker was lost), one per pass: claim it
    and commit, forecast from `now` in a read-only session, store the report or the refusal.
    Also forgets finished runs older than KEEP_FINISHED. The heartbeats and the finish are
    stamped by `wall`, the clock that moves while the forecast runs."""
    done = {"succeeded": 0, "failed": 0, "lost": 0, "taken_over": 0, "forgotten": 0}
    claim = _claim(factory, now, done)
    if claim is None:
        return done
    request = claim.request
    try:
        with factory() as source:  # simulate reads it read-only and ends its transaction
            result = simulate(
                source,
                claim.organization_id,
                now=now,
                until=request.until,
                cipher=cipher,
                by=request.by,
                decline_rate=request.decline_rate,
                seed=request.seed,
                from_history=request.from_history,
                lifecycle_only=request.lifecycle_only,
                progress=_heartbeat(factory, claim, wall, monotonic),
            )
    except _TakenOver:
        done["taken_over"] += 1
        return done
    except DomainError as error:  # refused since it was queued (a date now past, a provider)
        failed = _finish(factory, claim, wall(), error_code=error.code, error=error.message)
    except Exception as error:
        logger.exception("forecast run %s failed", claim.run_id)
        failed = _finish(
            factory, claim, wall(), error_code=codes.FORECAST_FAILED, error=type(error).__name__
        )
    else:
        stored = _finish(factory, claim, wall(), report=result.report(request.explain))
        done["succeeded" if stored else "taken_over"] += 1
        return done
    done["failed" if failed else "taken_over"] += 1
    return done


def _claim(factory: sessionmaker[Session], at: datetime, done: dict[str, int]) -> _Claim | None:
    lost = (ForecastRun.status == ForecastRunStatus.running) & (
        ForecastRun.heartbeat_at < at - LEASE
    )
    with factory() as session:
        done["forgotten"] = session.execute(
            delete(ForecastRun).where(
                ForecastRun.status.not_in(UNFINISHED), ForecastRun.finished_at < at - KEEP_FINISHED
            )
        ).rowcount
        done["lost"] = session.execute(
            update(ForecastRun)
            .where(lost, ForecastRun.attempts >= MAX_ATTEMPTS)
            .values(
                status=ForecastRunStatus.failed,
                finished_at=at,
                error_code=codes.FORECAST_WORKER_LOST,
                error=f"its worker stopped {MAX_ATTEMPTS} times before it finished",
            )
        ).rowcount
        while True:
            run = session.scalar(
                select(ForecastRun)
                .where(or_(ForecastRun.status == ForecastRunStatus.queued, lost))
                .order_by(ForecastRun.created_at, ForecastRun.id)
                .limit(1)
                .with_for_update(skip_locked=True)
            )
            if run is None:
                session.commit()
                return None
            try:
                request = ForecastRequest.of(run.parameters)
            except (KeyError, TypeError, ValueError) as error:
                # Stored by another release (a field added since): raised here, it stopped
                # every pass at this run, the oldest, and no gym's forecast behind it ran.
                run.status, run.finished_at = ForecastRunStatus.failed, at
                run.error_code = codes.FORECAST_FAILED
                run.error = f"its stored request no longer reads ({type(error).__name__})"
                done["failed"] += 1
                continue
            run.status, run.attempts = ForecastRunStatus.running, run.attempts + 1
            run.started_at = run.heartbeat_at = at
            run.reached = None
            claim = _Claim(run.id, run.attempts, run.organization_id, request)
            session.commit()
            return claim


def _heartbeat(
    factory: sessionmaker[Session],
    claim: _Claim,
    now: Callable[[], datetime],
    monotonic: Callable[[], float],
) -> Callable[[datetime], None]:
    """The forecast's progress hook: writes the instant reached, at most every
    HEARTBEAT_SECONDS, and stops the forecast if the run was taken over."""
    last = [float("-inf")]

    def beat(reached: datetime) -> None:
        if monotonic() - last[0] < HEARTBEAT_SECONDS:
            return
        last[0] = monotonic()
        try:
            with factory() as session:
                moved = session.execute(
                    update(ForecastRun)
                    .where(*_still_ours(claim))
                    .values(reached=reached, heartbeat_at=now())
                ).rowcount
                session.commit()
        except SQLAlchemyError:
            # A missed beat (the embedded default's write lock busy past its timeout, a
            # connection lost) is not a failed forecast: the next beat, or the lease, covers it.
            logger.warning("forecast run %s: a heartbeat was not written", claim.run_id)
            return
        if not moved:
            raise _TakenOver

    return beat


def _still_ours(claim: _Claim) -> tuple[Any, ...]:
    """The claimed attempt, still running: not taken over by a later attempt, nor failed as
    lost while this worker was silent past the lease."""
    return (
        ForecastRun.id == claim.run_id,
        ForecastRun.attempts == claim.attempt,
        ForecastRun.status == ForecastRunStatus.running,
    )


def _finish(
    factory: sessionmaker[Session],
    claim: _Claim,
    at: datetime,
    *,
    report: dict[str, Any] | None = None,
    error_code: str | None = None,
    error: str | None = None,
) -> bool:
    """Store the outcome of the claimed attempt; False when the run was taken over since."""
    status = ForecastRunStatus.failed if error_code else ForecastRunStatus.succeeded
    with factory() as session:
        stored = session.execute(
            update(ForecastRun)
            .where(*_still_ours(claim))
            .values(
                status=status,
                report=report,
                error_code=error_code,
                error=error,
                finished_at=at,
                heartbeat_at=at,
                reached=claim.request.until if report is not None else ForecastRun.reached,
            )
        ).rowcount
        session.commit()
    return bool(stored)
