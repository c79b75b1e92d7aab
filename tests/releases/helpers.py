"""Steps of the release flow shared by the tests: the owner's intake and its approval, then an
operator's candidate; a refusal that changes nothing; rows inserted without our code for the
database triggers' tests."""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager

import pytest
from sqlalchemy import insert, text

from gymctl.db import session_factory
from gymctl.errors import DomainError
from gymctl.models import Organization, Role
from gymctl.models.organizations import Tier
from gymctl.models.releases import BrandedApp, ReleaseCandidate, ReleaseRequest
from gymctl.releases import approvals, branded_apps, candidates, owner, requests
from gymctl.releases.canonical import sha256_of
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.releases.conftest import APP_CONFIG, COMMIT, SUBMISSION, publish_branding


def refused(session, call, code: str, status: int) -> DomainError:
    """`call` is refused with `code` and `status`, and nothing was written (not even flushed)."""
    before = snapshot(session)
    with pytest.raises(DomainError) as caught:
        call()
    assert (caught.value.code, caught.value.status) == (code, status)
    assert snapshot(session) == before
    return caught.value


def owner_call(client, gym, method, path, **kwargs):
    return client.open(
        f"/organizations/{gym.id}{path}", method=method, headers=gym[Role.owner].headers, **kwargs
    )


def approved_intake(client, gym, submission=None) -> int:
    """Save the intake and approve it; returns the revision."""
    saved = owner_call(
        client,
        gym,
        "PUT",
        "/releases/submission",
        json={"submission": submission or SUBMISSION, "revision": _revision(client, gym)},
    )
    assert saved.status_code == 200, saved.json
    revision = saved.json["revision"]
    approved = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={"purpose": "submission_intake", "revision": revision},
    )
    assert approved.status_code == 201, approved.json
    return revision


def _revision(client, gym) -> int:
    from gymctl.releases.requests import find_request
    from webhooks.context import Services

    services: Services = client.application.extensions["gymctl"]
    with services.session_factory() as session:
        request = find_request(session, gym.id)
        return request.submission_revision if request else 0


def cut(session, store, settings, gym, *, commit=COMMIT, at=NOW):
    candidate = candidates.cut_candidate(
        session, store, settings, gym.id, source_commit=commit, now=at
    )
    session.commit()
    return candidate


def gym_with_a_candidate(session, store, settings) -> Organization:
    """A gym on the top tier with an owner, its brand published, its app mapped and configured,
    the intake approved and a candidate cut (COMMIT), as committed tests start from."""
    gym = factories.organization(session, tier=Tier.elite)
    person = factories.user(session)
    factories.membership(session, user=person, organization=gym, role=Role.owner)
    publish_branding(session, store, gym.id)
    branded_apps.create_app(session, settings, gym, now=NOW)
    branded_apps.configure(session, gym.id, APP_CONFIG, now=NOW)
    approve_intake_in(session, gym.id)
    candidates.cut_candidate(session, store, settings, gym.id, source_commit=COMMIT, now=NOW)
    return gym


def approve_intake_in(session, organization_id, *, actor_user_id=None) -> None:
    """The owner's intake saved and approved through the domain functions (no HTTP door)."""
    owner.save_submission(
        session, organization_id, SUBMISSION, revision=0, actor_user_id=actor_user_id, now=NOW
    )
    approvals.approve(
        session,
        requests.require_request(session, organization_id),
        None,
        purpose="submission_intake",
        revision=1,
        snapshot_sha256=None,
        actor_user_id=actor_user_id,
        now=NOW,
    )


def inserted_app(connection) -> tuple[uuid.UUID, uuid.UUID]:
    """An organization and its branded app inserted with plain SQL; (organization id, app id)."""
    org_id, app_id = uuid.uuid4(), uuid.uuid4()
    tag = org_id.hex[:8]
    connection.execute(
        insert(Organization).values(id=org_id, name="G", slug=f"g-{tag}", created_at=NOW)
    )
    connection.execute(
        insert(BrandedApp).values(
            id=app_id,
            organization_id=org_id,
            link_slug=f"s{tag}",
            apple_bundle_id=f"com.example.a{tag}",
            android_package=f"com.example.a{tag}",
            config={},
            created_at=NOW,
            updated_at=NOW,
        )
    )
    return org_id, app_id


def inserted_candidate(connection, snap: dict) -> tuple[uuid.UUID, uuid.UUID]:
    """`inserted_app` with a release request and a generation-1 candidate of `snap`;
    (organization id, candidate id)."""
    org_id, app_id = inserted_app(connection)
    request_id, candidate_id = uuid.uuid4(), uuid.uuid4()
    connection.execute(
        insert(ReleaseRequest).values(
            id=request_id,
            organization_id=org_id,
            branded_app_id=app_id,
            created_at=NOW,
            updated_at=NOW,
        )
    )
    connection.execute(
        insert(ReleaseCandidate).values(
            id=candidate_id,
            organization_id=org_id,
            release_request_id=request_id,
            generation=1,
            snapshot=snap,
            snapshot_sha256=sha256_of(snap),
            brand_schema_version=2,
            created_at=NOW,
        )
    )
    return org_id, candidate_id


def _waiting_on_a_lock(engine) -> bool:
    with engine.connect() as connection:
        return bool(connection.scalar(text("SELECT count(*) FROM pg_locks WHERE NOT granted")) or 0)


@contextmanager
def two_writers(engine):
    """Two sessions of `engine`, each its own transaction, closed after the race."""
    factory = session_factory(engine)
    first, second = factory(), factory()
    try:
        yield first, second
    finally:
        first.close()
        second.close()


def race_writes(engine, first, second_write) -> list[BaseException]:
    """Run `second_write` in a thread until it waits on `first`'s uncommitted row, then commit
    `first`; the errors the second writer met."""
    errors: list[BaseException] = []

    def race() -> None:
        try:
            second_write()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=race)
    thread.start()
    deadline = time.monotonic() + 10
    while not _waiting_on_a_lock(engine) and time.monotonic() < deadline:
        time.sleep(0.02)
    first.commit()
    thread.join(timeout=30)
    return errors


def miss_first_get(monkeypatch, session, model):
    """The session's first look for a `model` row finds none, as a writer's look does when it
    runs just before a rival's row is committed; `.missed` says it happened."""
    real_get = session.get

    def get(wanted, key, **kwargs):
        if wanted is model and not get.missed:
            get.missed = True
            return None
        return real_get(wanted, key, **kwargs)

    get.missed = False
    monkeypatch.setattr(session, "get", get)
    return get
