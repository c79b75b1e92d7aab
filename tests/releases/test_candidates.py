"""Spec A 2.14, 3, 9: immutable snapshots bound to everything that makes the build, their
canonical digest, supersession by a new publish, config or intake revision, and the brand
schemaVersion rules for new and stored snapshots."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from sqlalchemy.exc import DBAPIError

from gymctl.branding import publishing
from gymctl.models import BrandRevision
from gymctl.models.releases import (
    BrandedApp,
    CandidateSupersession,
    ReleaseCandidate,
    ReleaseRequest,
)
from gymctl.releases import branded_apps, candidates, operations, switches
from gymctl.releases.canonical import canonical_json, sha256_of
from tests.conftest import NOW
from tests.releases.conftest import APP_CONFIG, COMMIT, SUBMISSION, publish_branding
from tests.releases.helpers import approved_intake, cut, inserted_candidate, owner_call, refused


def _cutting(session, store, settings, gym, commit=COMMIT):
    """Cutting a candidate, as a call `refused` can make."""
    return lambda: candidates.cut_candidate(
        session, store, settings, gym.id, source_commit=commit, now=NOW
    )


def test_canonical_json_sorts_keys_drops_whitespace_and_is_utf8():
    assert canonical_json({"b": 1, "a": {"d": [1, "é"], "c": None}}) == (
        '{"a":{"c":null,"d":[1,"é"]},"b":1}'.encode()
    )
    with pytest.raises(ValueError, match="floats"):
        canonical_json({"ratio": 4.5})


def test_a_snapshot_binds_everything_that_makes_the_build(
    client, session, store, settings, branded, gym
):
    revision = approved_intake(client, gym)
    candidate = cut(session, store, settings, gym)
    snap = candidate.snapshot
    assert snap["sourceCommit"] == COMMIT
    assert snap["configRevision"] == branded.config_revision
    assert snap["nativeVersion"] == "1.0.6"
    assert (snap["branding"]["brandRevision"], snap["branding"]["appVersion"]) == (1, 1)
    assert snap["brandSchemaVersion"] == 2 == candidate.brand_schema_version
    assert snap["buildServiceProject"] == APP_CONFIG["buildServiceProject"]
    assert snap["profiles"] == {
        "ios": APP_CONFIG["iosProfile"],
        "android": APP_CONFIG["androidProfile"],
    }
    assert set(snap["assets"]) == {"icon", "logo"}
    assert snap["pushCredentialSha256"] == APP_CONFIG["pushCredentialSha256"]
    assert snap["submission"] == {"intake": SUBMISSION, "revision": revision}
    assert "assetDownloads" not in json.dumps(snap)
    assert "signature=" not in json.dumps(snap)
    assert candidate.snapshot_sha256 == hashlib.sha256(canonical_json(snap)).hexdigest()
    # The digest holds for what the database gives back (JSONB reorders keys; canonical JSON
    # sorts them again).
    session.expire_all()
    stored = session.get(ReleaseCandidate, candidate.id)
    assert sha256_of(stored.snapshot) == stored.snapshot_sha256


def test_cutting_needs_the_owners_approval_of_the_current_intake(
    client, session, store, settings, branded, gym
):
    refused(session, _cutting(session, store, settings, gym), "release_intake_not_approved", 409)


def test_cutting_refuses_a_bad_commit_and_an_incomplete_config(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    refused(
        session,
        _cutting(session, store, settings, gym, "main"),
        "release_source_commit_invalid",
        400,
    )
    app = session.get(BrandedApp, branded.id)
    app.config = {k: v for k, v in app.config.items() if k != "iosProfile"}
    session.commit()
    incomplete = refused(
        session, _cutting(session, store, settings, gym), "release_config_incomplete", 409
    )
    assert incomplete.details["missing"] == ["iosProfile"]


def test_cutting_again_with_nothing_changed_returns_the_current_candidate(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    first = cut(session, store, settings, gym)
    assert cut(session, store, settings, gym).id == first.id
    second = cut(session, store, settings, gym, commit="a" * 40)
    assert second.generation == 2
    assert session.get(CandidateSupersession, first.id).reason == "replaced"


@pytest.mark.parametrize("change", ["publish", "config", "intake"])
def test_a_new_publish_config_or_intake_revision_supersedes_the_current_candidate(
    client, session, store, settings, branded, gym, change
):
    approved_intake(client, gym)
    candidate = cut(session, store, settings, gym)
    if change == "publish":
        publish_branding(session, store, gym.id, primary="#A01C40")
    elif change == "config":
        branded_apps.configure(session, gym.id, {"iosProfile": "ios-prof-3"}, now=NOW)
    else:
        response = owner_call(
            client,
            gym,
            "PUT",
            "/releases/submission",
            json={"submission": {**SUBMISSION, "appName": "Iron"}, "revision": 1},
        )
        assert response.status_code == 200
    session.commit()
    request = session.scalar(select(ReleaseRequest))
    current = candidates.refresh_current(session, request, now=NOW)
    # After a publish a new candidate replaces it (test below); config and intake wait for an
    # operator's cut or the owner's approval.
    assert (current is None) is (change != "publish")
    assert session.get(CandidateSupersession, candidate.id).reason == change


def test_after_a_publish_supersedes_the_current_candidate_a_new_one_replaces_it(
    client, session, store, settings, branded, gym
):
    """Spec A 3: Release candidate, current -> superseded on a new publish, "new candidate
    replaces it": same source commit and configuration, the branding live now."""
    approved_intake(client, gym)
    candidate = cut(session, store, settings, gym)
    later = NOW + timedelta(hours=1)
    publish_branding(session, store, gym.id, primary="#A01C40", at=later)
    session.commit()
    request = session.scalar(select(ReleaseRequest))
    current = candidates.refresh_current(session, request, now=later)
    assert current is not None
    assert current.generation > candidate.generation
    assert current.snapshot["sourceCommit"] == candidate.snapshot["sourceCommit"]
    assert current.snapshot["configRevision"] == candidate.snapshot["configRevision"]
    assert (
        current.snapshot["branding"]["brandRevision"]
        > (candidate.snapshot["branding"]["brandRevision"])
    )
    assert current.snapshot["app"] == candidate.snapshot["app"]
    assert candidates.is_current(session, request, current)
    switches.set_switch(session, gym.id, switches.RELEASE_TRACKER, True, now=later)
    session.commit()
    tracker = owner_call(client, gym, "GET", "/releases")
    assert tracker.json["candidate"]["generation"] == current.generation


