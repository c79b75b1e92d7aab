"""Branded apps and the release pipeline over HTTP (spec A 2.12-2.14, 5.5, 6.4): the public
application-ID lookup, link resolution and association files; push registration; the owner's
release tracker, submission intake, approvals and business checks; the administrator's build
input; and the CI workflow's own door (OIDC-authenticated, so public to the session guard)."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from flask import Blueprint, jsonify, request
from pydantic import Field

from gymctl.access.memberships import resolve_membership
from gymctl.errors import unauthorized
from gymctl.releases import associations, branded_apps, ci_access, operations, owner, push
from gymctl.releases.approvals import PURPOSES
from gymctl.releases.build_input import build_input
from gymctl.versioning import payload_schema
from webhooks import codes
from webhooks.access import membership, owner_route, platform_admin_route
from webhooks.context import auth, client_locale, db, now, services
from webhooks.guard import public
from webhooks.validation import Body, parse

bp = Blueprint("releases", __name__)
ORG = "/organizations/<uuid:org_id>"
TEXT = r"^[^\u0000]*\S[^\u0000]*$"
URL = r"^https://[^\u0000\s]+$"


def _schema() -> int:
    return payload_schema(request.args.get("schema"), parameter="schema")


# --- public: what installed binaries and the stores read -----------------------------------


@bp.get("/public/apps/<app_id>/identity")
@public
def application_identity(app_id):
    """The application-ID lookup a native binary makes before unlocking (?schema=1..4)."""
    settings = services().settings
    return jsonify(branded_apps.lookup_application(db(), settings, app_id, schema=_schema()))


@bp.get("/public/app-links/<slug>")
@public
def app_link(slug):
    """An installed app resolving /b/<slug> (independent of the tier)."""
    return jsonify(branded_apps.resolve_link(db(), services().settings, slug, schema=_schema()))


@bp.get("/.well-known/apple-app-site-association")
@public
def apple_app_site_association():
    return jsonify(associations.apple_app_site_association(db()))


@bp.get("/.well-known/assetlinks.json")
@public
def assetlinks():
    return jsonify(associations.asset_links(db()))


# --- members: push registration ------------------------------------------------------------


class PushRegistrationBody(Body):
    app_id: str = Field(alias="appId", min_length=1, max_length=155, pattern=TEXT)
    platform: Literal["ios", "android"]
    token: str = Field(min_length=1, max_length=push.MAX_TOKEN, pattern=TEXT)


class PushRevocationBody(Body):
    app_id: str = Field(alias="appId", min_length=1, max_length=155, pattern=TEXT)
    token: str = Field(min_length=1, max_length=push.MAX_TOKEN, pattern=TEXT)


@bp.post(f"{ORG}/push-registrations")
def register_push(org_id):
    """A member's device registers for the gym's pushes (membership required)."""
    resolve_membership(db(), org_id, auth().user)
    body = parse(PushRegistrationBody)
    push.register(
        db(),
        services().settings,
        org_id,
        auth().user,
        app_id=body.app_id,
        platform=body.platform,
        token=body.token,
        now=now(),
        locale=client_locale(),
    )
    return jsonify(registered=True), 201


register_push.gymctl_access = ("own",)  # type: ignore[attr-defined]


@bp.post(f"{ORG}/push-registrations/revoke")
def revoke_push(org_id):
    """Sign-out revokes the device's token first."""
    resolve_membership(db(), org_id, auth().user)
    body = parse(PushRevocationBody)
    revoked = push.revoke(
        db(), org_id, auth().user, app_id=body.app_id, token=body.token, now=now()
    )
    return jsonify(revoked=revoked)


revoke_push.gymctl_access = ("own",)  # type: ignore[attr-defined]


# --- the owner ------------------------------------------------------------------------------


@bp.get(f"{ORG}/releases")
@owner_route
def release_tracker(org_id):
    return jsonify(owner.tracker(db(), org_id, now=now()))


