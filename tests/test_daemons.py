"""The daemon runner: single flight by advisory lock, one run per tick across daemons, failures
recorded without stopping the daemon, and a clean stop on SIGTERM/SIGINT."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from daemons.jobs import JOBS, Job, OwnTransactionsJob, select_jobs
from daemons.runner import JobOutcome, run_daemons, run_job_once, runner_id, tick_for
from gymctl.clock import FixedClock
from gymctl.config import Settings, get_settings
from gymctl.db import get_engine, lock_key, session_factory, session_scope
from gymctl.errors import DomainError
from gymctl.events import EventKind, emit
from gymctl.models import JobRun, OutboxEvent
from tests.factories import emit_committed

REPO = Path(__file__).resolve().parents[1]


def _probe(calls: list[datetime], *, fail: bool = False) -> Job:
    def run(session: Session, now: datetime, settings: Settings) -> dict:
        calls.append(now)
        emit(session, EventKind.domain, "probe.ran", at=now, aggregate_type="probe",
             aggregate_id="probe")  # fmt: skip
        if fail:
            raise RuntimeError("boom")
        return {"calls": len(calls)}

    return Job("probe", 5, run)


def test_tick_is_the_epoch_aligned_interval_number() -> None:
    assert tick_for(datetime(1970, 1, 1, 0, 0, 12, tzinfo=UTC), 5) == 2
    assert tick_for(datetime(1970, 1, 1, 0, 0, 15, tzinfo=UTC), 5) == 3
    assert tick_for(datetime(1970, 1, 1, 0, 0, 15, 999_999, tzinfo=UTC), 5) == 3
    at = datetime(2026, 11, 21, 9, 0, 0, 300_000, tzinfo=UTC)
    assert tick_for(at, 1) == int(at.timestamp())


@pytest.mark.embedded
def test_a_tick_already_in_the_ledger_is_skipped(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    calls: list[datetime] = []
    job = _probe(calls)
    run = {"session_factory": session_factory, "settings": get_settings(), "now": clock.now()}

    first = run_job_once(job, tick=100, **run)
    second = run_job_once(job, tick=100, **run)
    next_tick = run_job_once(job, tick=101, **run)

    assert (first.status, second.status, next_tick.status) == ("ok", "skipped", "ok")
    assert second.reason == "already ran this tick"
    assert len(calls) == 2
    ledger = session.get(JobRun, ("probe", 100))
    assert ledger is not None
    assert (ledger.status, ledger.runner, ledger.started_at) == ("ok", runner_id(), clock.now())
    assert json.loads(ledger.result or "") == {"calls": 1}
    assert ledger.finished_at is not None


def test_a_job_whose_advisory_lock_is_held_elsewhere_is_skipped(
    engine, session: Session, session_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    calls: list[datetime] = []
    with engine.connect() as other:
        other.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": lock_key("daemon:probe")})

        outcome = run_job_once(
            _probe(calls), session_factory=session_factory, settings=get_settings(),
            now=clock.now(), tick=200,
        )  # fmt: skip

    assert (outcome.status, outcome.reason) == ("skipped", "locked: running elsewhere")
    assert calls == []
    assert session.get(JobRun, ("probe", 200)) is None


@pytest.mark.parametrize("timeout", ["idle_in_transaction_session_timeout", "idle_session_timeout"])
def test_a_job_that_commits_as_it_goes_keeps_its_lock_past_the_idle_timeouts(
    pg_url: str, timeout: str
) -> None:
    """A forecast or the 02:00 sweep runs for minutes. Its lock must not sit in a session the
    server ends for idling meanwhile (here after 200 ms, in a transaction or out of one): the
    lock would go with it, and a second daemon would start the same job."""
    short = create_engine(pg_url, connect_args={"options": f"-c {timeout}=200"})
    factory = sessionmaker(bind=short, expire_on_commit=False)
    rival: list[JobOutcome] = []
    runs: list[datetime] = []

    def long_run(inner: sessionmaker[Session], now: datetime, _: Settings) -> str:
        runs.append(now)
        if len(runs) > 1:
            return "a second run"  # the rival got in
        time.sleep(0.6)  # three timeouts long
        rival.append(
            run_job_once(job, session_factory=inner, settings=get_settings(), now=now, tick=None)
        )
        return "done"

    job = OwnTransactionsJob("idle_probe", 5, long_run)
    try:
        outcome = run_job_once(
            job, session_factory=factory, settings=get_settings(), now=datetime.now(UTC), tick=None
        )
        with short.connect() as probe:  # the lock went with the run
            free = probe.execute(
                text("SELECT pg_try_advisory_lock(:k)"), {"k": lock_key("daemon:idle_probe")}
            ).scalar()
            probe.execute(text("SELECT pg_advisory_unlock_all()"))
    finally:
        short.dispose()
    assert (outcome.status, outcome.result) == ("ok", "done")
    assert [(r.status, r.reason) for r in rival] == [("skipped", "locked: running elsewhere")]
    assert len(runs) == 1
    assert free is True


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.embedded
def test_a_failing_job_is_recorded_failed_rolled_back_and_does_not_raise(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    job = _probe([], fail=True)
    captured = _Records()  # not caplog: the suite may run with -p no:logging
    logging.getLogger("gymctl.daemons").addHandler(captured)
    try:
        outcome = run_job_once(
            job, session_factory=session_factory, settings=get_settings(), now=clock.now(), tick=300
        )
    finally:
        logging.getLogger("gymctl.daemons").removeHandler(captured)

    assert (outcome.status, outcome.reason) == ("failed", "RuntimeError: boom")
    ledger = session.get(JobRun, ("probe", 300))
    assert ledger is not None
    assert (ledger.status, ledger.result) == ("failed", "RuntimeError: boom")
    assert ledger.finished_at is not None
    assert session.scalars(select(OutboxEvent).where(OutboxEvent.name == "probe.ran")).all() == []
    errors = [r for r in captured.records if r.exc_info]
    assert errors
    assert "probe" in errors[0].getMessage()


def test_unknown_job_names_are_refused_listing_the_valid_ones() -> None:
    with pytest.raises(DomainError) as raised:
        select_jobs(["event_relay", "nope"])
    assert raised.value.code == "unknown_job"
    assert "nope" in raised.value.message
    assert "event_relay" in raised.value.message
    with pytest.raises(DomainError):
        run_daemons(["nope"], True, get_settings())
    assert [job.name for job in select_jobs(None)] == [job.name for job in JOBS]


def test_cli_runs_the_relay_once_and_shows_jobs_and_runs(
    committed_pg: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gymctl.cli.daemons import app

    # `run` configures logging for the process; keep that from outliving the test.
    monkeypatch.setattr(logging.root, "handlers", list(logging.root.handlers))
    monkeypatch.setattr(logging.root, "level", logging.root.level)
    scheduler_logger = logging.getLogger("apscheduler")
    monkeypatch.setattr(scheduler_logger, "level", scheduler_logger.level)
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("GYMCTL_HOME", str(tmp_path))
    monkeypatch.delenv("GYMCTL_EVENT_SINK", raising=False)
    ids = emit_committed(committed_pg, 2)
    cli = CliRunner()

    ran = cli.invoke(app, ["run", "--once", "--job", "event_relay", "--json"])

    assert ran.exit_code == 0, ran.output
    [row] = json.loads(ran.stdout)
    assert (row["job"], row["status"], row["result"]["delivered"]) == ("event_relay", "ok", 2)
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ids

    listed = cli.invoke(app, ["list", "--json"])
    assert {"name": "event_relay", "interval": 5} in [
        {"name": r["name"], "interval": r["interval"]} for r in json.loads(listed.stdout)
    ]

    factory = session_factory(get_engine(committed_pg))
    run_job_once(JOBS[0], session_factory=factory, settings=get_settings(),
                 now=datetime.now(UTC), tick=42)  # fmt: skip
    runs = cli.invoke(app, ["runs", "--json", "-n", "5"])
    assert runs.exit_code == 0, runs.output
    [shown] = json.loads(runs.stdout)
    assert (shown["job"], shown["tick"], shown["status"]) == ("event_relay", 42, "ok")
    # The ledger keeps the result as JSON text; --json shows it as JSON, not a string of it.
    assert isinstance(shown["result"], dict)
    assert shown["runner"] == runner_id()


Spawn = Callable[..., tuple[subprocess.Popen, Path]]


@pytest.fixture
def spawn_daemon(committed_pg: str, tmp_path: Path) -> Iterator[Spawn]:
    """Start `python -m daemons ...` against the committed test database; stderr goes to a file."""
    started: list[subprocess.Popen] = []
    env = {
        **os.environ,
        "GYMCTL_DATABASE_URL": committed_pg,
        "GYMCTL_ENV": "test",
        "GYMCTL_HOME": str(tmp_path),
        "GYMCTL_LOG_LEVEL": "INFO",
    }
    env.pop("GYMCTL_EVENT_SINK", None)

    def spawn(*args: str) -> tuple[subprocess.Popen, Path]:
        log = tmp_path / f"daemon-{len(started)}.log"
        with log.open("w") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "daemons", *args],
                cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=stderr,
            )  # fmt: skip
        started.append(process)
        return process, log

    yield spawn
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


def _wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _ledger(url: str) -> list[JobRun]:
    with session_scope(session_factory(get_engine(url))) as session:
        return list(session.scalars(select(JobRun).order_by(JobRun.tick)))


def test_two_daemons_started_at_once_on_postgresql_run_each_tick_once_between_them(
    committed_pg: str, tmp_path: Path, spawn_daemon: Spawn
) -> None:
    ids = emit_committed(committed_pg, 3)
    daemons = [spawn_daemon("--job", "event_relay", "--interval", "1") for _ in range(2)]
    _wait_for(lambda: all("started" in log.read_text() for _, log in daemons), 10, "both daemons")
    both_up = int(time.time()) + 1  # the first tick at which both were surely scheduled
    _wait_for(
        lambda: len([r for r in _ledger(committed_pg) if r.tick >= both_up]) >= 3, 8, "3 ticks"
    )

    for process, _ in daemons:
        process.send_signal(signal.SIGTERM)
    codes = [process.wait(timeout=10) for process, _ in daemons]

    logs = [log.read_text() for _, log in daemons]
    assert codes == [0, 0], logs
    assert not any("Traceback" in log or " ERROR " in log for log in logs), logs
    runs = _ledger(committed_pg)
    ticks = [run.tick for run in runs]
    assert len(ticks) == len(set(ticks))
    assert len([tick for tick in ticks if tick >= both_up]) >= 3
    assert all(run.status == "ok" for run in runs)
    host = socket.gethostname()
    runners = {
        f"{host}:{process.pid}": log for (process, _), log in zip(daemons, logs, strict=True)
    }
    for run in runs:
        assert run.runner in runners
        assert f"tick {run.tick} ok" in runners[run.runner]  # the runner logged the tick it ran
    delivered = [json.loads(line)["id"] for line in (tmp_path / "events.jsonl").open()]
    assert delivered == ids  # once, in order, although both daemons were running the relay


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_daemon_stops_promptly_and_cleanly_on_a_signal(
    signum: signal.Signals, spawn_daemon: Spawn
) -> None:
    process, log = spawn_daemon("--job", "event_relay", "--interval", "1")
    _wait_for(lambda: "started" in log.read_text(), 10, "the daemon to start")

    sent = time.monotonic()
    process.send_signal(signum)
    code = process.wait(timeout=10)

    assert code == 0, log.read_text()
    assert time.monotonic() - sent < 3
    assert f"received {signum.name}" in log.read_text()
    assert "stopped" in log.read_text()


@pytest.mark.embedded
def test_job_runs_older_than_two_weeks_are_pruned(session, clock) -> None:
    from daemons.jobs import job_runs_prune
    from gymctl.models import JobRun

    now = clock.now()
    for tick, age in ((1, timedelta(days=15)), (2, timedelta(days=13))):
        session.add(
            JobRun(
                job_name="event_relay", tick=tick, runner="test", status="ok", started_at=now - age
            )
        )
    session.flush()
    assert job_runs_prune(session, now, None) == {"deleted": 1}
    assert [run.tick for run in session.query(JobRun).all()] == [2]


@pytest.mark.embedded
def test_rate_windows_past_a_day_are_pruned(session, clock) -> None:
    from daemons.jobs import rate_windows_prune
    from gymctl import ratelimit
    from gymctl.models import RateWindow

    now = clock.now()
    ratelimit.spend(session, "old", window=timedelta(minutes=1), now=now - timedelta(hours=25))
    ratelimit.spend(session, "day", window=timedelta(days=1), now=now - timedelta(hours=2))
    ratelimit.spend(session, "new", window=timedelta(minutes=1), now=now)
    assert rate_windows_prune(session, now, None) == {"deleted": 1}
    assert sorted(window.key for window in session.query(RateWindow).all()) == ["day", "new"]


@pytest.mark.embedded
def test_webhook_replay_keys_are_forgotten_once_no_replay_can_reach_them(session, clock) -> None:
    """A row per delivery stayed for good. An identity delivery older than its signature's
    5-minute tolerance is refused before its id is looked up, so its id goes after 30 days
    (kept that long for its outcome); a payment delivery's digest after 90 (a provider
    redelivers within days)."""
    from daemons.jobs import webhook_deliveries_prune
    from gymctl.identity import users
    from gymctl.identity.webhook_signature import TOLERANCE
    from gymctl.models import IdentityWebhookDelivery, PaymentWebhookDelivery
    from tests import factories

    now = clock.now()
    assert users.DELIVERIES_KEPT > TOLERANCE
    organization = factories.organization(session)
    for name, age in (("old", timedelta(days=31)), ("new", timedelta(days=29))):
        session.add(
            IdentityWebhookDelivery(
                id=f"msg_{name}", event_type="user.updated", received_at=now - age, outcome="ok"
            )
        )
    for digest, age in (("a" * 64, timedelta(days=91)), ("b" * 64, timedelta(days=89))):
        session.add(
            PaymentWebhookDelivery(
                organization_id=organization.id,
                provider="other",
                body_sha256=digest,
                received_at=now - age,
            )
        )
    session.flush()
    assert webhook_deliveries_prune(session, now, None) == {"identity": 1, "payment": 1}
    assert [d.id for d in session.query(IdentityWebhookDelivery).all()] == ["msg_new"]
    assert [d.body_sha256 for d in session.query(PaymentWebhookDelivery).all()] == ["b" * 64]
