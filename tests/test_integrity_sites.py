"""Each call site that expects a unique violation answers it as before, and lets any other
integrity error (a foreign key, NOT NULL) surface instead of answering it as the duplicate.

The unrelated failures are real ones: `now=None` leaves a NOT NULL timestamp empty (checked
before any unique key on both engines), an id of no row breaks a foreign key (the site's own, or
an orphan row flushed with the site's insert)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
from sqlalchemy import event, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from daemons.jobs import Job, OwnTransactionsJob
from daemons.runner import run_job_once
from gymctl.access.identity_events import apply_identity_event
from gymctl.access.sessions import clear_cache, record_session
from gymctl.bridge import enqueue, queue
from gymctl.config import Settings
from gymctl.db import get_engine
from gymctl.db import session_factory as db_session_factory
from gymctl.errors import DomainError
from gymctl.identity.users import find_or_create
from gymctl.models import (
    AuditLog,
    IdentityWebhookDelivery,
    IntegrationConnection,
    JobRun,
    Movement,
    MovementVideoReport,
    User,
    UserSession,
)
from gymctl.models.bridge import SyncOp
from gymctl.models.organizations import Tier
from gymctl.models.releases import (
    BrandedApp,
    CandidateSupersession,
    PushRegistration,
    ReleaseCandidate,
    ReleaseRequest,
)
from gymctl.movements.own import create_own
from gymctl.movements.ranking import report_video
from gymctl.releases import branded_apps
from gymctl.releases.candidates import supersede
from gymctl.releases.push import _upsert_registration
from tests import factories
from tests.conftest import NOW
from tests.lost_race import checks_miss, orphan, orphan_with

pytestmark = pytest.mark.embedded


def _count(session, model) -> int:
    return session.scalar(select(func.count()).select_from(model))


# -- identity: the login's row, the webhook delivery -------------------------------------------


def test_a_login_created_twice_reads_the_winner_and_a_foreign_key_failure_surfaces(
    engine, session, monkeypatch
):
    winner = factories.user(session, identity_id="user_race")
    checks_miss(monkeypatch, session, "scalar", 1)
    assert find_or_create(session, "user_race", now=NOW) == (winner, False)

    with orphan_with(session, User), pytest.raises(IntegrityError):
        find_or_create(session, "user_new", now=NOW)
    assert _count(session, User) == 1


def test_a_replayed_delivery_is_a_duplicate_and_an_empty_timestamp_surfaces(
    engine, session, settings, monkeypatch
):
    event = {"type": "session.created", "data": {}}
    assert apply_identity_event(session, "msg_1", event, now=NOW, settings=settings) == "ignored"
    checks_miss(monkeypatch, session, "get", 1)
    assert apply_identity_event(session, "msg_1", event, now=NOW, settings=settings) == "duplicate"

    checks_miss(monkeypatch, session, "get", 1)
    with pytest.raises(IntegrityError):
        apply_identity_event(session, "msg_1", event, now=None, settings=settings)
    assert _count(session, IdentityWebhookDelivery) == 1


# -- access: the ownership trail's session row ------------------------------------------------


def test_a_session_row_raced_is_updated_and_an_empty_timestamp_surfaces(
    engine, session, monkeypatch
):
    clear_cache()
    person = factories.user(session)
    seen = {
        "session_id": "sess_1",
        "ip": None,
        "user_agent": None,
        "city": None,
        "country": None,
        "impersonated_by": None,
    }
    record_session(session, user_id=person.id, now=NOW, **seen)
    clear_cache()
    later = NOW + timedelta(hours=1)
    checks_miss(monkeypatch, session, "scalar", 1)
    record_session(session, user_id=person.id, now=later, **seen)
    (row,) = session.scalars(select(UserSession)).all()
    assert row.last_seen_at == later

    clear_cache()
    checks_miss(monkeypatch, session, "scalar", 1)
    with pytest.raises(IntegrityError):
        record_session(session, user_id=person.id, now=None, **seen)
    clear_cache()


# -- releases: the app mapping, a candidate's supersession, a device token --------------------


def test_an_app_id_raced_by_another_gym_is_taken_and_an_empty_timestamp_surfaces(
    engine, session, settings, monkeypatch
):
    theirs = factories.organization(session, tier=Tier.elite)
    mine = factories.organization(session, tier=Tier.elite)
    branded_apps.create_app(session, settings, theirs, link_slug="shared", now=NOW)
    checks_miss(monkeypatch, session, "scalar", 2)
    with pytest.raises(DomainError) as refused:
        branded_apps.create_app(session, settings, mine, link_slug="shared", now=NOW)
    assert (refused.value.code, refused.value.status) == ("branded_app_id_taken", 409)

    checks_miss(monkeypatch, session, "scalar", 2)
    with pytest.raises(DomainError) as refused:
        branded_apps.create_app(session, settings, theirs, link_slug="other", now=NOW)
    assert (refused.value.code, refused.value.status) == ("branded_app_exists", 409)

    checks_miss(monkeypatch, session, "scalar", 2)
    with pytest.raises(IntegrityError):
        branded_apps.create_app(session, settings, mine, link_slug="shared", now=None)
    assert _count(session, BrandedApp) == 1


def _candidate(session, settings) -> ReleaseCandidate:
    gym = factories.organization(session, tier=Tier.elite)
    app = branded_apps.create_app(session, settings, gym, now=NOW)
    request = ReleaseRequest(
        organization_id=gym.id, branded_app_id=app.id, created_at=NOW, updated_at=NOW
    )
    session.add(request)
    session.flush()
    candidate = ReleaseCandidate(
        organization_id=gym.id,
        release_request_id=request.id,
        generation=1,
        snapshot={},
        snapshot_sha256="0" * 64,
        brand_schema_version=1,
        created_at=NOW,
    )
    session.add(candidate)
    session.flush()
    return candidate


def test_a_candidate_superseded_twice_is_written_once_and_other_failures_surface(
    engine, session, settings
):
    candidate = _candidate(session, settings)
    supersede(session, candidate, "publish", now=NOW)
    supersede(session, candidate, "config", now=NOW)
    assert session.get(CandidateSupersession, candidate.id).reason == "publish"
    superseded = select(func.count()).where(AuditLog.action == "release.candidate_superseded")
    assert session.scalar(superseded) == 1

    with pytest.raises(IntegrityError):
        supersede(session, candidate, "config", now=None)
    gone = ReleaseCandidate(
        id=uuid.uuid4(), organization_id=candidate.organization_id, generation=2
    )
    with pytest.raises(IntegrityError):  # a candidate that is not there: a foreign key
        supersede(session, gone, "publish", now=NOW)
    assert session.scalar(superseded) == 1


def test_a_device_token_registered_twice_is_one_row_and_other_failures_surface(
    engine, session, monkeypatch
):
    gym, person = factories.organization(session), factories.user(session)
    fields = {
        "organization_id": gym.id,
        "user_id": person.id,
        "branded_app_id": None,
        "platform": "ios",
        "registered_at": NOW,
    }
    first = _upsert_registration(session, "app.one", "token-1", fields)
    checks_miss(monkeypatch, session, "scalar", 1)
    again = _upsert_registration(session, "app.one", "token-1", {**fields, "platform": "android"})
    assert again.id == first.id
    assert again.platform == "android"

    checks_miss(monkeypatch, session, "scalar", 1)
    with pytest.raises(IntegrityError):
        _upsert_registration(session, "app.one", "token-1", {**fields, "registered_at": None})
    with pytest.raises(IntegrityError):
        _upsert_registration(session, "app.one", "token-2", {**fields, "user_id": uuid.uuid4()})
    assert _count(session, PushRegistration) == 1


# -- movements: a gym's own slug, a member's video report -------------------------------------


def test_an_own_slug_raced_is_taken_and_a_foreign_key_failure_surfaces(
    engine, session, monkeypatch
):
    gym = factories.organization(session)
    create = {"organization_id": gym.id, "fields": {"name": "Row"}, "actor_user_id": None}
    create_own(session, now=NOW, **create)
    checks_miss(monkeypatch, session, "scalar", 1)
    with pytest.raises(DomainError) as refused:
        create_own(session, now=NOW, **create)
    assert refused.value.status == 409
    taken = refused.value.code

    with orphan_with(session, Movement), pytest.raises(IntegrityError):  # was "slug taken"
        create_own(session, now=NOW, slug="other", **create)
    assert taken == "movement_slug_taken"
    assert _count(session, Movement) == 1


def test_a_repeated_report_changes_nothing_and_a_report_of_no_member_surfaces(
    engine, session, settings
):
    movement = Movement(
        slug="squat", name="Squat", video_url="https://v.example/1", video_status="auto"
    )
    session.add(movement)
    gym, person = factories.organization(session), factories.user(session)
    report = {
        "organization_id": gym.id,
        "movement_id": movement.id,
        "negative": True,
        "reason": None,
        "now": NOW,
    }
    assert report_video(session, settings, user_id=person.id, **report)["recorded"] is True
    assert report_video(session, settings, user_id=person.id, **report)["recorded"] is False

    with pytest.raises(IntegrityError):  # was answered "a repeat changes nothing"
        report_video(session, settings, user_id=uuid.uuid4(), **report)
    assert _count(session, MovementVideoReport) == 1


# -- bridge: the claim's in-flight backstop ---------------------------------------------------


def test_a_claim_refused_by_the_backstop_claims_nothing_and_other_failures_surface(engine, session):
    gym = factories.organization(session)
    session.add(IntegrationConnection(organization_id=gym.id, status="active"))
    member = str(uuid.uuid4())
    payload = {"memberId": member, "bookingId": str(uuid.uuid4()), "sessionId": str(uuid.uuid4())}
    first = enqueue(
        session, organization_id=gym.id, op_type="booking.create", payload=payload, now=NOW
    )
    second = enqueue(
        session,
        organization_id=gym.id,
        op_type="booking.create",
        payload={**payload, "bookingId": str(uuid.uuid4())},
        now=NOW,
    )
    session.flush()
    second.status = "in_flight"  # a later op of the key in flight: the claim's head collides
    session.commit()
    claim = {"now": NOW, "limit": 10, "lease": timedelta(minutes=5), "owner": "w1"}
    assert queue.claim(session, gym.id, **claim) == []
    assert session.get(SyncOp, first.id).status == "pending"

    gym_id, first_id = gym.id, first.id
    session.add(orphan())  # the caller's pending write fails in the claim's flush
    with pytest.raises(IntegrityError):
        queue.claim(session, gym_id, **claim)
    session.rollback()
    assert session.get(SyncOp, first_id).status == "pending"


# -- daemons: one run per tick ----------------------------------------------------------------


def _ledger_blind(monkeypatch, session_factory):
    """Sessions whose first read of the ledger misses: the check ran before a rival's row."""

    def factory():
        made = session_factory()
        checks_miss(monkeypatch, made, "get", 1)
        return made

    return factory


