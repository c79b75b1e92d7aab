"""GET /users/me picks the active organization among the caller's *usable* memberships.

Every organization route resolves the caller's membership only "in a live organization"
(gymctl.access.memberships.resolve_membership: status active, not deleted) and answers an
inactive gym 404 organization_not_found; the openapi of /users/me says organizationId picks
"among the caller's active memberships" and answers 404 "No active membership in the requested
organization". /users/me left inactive gyms in: the earliest membership (an inactive gym) became
the app's active organization, every call of which then answers 404, and ?organizationId= of
that gym answered 200 with it as the context.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from gymctl.models.organizations import OrganizationStatus
from tests import factories
from tests.conftest import NOW

pytestmark = pytest.mark.embedded


@pytest.fixture
def two_gyms(session, idp):
    dead = factories.organization(session, name="Closed Gym", status=OrganizationStatus.inactive)
    live = factories.organization(session, name="Live Gym")
    person = factories.signed_in(idp, session, identity_id="user_two", email="two@gyms.test")
    factories.membership(  # the earlier membership: the default context when it is usable
        session, user=person.user, organization=dead, created_at=NOW - timedelta(days=30)
    )
    factories.membership(session, user=person.user, organization=live, created_at=NOW)
    session.commit()
    return dead.id, live.id, person


def test_an_inactive_gym_is_not_the_default_active_organization(client, two_gyms):
    dead, live, person = two_gyms
    # The org routes refuse the inactive gym, as they refuse any gym the caller cannot use.
    refused = client.get(f"/organizations/{dead}/sessions", headers=person.headers)
    assert (refused.status_code, refused.json["code"]) == (404, "organization_not_found")

    me = client.get("/users/me", headers=person.headers)
    assert me.status_code == 200
    assert me.json["activeOrganization"]["id"] == str(live)


def test_asking_for_an_inactive_gym_as_the_context_is_404_as_on_every_org_route(client, two_gyms):
    dead, _, person = two_gyms
    response = client.get(f"/users/me?organizationId={dead}", headers=person.headers)
    assert (response.status_code, response.json.get("code")) == (404, "organization_not_found")
