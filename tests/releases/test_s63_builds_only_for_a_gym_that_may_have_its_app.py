"""The release pipeline serves only a gym that may have its app now (`branded_apps.may_have_app`:
live, active, on the top tier; spec A 2.12: "inactive or deleted organizations deny access";
s56: no build is made for a gym that may not have the app). A hunt in s63 found the admin's
build input answering a deleted gym's (fresh signed download URLs included), and a candidate
cut, and a build dispatched, for an inactive gym: `build_input`, `cut_candidate` and
`dispatch` now check `require_building` as a build's claim does."""

from __future__ import annotations

from gymctl.access import gyms
from gymctl.models import OrganizationStatus
from gymctl.releases import candidates, operations
from tests.conftest import NOW
from tests.releases.conftest import COMMIT
from tests.releases.helpers import approved_intake, refused


def test_admin_build_input_of_a_deleted_gym_is_refused(
    client, session, branded, gym, platform_admin
):
    """The route is "Same as `gymctl releases build-input ORG --json`", which answers 404
    organization_not_found for a deleted gym."""
    gyms.delete_organization(session, gym.organization, actor_user_id=None, now=NOW)
    session.commit()
    response = client.get(
        f"/admin/organizations/{gym.id}/releases/build-input", headers=platform_admin.headers
    )
    assert response.status_code == 404, (response.status_code, sorted(response.json or {}))
    assert response.json["code"] == "organization_not_found"


def test_no_candidate_is_cut_for_an_inactive_gym(client, session, store, settings, branded, gym):
    """`branded_apps.may_have_app`: "A live gym on the top tier: what a build, an upload or a
    new candidate of its app needs at the moment it happens" (the publish's replacement obeyed
    it; the operator's cut checked only the tier)."""
    approved_intake(client, gym)
    gym.organization.status = OrganizationStatus.inactive
    session.commit()
    refused(
        session,
        lambda: candidates.cut_candidate(
            session, store, settings, gym.id, source_commit=COMMIT, now=NOW
        ),
        "organization_not_found",
        404,
    )


def test_no_build_is_dispatched_for_an_inactive_gym(client, session, settings, branded, gym):
    approved_intake(client, gym)
    gym.organization.status = OrganizationStatus.inactive
    session.commit()
    refused(
        session,
        lambda: operations.dispatch(
            session, settings, gym.id, kind="build", platform="ios", now=NOW
        ),
        "organization_not_found",
        404,
    )