def _probe(calls: list, own_transactions: bool) -> Job | OwnTransactionsJob:
    """A job that records its calls, of either kind (one transaction, or its own ones)."""
    if own_transactions:

        def commits_as_it_goes(factory: sessionmaker[Session], now: datetime, _: Settings) -> str:
            calls.append(now)
            return "ran"

        return OwnTransactionsJob("probe", 5, commits_as_it_goes)

    def in_one_transaction(session: Session, now: datetime, _: Settings) -> str:
        calls.append(now)
        return "ran"

    return Job("probe", 5, in_one_transaction)


@pytest.mark.parametrize("own_transactions", [False, True])
def test_a_tick_claimed_by_a_rival_is_skipped_and_an_empty_timestamp_fails(
    engine, session, session_factory, settings, monkeypatch, own_transactions
):
    calls = []
    job = _probe(calls, own_transactions)
    session.add(JobRun(job_name="probe", tick=7, runner="rival", started_at=NOW, status="ok"))
    session.commit()
    run = {"settings": settings, "tick": 7}
    outcome = run_job_once(
        job, session_factory=_ledger_blind(monkeypatch, session_factory), now=NOW, **run
    )
    assert (outcome.status, outcome.reason) == ("skipped", "already ran this tick")

    # run_job_once never raises: an unrelated violation is the run's failure, whichever way
    # the job commits (the job that commits as it goes claims its tick first).
    factory = _ledger_blind(monkeypatch, session_factory)
    outcome = run_job_once(job, session_factory=factory, now=None, **run)
    assert outcome.status == "failed"
    assert outcome.reason.startswith("IntegrityError")
    assert calls == []
    assert session.get(JobRun, ("probe", 7)).runner == "rival"


