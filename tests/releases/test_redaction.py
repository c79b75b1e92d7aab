"""Spec A 2.13: owner-facing responses never contain bundle or package IDs, store account
identifiers, certificate fingerprints, build-service or CI identifiers, raw errors or the runtime
enabled control. This walks every owner-facing route of the area, successes and refusals, with
everything configured and the pipeline advanced, and looks for each."""

from __future__ import annotations

import pytest

from gymctl.models import Role
from gymctl.releases import checks, evidence, operations, switches
from gymctl.releases.candidates import require_current
from tests.conftest import NOW
from tests.releases.conftest import APP_CONFIG, CERT, REPOSITORY, SUBMISSION, WORKFLOW_REF
from tests.releases.helpers import approved_intake, cut

FORBIDDEN = {
    "bundle ID": "com.gymctl.gym.iron-temple",
    "package name": "com.gymctl.gym.iron_temple",
    "ID prefix": "com.gymctl.gym",
    "team ID": APP_CONFIG["appleTeamId"],
    "certificate fingerprint": CERT,
    "certificate fingerprint fragment": "A1:A1:A1",
    "build-service project": APP_CONFIG["buildServiceProject"],
    "iOS profile": APP_CONFIG["iosProfile"],
    "Android profile": APP_CONFIG["androidProfile"],
    "Apple store account": APP_CONFIG["appleStoreAccount"],
    "Google store account": APP_CONFIG["googleStoreAccount"],
    "push credential digest": APP_CONFIG["pushCredentialSha256"],
    "CI repository": REPOSITORY,
    "CI repository id": "123456789",
    "CI workflow ref": WORKFLOW_REF,
    "operation": "operationId",
    "enabled switch": '"enabled"',
    "config": "configRevision",
    "raw error": "Traceback",
    "exception text": "Error(",
    "SQL": "SELECT ",
}
OWNER_FACING_PREFIXES = ("/organizations/", "/public/")


class Walk:
    def __init__(self, client) -> None:
        self.client = client
        self.seen: list[tuple[str, str, int, str]] = []

    def __call__(self, method, path, rule, headers=None, **kwargs):
        response = self.client.open(path, method=method, headers=headers or {}, **kwargs)
        self.seen.append((method, rule, response.status_code, response.get_data(as_text=True)))
        return response


@pytest.fixture
def walk(client):
    return Walk(client)


def test_no_owner_facing_response_of_the_area_carries_an_internal_identifier(
    app, client, session, store, settings, branded, gym, walk, ci
):
    owner = gym[Role.owner].headers
    member = gym[Role.member].headers
    org = f"/organizations/{gym.id}"
    rule = "/organizations/<uuid:org_id>"

    # Refusals first: a hidden tracker, a stale revision, a missing candidate.
    walk("GET", f"{org}/releases", f"{rule}/releases", owner)
    switches.set_switch(session, gym.id, switches.RELEASE_TRACKER, True, now=NOW)
    switches.set_switch(session, gym.id, switches.INTERNAL_UPLOAD_ASSISTANCE, True, now=NOW)
    session.commit()
    tracker = walk("GET", f"{org}/releases", f"{rule}/releases", owner).json
    walk(
        "PUT",
        f"{org}/releases/submission",
        f"{rule}/releases/submission",
        owner,
        json={"submission": SUBMISSION, "revision": 7},
    )
    walk(
        "PUT",
        f"{org}/releases/checks/ios/store_listing_confirmed",
        f"{rule}/releases/checks/<target>/<check>",
        owner,
        json={"status": "passing"},
    )

    # The pipeline advanced: intake approved, a candidate, operations, evidence.
    approved_intake(client, gym)
    walk(
        "PUT",
        f"{org}/releases/submission",
        f"{rule}/releases/submission",
        owner,
        json={"submission": SUBMISSION, "revision": 1},
    )
    walk(
        "POST",
        f"{org}/releases/approvals",
        f"{rule}/releases/approvals",
        owner,
        json={"purpose": "submission_intake", "revision": 2},
    )
    candidate = cut(session, store, settings, gym)
    approval = {"revision": 2, "snapshotSha256": candidate.snapshot_sha256}
    walk(
        "POST",
        f"{org}/releases/approvals",
        f"{rule}/releases/approvals",
        owner,
        json={"purpose": "store_review", **approval},
    )
    for target in checks.TARGETS:
        for check in checks.CHECKS:
            walk(
                "PUT",
                f"{org}/releases/checks/{target}/{check}",
                f"{rule}/releases/checks/<target>/<check>",
                owner,
                json={"status": "passing"},
            )
    for purpose in ("internal_upload", "store_review", "public_release"):
        walk(
            "POST",
            f"{org}/releases/approvals",
            f"{rule}/releases/approvals",
            owner,
            json={"purpose": purpose, **approval},
        )
    operation, nonce = operations.dispatch(
        session, settings, gym.id, kind="internal_upload", platform="ios", now=NOW
    )
    operations.claim(
        session, store, dict(operation.ci), operation_id=operation.id, dispatch_nonce=nonce, now=NOW
    )
    request, current = require_current(session, gym.id, now=NOW)
    evidence.record_observed(
        session,
        request,
        current,
        platform="android",
        result="store_review_rejected",
        observed_at=NOW,
        note="Guideline 4.2 (com.gymctl.gym.iron_temple)",
        now=NOW,
    )
    session.commit()
    tracker = walk("GET", f"{org}/releases", f"{rule}/releases", owner).json

    # Members and their devices; the public lookups.
    for app_id in ("com.gymctl.gym.iron-temple", "com.gymctl.app", "com.example.nope"):
        walk(
            "POST",
            f"{org}/push-registrations",
            f"{rule}/push-registrations",
            member,
            json={"appId": app_id, "platform": "ios", "token": "device-token"},
        )
    walk(
        "POST",
        f"{org}/push-registrations/revoke",
        f"{rule}/push-registrations/revoke",
        member,
        json={"appId": "com.gymctl.app", "token": "device-token"},
    )
    for app_id in ("com.gymctl.gym.iron-temple", "com.gymctl.gym.iron_temple", "com.gymctl.app"):
        walk("GET", f"/public/apps/{app_id}/identity?schema=4", "/public/apps/<app_id>/identity")
    walk("GET", "/public/apps/unknown/identity", "/public/apps/<app_id>/identity")
    walk("GET", "/public/app-links/iron-temple?schema=2", "/public/app-links/<slug>")
    walk("GET", "/public/app-links/nope", "/public/app-links/<slug>")

    # Every owner-facing route of the area was walked, with successes and refusals.
    routes = {
        (method, r.rule)
        for r in app.url_map.iter_rules()
        if r.endpoint.startswith("releases.") and r.rule.startswith(OWNER_FACING_PREFIXES)
        for method in r.methods - {"HEAD", "OPTIONS"}
    }
    walked = {(method, rule_) for method, rule_, _status, _body in walk.seen}
    assert routes == walked
    statuses = {status for *_rest, status, _body in walk.seen}
    assert {200, 201, 404, 409} <= statuses
    # The tracker shows where things stand, without saying how they are built or shipped.
    assert tracker["platforms"] == {
        "ios": "internal_upload_dispatched",
        "android": "store_review_rejected",
    }
    assert [e["result"] for e in tracker["evidence"]] == ["store_review_rejected"]
    for method, rule_, status, body in walk.seen:
        for label, secret in FORBIDDEN.items():
            assert secret not in body, f"{label} leaked by {method} {rule_} ({status})"
