"""Spec A 5.5: the protected workflow sends only operation_id and dispatch_nonce plus its CI
provider's OIDC token; repository, repository ID, workflow, exact workflow_ref, ref, event,
audience and the branded-app-internal environment must all match; a nonce is single use; smoke
and production-review jobs get only a redacted receipt."""

from __future__ import annotations

import base64
from datetime import timedelta

import pytest

from gymctl.errors import DomainError
from gymctl.releases import operations
from tests.access.conftest import snapshot
from tests.conftest import NOW
from tests.idp import SigningKey
from tests.releases.conftest import APP_CONFIG, WORKFLOW_REF
from tests.releases.helpers import approved_intake, cut

OTHER_WORKFLOW = "mallory/fork/.github/workflows/caller.yml@refs/heads/main"


@pytest.fixture
def candidate(client, session, store, settings, branded, gym):
    approved_intake(client, gym)
    return cut(session, store, settings, gym)


def _dispatch(session, settings, gym, kind="build"):
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind=kind, platform="android", now=NOW
    )
    session.commit()
    return operation, nonce


def _claim(client, token, operation, nonce):
    return client.post(
        "/ci/releases/claim",
        json={"operationId": str(operation.id), "dispatchNonce": nonce},
        headers={"Authorization": f"Bearer {token}"},
    )


def test_a_matching_token_gets_executor_access_and_the_immutable_inputs_once(
    client, session, settings, gym, candidate, ci
):
    operation, nonce = _dispatch(session, settings, gym)
    response = _claim(client, ci.token(NOW), operation, nonce)
    assert response.status_code == 200, response.json
    body = response.json
    assert body["inputs"]["snapshot"] == candidate.snapshot
    assert body["inputs"]["snapshotSha256"] == candidate.snapshot_sha256
    assert set(body["inputs"]["assetDownloads"]) == {"icon", "logo"}
    assert body["executorAccess"]["expiresAt"] == (NOW + timedelta(minutes=15)).isoformat()
    replay = _claim(client, ci.token(NOW), operation, nonce)
    assert (replay.status_code, replay.json["code"]) == (409, "ci_nonce_used")
    result = client.post(
        f"/ci/releases/operations/{operation.id}/result",
        json={"result": "succeeded"},
        headers={"Authorization": f"Bearer {body['executorAccess']['token']}"},
    )
    assert result.json == {"operationId": str(operation.id), "status": "succeeded"}


@pytest.mark.parametrize(
    ("claims", "code", "status"),
    [
        ({"workflow_ref": OTHER_WORKFLOW}, "ci_claims_mismatch", 403),
        # Only the reusable-workflow claim names ours: any caller can run a reusable workflow.
        (
            {"workflow_ref": OTHER_WORKFLOW, "job_workflow_ref": WORKFLOW_REF},
            "ci_claims_mismatch",
            403,
        ),
        ({"environment": "production"}, "ci_claims_mismatch", 403),
        ({"environment": None}, "ci_claims_mismatch", 403),
        ({"repository_id": "987654321"}, "ci_claims_mismatch", 403),
        ({"repository": "mallory/gym-apps"}, "ci_claims_mismatch", 403),
        ({"ref": "refs/heads/feature"}, "ci_claims_mismatch", 403),
        ({"event_name": "push"}, "ci_claims_mismatch", 403),
        ({"workflow": "Other"}, "ci_claims_mismatch", 403),
        ({"aud": "someone-else"}, "ci_claims_mismatch", 403),
        ({"iss": "https://issuer.example.test"}, "ci_token_invalid", 401),
        ({"exp": int((NOW - timedelta(minutes=1)).timestamp())}, "ci_token_expired", 401),
        # JSON's Infinity (or 1e400): int() of it was an OverflowError, a 500
        ({"exp": float("inf")}, "ci_token_invalid", 401),
        ({"nbf": float("-inf")}, "ci_token_invalid", 401),
    ],
    ids=[
        "wrong-workflow_ref",
        "reusable-workflow-claim-only",
        "wrong-environment",
        "no-environment",
        "wrong-repository-id",
        "wrong-repository",
        "wrong-ref",
        "wrong-event",
        "wrong-workflow",
        "wrong-audience",
        "wrong-issuer",
        "expired",
        "infinite-exp",
        "infinite-nbf",
    ],
)
def test_forged_or_foreign_tokens_are_refused_and_change_nothing(
    client, session, settings, gym, candidate, ci, claims, code, status
):
    operation, nonce = _dispatch(session, settings, gym)
    before = snapshot(session)
    response = _claim(client, ci.token(NOW, **claims), operation, nonce)
    assert (response.status_code, response.json["code"]) == (status, code)
    assert "executorAccess" not in response.json
    assert snapshot(session) == before
    # The refusal did not burn the nonce: the real workflow still gets in.
    assert _claim(client, ci.token(NOW), operation, nonce).status_code == 200