class SubmissionIntake(Body):
    app_name: str | None = Field(None, alias="appName", max_length=30, pattern=TEXT)
    subtitle: str | None = Field(None, max_length=30, pattern=TEXT)
    description: str | None = Field(None, max_length=4000, pattern=TEXT)
    keywords: str | None = Field(None, max_length=100, pattern=TEXT)
    category: str | None = Field(None, max_length=40, pattern=TEXT)
    support_url: str | None = Field(None, alias="supportUrl", max_length=500, pattern=URL)
    privacy_policy_url: str | None = Field(
        None, alias="privacyPolicyUrl", max_length=500, pattern=URL
    )
    marketing_url: str | None = Field(None, alias="marketingUrl", max_length=500, pattern=URL)
    contact_email: str | None = Field(
        None,
        alias="contactEmail",
        max_length=320,
        pattern=r"^[^@\s\u0000]+@[^@\s\u0000]+\.[^@\s\u0000]+$",
    )


class SubmissionBody(Body):
    submission: SubmissionIntake | None
    revision: int = Field(ge=0, le=2**31 - 1)


@bp.put(f"{ORG}/releases/submission")
@owner_route
def save_submission(org_id):
    body = parse(SubmissionBody)
    intake: dict[str, Any] | None = (
        body.submission.model_dump(by_alias=True, exclude_none=True)
        if body.submission is not None
        else None
    )
    return jsonify(
        owner.save_submission(
            db(),
            org_id,
            intake,
            revision=body.revision,
            actor_user_id=membership().user_id,
            now=now(),
        )
    )


class ApprovalBody(Body):
    purpose: Literal[PURPOSES]  # type: ignore[valid-type]
    revision: int = Field(ge=0, le=2**31 - 1)
    snapshot_sha256: str | None = Field(None, alias="snapshotSha256", pattern=r"^[0-9a-f]{64}$")


@bp.post(f"{ORG}/releases/approvals")
@owner_route
def approve(org_id):
    body = parse(ApprovalBody)
    approval = owner.approve(
        db(),
        org_id,
        purpose=body.purpose,
        revision=body.revision,
        snapshot_sha256=body.snapshot_sha256,
        actor_user_id=membership().user_id,
        now=now(),
    )
    return jsonify(approval), 201


class CheckBody(Body):
    status: Literal["passing", "failing"]


@bp.put(f"{ORG}/releases/checks/<target>/<check>")
@owner_route
def record_check(org_id, target, check):
    body = parse(CheckBody)
    return jsonify(
        owner.record_check(
            db(),
            org_id,
            target=target,
            check=check,
            status=body.status,
            actor_user_id=membership().user_id,
            now=now(),
        )
    )


# --- the administrator ----------------------------------------------------------------------


@bp.get("/admin/organizations/<uuid:org_id>/releases/build-input")
@platform_admin_route
def admin_build_input(org_id):
    """Same as `gymctl releases build-input ORG --json`; the signed URLs are fresh each call."""
    svc = services()
    return jsonify(build_input(db(), svc.store, svc.settings, org_id))


# --- the protected CI workflow ----------------------------------------------------------------


def _bearer() -> str:
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise unauthorized(codes.AUTHORIZATION_MISSING, "send Authorization: Bearer <token>")
    return token.strip()


class ClaimBody(Body):
    operation_id: uuid.UUID = Field(alias="operationId")
    dispatch_nonce: str = Field(alias="dispatchNonce", min_length=1, max_length=200, pattern=TEXT)


@bp.post("/ci/releases/claim")
@public
def ci_claim():
    """The workflow's only inputs are operationId and dispatchNonce; its OIDC token proves who
    runs it (Authorization: Bearer <CI OIDC token>)."""
    svc = services()
    claims = ci_access.ci_verifier(svc.settings, svc.clock).verify(_bearer())
    body = parse(ClaimBody)
    return jsonify(
        operations.claim(
            db(),
            svc.store,
            claims,
            operation_id=body.operation_id,
            dispatch_nonce=body.dispatch_nonce,
            now=now(),
        )
    )


@bp.post("/ci/releases/operations/<uuid:operation_id>/submit")
@public
def ci_submit(operation_id):
    """Asked immediately before an internal upload is submitted (executor access)."""
    return jsonify(operations.authorize_submit(db(), operation_id, _bearer(), now=now()))


class ResultBody(Body):
    result: Literal[operations.RESULTS]  # type: ignore[valid-type]


@bp.post("/ci/releases/operations/<uuid:operation_id>/result")
@public
def ci_result(operation_id):
    access = _bearer()
    body = parse(ResultBody)
    return jsonify(
        operations.report_result(db(), operation_id, access, result=body.result, now=now())
    )