def _run_with_a_broken_claim(job, factory: sessionmaker[Session], settings: Settings, tick: int):
    """Run `job` at `tick` where the flush claiming the tick also inserts an orphan: it breaks
    a foreign key, not the ledger's key. Later flushes (the failure's record) go through."""
    broken = []

    def first_claim_breaks(flushing: Session, *_) -> None:
        if not broken and any(isinstance(row, JobRun) for row in flushing.new):
            broken.append(True)
            flushing.add(orphan())

    event.listen(factory, "before_flush", first_claim_breaks)
    try:
        outcome = run_job_once(job, session_factory=factory, settings=settings, now=NOW, tick=tick)
    finally:
        event.remove(factory, "before_flush", first_claim_breaks)
    assert broken == [True]
    return outcome


@pytest.mark.parametrize("own_transactions", [False, True])
def test_an_unrelated_violation_claiming_a_tick_fails_the_run_not_skips_or_raises(
    engine, session, session_factory, settings, own_transactions
):
    """Not "already ran this tick", not raised: the run failed with the error, the job not run."""
    calls = []
    outcome = _run_with_a_broken_claim(
        _probe(calls, own_transactions), session_factory, settings, 9
    )
    assert outcome.status == "failed"
    assert outcome.reason.startswith("IntegrityError")
    assert calls == []
    assert session.scalar(select(func.count()).select_from(UserSession)) == 0
    if not own_transactions:  # the job that commits as it goes: below, on real commits
        session.expire_all()
        recorded = session.get(JobRun, ("probe", 9))
        assert (recorded.status, recorded.result) == ("failed", outcome.reason)


def test_an_unrelated_violation_claiming_the_tick_of_a_job_committing_as_it_goes_is_recorded(
    committed_pg, settings
):
    """The claim is its own committed transaction (the tests' savepoints would roll the record
    back with the lock holder's): on real commits, the tick's failed row holds the error."""
    calls = []
    factory = db_session_factory(get_engine(committed_pg))
    outcome = _run_with_a_broken_claim(_probe(calls, True), factory, settings, 11)
    assert (outcome.status, calls) == ("failed", [])
    with factory() as fresh:
        recorded = fresh.get(JobRun, ("probe", 11))
        assert (recorded.status, recorded.result) == ("failed", outcome.reason)
        assert recorded.result.startswith("IntegrityError")
        assert fresh.scalar(select(func.count()).select_from(UserSession)) == 0
