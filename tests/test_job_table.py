"""The daemons' job table (issue 25): a job that runs in the runner's transaction and one that
commits its own are two types, and each checks its function's signature when it is built, so a
wrong row fails at import, not at its first tick (02:00 for billing_daily)."""

from __future__ import annotations

import importlib.util
from datetime import datetime

import pytest
from sqlalchemy.orm import Session

from daemons.jobs import JOBS, Job, OwnTransactionsJob
from gymctl.billing import sweeps
from gymctl.bridge import sweeps as bridge
from gymctl.config import Settings

OWN_TRANSACTIONS = {
    "bridge_dispatch",
    "billing_catchup",
    "billing_recovery",
    "billing_side_effects",
    "billing_daily",
    "billing_abandoned_checkouts",
    # Each abandoned page's read-back counted in its own commit before the provider is asked.
    "billing_abandoned_read_back",
    "cancellation_sweep",
    # Each presale case's email in a transaction of its own: staff work those cases meanwhile.
    "retention_presale_cases",
    # Not money: a queued forecast runs for minutes, so it must not hold the embedded
    # default's write lock (the runner's one transaction would) while it does.
    "billing_forecasts",
    # Each address of a bulk invite calls the identity provider and the mail server: in its own
    # transaction, so no lock is held across the batch (and its outcome is stored with it).
    "invitation_batches",
    # A roster import's rows register a chunk a transaction; a login's row asks the person to
    # link, emailed after the chunk commits.
    "member_imports",
    # Each link request's email with no transaction open, its send recorded after.
    "link_requests",
    # Each member's billing email, each gym's digest, each library job in a transaction of its
    # own: a run stopped midway keeps the emails it sent and the jobs it finished.
    "billing_member_emails",
    "retention_digest",
    "movement_jobs",
    # Each member's push likewise: a run stopped midway keeps the pushes it made.
    "member_pushes",
    # The event sink is called with no transaction open (an HTTP sink's timeout held the
    # embedded default's write lock); each batch is marked delivered as it goes.
    "event_relay",
}


def test_the_table_builds_and_the_money_jobs_commit_their_own_transactions():
    assert {type(job) for job in JOBS} == {Job, OwnTransactionsJob}
    own = {job.name for job in JOBS if isinstance(job, OwnTransactionsJob)}
    assert own == OWN_TRANSACTIONS
    assert all(job.own_transactions == (job.name in OWN_TRANSACTIONS) for job in JOBS)
    rebuilt = [
        type(job)(job.name, job.interval_seconds, job.run, job.description, job.offset_seconds)
        for job in JOBS
    ]
    assert rebuilt == list(JOBS)


def test_a_job_given_the_other_kind_of_function_fails_when_built():
    with pytest.raises(TypeError, match=r"billing_daily: run must take \(Session, datetime"):
        Job("billing_daily", 86400, sweeps.daily)
    with pytest.raises(TypeError, match=r"lease: run must take \(sessionmaker, datetime"):
        OwnTransactionsJob("lease", 30, bridge.lease_rescue)


def _session_job(session: Session, now: datetime, settings: Settings) -> dict:
    return {}


def _two_arguments(session: Session, now: datetime) -> dict:
    return {}


def test_a_function_whose_signature_cannot_be_read_fails_when_built():
    assert Job("fine", 5, _session_job).run is _session_job
    with pytest.raises(TypeError, match="unannotated: run must take"):
        Job("unannotated", 5, lambda session, now, settings: {})
    with pytest.raises(TypeError, match="short: run must take"):
        Job("short", 5, _two_arguments)
    with pytest.raises(TypeError, match="keyword: run must take"):
        Job("keyword", 5, lambda session, now, *, settings: {})


def test_a_table_with_a_wrong_row_fails_at_import(tmp_path):
    module = tmp_path / "wrong_table.py"
    module.write_text(
        "from daemons.jobs import Job\n"
        "from gymctl.billing import sweeps\n"
        "JOBS = (Job('billing_daily', 86400, sweeps.daily, offset_seconds=2 * 3600),)\n",
        encoding="utf-8",
    )
    spec = importlib.util.spec_from_file_location("wrong_table", module)
    assert spec is not None
    assert spec.loader is not None
    with pytest.raises(TypeError, match="billing_daily: run must take"):
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
