"""Spec A 2.14: "Evidence is append-only and separate from per-platform state". An operator who
dispatches a platform's job again (the first CI run looked stuck, two operators asked for the
same build at once) has two operations of one candidate in flight. The older one's outcome came
last and set the platform's state: a build that failed after a newer one succeeded showed the
owner "build_failed". The outcome of an operation a newer dispatch of the platform overtook is
its evidence only; the state is where the newest operation stands."""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.releases import operations
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.releases import test_operation_results
from tests.releases.test_operation_results import _claimed, _evidence, _ios_state, _result

candidate = test_operation_results.candidate  # the fixture: a current candidate


def _claim(client, ci, operation, nonce):
    claimed = client.post(
        "/ci/releases/claim",
        json={"operationId": str(operation.id), "dispatchNonce": nonce},
        headers={"Authorization": f"Bearer {ci.token(NOW)}"},
    )
    assert claimed.status_code == 200, claimed.json
    return {"Authorization": f"Bearer {claimed.json['executorAccess']['token']}"}


@pytest.mark.embedded
def test_an_overtaken_operation_never_claimed_claims_nothing(
    client, session, settings, gym, candidate, ci, engine
):
    older, older_nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW
    )
    newer, nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW + timedelta(minutes=1)
    )
    session.commit()
    before = snapshot(session)

    late = client.post(
        "/ci/releases/claim",
        json={"operationId": str(older.id), "dispatchNonce": older_nonce},
        headers={"Authorization": f"Bearer {ci.token(NOW)}"},
    )

    assert (late.status_code, late.json["code"]) == (403, "ci_nonce_invalid")
    assert "executorAccess" not in late.json
    assert snapshot(session) == before
    _claim(client, ci, newer, nonce)  # the re-dispatched run gets in


@pytest.mark.embedded
def test_a_late_result_of_an_overtaken_build_leaves_the_newer_builds_state(
    client, session, settings, gym, candidate, ci, engine
):
    older, older_access = _claimed(client, session, settings, gym, ci, "build")
    newer, nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW + timedelta(minutes=1)
    )
    session.commit()
    newer_access = _claim(client, ci, newer, nonce)
    assert _result(client, newer, newer_access, "succeeded").status_code == 200
    assert _ios_state(session) == "build_succeeded"

    late = _result(client, older, older_access, "failed")

    assert late.json == {"operationId": str(older.id), "status": "failed"}
    assert _evidence(session, older) == ["failed"]  # recorded, as the older operation's
    assert _ios_state(session) == "build_succeeded"


@pytest.mark.embedded
def test_the_newest_operations_result_still_moves_the_state(
    client, session, settings, gym, candidate, ci, engine
):
    older, older_access = _claimed(client, session, settings, gym, ci, "build")
    assert _result(client, older, older_access, "failed").status_code == 200
    assert _ios_state(session) == "build_failed"
    newer, nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW + timedelta(minutes=1)
    )
    session.commit()
    assert _ios_state(session) == "build_dispatched"
    assert _result(client, newer, _claim(client, ci, newer, nonce), "succeeded").status_code == 200
    assert _ios_state(session) == "build_succeeded"
