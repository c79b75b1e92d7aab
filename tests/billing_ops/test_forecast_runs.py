"""Queued billing forecasts (issue 24's admin screen): POST queues, the `billing_forecasts`
daemon job runs the same `simulate` the CLI calls, GET reads the run back. A large gym's
forecast outruns a request (gunicorn restarts a worker silent for 30 s), so the synchronous
route refers to the queue once its time is spent."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.orm import sessionmaker
from typer.testing import CliRunner

from daemons.jobs import JOBS
from gymctl.billing import forecast_runs, sweeps
from gymctl.billing.forecast import simulate, within
from gymctl.cli.billing import app as billing_app
from gymctl.db import get_engine
from gymctl.errors import DomainError
from gymctl.models import ForecastRun, Subscription
from gymctl.models.billing import PlanType
from tests import factories
from tests.billing import factories as bf
from tests.billing.factories import TEST_CIPHER, TEST_KEY
from tests.billing.test_checkout_webhooks import app  # noqa: F401 (fixture)
from tests.billing_ops.test_routes import headers, operator  # noqa: F401 (fixtures)
from tests.conftest import NOW

pytestmark = pytest.mark.embedded  # an admin screen of the quick start's deployment too


def _url(gym, run_id=None):
    base = f"/admin/organizations/{gym.organization.id}/billing-forecasts"
    return f"{base}/{run_id}" if run_id else base


def _body(**overrides):
    return {"until": (NOW + timedelta(days=45)).isoformat(), "by": "week", **overrides}


def _runs(session):
    return session.scalar(select(func.count()).select_from(ForecastRun))


def _queue(session, gym, *, days, **options):
    """A run queued (and committed) as the POST route queues one."""
    run, _ = forecast_runs.request_forecast(
        session,
        gym.organization.id,
        forecast_runs.ForecastRequest(until=NOW + timedelta(days=days), **options),
        now=NOW,
        requested_by=None,
    )
    session.commit()
    return run


def _work(session_factory, now=NOW):
    return forecast_runs.work_forecast_runs(
        session_factory, now=now, cipher=TEST_CIPHER, wall=lambda: now
    )


def test_a_queued_forecast_runs_in_the_daemon_and_reads_back_as_the_synchronous_one(
    client,
    session,
    session_factory,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """The run's report is the synchronous route's answer to the same question, to the field."""
    cash = bf.make_subscription(session, gym, PlanType.cash)
    bf.make_subscription(session, gym, PlanType.gift)
    session.commit()
    body = _body(explain=str(cash.id), by="month")

    queued = client.post(_url(gym), json=body, headers=headers(operator))
    assert queued.status_code == 202, queued.json
    run_id = queued.json["id"]
    assert queued.headers["Location"] == _url(gym, run_id)
    assert (queued.json["status"], queued.json["progress"], queued.json["report"]) == (
        "queued",
        0.0,
        None,
    )

    assert _work(session_factory)["succeeded"] == 1
    read = client.get(_url(gym, run_id), headers=headers(operator))
    assert read.status_code == 200
    assert (read.json["status"], read.json["progress"], read.json["error"]) == (
        "succeeded",
        1.0,
        None,
    )
    direct = client.get(
        f"/admin/organizations/{gym.organization.id}/billing-forecast",
        query_string=body,
        headers=headers(operator),
    )
    assert direct.status_code == 200
    assert read.json["report"] == direct.json
    assert [s["event"] for s in read.json["report"]["explain"]["timeline"]] == [
        "subscription.debt_opened",
        "subscription.cancelled",
    ]
    # Instants are ISO 8601, as the document's date-time says.
    assert datetime.fromisoformat(direct.json["from"]) == NOW
    assert datetime.fromisoformat(read.json["finishedAt"]) == NOW

    listed = client.get(_url(gym), headers=headers(operator)).json["data"]
    assert [(r["id"], r["status"]) for r in listed] == [(run_id, "succeeded")]
    assert "report" not in listed[0]
    assert _work(session_factory)["succeeded"] == 0  # nothing left queued


def test_the_same_request_answers_its_unfinished_run_and_a_fourth_waits(
    client,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """A repeated click queues one forecast; at most three per organization queued or running
    (forecast_queue_full, 429), and the refusal queues nothing."""
    first = client.post(_url(gym), json=_body(), headers=headers(operator))
    again = client.post(_url(gym), json=_body(), headers=headers(operator))
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json["id"] == first.json["id"]
    for seed in (1, 2):
        assert (
            client.post(_url(gym), json=_body(seed=seed), headers=headers(operator)).status_code
            == 202
        )
    before = _runs(session)
    full = client.post(_url(gym), json=_body(seed=3), headers=headers(operator))
    assert (full.status_code, full.json["code"]) == (429, "forecast_queue_full")
    assert _runs(session) == before == 3


def test_refusals_and_hostile_requests_queue_nothing(
    client,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    other = factories.make_gym(session)
    session.commit()
    theirs = client.post(_url(other), json=_body(), headers=headers(operator)).json["id"]
    before = _runs(session)
    deep = "[" * 5000 + "]" * 5000
    cases = [
        (_body(), gym.owner, 403, "platform_admin_required"),
        ({"until": "soon"}, operator, 400, "invalid_body"),
        (_body(declineRate="2"), operator, 400, "invalid_body"),
        (_body(by={"deep": 1}), operator, 400, "invalid_body"),
        (_body(seed=-1), operator, 400, "invalid_body"),
        (_body(shell="rm -rf /"), operator, 400, "invalid_body"),
        (_body(declineRate=0.2, fromHistory=True), operator, 422, "decline_rate_conflict"),
        ({"until": "2026-12-01T00:00:00"}, operator, 422, "timestamp_not_utc"),
        (_body(until=(NOW - timedelta(days=1)).isoformat()), operator, 422, "forecast_date_past"),
        (
            _body(until=(NOW + timedelta(days=3 * 366 + 1)).isoformat()),
            operator,
            422,
            "forecast_date_too_far",
        ),
    ]
    for body, caller, status, code in cases:
        refused = client.post(_url(gym), json=body, headers=headers(caller))
        assert (refused.status_code, refused.json["code"]) == (status, code), body
    raw = [
        (deep, "application/json"),
        ("{" + '"a":' * 2 + "}", "application/json"),
        ("until=tomorrow", "application/x-www-form-urlencoded"),
        ('{"until": ' + '"9' * 300_000 + '"}', "application/json"),
    ]
    for data, content_type in raw:
        refused = client.post(
            _url(gym), data=data, content_type=content_type, headers=headers(operator)
        )
        assert 400 <= refused.status_code < 500, data[:40]
        assert refused.is_json
    unknown = client.post(
        f"/admin/organizations/{uuid.uuid4()}/billing-forecasts",
        json=_body(),
        headers=headers(operator),
    )
    assert (unknown.status_code, unknown.json["code"]) == (404, "organization_not_found")
    unlisted = client.get(
        f"/admin/organizations/{uuid.uuid4()}/billing-forecasts", headers=headers(operator)
    )
    assert (unlisted.status_code, unlisted.json["code"]) == (404, "organization_not_found")
    # Another gym's run through this gym's path, and a run that does not exist: one answer.
    for run_id in (theirs, uuid.uuid4()):
        missing = client.get(_url(gym, run_id), headers=headers(operator))
        assert (missing.status_code, missing.json["code"]) == (404, "forecast_run_not_found")
    assert client.get(_url(gym), headers=headers(gym.owner)).status_code == 403
    assert client.get(_url(gym, theirs), headers=headers(gym.owner)).status_code == 403
    assert _runs(session) == before


def test_a_run_refused_since_it_was_queued_fails_with_the_refusal(
    client,
    session,
    session_factory,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """The daemon forecasts from its own now: a date that has passed since is the forecast's
    own refusal, stored on the run (forecast_date_past), not a crash."""
    body = _body(until=(NOW + timedelta(days=1)).isoformat())
    run_id = client.post(_url(gym), json=body, headers=headers(operator)).json["id"]
    later = NOW + timedelta(days=2)
    assert _work(session_factory, now=later)["failed"] == 1
    run = client.get(_url(gym, run_id), headers=headers(operator)).json
    assert run["status"] == "failed"
    assert run["error"]["code"] == "forecast_date_past"
    assert run["report"] is None


def test_a_lost_worker_is_taken_over_and_a_run_lost_three_times_fails(
    client,
    session,
    session_factory,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """A running run whose heartbeat stopped more than the lease ago lost its worker: the next
    pass runs it again; after MAX_ATTEMPTS lost workers it fails (forecast_worker_lost)."""
    again = client.post(_url(gym), json=_body(), headers=headers(operator)).json["id"]
    lost = client.post(_url(gym), json=_body(seed=7), headers=headers(operator)).json["id"]
    stale = NOW - forecast_runs.LEASE - timedelta(seconds=1)
    fresh = NOW - timedelta(seconds=10)
    alive = client.post(_url(gym), json=_body(seed=8), headers=headers(operator)).json["id"]
    for run_id, attempts, beat in ((again, 1, stale), (lost, 3, stale), (alive, 1, fresh)):
        session.execute(
            update(ForecastRun)
            .where(ForecastRun.id == uuid.UUID(run_id))
            .values(status="running", attempts=attempts, started_at=beat, heartbeat_at=beat)
        )
    session.commit()

    done = _work(session_factory)
    assert (done["succeeded"], done["lost"]) == (1, 1)
    view = {
        r["id"]: (r["status"], (r["error"] or {}).get("code"))
        for r in client.get(_url(gym), headers=headers(operator)).json["data"]
    }
    assert view == {
        again: ("succeeded", None),
        lost: ("failed", "forecast_worker_lost"),
        alive: ("running", None),  # its worker is still beating: left alone
    }
    assert session.get(ForecastRun, uuid.UUID(again)).attempts == 2


def test_a_worker_whose_run_was_taken_over_writes_nothing_and_stops(session, session_factory, gym):
    run = _queue(session, gym, days=10)
    claim = forecast_runs._claim(session_factory, NOW, {})
    beat = forecast_runs._heartbeat(
        session_factory, claim, lambda: NOW, iter(range(0, 100, 5)).__next__
    )
    beat(NOW + timedelta(days=1))
    session.refresh(run)
    assert run.reached == NOW + timedelta(days=1)
    # Another worker took the run over (its lease had passed): attempts moved on.
    session.execute(update(ForecastRun).where(ForecastRun.id == run.id).values(attempts=2))
    session.commit()
    with pytest.raises(forecast_runs._TakenOver):
        beat(NOW + timedelta(days=2))
    assert not forecast_runs._finish(session_factory, claim, NOW, report={"late": True})
    session.refresh(run)
    assert (run.status, run.report, run.reached) == ("running", None, NOW + timedelta(days=1))


def test_the_daemon_job_runs_a_queued_forecast(session, session_factory, gym, settings):
    """`billing_forecasts` in the daemons' table commits its own transactions (the runner's
    one transaction would hold the embedded default's write lock through the forecast)."""
    from pydantic import SecretStr

    _queue(session, gym, days=20, by="day")
    job = next(j for j in JOBS if j.name == "billing_forecasts")
    assert (job.own_transactions, job.run) == (True, sweeps.forecasts)
    keyed = settings.model_copy(update={"billing_encryption_key": SecretStr(TEST_KEY)})
    assert job.run(session_factory, NOW, keyed)["succeeded"] == 1
    session.expire_all()  # the row was written by the job's own sessions
    run = session.scalar(select(ForecastRun))
    assert run.status == "succeeded"
    assert len(run.report["periods"]) == 20


