"""Spec A 2.14, 5.5: an operation's outcome is reported once. The executor's access lives 15
minutes; a replayed or contradicting report within them must not append a second piece of
evidence, flip the platform's state, or walk a finished upload back to "submitted"."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from gymctl.models.releases import ReleaseEvidence, ReleaseRequest
from gymctl.releases import evidence, operations, switches
from gymctl.releases.candidates import latest_candidate
from tests.conftest import NOW
from tests.releases.helpers import approved_intake, cut, owner_call


@pytest.fixture
def candidate(client, session, store, settings, branded, gym):
    approved_intake(client, gym)
    current = cut(session, store, settings, gym)
    switches.set_switch(session, gym.id, switches.INTERNAL_UPLOAD_ASSISTANCE, True, now=NOW)
    session.commit()
    return current


def _claimed(client, session, settings, gym, ci, kind):
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind=kind, platform="ios", now=NOW
    )
    session.commit()
    claimed = client.post(
        "/ci/releases/claim",
        json={"operationId": str(operation.id), "dispatchNonce": nonce},
        headers={"Authorization": f"Bearer {ci.token(NOW)}"},
    )
    assert claimed.status_code == 200, claimed.json
    return operation, {"Authorization": f"Bearer {claimed.json['executorAccess']['token']}"}


def _approve_upload(client, gym, candidate):
    approved = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={
            "purpose": "internal_upload",
            "revision": 1,
            "snapshotSha256": candidate.snapshot_sha256,
        },
    )
    assert approved.status_code == 201, approved.json


def _result(client, operation, headers, result):
    return client.post(
        f"/ci/releases/operations/{operation.id}/result", json={"result": result}, headers=headers
    )


def _evidence(session, operation):
    session.expire_all()
    return session.scalars(
        select(ReleaseEvidence.result).where(ReleaseEvidence.operation_id == operation.id)
    ).all()


def _ios_state(session):
    session.expire_all()
    request = session.scalar(select(ReleaseRequest))
    return evidence.platform_states(session, request, latest_candidate(session, request))["ios"]


@pytest.mark.embedded
def test_a_finished_build_takes_no_second_result(
    client, session, settings, gym, candidate, ci, engine
):
    operation, headers = _claimed(client, session, settings, gym, ci, "build")
    assert _result(client, operation, headers, "succeeded").status_code == 200
    # The same report again (a retry after a lost answer) is answered, not recorded twice.
    replay = _result(client, operation, headers, "succeeded")
    assert replay.json == {"operationId": str(operation.id), "status": "succeeded"}
    # A contradicting one is refused: the build succeeded.
    flipped = _result(client, operation, headers, "failed")
    assert (flipped.status_code, flipped.json["code"]) == (409, "release_operation_finished")
    assert _evidence(session, operation) == ["succeeded"]
    assert _ios_state(session) == "build_succeeded"


@pytest.mark.embedded
def test_a_finished_internal_upload_is_not_submitted_again(
    client, session, settings, gym, candidate, ci, engine
):
    _approve_upload(client, gym, candidate)
    operation, headers = _claimed(client, session, settings, gym, ci, "internal_upload")
    submit = f"/ci/releases/operations/{operation.id}/submit"
    assert client.post(submit, headers=headers).status_code == 200
    # A retried submit (its answer lost) is authorized again without a second record.
    assert client.post(submit, headers=headers).json["authorized"] is True
    assert _evidence(session, operation) == ["submitted"]
    assert _result(client, operation, headers, "succeeded").status_code == 200
    again = client.post(submit, headers=headers)
    assert (again.status_code, again.json["code"]) == (409, "release_operation_finished")
    assert _evidence(session, operation) == ["submitted", "succeeded"]
    assert _ios_state(session) == "internal_upload_succeeded"


@pytest.mark.embedded
def test_an_internal_upload_never_submitted_cannot_succeed(
    client, session, settings, gym, candidate, ci, engine
):
    """'The approval is rechecked immediately before submit' (spec A 3): an upload reported
    succeeded without its submit skipped that recheck. Refused, nothing recorded; it may still
    fail (a build that broke before submitting)."""
    _approve_upload(client, gym, candidate)
    operation, headers = _claimed(client, session, settings, gym, ci, "internal_upload")
    before = _ios_state(session)

    skipped = _result(client, operation, headers, "succeeded")

    assert (skipped.status_code, skipped.json["code"]) == (409, "release_operation_not_submitted")
    assert _evidence(session, operation) == []
    assert _ios_state(session) == before
    assert _result(client, operation, headers, "failed").status_code == 200
    assert _evidence(session, operation) == ["failed"]
