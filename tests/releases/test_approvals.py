"""Spec A 2.14, 3, 8, 9: purpose-specific revision-bound owner approvals, the 24-hour
internal-upload approval rechecked immediately before submit, the four business checks per
target and artifact generation, append-only evidence apart from per-platform state, and the
feature switches (off by default, per organization)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import DBAPIError

from gymctl.errors import DomainError
from gymctl.models.releases import ReleaseCandidate, ReleaseEvidence, ReleaseRequest
from gymctl.releases import approvals, branded_apps, checks, evidence, operations, switches
from tests import factories
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.releases.conftest import SUBMISSION
from tests.releases.helpers import approved_intake, cut, inserted_candidate, owner_call, refused

DAY = timedelta(hours=24)


@pytest.fixture
def current(client, session, store, settings, branded, gym):
    """An approved intake and a current candidate; internal-upload assistance on."""
    approved_intake(client, gym)
    candidate = cut(session, store, settings, gym)
    switches.set_switch(session, gym.id, switches.INTERNAL_UPLOAD_ASSISTANCE, True, now=NOW)
    session.commit()
    return candidate


def _approve(client, gym, purpose, candidate, revision=1):
    return owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={
            "purpose": purpose,
            "revision": revision,
            "snapshotSha256": candidate.snapshot_sha256,
        },
    )


def test_switches_are_off_by_default_and_set_per_organization(session, branded, gym, outsider):
    other = factories.organization(session)
    assert switches.states(session, gym.id) == dict.fromkeys(switches.SWITCHES, False)
    switches.set_switch(session, gym.id, switches.HERMES_ASSISTANCE, True, now=NOW)
    assert switches.is_enabled(session, gym.id, switches.HERMES_ASSISTANCE)
    assert not switches.is_enabled(session, other.id, switches.HERMES_ASSISTANCE)
    with pytest.raises(DomainError) as unknown:
        switches.set_switch(session, gym.id, "member-app-everything", True, now=NOW)
    assert (unknown.value.code, unknown.value.status) == ("feature_switch_unknown", 400)


def test_the_tracker_stays_hidden_until_its_switch_is_on(client, session, branded, gym):
    response = owner_call(client, gym, "GET", "/releases")
    assert (response.status_code, response.json["code"]) == (404, "feature_disabled")
    switches.set_switch(session, gym.id, switches.RELEASE_TRACKER, True, now=NOW)
    session.commit()
    response = owner_call(client, gym, "GET", "/releases")
    assert response.status_code == 200
    assert response.json["submission"] == {"intake": None, "revision": 0, "approved": False}
    assert response.json["checks"]["ios"]["store_listing_confirmed"] == {
        "status": "missing",
        "observedAt": None,
    }


def test_the_intake_is_nullable_json_with_a_revision_from_0_and_conflicts_are_refused(
    client, session, branded, gym
):
    saved = owner_call(
        client, gym, "PUT", "/releases/submission", json={"submission": None, "revision": 0}
    )
    assert saved.json == {"intake": None, "revision": 1, "approved": False}
    before = snapshot(session)
    stale = owner_call(
        client, gym, "PUT", "/releases/submission", json={"submission": SUBMISSION, "revision": 0}
    )
    assert (stale.status_code, stale.json["code"], stale.json["revision"]) == (
        409,
        "release_submission_revision_conflict",
        1,
    )
    bad = owner_call(
        client,
        gym,
        "PUT",
        "/releases/submission",
        json={"submission": {"supportUrl": "http://plain.example"}, "revision": 1},
    )
    assert (bad.status_code, bad.json["code"]) == (400, "invalid_body")
    assert snapshot(session) == before
    nothing = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={"purpose": "submission_intake", "revision": 1},
    )
    assert (nothing.status_code, nothing.json["code"]) == (409, "release_submission_missing")


def test_approvals_are_purpose_specific(client, session, branded, gym, current):
    request = session.scalar(select(ReleaseRequest))
    assert _approve(client, gym, "store_review", current).status_code == 409  # checks first
    for purpose in (approvals.INTERNAL_UPLOAD, approvals.PUBLIC_RELEASE):
        assert approvals.valid_approval(session, request, current, purpose, now=NOW) is None
    assert _approve(client, gym, "public_release", current).status_code == 201
    assert approvals.valid_approval(session, request, current, approvals.PUBLIC_RELEASE, now=NOW)
    assert not approvals.valid_approval(
        session, request, current, approvals.INTERNAL_UPLOAD, now=NOW
    )


def test_approvals_are_bound_to_the_revision_and_the_candidate(
    client, session, store, settings, branded, gym, current
):
    before = snapshot(session)
    stale_revision = _approve(client, gym, "internal_upload", current, revision=0)
    assert (stale_revision.status_code, stale_revision.json["code"]) == (
        409,
        "release_revision_stale",
    )
    wrong = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={"purpose": "internal_upload", "revision": 1, "snapshotSha256": "f" * 64},
    )
    assert (wrong.status_code, wrong.json["code"]) == (409, "release_candidate_stale")
    assert snapshot(session) == before
    assert _approve(client, gym, "internal_upload", current).status_code == 201
    # A new intake revision: the candidate is superseded and the approval no longer counts.
    approved_intake(client, gym, {**SUBMISSION, "appName": "Iron 2"})
    session.expire_all()
    request = session.scalar(select(ReleaseRequest))
    assert (
        approvals.valid_approval(session, request, current, approvals.INTERNAL_UPLOAD, now=NOW)
        is None
    )
    missing = _approve(client, gym, "internal_upload", current, revision=2)
    assert (missing.status_code, missing.json["code"]) == (409, "release_candidate_missing")


def test_internal_upload_approval_needs_its_assistance_switch(
    client, session, branded, gym, current
):
    switches.set_switch(session, gym.id, switches.INTERNAL_UPLOAD_ASSISTANCE, False, now=NOW)
    session.commit()
    response = _approve(client, gym, "internal_upload", current)
    assert (response.status_code, response.json["code"]) == (404, "feature_disabled")


def test_the_internal_upload_approval_expires_at_24_hours_and_is_rechecked_before_submit(
    client, session, store, settings, branded, gym, current, clock
):
    """Spec A 3: valid -> expired after 24 hours, rechecked immediately before submit."""
    assert _approve(client, gym, "internal_upload", current).status_code == 201
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind="internal_upload", platform="ios", now=NOW
    )
    claimed = operations.claim(
        session, store, dict(operation.ci), operation_id=operation.id, dispatch_nonce=nonce, now=NOW
    )
    access = claimed["executorAccess"]["token"]
    # Executor access lives 15 minutes; the approval is what lapses at 24 h. Re-arm the access
    # to reach the boundary.
    request = session.scalar(select(ReleaseRequest))
    just_before = NOW + DAY - timedelta(seconds=1)
    assert approvals.require_internal_upload(session, request, current, now=just_before)
    operation.access_expires_at = NOW + DAY + timedelta(minutes=5)
    session.commit()
    refused(
        session,
        lambda: operations.authorize_submit(session, operation.id, access, now=NOW + DAY),
        "internal_upload_approval_missing",
        409,
    )
    assert operations.authorize_submit(session, operation.id, access, now=just_before)["authorized"]
    assert evidence.platform_states(session, request, current)["ios"] == "internal_upload_submitted"


def test_dispatching_an_internal_upload_without_a_valid_approval_is_refused(
    client, session, settings, branded, gym, current
):
    with pytest.raises(DomainError) as refused:
        operations.dispatch(
            session, settings, gym.id, kind="internal_upload", platform="ios", now=NOW
        )
    assert (refused.value.code, refused.value.status) == ("internal_upload_approval_missing", 409)


def test_four_business_checks_per_target_and_generation_missing_passing_or_failing(
    client, session, store, settings, branded, gym, current, clock
):
    response = owner_call(
        client,
        gym,
        "PUT",
        "/releases/checks/ios/store_listing_confirmed",
        json={"status": "failing"},
    )
    assert response.status_code == 200
    ios = response.json["checks"]["ios"]
    assert ios["store_listing_confirmed"] == {"status": "failing", "observedAt": NOW.isoformat()}
    assert ios["privacy_answers_confirmed"]["status"] == "missing"
    assert response.json["checks"]["android"]["store_listing_confirmed"]["status"] == "missing"
    for target in checks.TARGETS:
        for check in checks.CHECKS:
            owner_call(
                client, gym, "PUT", f"/releases/checks/{target}/{check}", json={"status": "passing"}
            )
    assert _approve(client, gym, "store_review", current).status_code == 201
    # A new artifact generation starts with every check missing.
    second = cut(session, store, settings, gym, commit="b" * 40)
    request = session.scalar(select(ReleaseRequest))
    states = checks.states(session, request, second.generation)
    assert {e["status"] for t in states.values() for e in t.values()} == {"missing"}
    bad = owner_call(
        client,
        gym,
        "PUT",
        "/releases/checks/web/store_listing_confirmed",
        json={"status": "passing"},
    )
    assert (bad.status_code, bad.json["code"]) == (400, "release_target_invalid")
    bad = owner_call(client, gym, "PUT", "/releases/checks/ios/vibes", json={"status": "passing"})
    assert (bad.status_code, bad.json["code"]) == (400, "release_check_invalid")


def test_observed_store_results_need_the_owners_approval_and_append_evidence(
    client, session, branded, gym, current
):
    request = session.scalar(select(ReleaseRequest))
    for observed_at, code, status in (
        (NOW, "release_approval_missing", 409),
        (NOW + timedelta(minutes=1), "release_observed_in_future", 400),
    ):
        refused(
            session,
            lambda observed_at=observed_at: evidence.record_observed(
                session,
                request,
                current,
                platform="ios",
                result="publicly_released",
                observed_at=observed_at,
                note=None,
                now=NOW,
            ),
            code,
            status,
        )
    assert _approve(client, gym, "public_release", current).status_code == 201
    evidence.record_observed(
        session,
        request,
        current,
        platform="android",
        result="publicly_released",
        observed_at=NOW - timedelta(hours=1),
        note="live in Play",
        now=NOW,
    )
    [row] = evidence.evidence_of(session, request)
    assert (row.kind, row.result, row.source) == ("public_release", "publicly_released", "admin")
    assert row.observed_at == NOW - timedelta(hours=1)
    assert evidence.platform_states(session, request, current) == {
        "ios": None,
        "android": "publicly_released",
    }


@pytest.mark.embedded
def test_evidence_is_append_only_in_the_database(connection):
    org_id, candidate_id = inserted_candidate(connection, {})
    row_id = uuid.uuid4()
    connection.execute(
        insert(ReleaseEvidence).values(
            id=row_id,
            organization_id=org_id,
            candidate_id=candidate_id,
            platform="ios",
            kind="build",
            result="succeeded",
            source="executor",
            observed_at=NOW,
            recorded_at=NOW,
            data={},
        )
    )
    with pytest.raises(DBAPIError, match="release_evidence_append_only"):
        connection.execute(
            update(ReleaseEvidence).where(ReleaseEvidence.id == row_id).values(result="failed")
        )


def test_a_candidate_superseded_after_dispatch_is_neither_built_nor_uploaded(
    client, session, store, settings, branded, gym, current
):
    """Spec A 3: a new config revision supersedes the current candidate; the approval bound its
    snapshot, so the claim of a build and the recheck before submit refuse it and write nothing
    (the nonce stays unburnt, the platform state and evidence unchanged)."""
    assert _approve(client, gym, "internal_upload", current).status_code == 201
    build, build_nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="android", now=NOW
    )
    upload, upload_nonce = operations.dispatch(
        session, settings, gym.id, kind="internal_upload", platform="ios", now=NOW
    )
    access = operations.claim(
        session,
        store,
        dict(upload.ci),
        operation_id=upload.id,
        dispatch_nonce=upload_nonce,
        now=NOW,
    )["executorAccess"]["token"]
    branded_apps.configure(session, gym.id, {"iosProfile": "ios-appstore-prof-1000"}, now=NOW)
    session.commit()
    refused(
        session,
        lambda: operations.claim(
            session,
            store,
            dict(build.ci),
            operation_id=build.id,
            dispatch_nonce=build_nonce,
            now=NOW,
        ),
        "release_candidate_stale",
        409,
    )
    refused(
        session,
        lambda: operations.authorize_submit(session, upload.id, access, now=NOW),
        "release_candidate_stale",
        409,
    )
    request = session.scalar(select(ReleaseRequest))
    assert (
        evidence.platform_states(session, request, current)["ios"] == "internal_upload_dispatched"
    )


@pytest.mark.embedded
def test_snapshots_and_evidence_refuse_delete_in_the_database(connection):
    """Spec A 2.14: snapshots are never rewritten and evidence is append-only: a DELETE is
    refused by the database itself, like an UPDATE."""
    org_id, candidate_id = inserted_candidate(connection, {})
    row_id = uuid.uuid4()
    connection.execute(
        insert(ReleaseEvidence).values(
            id=row_id,
            organization_id=org_id,
            candidate_id=candidate_id,
            platform="ios",
            kind="build",
            result="succeeded",
            source="executor",
            observed_at=NOW,
            recorded_at=NOW,
            data={},
        )
    )
    savepoint = connection.begin_nested()
    with pytest.raises(DBAPIError, match="release_evidence_append_only"):
        connection.execute(delete(ReleaseEvidence).where(ReleaseEvidence.id == row_id))
    savepoint.rollback()
    with pytest.raises(DBAPIError, match="release_candidate_immutable"):
        connection.execute(delete(ReleaseCandidate).where(ReleaseCandidate.id == candidate_id))
