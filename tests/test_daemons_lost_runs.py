"""A job that commits as it goes claims its tick's ledger row (status running) before it runs,
and closes it after. A daemon killed in between (a deploy's SIGKILL, the OOM killer) left the
row running: `gymctl daemons runs` showed the 02:00 charge sweep still running for the two
weeks the row is kept, and nothing said that run had stopped halfway. The next run of the job,
under the same lock, closes such a row as failed."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from daemons.jobs import OwnTransactionsJob
from daemons.runner import run_job_once
from gymctl.clock import FixedClock
from gymctl.config import Settings, get_settings
from gymctl.models import JobRun


@pytest.mark.embedded
def test_a_run_whose_daemon_was_killed_is_closed_by_the_next_run(
    session: Session, session_factory: sessionmaker[Session], clock: FixedClock
) -> None:
    runs: list[datetime] = []

    def run(factory: sessionmaker[Session], now: datetime, settings: Settings) -> str:
        runs.append(now)
        if len(runs) == 1:
            raise SystemExit("the daemon was killed")  # not an Exception: nothing records it
        return "done"

    job = OwnTransactionsJob("killed_probe", 5, run)
    ticks = {"session_factory": session_factory, "settings": get_settings(), "now": clock.now()}
    with pytest.raises(SystemExit):
        run_job_once(job, tick=400, **ticks)
    assert session.get(JobRun, ("killed_probe", 400)).status == "running"  # what a kill leaves

    assert run_job_once(job, tick=401, **ticks).status == "ok"

    session.expire_all()
    killed, next_run = (session.get(JobRun, ("killed_probe", tick)) for tick in (400, 401))
    assert (killed.status, killed.finished_at) == ("failed", None)
    assert "stopped before the run ended" in killed.result
    assert (next_run.status, next_run.result) == ("ok", "done")
