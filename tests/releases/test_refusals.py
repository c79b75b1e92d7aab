"""Every refusal of the area not exercised elsewhere: its code, its status, and that nothing
changed."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import select

from gymctl.errors import DomainError
from gymctl.identity.tokens import KeySet
from gymctl.models import BrandRevision, Role
from gymctl.models.releases import ReleaseRequest
from gymctl.releases import approvals, checks, evidence, operations, push, requests
from gymctl.releases.build_input import build_input
from gymctl.releases.candidates import require_current
from gymctl.releases.ci_access import CiTokenVerifier
from gymctl.releases.identifiers import url_scheme
from tests.conftest import NOW
from tests.releases.conftest import CI_ISSUER
from tests.releases.helpers import approved_intake, cut, owner_call, refused


@pytest.fixture
def current(client, session, store, settings, branded, gym):
    approved_intake(client, gym)
    return cut(session, store, settings, gym)


def test_push_registration_refuses_a_bad_platform_or_token(session, settings, branded, gym):
    user = gym[Role.member].user
    common = {"app_id": "com.gymctl.app", "now": NOW}
    refused(
        session,
        lambda: push.register(session, settings, gym.id, user, platform="web", token="t", **common),
        "push_platform_invalid",
        400,
    )
    refused(
        session,
        lambda: push.register(
            session, settings, gym.id, user, platform="ios", token="x" * 4097, **common
        ),
        "push_token_invalid",
        400,
    )


def test_the_intake_refuses_unknown_or_malformed_fields(session, branded, gym):
    for submission in (
        {"appName": ""},
        {"price": "1"},
        {"supportUrl": "http://a.example"},
        {"contactEmail": "nobody"},
        {"appName": "x" * 31},
    ):
        refused(
            session,
            lambda submission=submission: requests.save_submission(
                session, gym.id, submission, revision=0, actor_user_id=None, now=NOW
            ),
            "release_submission_invalid",
            400,
        )


def test_a_gym_without_a_request_or_app_is_told_so(client, session, gym):
    response = owner_call(
        client, gym, "PUT", "/releases/submission", json={"submission": None, "revision": 0}
    )
    assert (response.status_code, response.json["code"]) == (404, "branded_app_not_found")
    response = owner_call(
        client,
        gym,
        "POST",
        "/releases/approvals",
        json={"purpose": "public_release", "revision": 0},
    )
    assert (response.status_code, response.json["code"]) == (404, "release_request_not_found")


def test_build_input_needs_a_published_brand_and_member_app(session, store, settings, branded, gym):
    revision = session.scalar(select(BrandRevision))
    revision.unpublished_at = NOW
    session.commit()
    refused(
        session, lambda: build_input(session, store, settings, gym.id), "brand_not_published", 409
    )


def test_domain_refusals_of_approvals_checks_results_and_operations(
    session, store, settings, branded, gym, current
):
    request = session.scalar(select(ReleaseRequest))
    refused(
        session,
        lambda: approvals.approve(
            session,
            request,
            current,
            purpose="everything",
            revision=1,
            snapshot_sha256=current.snapshot_sha256,
            actor_user_id=None,
            now=NOW,
        ),
        "release_approval_purpose_invalid",
        400,
    )
    refused(
        session,
        lambda: checks.record(
            session,
            request,
            current,
            target="ios",
            check=checks.CHECKS[0],
            status="maybe",
            actor_user_id=None,
            now=NOW,
        ),
        "release_check_status_invalid",
        400,
    )
    for platform, result, code in (
        ("ios", "vibes", "release_result_invalid"),
        ("web", "publicly_released", "release_target_invalid"),
    ):
        refused(
            session,
            lambda platform=platform, result=result: evidence.record_observed(
                session,
                request,
                current,
                platform=platform,
                result=result,
                observed_at=NOW,
                note=None,
                now=NOW,
            ),
            code,
            400,
        )
    refused(
        session,
        lambda: operations.dispatch(
            session, settings, gym.id, kind="deploy", platform="ios", now=NOW
        ),
        "release_operation_kind_invalid",
        400,
    )
    refused(
        session,
        lambda: operations.dispatch(
            session, settings, gym.id, kind="build", platform="web", now=NOW
        ),
        "release_target_invalid",
        400,
    )
    refused(
        session,
        lambda: operations.claim(
            session, store, {}, operation_id=uuid.uuid4(), dispatch_nonce="n", now=NOW
        ),
        "release_operation_not_found",
        404,
    )
    assert require_current(session, gym.id, now=NOW)[1].id == current.id


def test_only_internal_uploads_are_submitted(session, store, settings, branded, gym, current):
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind="build", platform="ios", now=NOW
    )
    access = operations.claim(
        session, store, dict(operation.ci), operation_id=operation.id, dispatch_nonce=nonce, now=NOW
    )["executorAccess"]["token"]
    session.commit()
    refused(
        session,
        lambda: operations.authorize_submit(session, operation.id, access, now=NOW),
        "release_operation_kind_invalid",
        409,
    )


def test_an_unreachable_key_set_is_503_not_a_pass(clock, ci):
    unreachable = KeySet("http://127.0.0.1:9/jwks", None, clock, httpx.Client())
    verifier = CiTokenVerifier(issuer=CI_ISSUER, key_set=unreachable, clock=clock)
    with pytest.raises(DomainError) as refused:
        verifier.verify(ci.token(NOW))
    assert (refused.value.code, refused.value.status) == ("ci_keys_unavailable", 503)


def test_a_scheme_brand_that_is_no_uri_scheme_isrefused():
    with pytest.raises(DomainError) as refused:
        url_scheme("My Brand", "iron")
    assert (refused.value.code, refused.value.status) == ("branded_app_scheme_invalid", 400)
