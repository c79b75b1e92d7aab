"""The forecast's stepping (issue 24's figure): running each job again only when rows changed
since its own last run gives the same forecast as running every job again after any write, in
fewer runs; the scratch copy's own indexes and statistics change no result; and the scratch
database leaves nothing in the process's engine cache."""

from __future__ import annotations

import functools
from datetime import timedelta

from gymctl import db
from gymctl.billing import forecast as fc
from tests.billing.factories import TEST_CIPHER
from tests.billing.test_forecast import LEDGER, _rows, small_gym
from tests.conftest import NOW


def _forecast(session, org, tmp_path, monkeypatch, *, per_job=True, tuned=True):
    with monkeypatch.context() as patched:
        patched.setattr(fc, "run", functools.partial(fc.run, per_job=per_job))
        if not tuned:
            patched.setattr(fc, "tune_scratch", lambda engine: None)
        return fc.simulate(
            session,
            org,
            now=NOW,
            until=NOW + timedelta(days=35),
            cipher=TEST_CIPHER,
            by="day",
            decline_rate=0.3,
            seed=3,
            scratch_dir=tmp_path,
        )


def _steps(forecast):
    """Every event with its instant, job and subscription; ids the run drew are left out."""
    return [
        (step.at, step.job, step.event, step.subscription_id, sorted(step.payload))
        for step in forecast.steps
    ]


def test_running_a_job_only_after_changes_since_its_own_run_gives_the_same_forecast(
    session, tmp_path, monkeypatch
):
    org = small_gym(session).organization.id

    per_job = _forecast(session, org, tmp_path, monkeypatch, per_job=True)
    every_job = _forecast(session, org, tmp_path, monkeypatch, per_job=False)

    _same_forecast(per_job, every_job)
    # Not a trivial comparison: money moved, debts opened, and the stepping saved runs.
    assert sum(p["moneyInCents"] for p in per_job.periods()) > 0
    assert sum(p["debtsOpened"] for p in per_job.periods()) > 0
    assert 0 < per_job.ticks_run < every_job.ticks_run


def _same_forecast(first, second) -> None:
    assert _rows(first.final["subscriptions"]) == _rows(second.final["subscriptions"])
    ledger = first.final["payment_transactions"]
    assert _rows(ledger, LEDGER) == _rows(second.final["payment_transactions"], LEDGER)
    assert _steps(first) == _steps(second)
    assert first.periods() == second.periods()


def test_the_scratch_indexes_and_statistics_change_no_result(session, tmp_path, monkeypatch):
    """A plan decides how a statement finds its rows, not which: the forecast on the tuned
    scratch copy (an index per instant column, ANALYZE) is the one on the plain copy."""
    org = small_gym(session).organization.id

    tuned = _forecast(session, org, tmp_path, monkeypatch)
    plain = _forecast(session, org, tmp_path, monkeypatch, tuned=False)

    _same_forecast(tuned, plain)
    assert sum(p["moneyInCents"] for p in tuned.periods()) > 0
    assert tuned.ticks_run == plain.ticks_run


def test_the_scratch_database_leaves_no_engine_in_the_cache(session, tmp_path):
    org = small_gym(session).organization.id
    engines_before = dict(db._engines)
    factories_before = dict(db._sessionmakers)

    fc.simulate(
        session,
        org,
        now=NOW,
        until=NOW + timedelta(days=2),
        cipher=TEST_CIPHER,
        scratch_dir=tmp_path,
    )

    assert list(tmp_path.iterdir()) == []  # the file is dropped
    assert db._engines == engines_before  # and so is its engine
    assert db._sessionmakers == factories_before
    assert not [url for url in db._engines if str(tmp_path) in url]


def test_a_released_engine_is_disposed_and_forgotten(tmp_path):
    url = f"sqlite:///{tmp_path / 'scratch.sqlite3'}"
    engine = db.get_engine(url)
    factory = db.session_factory(engine)
    with engine.connect() as connection:
        connection.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    assert engine.pool.checkedin() == 1

    db.release_engine(url)

    assert url not in db._engines
    assert engine not in db._sessionmakers
    assert engine.pool.checkedin() == 0  # its pooled connection was closed
    fresh = db.get_engine(url)  # asked again: a new engine, not the released one
    assert fresh is not engine
    assert db.session_factory(fresh) is not factory
    db.release_engine(url)
    db.release_engine(url)  # releasing an unknown url is a no-op
    assert url not in db._engines