def test_a_token_signed_by_another_key_or_with_a_wrong_nonce_is_refused(
    client, session, settings, gym, candidate, ci
):
    operation, nonce = _dispatch(session, settings, gym)
    forged = ci.token(NOW, key=SigningKey(ci.key.kid, name="attacker"))
    response = _claim(client, forged, operation, nonce)
    assert (response.status_code, response.json["code"]) == (401, "ci_token_invalid")
    wrong = _claim(client, ci.token(NOW), operation, "not-the-nonce")
    assert (wrong.status_code, wrong.json["code"]) == (403, "ci_nonce_invalid")
    missing = client.post(
        "/ci/releases/claim", json={"operationId": str(operation.id), "dispatchNonce": nonce}
    )
    assert (missing.status_code, missing.json["code"]) == (401, "authorization_missing")


@pytest.mark.parametrize("kind", ["smoke", "production_review"])
def test_smoke_and_production_review_jobs_get_only_a_redacted_receipt(
    client, session, settings, gym, candidate, ci, kind
):
    operation, nonce = _dispatch(session, settings, gym, kind=kind)
    response = _claim(client, ci.token(NOW), operation, nonce)
    assert response.status_code == 200
    assert set(response.json) == {"receipt"}
    text = response.get_data(as_text=True)
    for secret in (
        "com.gymctl.gym",
        APP_CONFIG["buildServiceProject"],
        APP_CONFIG["iosProfile"],
        APP_CONFIG["appleStoreAccount"],
        APP_CONFIG["pushCredentialSha256"],
        "assetDownloads",
        "signature",
    ):
        assert secret not in text
    receipt = response.json["receipt"]
    assert receipt["snapshotSha256"] == candidate.snapshot_sha256
    # With no executor access, a receipt job cannot report or submit.
    refused = client.post(
        f"/ci/releases/operations/{operation.id}/result",
        json={"result": "succeeded"},
        headers={"Authorization": "Bearer anything"},
    )
    assert (refused.status_code, refused.json["code"]) == (401, "executor_access_invalid")


def test_executor_access_is_short_lived(
    client, session, store, settings, gym, candidate, ci, clock
):
    operation, nonce = _dispatch(session, settings, gym)
    access = _claim(client, ci.token(NOW), operation, nonce).json["executorAccess"]["token"]
    clock.set(NOW + timedelta(minutes=15))
    response = client.post(
        f"/ci/releases/operations/{operation.id}/result",
        json={"result": "failed"},
        headers={"Authorization": f"Bearer {access}"},
    )
    assert (response.status_code, response.json["code"]) == (401, "executor_access_expired")


def test_dispatch_needs_the_workflow_identity_configured(session, gym, candidate, settings):
    unconfigured = settings.model_copy(update={"release_ci_workflow_ref": None})
    with pytest.raises(DomainError) as refused:
        operations.dispatch(session, unconfigured, gym.id, kind="build", platform="ios", now=NOW)
    assert (refused.value.code, refused.value.details["missing"]) == (
        "release_ci_not_configured",
        ["workflow_ref"],
    )


def test_a_token_whose_header_nests_thousands_deep_is_refused_not_a_500(
    client, session, settings, gym, candidate, ci
):
    """The claim route reads the CI token's JOSE header with the session tokens' reader: 5,000
    nested arrays there were a RecursionError (500) on a public route."""
    operation, nonce = _dispatch(session, settings, gym)
    before = snapshot(session)
    head = base64.urlsafe_b64encode(b"[" * 5000).rstrip(b"=").decode()

    response = _claim(client, f"{head}.e30.c2ln", operation, nonce)

    assert (response.status_code, response.json["code"]) == (401, "ci_token_invalid")
    assert snapshot(session) == before
    assert _claim(client, ci.token(NOW), operation, nonce).status_code == 200