def test_no_candidate_replaces_one_when_the_intake_moved_too(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    cut(session, store, settings, gym)
    response = owner_call(
        client,
        gym,
        "PUT",
        "/releases/submission",
        json={"submission": {**SUBMISSION, "appName": "Iron"}, "revision": 1},
    )
    assert response.status_code == 200
    publish_branding(session, store, gym.id, primary="#A01C40")
    session.commit()
    request = session.scalar(select(ReleaseRequest))
    assert candidates.refresh_current(session, request, now=NOW) is None


@pytest.mark.parametrize("step", ["unpublish_brand", "unpublish_app"])
def test_a_publish_or_unpublish_supersedes_in_its_own_transaction_at_its_instant(
    client, session, store, settings, branded, gym, step
):
    approved_intake(client, gym)
    candidate = cut(session, store, settings, gym)
    later = NOW + timedelta(hours=1)
    getattr(publishing, step)(session, gym.id, actor_user_id=None, now=later)
    row = session.get(CandidateSupersession, candidate.id)
    assert (row.reason, row.superseded_at) == ("publish", later)
    publish_branding(session, store, gym.id, at=later)  # nothing current left to supersede
    assert session.scalars(select(CandidateSupersession)).all() == [row]


def test_the_daemon_sweep_supersedes_unattended_and_is_idempotent(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    cut(session, store, settings, gym)
    branded_apps.configure(session, gym.id, {"iosProfile": "ios-prof-4"}, now=NOW)
    assert candidates.supersede_stale(session, now=NOW) == {"superseded": 1}
    assert candidates.supersede_stale(session, now=NOW) == {"superseded": 0}


def test_new_snapshots_admit_only_brand_schema_version_2(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    revision = session.scalar(select(BrandRevision))
    revision.brand = {**revision.brand, "schemaVersion": 1}
    session.commit()
    refused(
        session, _cutting(session, store, settings, gym), "release_brand_schema_unsupported", 409
    )


def test_a_stored_schema_version_1_snapshot_still_dispatches(
    client, session, store, settings, branded, gym
):
    approved_intake(client, gym)
    legacy = cut(session, store, settings, gym)
    # A snapshot stored before schemaVersion 2: the same binding, a schemaVersion 1 brand.
    snap = {**legacy.snapshot, "generation": 2, "brandSchemaVersion": 1}
    snap["branding"] = {**snap["branding"], "brand": {"schemaVersion": 1}}
    session.add(
        ReleaseCandidate(
            organization_id=gym.id,
            release_request_id=legacy.release_request_id,
            generation=2,
            snapshot=snap,
            snapshot_sha256=sha256_of(snap),
            brand_schema_version=1,
            created_at=NOW,
        )
    )
    session.commit()
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW
    )
    assert operation.snapshot_sha256 == sha256_of(snap)
    assert nonce


@pytest.mark.embedded
def test_the_database_refuses_to_update_a_snapshot(connection):
    """Never rewritten: a trigger refuses any UPDATE, on PostgreSQL and on SQLite."""
    snap = {"generation": 1, "sourceCommit": COMMIT}
    _, candidate_id = inserted_candidate(connection, snap)
    for values in (
        {"snapshot": {"generation": 1}},
        {"snapshot_sha256": "0" * 64},
        {"generation": 2},
    ):
        savepoint = connection.begin_nested()
        with pytest.raises(DBAPIError, match="release_candidate_immutable"):
            connection.execute(
                update(ReleaseCandidate).where(ReleaseCandidate.id == candidate_id).values(values)
            )
        savepoint.rollback()
    stored = connection.execute(select(ReleaseCandidate.snapshot_sha256)).scalar_one()
    assert stored == sha256_of(snap)
