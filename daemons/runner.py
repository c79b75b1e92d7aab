"""Run the jobs of daemons.jobs: once (`--once`) or on an APScheduler interval until a signal.

Any number of daemon processes may run on any number of machines. Two guards make that safe:
- single flight: each run holds the PostgreSQL advisory lock `daemon:<job>`, taken without
  waiting, so a job never runs twice at once (a held lock means skip): for its transaction, or
  for a job that commits as it goes, on a connection of its own that holds no transaction;
- one run per tick: ticks are epoch-aligned interval numbers, and the job_runs row (job, tick) is
  inserted in the run's transaction (for a job that commits as it goes, claimed in a transaction
  of its own before it runs), so a daemon reaching a tick already run skips it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from daemons.jobs import AnyJob, JobResult, OwnTransactionsJob, select_jobs
from gymctl import clock, migrate
from gymctl.config import Settings
from gymctl.db import advisory_lock, get_engine, job_lock
from gymctl.db import session_factory as default_session_factory
from gymctl.logs import configure_logging as configure_json_logging
from gymctl.models import JobRun
from gymctl.models.integrity import UniqueViolation, unique_violation
from gymctl.tracking import init_error_tracking

logger = logging.getLogger("gymctl.daemons")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MISFIRE_GRACE_SECONDS = 5
MAX_RESULT_CHARS = 2000


@dataclass(frozen=True)
class JobOutcome:
    job: str
    tick: int | None
    status: str  # "ok", "failed" or "skipped"
    result: JobResult | None = None
    reason: str | None = None  # why it was skipped, or the error

    def as_row(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "tick": self.tick,
            "status": self.status,
            "result": self.result,
            "reason": self.reason,
        }


def runner_id() -> str:
    """Who ran a tick, as recorded in job_runs.runner: host and process id."""
    return f"{socket.gethostname()}:{os.getpid()}"[:128]


def tick_for(at: datetime, interval_seconds: int, offset_seconds: int = 0) -> int:
    """The number of the epoch-aligned interval containing `at`.

    APScheduler 3 does not tell a job its scheduled time, so the tick is the current time rounded
    down to the interval. The trigger fires on epoch-aligned boundaries and never early, so this is
    the scheduled boundary's number unless the run starts a whole interval late (then it counts as
    the later tick, which coalescing would have run anyway). Each host numbers its own boundaries,
    so clock skew between hosts only changes which host reaches a tick first, not its number.
    """
    return (at - EPOCH - timedelta(seconds=offset_seconds)) // timedelta(seconds=interval_seconds)


def run_job_once(
    job: AnyJob,
    *,
    session_factory: sessionmaker[Session],
    settings: Settings,
    now: datetime,
    tick: int | None,
) -> JobOutcome:
    """Run `job` in one transaction under its advisory lock; with a tick, at most once per tick.

    Never raises: a failure is logged (logger.exception, which Sentry's logging integration
    reports), the job's work rolls back, and a "failed" ledger row is written separately.
    """
    if isinstance(job, OwnTransactionsJob):
        return _run_own_transactions(
            job, session_factory=session_factory, settings=settings, now=now, tick=tick
        )
    runner = runner_id()
    session = session_factory()
    try:
        if not advisory_lock(session, f"daemon:{job.name}", wait=False):
            session.rollback()
            return JobOutcome(job.name, tick, "skipped", reason="locked: running elsewhere")
        ledger: JobRun | None = None
        if tick is not None:
            if session.get(JobRun, (job.name, tick)) is not None:
                session.rollback()
                return JobOutcome(job.name, tick, "skipped", reason="already ran this tick")
            ledger = JobRun(
                job_name=job.name, tick=tick, runner=runner, started_at=now, status="running"
            )
            session.add(ledger)
            try:
                with unique_violation("pk_job_runs"):
                    session.flush()
            except UniqueViolation:
                # Another daemon inserted this (job, tick) between our read and our insert.
                session.rollback()
                return JobOutcome(job.name, tick, "skipped", reason="already ran this tick")
        result = job.run(session, now, settings)
        if ledger is not None:
            ledger.finished_at = clock.now()
            ledger.status = "ok"
            ledger.result = _result_text(result)
        session.commit()
        return JobOutcome(job.name, tick, "ok", result=result)
    except Exception as error:
        _rollback_quietly(session)
        return _failed(session_factory, job, tick, runner, now, error)
    finally:
        session.close()


def _failed(
    session_factory: sessionmaker[Session],
    job: AnyJob,
    tick: int | None,
    runner: str,
    now: datetime,
    error: Exception,
) -> JobOutcome:
    """A run that failed before its ledger row was kept: logged, and recorded as the tick's
    failed row in a fresh transaction."""
    logger.exception("job %s tick %s failed", job.name, tick)
    message = f"{type(error).__name__}: {error}"[:MAX_RESULT_CHARS]
    if tick is not None:
        _record_failure(session_factory, job, tick, runner, now, message)
    return JobOutcome(job.name, tick, "failed", reason=message)


def _run_own_transactions(
    job: OwnTransactionsJob,
    *,
    session_factory: sessionmaker[Session],
    settings: Settings,
    now: datetime,
    tick: int | None,
) -> JobOutcome:
    """A job that commits as it goes: the lock is a session-level one on a connection that
    holds no transaction while the job runs (`job_lock`: a forecast or the 02:00 sweep runs
    for minutes, and an idle-in-transaction holder would be ended by the server's
    idle_in_transaction_session_timeout, letting a second daemon in). The ledger row is claimed
    in its own committed transaction before the job runs, then closed after."""
    runner = runner_id()
    with session_factory() as probe:
        engine = probe.get_bind().engine  # a test's factory binds a connection: its engine
    with job_lock(engine, f"daemon:{job.name}") as held:
        if not held:
            return JobOutcome(job.name, tick, "skipped", reason="locked: running elsewhere")
        try:
            claimed = tick is None or _claim_tick(session_factory, job, tick, runner, now)
        except Exception as error:  # not the tick's duplicate (that answers False): a failure
            return _failed(session_factory, job, tick, runner, now, error)
        if not claimed:
            return JobOutcome(job.name, tick, "skipped", reason="already ran this tick")
        try:
            result = job.run(session_factory, now, settings)
        except Exception as error:
            logger.exception("job %s tick %s failed", job.name, tick)
            message = f"{type(error).__name__}: {error}"[:MAX_RESULT_CHARS]
            if tick is not None:
                _close_tick(session_factory, job, tick, "failed", message)
            return JobOutcome(job.name, tick, "failed", reason=message)
        if tick is not None:
            _close_tick(session_factory, job, tick, "ok", _result_text(result))
        return JobOutcome(job.name, tick, "ok", result=result)


def _claim_tick(
    session_factory: sessionmaker[Session], job: AnyJob, tick: int, runner: str, now: datetime
) -> bool:
    with session_factory() as session:
        if session.get(JobRun, (job.name, tick)) is not None:
            return False
        # Under the job's lock no other run of it is going, so an earlier tick's latest row
        # still running is one whose daemon stopped between its claim and its close (killed,
        # its database gone): it stayed "running" in the ledger for as long as the row was
        # kept. Earlier only: a rival that claims this very tick meanwhile is no lost run.
        last = session.scalar(
            select(JobRun)
            .where(JobRun.job_name == job.name, JobRun.tick < tick)
            .order_by(JobRun.tick.desc())
            .limit(1)
        )
        if last is not None and last.status == "running":
            last.status = "failed"
            last.result = f"lost: its runner {last.runner} stopped before the run ended"
        session.add(
            JobRun(job_name=job.name, tick=tick, runner=runner, started_at=now, status="running")
        )
        try:
            with unique_violation("pk_job_runs"):
                session.commit()
        except UniqueViolation:
            session.rollback()
            return False
    return True


def _close_tick(
    session_factory: sessionmaker[Session], job: AnyJob, tick: int, status: str, result: str
) -> None:
    with session_factory() as session:
        ledger = session.get(JobRun, (job.name, tick))
        ledger.status = status
        ledger.result = result
        ledger.finished_at = clock.now()
        session.commit()


def _rollback_quietly(session: Session) -> None:
    """Roll back after a failure; a failure of the rollback itself (the connection is gone, or
    the commit failed after it happened) must not hide the first error or escape."""
    try:
        session.rollback()
    except Exception:
        logger.warning("rollback after a failed job also failed", exc_info=True)


def _record_failure(
    session_factory: sessionmaker[Session],
    job: AnyJob,
    tick: int,
    runner: str,
    started_at: datetime,
    message: str,
) -> None:
    """Write the failed ledger row in a fresh transaction (the run's own one rolled back)."""
    try:
        with session_factory() as session:
            if session.get(JobRun, (job.name, tick)) is None:
                session.add(
                    JobRun(
                        job_name=job.name,
                        tick=tick,
                        runner=runner,
                        started_at=started_at,
                        finished_at=clock.now(),
                        status="failed",
                        result=message,
                    )
                )
            session.commit()
    except Exception:
        logger.exception("could not record the failure of job %s tick %s", job.name, tick)


def _result_text(result: JobResult) -> str:
    text = result if isinstance(result, str) else json.dumps(result, default=str, sort_keys=True)
    return text[:MAX_RESULT_CHARS]


def run_daemons(
    job_names: list[str] | None,
    once: bool,
    settings: Settings,
    *,
    interval_seconds: int | None = None,
    session_factory: sessionmaker[Session] | None = None,
    stop: threading.Event | None = None,
) -> list[JobOutcome]:
    """With `once`, run each selected job now (no tick, so it is not deduplicated against the
    schedule, but still single-flight) and return the outcomes. Otherwise schedule them until
    SIGTERM/SIGINT (or `stop`), then let the running job finish and return [].

    `interval_seconds` overrides every selected job's interval. Tick numbers depend on the
    interval, so daemons sharing a database should run with the same one.
    """
    settings.check()
    jobs = select_jobs(job_names)
    if session_factory is None:  # the configured database: at this gymctl's revision
        migrate.require_current(settings.resolved_database_url)
    if interval_seconds is not None:
        if interval_seconds < 1:
            raise ValueError("interval must be at least 1 second")
        jobs = [replace(job, interval_seconds=interval_seconds) for job in jobs]
    factory = session_factory or default_session_factory(get_engine(settings.resolved_database_url))
    if once:
        return [
            run_job_once(
                job, session_factory=factory, settings=settings, now=clock.now(), tick=None
            )
            for job in jobs
        ]
    _serve(jobs, factory, settings, stop or threading.Event())
    return []


def _serve(
    jobs: list[AnyJob], factory: sessionmaker[Session], settings: Settings, stop: threading.Event
) -> None:
    scheduler = BackgroundScheduler(
        timezone=UTC,
        job_defaults={
            "coalesce": True,
            "max_instances": 1,
            "misfire_grace_time": MISFIRE_GRACE_SECONDS,
        },
    )
    for job in jobs:
        # Epoch-aligned start: every process fires on the same boundaries, so ticks match.
        start = EPOCH + timedelta(seconds=job.offset_seconds)
        trigger = IntervalTrigger(seconds=job.interval_seconds, start_date=start, timezone=UTC)
        scheduler.add_job(
            _scheduled_run, trigger, args=(job, factory, settings), id=job.name, name=job.name
        )
    restore = _install_signal_handlers(stop)
    try:
        scheduler.start()
        logger.info(
            "daemon %s started: %s",
            runner_id(),
            ", ".join(f"{job.name} every {job.interval_seconds}s" for job in jobs),
        )
        while not stop.wait(1.0):
            pass
        logger.info("daemon %s stopping: waiting for running jobs", runner_id())
        scheduler.shutdown(wait=True)
        logger.info("daemon %s stopped", runner_id())
    finally:
        restore()


def _scheduled_run(job: AnyJob, factory: sessionmaker[Session], settings: Settings) -> None:
    now = clock.now()
    tick = tick_for(now, job.interval_seconds, job.offset_seconds)
    try:
        outcome = run_job_once(job, session_factory=factory, settings=settings, now=now, tick=tick)
    except Exception:  # run_job_once does not raise; this keeps the daemon up if it ever does
        logger.exception("job %s tick %s crashed the runner", job.name, tick)
        return
    if outcome.status == "ok":
        logger.info("job %s tick %s ok: %s", job.name, tick, _result_text(outcome.result or ""))
    elif outcome.status == "skipped":
        logger.debug("job %s tick %s skipped: %s", job.name, tick, outcome.reason)


def _install_signal_handlers(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set `stop`; returns a function restoring the previous handlers.

    The first signal also restores them, so a second one stops a daemon whose running job hangs.
    Only the main thread may install handlers; elsewhere the caller stops us through `stop`.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    def handle(signum: int, _frame: object) -> None:
        logger.info("daemon %s received %s", runner_id(), signal.Signals(signum).name)
        restore()
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}
    return restore


def configure_logging(settings: Settings) -> None:
    """JSON log lines to stderr, as the API writes them, and error tracking when SENTRY_DSN is
    set (its logging integration turns logger.exception into an event)."""
    configure_json_logging(settings.log_level)
    # APScheduler logs every run at INFO; our own line per run says more.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    init_error_tracking(settings)