def test_finished_runs_are_forgotten_after_thirty_days(session, session_factory, gym):
    _queue(session, gym, days=3)
    _work(session_factory)
    assert _work(session_factory, now=NOW + timedelta(days=29))["forgotten"] == 0
    assert _work(session_factory, now=NOW + timedelta(days=31))["forgotten"] == 1
    assert _runs(session) == 0


def test_the_synchronous_route_refers_to_the_queue_when_its_time_is_spent(
    settings,
    session_factory,
    clock,
    mailbox,
    card_server,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """GYMCTL_FORECAST_REQUEST_SECONDS (default 20, under gunicorn's 30 s): past it the route
    answers forecast_too_long_for_request (422) instead of being killed mid-answer."""
    from pydantic import SecretStr

    from webhooks.app import create_app

    bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    hurried = create_app(
        settings.model_copy(
            update={"billing_encryption_key": SecretStr(TEST_KEY), "forecast_request_seconds": 0}
        ),
        session_factory=session_factory,
        clock=clock,
        card_provider=card_server.provider(),
    )
    before = session.scalar(select(func.count()).select_from(Subscription))
    refused = hurried.test_client().get(
        f"/admin/organizations/{gym.organization.id}/billing-forecast",
        query_string={"until": (NOW + timedelta(days=30)).isoformat()},
        headers=headers(operator),
    )
    assert (refused.status_code, refused.json["code"]) == (422, "forecast_too_long_for_request")
    assert "billing-forecasts" in refused.json["message"]
    assert session.scalar(select(func.count()).select_from(Subscription)) == before


def test_progress_follows_the_forecast_clock_and_what_it_raises_ends_the_forecast(session, gym):
    bf.make_subscription(session, gym, PlanType.cash)
    session.commit()
    until = NOW + timedelta(days=40)
    seen: list[datetime] = []
    simulate(
        session,
        gym.organization.id,
        now=NOW,
        until=until,
        cipher=TEST_CIPHER,
        progress=seen.append,
    )
    assert not session.in_transaction()  # its read ended before the forecast ran
    assert seen == sorted(seen)
    assert seen[0] >= NOW
    assert NOW + timedelta(days=30) < seen[-1] <= until
    ticks = iter([0.0, 0.5, 2.0])  # the deadline is taken at 0.0; 0.5 is in time, 2.0 is not
    hook = within(1.0, monotonic=ticks.__next__)
    hook(NOW)
    with pytest.raises(DomainError) as refused:
        hook(NOW)
    assert refused.value.code == "forecast_too_long_for_request"


def test_an_instant_without_a_utc_time_is_a_400_not_a_500(
    client,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """0001-01-01T00:00:00+14:00 is a valid date-time whose UTC time is before year 1: Python's
    conversion overflows. Every body and query model refuses it (webhooks.validation.Body)."""
    before = _runs(session)
    admin = f"/admin/organizations/{gym.organization.id}"
    for edge in ("0001-01-01T00:00:00+14:00", "9999-12-31T23:00:00-14:00"):
        queued = client.post(_url(gym), json={"until": edge}, headers=headers(operator))
        direct = client.get(
            f"{admin}/billing-forecast", query_string={"until": edge}, headers=headers(operator)
        )
        repair = client.post(
            f"{admin}/billing-readiness/subscriptions/{uuid.uuid4()}/repair-schedule",
            json={"expectedNextChargeAt": edge},
            headers=headers(operator),
        )
        assert (queued.status_code, queued.json["code"]) == (400, "invalid_body"), edge
        assert (direct.status_code, direct.json["code"]) == (400, "invalid_query"), edge
        assert (repair.status_code, repair.json["code"]) == (400, "invalid_body"), edge
        assert queued.json["fields"][0]["field"] == "until"
        assert repair.json["fields"][0]["field"] == "expectedNextChargeAt"
    assert _runs(session) == before


def test_a_run_failed_as_lost_is_not_finished_by_its_silent_worker(session, session_factory, gym):
    """A worker silent past the lease on its last attempt: the next pass fails the run as lost;
    when that worker wakes, neither its heartbeat nor its report lands (it stops)."""
    run = _queue(session, gym, days=10)
    session.execute(update(ForecastRun).where(ForecastRun.id == run.id).values(attempts=2))
    session.commit()
    claim = forecast_runs._claim(session_factory, NOW, {})
    assert claim.attempt == forecast_runs.MAX_ATTEMPTS
    later = NOW + forecast_runs.LEASE + timedelta(seconds=1)
    assert _work(session_factory, now=later)["lost"] == 1
    beat = forecast_runs._heartbeat(session_factory, claim, lambda: later, iter(range(9)).__next__)
    with pytest.raises(forecast_runs._TakenOver):
        beat(NOW + timedelta(days=1))
    assert not forecast_runs._finish(session_factory, claim, later, report={"late": True})
    session.refresh(run)
    assert (run.status, run.error_code, run.report) == ("failed", "forecast_worker_lost", None)


def test_a_heartbeat_that_cannot_be_written_is_skipped_not_a_failed_forecast(
    session, session_factory, gym, caplog
):
    """The embedded default's write lock busy past its timeout, a dropped connection: the
    forecast goes on (the next beat, or the lease, covers a missed one)."""
    from sqlalchemy.exc import OperationalError

    run = _queue(session, gym, days=10)
    claim = forecast_runs._claim(session_factory, NOW, {})

    def unwritable():
        raise OperationalError("UPDATE forecast_runs", {}, Exception("database is locked"))

    beat = forecast_runs._heartbeat(unwritable, claim, lambda: NOW, iter(range(9)).__next__)
    beat(NOW + timedelta(days=1))  # does not raise
    assert "a heartbeat was not written" in caplog.text
    session.refresh(run)
    assert (run.status, run.reached) == ("running", None)


def test_an_admin_withdraws_a_queued_or_running_forecast_and_its_worker_stops(
    client,
    session,
    session_factory,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """Cancelling frees the organization's queue slot at once; a running forecast's worker
    finds its writes fenced out at its next heartbeat and stores nothing. A finished run is
    forecast_run_finished (409); another gym's run, forecast_run_not_found."""
    asked = {
        client.post(_url(gym), json=_body(seed=seed), headers=headers(operator)).json["id"]
        for seed in (1, 2)
    }
    claim = forecast_runs._claim(session_factory, NOW, {})
    running = str(claim.run_id)
    (queued,) = asked - {running}
    beat = forecast_runs._heartbeat(session_factory, claim, lambda: NOW, iter(range(9)).__next__)

    forbidden = client.post(f"{_url(gym, running)}/cancel", headers=headers(gym.owner))
    assert forbidden.status_code == 403
    cancelled = client.post(f"{_url(gym, running)}/cancel", headers=headers(operator))
    assert (cancelled.status_code, cancelled.json["status"]) == (200, "cancelled")
    with pytest.raises(forecast_runs._TakenOver):
        beat(NOW + timedelta(days=1))
    assert not forecast_runs._finish(session_factory, claim, NOW, report={"late": True})

    again = client.post(f"{_url(gym, running)}/cancel", headers=headers(operator))
    assert (again.status_code, again.json["code"]) == (409, "forecast_run_finished")
    other = factories.make_gym(session)
    session.commit()
    for run_id in (queued, uuid.uuid4()):
        refused = client.post(f"{_url(other, run_id)}/cancel", headers=headers(operator))
        assert (refused.status_code, refused.json["code"]) == (404, "forecast_run_not_found")
    withdrawn = client.post(f"{_url(gym, queued)}/cancel", headers=headers(operator))
    assert withdrawn.status_code == 200
    assert _work(session_factory)["succeeded"] == 0  # nothing left to run
    listed = client.get(_url(gym), headers=headers(operator)).json["data"]
    assert {r["id"]: r["status"] for r in listed} == {queued: "cancelled", running: "cancelled"}


def test_a_forecast_that_crashes_fails_as_forecast_failed_and_the_next_run_goes_on(
    session, session_factory, gym, caplog, monkeypatch, tmp_path
):
    """The daemon's temporary folder is gone, so the scratch database cannot be made: the run
    fails as forecast_failed (logged), nothing else is stored, and once the folder is back the
    queue moves on."""
    import tempfile

    runs = [_queue(session, gym, days=10), _queue(session, gym, days=10, seed=1)]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "gone"))
    assert _work(session_factory)["failed"] == 1
    assert "forecast run" in caplog.text
    for run in runs:
        session.refresh(run)
    (broken,) = [run for run in runs if run.status == "failed"]
    (later,) = [run for run in runs if run.status == "queued"]
    assert (broken.error_code, broken.report) == ("forecast_failed", None)
    monkeypatch.undo()
    assert _work(session_factory)["succeeded"] == 1
    session.refresh(later)
    assert later.status == "succeeded"


def test_a_run_whose_stored_request_no_longer_reads_fails_and_holds_back_no_other(
    session, session_factory, gym
):
    """One run per pass, oldest first: a queued run whose stored parameters no longer read (a
    run queued by an older release, a field added since) raised in the claim at every pass,
    and no forecast of any gym behind it ever ran. It fails (forecast_failed) and the next is
    claimed."""
    stale = _queue(session, gym, days=30)
    stale.parameters = {"until": stale.parameters["until"]}  # the other fields unknown to it
    later = _queue(session, gym, days=30)
    session.execute(
        update(ForecastRun)
        .where(ForecastRun.id == later.id)
        .values(created_at=stale.created_at + timedelta(seconds=1))
    )
    session.commit()

    done = _work(session_factory)

    assert (done["failed"], done["succeeded"]) == (1, 1)
    session.expire_all()
    failed = session.get(ForecastRun, stale.id)
    assert (failed.status, failed.error_code) == ("failed", "forecast_failed")
    assert session.get(ForecastRun, later.id).status == "succeeded"


def test_a_run_whose_stored_request_no_longer_reads_is_still_listed_and_read_back(
    client,
    session,
    session_factory,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """The view read the whole stored request to measure progress: a run stored by another
    release (a field added since) answered 500 on the organization's list and on the run itself,
    queued and after the claim failed it, until it was forgotten 30 days later."""
    stale = _queue(session, gym, days=30)
    stale.parameters = {"until": stale.parameters["until"]}
    odd = _queue(session, gym, days=31)
    odd.parameters = {**odd.parameters, "until": 20270101}
    session.commit()

    for worked in (False, True):
        if worked:
            assert _work(session_factory)["failed"] == 2
        listed = client.get(_url(gym), headers=headers(operator))
        assert listed.status_code == 200, listed.json
        assert {run["id"] for run in listed.json["data"]} == {str(stale.id), str(odd.id)}
        for run in (stale, odd):
            read = client.get(_url(gym, run.id), headers=headers(operator))
            assert read.status_code == 200, read.json
            assert read.json["status"] == ("failed" if worked else "queued")
            assert read.json["progress"] == 0.0


def test_the_operators_list_shows_a_run_whose_stored_request_no_longer_reads(
    committed_pg, monkeypatch
):
    """`gymctl billing forecasts` read the stored `until` as a string: a run stored by another
    release (a number there, or none) ended the command with a traceback instead of listing the
    organization's runs."""
    monkeypatch.setenv("GYMCTL_DATABASE_URL", committed_pg)
    monkeypatch.setenv("COLUMNS", "250")
    factory = sessionmaker(bind=get_engine(committed_pg), expire_on_commit=False)
    with factory() as session:
        gym = bf.make_gym(session)
        session.commit()
        odd, stale = (_queue(session, gym, days=days) for days in (30, 31))
        odd.parameters = {**odd.parameters, "until": 20270101}
        stale.parameters = {"by": "week"}
        session.commit()
    org = str(gym.organization.id)
    listed = CliRunner().invoke(billing_app, ["forecasts", org])
    assert listed.exit_code == 0, listed.output
    assert str(odd.id) in listed.stdout
    assert str(stale.id) in listed.stdout
    as_json = CliRunner().invoke(billing_app, ["forecasts", org, "--json"])
    assert {run["id"] for run in json.loads(as_json.stdout)} == {str(odd.id), str(stale.id)}


def test_explain_of_another_gyms_subscription_is_refused_on_both_routes(
    client,
    session,
    gym,
    headers,  # noqa: F811
    operator,  # noqa: F811
):
    """`gymctl billing simulate --explain` refuses a subscription the organization does not
    have (subscription_not_found); over HTTP the same id was explained with an empty timeline
    (200) and queued (202), as if the subscription had nothing ahead of it."""
    other = factories.make_gym(session)
    theirs = bf.make_subscription(session, other, PlanType.cash)
    session.commit()
    forecast_url = f"/admin/organizations/{gym.organization.id}/billing-forecast"
    for explain in (theirs.id, uuid.uuid4()):
        asked = client.get(
            forecast_url, query_string=_body(explain=str(explain)), headers=headers(operator)
        )
        assert (asked.status_code, asked.json["code"]) == (404, "subscription_not_found")
        queued = client.post(_url(gym), json=_body(explain=str(explain)), headers=headers(operator))
        assert (queued.status_code, queued.json["code"]) == (404, "subscription_not_found")
    unknown = uuid.uuid4()
    for answer in (
        client.get(
            f"/admin/organizations/{unknown}/billing-forecast",
            query_string=_body(explain=str(theirs.id)),
            headers=headers(operator),
        ),
        client.post(
            f"/admin/organizations/{unknown}/billing-forecasts",
            json=_body(explain=str(theirs.id)),
            headers=headers(operator),
        ),
    ):
        assert (answer.status_code, answer.json["code"]) == (404, "organization_not_found")
    assert _runs(session) == 0
